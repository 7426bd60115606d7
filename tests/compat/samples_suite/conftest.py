import pytest


def pytest_addoption(parser):
    parser.addoption("--simulation-only", action="store_true", default=False,
                     help="run only the tests marked simulation (no Neuron device needed)")


def pytest_configure(config):
    config.addinivalue_line("markers", "simulation: runs on the NKI CPU simulator")


def pytest_runtest_setup(item):
    if item.config.getoption("--simulation-only") and "simulation" not in item.keywords:
        pytest.skip("needs a Neuron device")


@pytest.fixture
def simulation_only(request):
    return request.config.getoption("--simulation-only")
