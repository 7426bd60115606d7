"""nisa.tensor_reduce (spec/isa.md §6.7): reductions over free axes, fp32 or raw integer bits."""

import functools

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, HardwareUnsupportedError, KernelError, ShapeError
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand, rejecting, rejects, run, to_hbm, to_sbuf
from tests.raises import raises_at


def _reduce_kernel(op, axis, **kw):
    def kernel(x):
        r = nisa.tensor_reduce(op, nl.load(x), axis, **kw)
        out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        return out
    return kernel


def _fold(ufunc, x, axes, keepdims=False):
    return ufunc.reduce(x, axis=axes, keepdims=keepdims)


ARITH = [
    (np.add, functools.partial(_fold, np.add)),
    (np.max, functools.partial(_fold, np.maximum)),
    (np.minimum, functools.partial(_fold, np.minimum)),
    (np.multiply, functools.partial(_fold, np.multiply)),
    (np.subtract, lambda x, axes, keepdims=False: _fold(np.subtract, x, axes[0], keepdims)),
    (np.logical_or, lambda x, axes, keepdims=False: np.logical_or.reduce(x > 0, axis=axes, keepdims=keepdims)),
]


@pytest.mark.parametrize("op,ref", ARITH, ids=["add", "max", "min", "multiply", "subtract", "logical_or"])
def test_arithmetic_reductions(rng, op, ref):
    x = rand(rng, 128, 48, low=0.5, high=1.5)
    if op is np.logical_or:
        x = (rng.random((128, 48)) < 0.05).astype(np.float32)
    got = run(_reduce_kernel(op, 1), x)
    np.testing.assert_allclose(got[:, 0], np.asarray(ref(x, (1,)), np.float32), rtol=2e-5)


@pytest.mark.parametrize("axis,keepdims,shape", [((1,), False, (128, 6)), ((2,), True, (128, 4, 1)),
                                                 ((1, 2), False, (128, 1)), (-1, False, (128, 4)),
                                                 ((1, 2), True, (128, 1, 1))])
def test_axes_and_keepdims_of_3d_tiles(rng, axis, keepdims, shape):
    x = rand(rng, 128, 4, 6)
    got = run(_reduce_kernel(np.add, axis, keepdims=keepdims), x)
    assert got.shape == shape
    axes = tuple(a % 3 for a in ((axis,) if isinstance(axis, int) else axis))
    np.testing.assert_allclose(got.reshape(128, -1), x.sum(axis=axes).reshape(128, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,ref", [(np.bitwise_or, np.bitwise_or), (np.bitwise_and, np.bitwise_and),
                                    (np.bitwise_xor, np.bitwise_xor)])
def test_bitvec_reductions_on_raw_bits(rng, op, ref):
    x = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(32, 16), dtype=np.int64).astype(np.int32)
    got = run(_reduce_kernel(op, 1), x)
    np.testing.assert_array_equal(got[:, 0], ref.reduce(x, axis=1))


def test_negate_bf16_and_masked_free_elements(rng):
    x = rand(rng, 128, 32).astype(ml_dtypes.bfloat16)
    got = run(_reduce_kernel(np.max, 1, negate=True), x)
    np.testing.assert_array_equal(got[:, 0].astype(np.float32), -x.astype(np.float32).max(1))

    def masked(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        nl.store(out, nisa.tensor_reduce(np.add, nl.load(x), 1, dtype=nl.float32, mask=(i_f < 10)))
        return out

    np.testing.assert_allclose(run(masked, x)[:, 0], x.astype(np.float32)[:, :10].sum(1), rtol=1e-5)


def test_new_generation_tensor_reduce(rng):
    x = rand(rng, 64, 8, 16)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        r = nl2.ndarray((64, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_reduce(dst=r, op=nl2.minimum, data=t, axis=(2,))
        return to_hbm(r)

    np.testing.assert_array_equal(run(kernel, x), x.min(axis=2))


def _axis0(x):
    nisa.tensor_reduce(np.add, nl.load(x), 0)


def _not_reducible(x):
    nisa.tensor_reduce(np.power, nl.load(x), 1)


def _dst_shape(x):
    t = nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=x)
    nisa2.tensor_reduce(dst=nl2.ndarray((128, 2), dtype=nl2.float32, buffer=nl2.sbuf), op=nl2.add, data=t, axis=1)


def _bitvec_negate(x):
    nisa.tensor_reduce(np.bitwise_or, nl.zeros((128, 4), dtype=nl.int32), 1, negate=True)


def _bitvec_float(x):
    nisa.tensor_reduce(np.bitwise_and, nl.load(x), 1)


def _axis_range(x):
    nisa.tensor_reduce(np.add, nl.load(x), 3)


REJECTS = [
    ("partition_axis", _axis0, ShapeError, "free axes only"),
    ("not_a_reduction", _not_reducible, KernelError, "not a reduction operator"),
    ("bitvec_negate", _bitvec_negate, DtypeError, "no negate"),
    ("bitvec_on_floats", _bitvec_float, DtypeError, "integer data"),
    ("axis_out_of_range", _axis_range, ShapeError, "out of range"),
]


test_tensor_reduce_rejects = rejecting(REJECTS)


def test_dst_must_hold_the_result(rng):
    rejects(_dst_shape, rand(rng, 128, 16), error=ShapeError, match="reduced result")


def test_non_trailing_axes_rejected_in_hardware_strict_mode(rng):
    x = rand(rng, 16, 4, 6)
    kernel = _reduce_kernel(np.add, (1,))
    np.testing.assert_allclose(run(kernel, x), x.sum(axis=1), rtol=1e-6)
    with raises_at(HardwareUnsupportedError, match="trailing"):
        run(kernel, x, options=SimOptions(hardware_strict=True))

