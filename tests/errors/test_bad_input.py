"""Bad input of every class ends in an OpenNKIError at the user's line (issue: no internal exceptions):
one case per rule whose behaviour was decided here; the fuzzer (tests/properties) covers the rest."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
import opennki.legacy as lnki
import opennki.legacy.language as lnl
from opennki.errors import AllocationError, DtypeError, HardwareUnsupportedError, KernelError, ShapeError
from opennki.kernels.base import run_kernel
from opennki.sim.options import SimOptions
from tests.raises import raises_at


def _copy(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, value=lnl.load(x))
    return out


@pytest.fixture
def x(rng):
    return rng.standard_normal((4, 8)).astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64, np.uint64])
def test_kernel_inputs_of_dtypes_neuroncores_lack_name_the_argument_at_the_call(x, dtype):
    with raises_at(DtypeError, match=f"kernel argument 'x': {np.dtype(dtype)} is not a NeuronCore dtype",
                   line="lnki.jit(_copy)(x.astype(dtype))"):
        lnki.jit(_copy)(x.astype(dtype))


@pytest.mark.parametrize("dtype,shown", [("banana", "'banana' is not an NKI dtype"), (3, "3 is not an NKI dtype"),
                                          (np.float64, "float64 is not a NeuronCore dtype")])
def test_bad_dtypes_of_a_tensor_are_dtype_errors(x, dtype, shown):
    def kernel(x):
        lnl.ndarray((4, 8), dtype=dtype, buffer=lnl.sbuf)
        return x
    with raises_at(DtypeError, match=shown, line="lnl.ndarray((4, 8), dtype=dtype"):
        lnki.jit(kernel)(x)


@pytest.mark.parametrize("key,match", [(None, "SPMD grid dimension"), ((0,), "SPMD grid dimension"),
                                       ((2, 0), "SPMD grid dimension"),    # a bare kernel[0] is one program
                                       (lnl.nc(0), r"nl.nc\(n\) must be a positive"),
                                       (lnl.nc(3), "at most 2 physical cores")])
def test_bad_legacy_grids_fail_at_the_launching_line(x, key, match):
    kernel = lnki.jit(_copy)[key]
    with raises_at(KernelError, match=match, line="kernel(x)"):
        kernel(x)


@pytest.mark.parametrize("lnc", [None, 0, 3, "2"])
def test_bad_lnc_fails_at_the_launching_line(x, lnc):
    @nki.jit
    def kernel(x):
        return x
    with raises_at(KernelError, line="kernel[lnc](x)"):
        kernel[lnc](x)


def test_writing_a_read_only_input_is_an_error_not_a_dropped_write(x):
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=x, src=t)
        return x
    frozen = x.copy()
    frozen.flags.writeable = False
    with raises_at(KernelError, match="read-only NumPy array", line="nisa.dma_copy(dst=x, src=t)"):
        nki.jit(kernel)(frozen)
    np.testing.assert_array_equal(frozen, x)


def test_an_hbm_tensor_larger_than_hbm_is_the_capacity_error(x):
    def kernel(x):
        nl.ndarray((1 << 20, 1 << 21), dtype=nl.float32, buffer=nl.shared_hbm)
        return x
    with raises_at(AllocationError, match="HBM overflow", line="nl.ndarray((1 << 20, 1 << 21)"):
        nki.jit(kernel)(x)


@pytest.mark.parametrize("op", ["add", 3, lambda a, b: a])
def test_new_generation_op_must_be_an_nl_operator(x, op):
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.tensor_tensor(dst=t, data1=t, data2=t, op=op)
        return x
    with raises_at(KernelError, match="nl operator|not an NKI operator", line="nisa.tensor_tensor(dst=t"):
        nki.jit(kernel)(x)


@pytest.mark.parametrize("op,ref", [(nl.divide, np.divide), (nl.mod, np.mod), (nl.fmod, np.fmod)])
def test_divide_and_mod_opcodes_run_and_raise_only_under_hardware_strict(rng, op, ref):
    a = rng.uniform(1, 3, (4, 8)).astype(np.float32)
    b = rng.uniform(0.5, 2, (4, 8)).astype(np.float32)

    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ta, tb = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf), nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        nisa.tensor_tensor(dst=ta, data1=ta, data2=tb, op=op)
        nisa.dma_copy(dst=out, src=ta)
        return out
    np.testing.assert_allclose(nki.jit(kernel)(a, b), ref(a, b), rtol=1e-6)
    with raises_at(HardwareUnsupportedError, match="opcode on hardware", line="nisa.tensor_tensor(dst=ta"):
        run_kernel(kernel, (a, b), options=SimOptions(hardware_strict=True))


@pytest.mark.parametrize("mask,match", [("x", "must be a predicate"), (3, "must be a predicate"),
                                        (lnl.arange(7)[:, None] < 1, "fit any operand")])
def test_masks_that_are_not_predicates_or_fit_nothing_are_rejected(x, mask, match):
    def kernel(x):
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, value=lnl.exp(lnl.load(x), mask=mask))
        return out
    with raises_at(KernelError if isinstance(mask, (str, int)) else ShapeError, match=match,
                   line="lnl.exp(lnl.load(x), mask=mask)"):
        lnki.jit(kernel)(x)


@pytest.mark.parametrize("make", [lambda t: t.reshape("a"), lambda t: t[:, ::0], lambda t: t[:, 0:1.5],
                                  lambda t: t.ap("x"), lambda t: t.squeeze_dim(5), lambda t: t.broadcast(1.5, 2)])
def test_malformed_views_are_shape_errors(x, make):
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        make(t)
        return x
    with raises_at(ShapeError):
        nki.jit(kernel)(x)


@pytest.mark.parametrize("axis", [1.5, "a", [1, 1], 7])
def test_malformed_reduction_axes_are_shape_errors(x, axis):
    def kernel(x):
        out = lnl.ndarray((4, 1), dtype=x.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, value=lnl.sum(lnl.load(x), axis=axis, keepdims=True))
        return out
    with raises_at(ShapeError, match="reduction axis", line="lnl.sum(lnl.load(x), axis=axis"):
        lnki.jit(kernel)(x)


def test_affine_range_step_zero_is_a_kernel_error(x):
    def kernel(x):
        for _ in lnl.affine_range(0, 4, 0):
            pass
        return x
    with raises_at(KernelError, match="step must not be zero", line="lnl.affine_range(0, 4, 0)"):
        lnki.jit(kernel)(x)
