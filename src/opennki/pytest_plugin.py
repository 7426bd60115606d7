"""Front door: `pytest -p opennki.pytest_plugin` runs an NKI test suite, unmodified, on opennki.

Imports compat (and, with `--nki-check`, opennki.checks when a test runs; with `--nki-durations`, the
simulator's launch clock). Before any conftest.py is imported, `neuronxcc.nki...` and `nki...` are mapped onto
opennki (opennki.compat.install); a real installation is left in place (and the plugin says so) unless
`--opennki-force` is given. The plugin is opt-in: it is not registered as an entry point, so installing
opennki never changes how other test suites import.
"""

from __future__ import annotations

import time

import pytest

from opennki import compat


def pytest_addoption(parser):
    group = parser.getgroup("opennki")
    group.addoption("--opennki-force", action="store_true", default=False,
                    help="map neuronxcc.nki / nki onto opennki even where a real installation exists")
    group.addoption("--nki-check", action="store_true", default=False,
                    help="run every test with opennki's checks on (races, uninitialised reads, the "
                         "compiler-rule lint) and fail a test on any finding")
    group.addoption("--nki-durations", type=int, default=None, metavar="N",
                    help="after the run, list the N tests (0: all) with the most CPU seconds in opennki's "
                         "kernel launches, beside each test's whole CPU seconds, and the session's totals "
                         "(in one process: without pytest-xdist)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With --nki-durations, the CPU seconds of the whole test (setup, call, teardown) and of the kernel
    launches in it (opennki.sim.simulator.LAUNCH_CLOCK)."""
    if item.config.getoption("nki_durations") is None:
        return (yield)
    from opennki.sim.simulator import LAUNCH_CLOCK
    cpu, launched = time.process_time(), LAUNCH_CLOCK.seconds
    try:
        return (yield)
    finally:
        item.config.stash.setdefault(_DURATIONS, []).append(
            (LAUNCH_CLOCK.seconds - launched, time.process_time() - cpu, item.nodeid))


_DURATIONS = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, config):
    limit = config.getoption("nki_durations")
    if limit is None:
        return
    rows = sorted(config.stash.get(_DURATIONS, []), reverse=True)
    write = terminalreporter.write_line
    terminalreporter.section("opennki durations (CPU seconds: in kernel launches / the whole test)")
    for launches, whole, nodeid in rows[:limit or None]:
        write(f"{launches:9.2f} / {whole:9.2f}  {nodeid}")
    launches, whole = sum(r[0] for r in rows), sum(r[1] for r in rows)
    share = f" ({100 * launches / whole:.0f}%)" if whole > 0 else ""
    write(f"opennki: {len(rows)} tests, {whole:.2f} s CPU, of which {launches:.2f} s{share} in kernel launches")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """With --nki-check, the test body runs inside `opennki.checks.checking()`; a finding fails it."""
    if not item.config.getoption("nki_check"):
        return (yield)
    from opennki.checks import checking, format_findings
    with checking() as found:
        result = yield
    if found:
        pytest.fail("opennki --nki-check:\n" + format_findings(found), pytrace=False)
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    compat.install(force=bool(getattr(early_config.known_args_namespace, "opennki_force", False)))


def pytest_report_header(config):
    mapped = compat.installed()
    if not mapped:
        return "opennki: no NKI import names mapped (a real installation is in use)"
    return "opennki: " + ", ".join(f"{alias} -> {real}" for alias, real in mapped.items())
