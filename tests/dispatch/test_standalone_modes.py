"""baremetal, benchmark and profile (with a stand-in cost model), interpreter clients (per-program callbacks
and early stop)."""

import json

import numpy as np
import pytest

import opennki.legacy as nki
from opennki.errors import KernelError, UnsupportedError
from opennki.events import InstructionExecuted, ProgramFinished
from opennki.kernels.standalone import use_services
from opennki.listeners import Recorder
from tests.dispatch import kernels as K
from tests.raises import raises_at


@pytest.fixture
def x(rng):
    return rng.standard_normal((256, 64), dtype=np.float32)


class StandIn:
    """A stand-in cost model: records what the kernel classes hand it and answers with fixed numbers."""

    def __init__(self):
        self.calls = []

    def benchmark(self, kernel, args, kwargs, **config):
        rec = Recorder()
        kernel.launch(args, kwargs, options=kernel.options(shape_only=True), listeners=[rec])
        self.calls.append(("benchmark", kernel.spec.name, config, len(rec.of_type(InstructionExecuted))))
        return {"nc_latency": 42.0}

    def profile(self, kernel, args, kwargs, **config):
        self.calls.append(("profile", kernel.spec.name, config))

    def write_trace(self, kernel, args, kwargs, path):
        self.calls.append(("write_trace", kernel.spec.name, path))


@pytest.fixture
def cost_model():
    stand_in = StandIn()
    previous = use_services(benchmark=stand_in.benchmark, profile=stand_in.profile,
                            write_trace=stand_in.write_trace)
    yield stand_in
    use_services(**previous)


def test_baremetal_runs_once_and_returns_outputs(x):
    k = nki.baremetal(K.scale_rows)
    np.testing.assert_allclose(k(x, 0.25), x * 0.25, rtol=1e-6)
    np.testing.assert_allclose(nki.baremetal(K.jit_scale_rows)[2](x, 3.0), x * 3.0, rtol=1e-6)


def test_baremetal_writes_the_traced_program_and_says_no_neff_exists(x, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    k = nki.baremetal(save_neff_name="scaled.neff", artifacts_dir=str(tmp_path / "art"),
                      additional_compile_opt="--verbose")(K.scale_rows)
    with pytest.warns(UserWarning, match="no NEFF exists"):
        out = k(x, 2.0)
    np.testing.assert_allclose(out, x * 2.0, rtol=1e-6)
    assert not (tmp_path / "scaled.neff").exists()
    doc = json.loads((tmp_path / "scaled.program.json").read_text())
    assert doc["func_name"] == "scale_rows" and doc["opts"] == "--verbose"
    assert "no NEFF" in doc["simulated_by"]
    assert json.loads((tmp_path / "art" / "scale_rows.program.json").read_text()) == doc


def test_baremetal_artifacts_dir_must_be_empty(x, tmp_path):
    (tmp_path / "leftover.txt").write_text("x")
    k = nki.baremetal(artifacts_dir=str(tmp_path))(K.scale_rows)
    with raises_at(KernelError, match="must be empty"):
        k(x, 2.0)


def test_baremetal_save_trace_name_requires_default_neff_name(x):
    k = nki.baremetal(save_neff_name="mine.neff", save_trace_name="profile.ntff")(K.scale_rows)
    with raises_at(KernelError, match="save_trace_name requires save_neff_name to be 'file.neff'"):
        k(x, 2.0)


def test_baremetal_save_trace_name_asks_the_cost_model(x, cost_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    k = nki.baremetal(save_trace_name="profile.ntff")(K.scale_rows)
    np.testing.assert_allclose(k(x, 2.0), x * 2.0, rtol=1e-6)
    assert cost_model.calls == [("write_trace", "scale_rows", "profile.ntff")]


def test_baremetal_with_torch_tensors_is_a_clear_error(x):
    torch = pytest.importorskip("torch")
    k = nki.baremetal(K.scale_rows)
    with raises_at(KernelError, match="mode 'baremetal', which takes NumPy arrays, but was called with torch"):
        k(torch.from_numpy(x), 2.0)


def test_benchmark_decorator_and_mode_use_the_cost_model(x, cost_model):
    bench = nki.benchmark(warmup=2, iters=5)(K.scale_rows)
    out = bench(x, 2.0)
    assert out.shape == x.shape and np.isnan(out).all()          # benchmark outputs are undefined
    assert bench.benchmark_result == {"nc_latency": 42.0}
    name, kernel, config, n_instr = cost_model.calls[0]
    assert (name, kernel, config) == ("benchmark", "scale_rows", {"warmup": 2, "iters": 5}) and n_instr >= 6
    via_jit = nki.jit(K.scale_rows, mode="benchmark")
    via_jit(x, 2.0)
    assert via_jit.benchmark_result == {"nc_latency": 42.0}


def test_benchmark_result_lands_on_the_gridded_kernel_and_its_parent(x, cost_model):
    bench = nki.benchmark(K.scale_rows)
    child = bench[2]
    child(x, 2.0)
    assert child.benchmark_result is bench.benchmark_result is not None


def test_profile_mode_hands_its_options_to_the_cost_model(x, cost_model, tmp_path):
    prof = nki.profile(working_directory=str(tmp_path), profile_nth=2)(K.scale_rows)
    prof(x, 2.0)
    assert cost_model.calls == [("profile", "scale_rows", {"working_directory": str(tmp_path), "profile_nth": 2})]


def test_benchmark_without_a_cost_model_says_so(x, monkeypatch):
    import opennki.kernels.standalone as standalone
    monkeypatch.setattr(standalone, "_SERVICES", {})
    monkeypatch.setattr(standalone, "_PROVIDED", {})      # a build whose front door gave no cost model
    with raises_at(UnsupportedError, match="cost model"):
        nki.benchmark(K.scale_rows)(x, 2.0)


# ------------------------------------------------------------------------------------- interpreter clients

def test_callbacks_run_before_and_after_every_program_in_order(x):
    log = []
    rec = Recorder()
    out = K.jit_scale_rows[2].launch((x, 5.0), listeners=[rec],
                                     before_program=lambda ids: log.append(("before", ids)),
                                     after_program=lambda ids: log.append(("after", ids)))
    np.testing.assert_allclose(out, x * 5.0, rtol=1e-6)
    assert log == [("before", (0,)), ("after", (0,)), ("before", (1,)), ("after", (1,))]
    assert len(rec.of_type(ProgramFinished)) == 2


def test_after_program_returning_false_stops_and_keeps_finished_work(x):
    x4 = np.concatenate([x, x * 2])                                 # 4 tiles of 128 rows
    ran = []

    def stop_after_two(ids):
        ran.append(ids)
        return len(ran) < 2
    out = K.jit_scale_rows[4].launch((x4, 3.0), after_program=stop_after_two)
    assert ran == [(0,), (1,)]
    np.testing.assert_allclose(out[:256], x4[:256] * 3.0, rtol=1e-6)    # what finished programs wrote
    assert np.isnan(out[256:]).all()                                    # never written: poison
