"""Front door: `pytest -p opennki.pytest_plugin` runs an NKI test suite, unmodified, on opennki.

Imports compat only. Before any conftest.py is imported, `neuronxcc.nki...` and `nki...` are mapped onto
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


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    compat.install(force=bool(getattr(early_config.known_args_namespace, "opennki_force", False)))


def pytest_report_header(config):
    mapped = compat.installed()
    if not mapped:
        return "opennki: no NKI import names mapped (a real installation is in use)"
    return "opennki: " + ", ".join(f"{alias} -> {real}" for alias, real in mapped.items())
