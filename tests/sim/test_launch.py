"""Launching kernels: outputs, write-back, grids, targets, precision switch, shape-only runs, plain Python
inside kernels."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from opennki.sim import ShapeSpec, SimOptions
from tests.raises import raises_at


@nki.jit
def two_outputs(a):
    s = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    print("inside the kernel:", t.shape)          # ordinary Python runs in the kernel body
    nl.store(s, value=t + t)
    nl.store(d, value=t * t)
    return s, d


def test_tuple_of_outputs_and_print(rng, capsys):
    a = rng.standard_normal((64, 32), dtype=np.float32)
    s, d = two_outputs(a)
    np.testing.assert_array_equal(s, a + a)
    np.testing.assert_array_equal(d, a * a)
    assert "inside the kernel: (64, 32)" in capsys.readouterr().out


@nki.jit
def writes_into_argument(a, out):
    nl.store(out, value=nl.exp(nl.load(a)))


def test_old_convention_output_argument_is_written_back(rng):
    a = rng.standard_normal((32, 16), dtype=np.float32)
    out = np.zeros_like(a)
    assert nki.simulate_kernel(writes_into_argument, a, out) is None
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-6)


@nki.jit
def which_program(a):
    out = nl.ndarray((2, 3), dtype=nl.int32, buffer=nl.shared_hbm)
    i, j = nl.program_id(0), nl.program_id(1)
    assert nl.num_programs() == 6 and nl.num_programs(1) == 3 and nl.program_ndim() == 2
    tile = nl.full((1, 1), 10 * i + j, dtype=nl.int32)
    nl.store(out[i:i + 1, j:j + 1], value=tile)
    return out


def test_grid_programs_see_their_ids():
    out = which_program[2, 3](np.zeros(1, np.float32))
    np.testing.assert_array_equal(out, [[0, 1, 2], [10, 11, 12]])


@nki.jit
def report_target(a):
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.full((1, 1), nl.tile_size.total_available_sbuf_size, dtype=nl.int32))
    return out


@pytest.mark.parametrize("target,sbuf", [("trn1", 176 * 1024), ("gen3", 208 * 1024), ("trn3", 240 * 1024)])
def test_target_from_environment(monkeypatch, target, sbuf):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    assert report_target(np.zeros(1, np.float32))[0, 0] == sbuf


@nki.jit
def bf16_sum(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out


@nki.jit
def add_four_times(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.load(a)
    small = nl.load(b)
    for _ in nl.sequential_range(4):
        acc[...] = nl.add(acc, small)      # update in place: a tensor created in a loop body is local to it
    nl.store(out, value=acc)
    return out


def test_precise_fp_switch(monkeypatch):
    a = np.full((4, 4), 1.0, ml_dtypes.bfloat16)
    b = np.full((4, 4), 2 ** -9, ml_dtypes.bfloat16)   # a quarter of bf16's step at 1.0
    precise = add_four_times(a, b)
    assert precise.dtype == ml_dtypes.bfloat16 and (precise.astype(np.float32) == 1.0).all()  # each add rounds
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    imprecise = add_four_times(a, b)                    # fp32 storage: the four quarters add up to one step
    assert imprecise.dtype == ml_dtypes.bfloat16 and (imprecise.astype(np.float32) == 1 + 2 ** -7).all()


def test_shape_only_run_needs_no_data():
    rec = Recorder()
    out = run_kernel(bf16_sum.func, (ShapeSpec((128, 64), "bfloat16"), ShapeSpec((128, 64), "bfloat16")),
                     listeners=[rec], options=SimOptions(shape_only=True))
    assert isinstance(out, ShapeSpec) and out.shape == (128, 64)
    assert [e.opcode for e in rec.of_type(InstructionExecuted)] == ["dma_copy", "dma_copy", "tensor_tensor",
                                                                     "dma_copy"]


def test_shape_only_still_checks_rules():
    from opennki.errors import ShapeError
    with raises_at(ShapeError, match="err_num_partition_exceed_arch_limit"):
        run_kernel(bf16_sum.func, (ShapeSpec((256, 64), "float32"), ShapeSpec((256, 64), "float32")),
                   options=SimOptions(shape_only=True))


def test_calling_nl_outside_a_kernel_is_an_error():
    from opennki.errors import KernelError
    with raises_at(KernelError, match="err_nki_api_outside_of_nki_kernel"):
        nl.zeros((4, 4), nl.float32)
