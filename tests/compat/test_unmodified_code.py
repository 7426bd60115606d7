"""Unmodified NKI code on opennki, tried as a new user would: a tutorial-style script under `opennki run`,
a samples-style test suite under `pytest -p opennki.pytest_plugin`, `opennki benchmark` / `opennki profile`,
and `opennki.compat.install()` (including never shadowing a real installation silently)."""

import importlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from opennki import cli, compat
from tests.running import run_python

HERE = Path(__file__).parent
TUTORIAL = HERE / "tutorial" / "rms_norm_nki_kernels.py"
NEW_GEN = HERE / "tutorial" / "new_gen_matmul.py"
SUITE = HERE / "samples_suite"


@pytest.fixture
def user_dir(tmp_path):
    """A fresh folder holding copies of the user's files (nothing of this repository around them)."""
    shutil.copy(TUTORIAL, tmp_path)
    shutil.copy(NEW_GEN, tmp_path)
    shutil.copytree(SUITE, tmp_path / "test_unit")
    return tmp_path


def test_tutorial_script_needs_nki_when_run_plainly(user_dir):
    if compat.real_installation("neuronxcc") is not None:
        pytest.skip("a real neuronxcc is installed here")
    plain = run_python([TUTORIAL.name], user_dir)
    assert plain.returncode != 0 and "No module named 'neuronxcc'" in plain.stderr


def test_tutorial_script_runs_unchanged_under_opennki_run(user_dir):
    done = run_python(["-m", "opennki", "run", TUTORIAL.name, "200"], user_dir)
    assert done.returncode == 0, done.stderr
    assert "RMSNorm: NKI and NumPy match" in done.stdout and "Tensor add: NKI and NumPy match" in done.stdout
    done = run_python(["-m", "opennki", "run", NEW_GEN.name], user_dir)
    assert done.returncode == 0 and "matmul: NKI and NumPy match" in done.stdout, done.stderr


def test_samples_suite_passes_under_the_plugin_without_edits(user_dir):
    base = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin", "test_unit"]
    done = run_python(base, user_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
    sim = run_python(base + ["--simulation-only"], user_dir)
    assert sim.returncode == 0 and "3 passed, 2 skipped" in sim.stdout, sim.stdout + sim.stderr
    without = run_python(base[:4] + ["test_unit"], user_dir)
    assert without.returncode != 0 and "neuronxcc" in without.stdout


def test_opennki_run_passes_arguments_and_exit_status(tmp_path, capsys):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nfrom neuronxcc import nki\nprint(sys.argv[1:], nki.__name__)\n"
                      "sys.exit(int(sys.argv[1]))\n")
    assert cli.main(["run", str(script), "3", "--x"]) == 3
    assert "['3', '--x'] opennki.legacy" in capsys.readouterr().out
    assert cli.main(["run", str(tmp_path / "missing.py")]) == 2
    assert compat.installed() == {}                    # the command cleans up after itself


def test_benchmark_command_estimates_every_kernel_call(capsys):
    assert cli.main(["benchmark", "--target", "trn2", str(TUTORIAL), "130"]) == 0
    out = capsys.readouterr().out
    assert "RMSNorm: NKI and NumPy match" in out                      # the script ran as usual
    table = out[out.index("opennki benchmark: 2 kernel call(s)"):].splitlines()
    assert table[2].split()[:3] == ["1", "nki_rms_norm", "trn2"]
    assert table[3].split()[:3] == ["2", "nki_tensor_add", "trn2"]


def test_benchmark_plumbing_hands_each_call_to_the_estimator(tmp_path):
    seen = []

    def estimator(kernel, args, kwargs):
        seen.append((kernel.spec.name, kernel.spec.grid_key, args[0].shape, args[0].dtype.name))
        return "estimate"
    reporter = cli.CallReporter(estimate=estimator)
    compat.install()
    try:
        assert cli._run_observed(reporter, str(TUTORIAL), ["130"]) == 0
    finally:
        compat.uninstall()
    assert seen == [("nki_rms_norm", None, (130, 256), "float32"), ("nki_tensor_add", (2, 2), (256, 1024), "float32")]
    assert [r[2] for r in reporter.rows] == ["estimate", "estimate"]


