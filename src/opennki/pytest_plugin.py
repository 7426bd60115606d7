"""Front door: `pytest -p opennki.pytest_plugin` runs an NKI test suite, unmodified, on opennki.

Imports compat (and, with `--nki-check`, opennki.checks when a test runs). Before any conftest.py is imported, `neuronxcc.nki...` and `nki...` are mapped onto
opennki (opennki.compat.install); a real installation is left in place (and the plugin says so) unless
`--opennki-force` is given. The plugin is opt-in: it is not registered as an entry point, so installing
opennki never changes how other test suites import.
"""

from __future__ import annotations

import pytest

from opennki import compat


def pytest_addoption(parser):
    group = parser.getgroup("opennki")
    group.addoption("--opennki-force", action="store_true", default=False,
                    help="map neuronxcc.nki / nki onto opennki even where a real installation exists")
    group.addoption("--nki-check", action="store_true", default=False,
                    help="run every test with opennki's checks on (races, uninitialised reads, the "
                         "compiler-rule lint) and fail a test on any finding")


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
