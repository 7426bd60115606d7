"""jit dispatch: GenericKernel, modes and their errors, memoisation, the specialisation cache and traced
program dumps, grids, nested kernels, call observers, error frames."""

import base64
import json
import traceback

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.compile import GenericKernel, _native_mode_map, compute_mode
from opennki.errors import KernelError, ShapeError
from opennki.events import ProgramStarted
from opennki._src.spmd import nc
from opennki.bridges.framework import JAXKernel, PyTorchKernel
from opennki.kernels import TraceKernel, observe_calls
from opennki.kernels.standalone import BaremetalKernel, BenchmarkKernel, ProfileKernel, SimulateKernel
from opennki.listeners import Recorder
from tests.dispatch import kernels as K
from tests.raises import raises_at


@pytest.fixture
def x(rng):
    return rng.standard_normal((256, 64), dtype=np.float32)


def test_jit_bare_and_parametrised_return_generic_kernels(x):
    bare = nki.jit(K.scale_rows)
    param = nki.jit(mode="simulation")(K.scale_rows)
    functional = nki.jit(K.scale_rows, mode="simulation", platform_target="trn2")
    for k in (bare, param, functional):
        assert isinstance(k, GenericKernel)
        np.testing.assert_allclose(k(x, 1.5), x * 1.5, rtol=1e-6)
    assert functional.spec.target == "trn2"
    assert param.mode == "simulation" and bare.mode == "auto"


def test_kernel_is_subscriptable_with_one_or_several_grid_dims(x):
    one = K.jit_scale_rows[2]
    two = K.jit_scale_rows[2, 1]
    assert isinstance(one, GenericKernel) and one.grid == 2 and two.grid == (2, 1)
    np.testing.assert_allclose(one(x, -2.0), x * -2.0, rtol=1e-6)
    np.testing.assert_allclose(two(x, 0.5), x * 0.5, rtol=1e-6)


@pytest.mark.parametrize("mode", ["fast", "Simulation", "", None, 3])
def test_unknown_mode_is_rejected_with_nki_text(mode):
    with raises_at(KernelError, match="' passed to nki.jit", line="nki.jit(K.scale_rows, mode=mode)"):
        nki.jit(K.scale_rows, mode=mode)
    with raises_at(KernelError, match="' passed to nki.jit"):
        compute_mode((), {}, mode)


def test_native_mode_map_names_every_mode():
    assert _native_mode_map == {"jax": JAXKernel, "torchxla": PyTorchKernel, "baremetal": BaremetalKernel,
                                "benchmark": BenchmarkKernel, "profile": ProfileKernel,
                                "simulation": SimulateKernel, "trace": TraceKernel}


@pytest.mark.parametrize("mode", sorted(set(_native_mode_map) - {"torchxla"}))   # torch: tests/bridges
def test_explicit_modes_resolve_through_the_map(mode):
    args = (np.zeros((2, 2), np.float32),)
    assert compute_mode(args, {}, mode) is _native_mode_map[mode]


def test_auto_mode_with_numpy_is_baremetal_and_memoised(x):
    k = nki.jit(K.scale_rows)
    assert compute_mode((x, 2.0), {}, "auto") is BaremetalKernel
    k(x, 2.0)
    first = k.resolve(BaremetalKernel)
    k(x, 3.0)
    assert list(k._kernels) == [BaremetalKernel] and k.resolve(BaremetalKernel) is first


def test_specialisation_cache_keys_on_shapes_dtypes_and_scalars(rng):
    k = nki.jit(K.scale_rows)
    tk = k.resolve(TraceKernel)
    a = rng.standard_normal((128, 64), dtype=np.float32)
    p1 = k.specialize(a, 2.0)
    assert k.specialize(rng.standard_normal((128, 64), dtype=np.float32), 2.0) is p1   # values don't matter
    assert tk.trace_count == 1
    assert k.specialize(a, 3.0) is not p1                                             # scalar value does
    assert k.specialize(a, 2) is not p1                                               # and its type
    assert k.specialize(rng.standard_normal((256, 64), dtype=np.float32), 2.0).inputs[0].shape == (256, 64)
    assert k.specialize(a.astype(np.float16), 2.0).inputs[0].dtype == "float16"
    assert tk.trace_count == 5


def test_traced_program_dumps_as_json_and_base64_backend_config(rng):
    a = rng.standard_normal((128, 32), dtype=np.float32)
    k = K.jit_sum_and_max
    program = k.specialize(a)
    doc = program.to_json()
    assert doc["func_name"] == "sum_and_max" and doc["input_names"] == ["x"]
    assert [o["shape"] for o in doc["outputs"]] == [[128, 1], [128, 1]]
    assert doc["result_is_sequence"] and doc["kernel_return"]
    opcodes = [i["opcode"] for i in doc["instructions"]]
    assert opcodes[0] == "dma_copy" and len(opcodes) >= 4
    assert all(i["location"].startswith("kernels.py:") for i in doc["instructions"])
    config, inputs, outputs = k.dump_config(a)
    assert json.loads(base64.b64decode(config)) == json.loads(program.dumps())
    assert inputs == ["x"] and len(outputs) == 2


