"""How users meet the checks: `opennki check SCRIPT` (text and --json, exit status) and the pytest plugin's
`--nki-check`, on a script / test with a loop-carried dependency, an uninitialised read and a lint rule,
and on the same code fixed."""

import json

import pytest

from tests.running import run_python

BUGGY = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    out = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((16, 32), dtype=nl.float32)
    buf[:, 0:8] = nl.load(x[0])
    for i in nl.{loop}(1, 4):
        prev = buf[:, nl.ds((i - 1) * 8, 8)]
        buf[:, nl.ds(i * 8, 8)] = nl.add(prev, nl.load(x[i]))
    pad = nl.ndarray((16, 8), dtype=nl.float32)
    pad[0:{rows}, :] = nl.load(x[0, 0:{rows}, :])
    nl.store(out[:, 0:8], value=nl.exp(pad))
    nl.store(out[:, 8:32], value=buf[:, 8:32])
    return out


def test_kernel():
    kernel(np.random.default_rng(0).standard_normal((4, 16, 8)).astype(np.float32))


if __name__ == "__main__":
    test_kernel()
'''


def _write(tmp_path, fixed: bool):
    path = tmp_path / ("test_fixed.py" if fixed else "test_buggy.py")
    path.write_text(BUGGY.format(loop="sequential_range" if fixed else "affine_range", rows=16 if fixed else 12))
    return path


def test_check_command_prints_each_finding_and_fails(tmp_path):
    script = _write(tmp_path, fixed=False)
    done = run_python(["-m", "opennki", "check", script.name], tmp_path)
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "[affine_loop_carried_raw]" in out and f"{script.name}:14" in out
    assert "[uninitialized_read]" in out and "element [12, 0]" in out and f"{script.name}:17" in out
    assert "why:" in out and "fix:" in out
    assert "iterations: 1, 2" in out and "regions: sbuf partitions 0-16 bytes" in out   # the record's data


def test_check_command_json(tmp_path):
    script = _write(tmp_path, fixed=False)
    done = run_python(["-m", "opennki", "check", "--json", script.name], tmp_path)
    report = json.loads(done.stdout)
    rules = {f["rule"] for f in report["findings"]}
    assert rules == {"affine_loop_carried_raw", "uninitialized_read"}
    race = next(f for f in report["findings"] if f["kind"] == "race")
    assert race["iterations"] == [1, 2] and [line["line"] for line in race["lines"]] == [14, 14]


def test_check_command_reports_nothing_for_the_fixed_script(tmp_path):
    script = _write(tmp_path, fixed=True)
    done = run_python(["-m", "opennki", "check", script.name], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no findings" in done.stdout


@pytest.mark.parametrize("fixed", [False, True])
def test_pytest_plugin_nki_check_fails_a_test_on_a_finding(tmp_path, fixed):
    test_file = _write(tmp_path, fixed=fixed)
    done = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin", "--nki-check",
                 test_file.name], tmp_path)
    if fixed:
        assert done.returncode == 0, done.stdout
    else:
        assert done.returncode == 1 and "affine_loop_carried_raw" in done.stdout, done.stdout
    plain = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin",
                  test_file.name], tmp_path)
    assert plain.returncode == 0, plain.stdout          # without --nki-check both pass, as on the simulator