def test_profile_command_writes_one_profile_per_call(tmp_path, capsys):
    out_dir = tmp_path / "profiles"
    assert cli.main(["profile", str(TUTORIAL), "130", "--out", str(out_dir)]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["001_nki_rms_norm", "002_nki_tensor_add"]
    for d in out_dir.iterdir():
        trace = next(p for p in d.iterdir() if p.name.endswith(".json") and p.is_file())
        json.loads(trace.read_text())
    assert "2 kernel call(s) profiled" in capsys.readouterr().out
    assert cli.main(["profile", str(TUTORIAL)]) == 2                  # --out is required


# ------------------------------------------------------------------------------------------ compat.install

@pytest.fixture
def clean_compat():
    yield
    compat.uninstall()


def test_install_maps_import_names_onto_the_facades(clean_compat):
    import opennki
    import opennki.legacy
    assert compat.install() == {"neuronxcc.nki": "opennki.legacy", "nki": "opennki"}
    from neuronxcc import nki
    nl = importlib.import_module("neuronxcc.nki.language")
    new_nisa = importlib.import_module("nki.isa")
    assert nki is opennki.legacy and nl is opennki.legacy.language and new_nisa is opennki.isa
    assert opennki.legacy.__spec__.name == "opennki.legacy"          # the real module keeps its own spec
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nki.no_such_module")


def test_a_real_installation_is_never_shadowed_silently(tmp_path, monkeypatch, capsys, clean_compat):
    (tmp_path / "nki").mkdir()
    (tmp_path / "nki" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nki", raising=False)
    assert compat.install() == {"neuronxcc.nki": "opennki.legacy"}
    assert "a real 'nki' is installed" in capsys.readouterr().err
    assert importlib.import_module("nki").REAL
    compat.uninstall()
    sys.modules.pop("nki", None)
    assert compat.install(force=True)["nki"] == "opennki"
    assert "forced to opennki" in capsys.readouterr().err
    import opennki
    assert importlib.import_module("nki") is opennki


# ------------------------------------------------------------------------------------- pytest collection

_KERNELS_NAMED_LIKE_TESTS = '''
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from neuronxcc import nki as legacy_nki
import neuronxcc.nki.language as lnl


@legacy_nki.jit(mode="simulation")
def test_legacy_scale(a):
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, value=lnl.multiply(lnl.load(a), 3.0))
    return out


@legacy_nki.baremetal
def test_legacy_shift(a):
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, value=lnl.add(lnl.load(a), 1.5))
    return out


@nki.jit
def test_new_negate(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=-1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


test_new_negate_lnc1 = test_new_negate[1]
test_new_simulated = nki.simulate(test_new_negate)


class TestInAClass:
    test_method_kernel = test_legacy_scale

    def test_method_calls_the_kernels(self):
        a = np.random.rand(16, 64).astype(np.float32)
        assert np.allclose(self.test_method_kernel(a), a * 3.0)


def test_calls_the_kernels():
    a = np.random.rand(16, 64).astype(np.float32)
    assert np.allclose(test_legacy_scale(a), a * 3.0)
    assert np.allclose(test_legacy_shift(a), a + 1.5)
    assert np.allclose(nki.simulate(test_new_negate)(a), -a)
    assert np.allclose(test_new_simulated(a), -a)
'''


def test_kernels_named_test_star_are_not_collected_as_tests(tmp_path):
    """NKI's kernel objects are not functions, so pytest does not collect a kernel named `test_*` (the SDK's
    own tests name kernels so); ours keep `__wrapped__` and the function's metadata all the same."""
    (tmp_path / "test_named_kernels.py").write_text(_KERNELS_NAMED_LIKE_TESTS)
    done = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "opennki.pytest_plugin",
                 "test_named_kernels.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "error" not in done.stdout, done.stdout

    import inspect
    import opennki
    import opennki.legacy

    def test_body(a, b=2):
        """doc"""
        return a
    assert opennki.simulate(opennki.jit(test_body)).__test__ is False
    for kernel in (opennki.legacy.jit(test_body), opennki.legacy.jit(test_body)[2], opennki.jit(test_body),
                   opennki.jit(test_body)[1]):
        assert kernel.__test__ is False
        assert kernel.__name__ == "test_body" and kernel.func is test_body
        assert list(inspect.signature(kernel).parameters) == ["a", "b"]
    assert opennki.legacy.jit(test_body).__wrapped__ is test_body and opennki.legacy.jit(test_body).__doc__ == "doc"


def test_importing_the_legacy_facade_gives_logging_an_off_level(caplog):
    """Harnesses call `logging.disable(logging.OFF)` right after `import neuronxcc.nki` (the real package
    defines the level); it must exist and silence every record."""
    import logging
    import opennki.legacy  # noqa: F401
    assert logging.OFF > logging.CRITICAL
    logger = logging.getLogger("opennki-test-harness")
    try:
        logging.disable(logging.OFF)
        logger.critical("silenced")
        assert "silenced" not in caplog.text
    finally:
        logging.disable(logging.NOTSET)
    logger.critical("heard")
    assert "heard" in caplog.text
