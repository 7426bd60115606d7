"""`pytest -p opennki.pytest_plugin --nki-durations N`: per test, the CPU seconds spent in opennki's kernel
launches beside the test's whole CPU seconds, and the session's totals (what part of a suite is the simulator)."""

import re
import time

import numpy as np

from opennki.sim.simulator import LaunchClock
from tests.running import run_python

SUITE = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


def test_kernel():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 128, 512), dtype=np.float32)
    for _ in range(20):
        assert np.array_equal(add(a, b), a + b)


def test_numpy_only():
    x = np.random.default_rng(2).standard_normal((256, 256))
    for _ in range(40):
        x = np.tanh(x @ x.T / 256)
    assert np.isfinite(x).all()
'''

ROW = re.compile(r"^\s*([\d.]+) /\s*([\d.]+)  test_suite\.py::(\w+)$", re.M)
TOTAL = re.compile(r"^opennki: (\d+) tests, ([\d.]+) s CPU, of which ([\d.]+) s \(\d+%\) in kernel launches$", re.M)


def test_durations_split_launches_from_the_rest(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    done = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin",
                       "--nki-durations", "0", "test_suite.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {name: (float(launches), float(whole)) for launches, whole, name in ROW.findall(done.stdout)}
    assert set(rows) == {"test_kernel", "test_numpy_only"}, done.stdout
    launches, whole = rows["test_kernel"]
    assert 0 < launches <= whole
    assert rows["test_numpy_only"][0] == 0 and rows["test_numpy_only"][1] > 0
    tests, total, in_launches = TOTAL.search(done.stdout).groups()
    assert int(tests) == 2
    assert abs(float(in_launches) - launches) < 0.015
    assert abs(float(total) - sum(w for _, w in rows.values())) < 0.015
    # the slowest launcher first
    assert done.stdout.index("::test_kernel") < done.stdout.index("::test_numpy_only")


def test_durations_are_off_by_default(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    done = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin",
                       "test_suite.py"], tmp_path)
    assert done.returncode == 0 and "opennki durations" not in done.stdout, done.stdout


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    x = np.ones(64)
    while time.process_time() < end:
        x = np.sqrt(x + 1.0)


def test_launch_clock_counts_nested_launches_once():
    clock = LaunchClock()
    start = time.process_time()
    with clock:
        with clock:
            _busy(0.05)
        _busy(0.05)
    outer = time.process_time() - start
    assert clock.depth == 0
    # counted once: the inner launch's 0.05 s again would put the clock past the outer launch's time
    assert 0.1 <= clock.seconds <= outer
    with clock:
        _busy(0.02)
    assert 0.12 <= clock.seconds <= time.process_time() - start