def test_mutated_inputs_are_found_by_the_trace(rng):
    a, b, r = (rng.standard_normal((128, 64), dtype=np.float32) for _ in range(3))
    program = K.jit_add_into.specialize(a, b, r)
    assert program.mutated == (2,) and program.outputs == () and program.to_json()["kernel_return"] is False


def test_simulate_kernel_returns_outputs_and_writes_back(rng):
    a, b = (rng.standard_normal((128, 64), dtype=np.float32) for _ in range(2))
    result = np.zeros_like(a)
    assert nki.simulate_kernel(K.jit_add_into, a, b, result) is None
    np.testing.assert_allclose(result, a + b, rtol=1e-6)
    result2 = np.zeros_like(a)
    nki.simulate_kernel(K.add_into, a, b, result2)                 # a plain function works too
    np.testing.assert_array_equal(result2, result)
    x = rng.standard_normal((256, 64), dtype=np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(K.jit_scale_rows[2], x, 4.0), x * 4.0, rtol=1e-6)
    s, m = nki.simulate_kernel(K.jit_sum_and_max, a)
    np.testing.assert_allclose(s[:, 0], a.sum(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(m[:, 0], a.max(axis=1))


def test_nested_kernel_call_is_inlined(rng):
    helper = nki.jit(mode="trace")(K.double_helper)
    outer = nki.jit(K.calls_helper)
    x = rng.standard_normal((128, 64), dtype=np.float32)
    np.testing.assert_allclose(outer(x, helper), x * 2, rtol=1e-6)


def test_nested_kernel_with_grid_is_an_error(rng):
    helper = nki.jit(K.double_helper)[2]
    outer = nki.jit(K.calls_helper)
    with raises_at(KernelError, match="err_nested_kernel_with_spmd_grid"):
        outer(rng.standard_normal((128, 64), dtype=np.float32), helper)


def test_nc_grid_spreads_programs_over_two_cores(x):
    rec = Recorder()
    out = K.jit_scale_rows[nc(2)].launch((x, 2.0), listeners=[rec])
    np.testing.assert_allclose(out, x * 2.0, rtol=1e-6)
    assert [(e.program, e.core) for e in rec.of_type(ProgramStarted)] == [((0,), 0), ((1,), 1)]


def test_nc_grid_is_refused_on_trn1(x):
    k = nki.jit(K.scale_rows, platform_target="trn1")[nc(2)]
    with raises_at(KernelError, match="err_multi_cores_spmd_not_supported"):
        k(x, 2.0)


def test_outputs_in_sbuf_are_refused_naming_the_allocation(rng):
    k = nki.jit(K.returns_sbuf, hardware_strict=True)     # the simulator default hands the values back, warning
    with raises_at(KernelError, match="kernel outputs must be allocated in HBM") as exc:
        k(rng.standard_normal((128, 64), dtype=np.float32))
    # the error is at the return line, and names the line that created the tensor
    assert exc.value.location.source == "return tile"
    assert traceback.extract_tb(exc.value.__traceback__)[-1].line == "return tile"
    created = K.returns_sbuf.__code__.co_firstlineno + 1
    assert f"created at kernels.py:{created}" in str(exc.value)


def test_kernel_errors_end_at_the_users_kernel_line(rng):
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x[0:256, :]))      # 256 rows in one tile
        return out
    with raises_at(ShapeError, match="err_num_partition_exceed_arch_limit",
                   line="nl.store(out, value=nl.load(x[0:256, :]))") as exc:
        bad(rng.standard_normal((256, 64), dtype=np.float32))
    assert traceback.extract_tb(exc.value.__traceback__)[-1].line.startswith("nl.store(out, value=nl.load(")


def test_call_observers_see_top_level_calls_only(rng):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    helper = nki.jit(mode="trace")(K.double_helper)
    outer = nki.jit(K.calls_helper)
    seen = []
    with observe_calls(seen.append):
        outer(x, helper)
        nki.simulate_kernel(K.jit_scale_rows, x, 2.0)
    outer(x, helper)                                   # outside the block: not observed
    assert [c.name for c in seen] == ["calls_helper", "scale_rows"]
    args, kwargs = seen[1].shape_args()
    assert args[0].shape == (128, 64) and args[0].dtype.name == "float32" and args[1] == 2.0
    np.testing.assert_allclose(seen[1].result, x * 2.0, rtol=1e-6)


def test_unwrap_and_run_kernel_keep_their_import_path(rng):
    from opennki.kernel import run_kernel, unwrap
    x = rng.standard_normal((256, 64), dtype=np.float32)
    fn, grid = unwrap(K.jit_scale_rows[2])
    assert fn is K.scale_rows and grid == 2
    np.testing.assert_allclose(run_kernel(fn, (x, 3.0), grid=(2,)), x * 3.0, rtol=1e-6)
