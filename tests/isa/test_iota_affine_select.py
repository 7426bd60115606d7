"""nisa.iota and nisa.affine_select (spec/isa.md §6.17, §6.18): affine integer patterns on GpSimd."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf
from tests.raises import raises_at


@pytest.mark.parametrize("dtype", [nl.int32, nl.float32, nl.uint16])
def test_legacy_iota_of_index_expressions(dtype):
    def kernel():
        out = nl.ndarray((128, 64), dtype=dtype, buffer=nl.shared_hbm)
        expr = 5 + nl.arange(128)[:, None] * 2 + nl.arange(64)[None, :] * 3
        nl.store(out, nisa.iota(expr, dtype=dtype))
        return out

    p, f = np.mgrid[0:128, 0:64]
    np.testing.assert_array_equal(run(kernel), (5 + 2 * p + 3 * f).astype(dtype))


def test_legacy_iota_row_and_mask():
    def kernel():
        out = nl.ndarray((1, 512), dtype=nl.int32, buffer=nl.shared_hbm)
        buf = nl.full((1, 512), -1, dtype=nl.int32)
        i_f = nl.arange(512)[None, :]
        buf[...] = nisa.iota(i_f, dtype=nl.int32, mask=(i_f < 100))
        nl.store(out, buf)
        return out

    got = run(kernel)
    np.testing.assert_array_equal(got[0, :100], np.arange(100))
    np.testing.assert_array_equal(got[0, 100:], -1)


def test_new_generation_iota_pattern_and_int32_wrap():
    def kernel():
        t = nl2.ndarray((8, 12), dtype=nl2.int32, buffer=nl2.sbuf)
        nisa2.iota(dst=t, pattern=[[100, 3], [-1, 4]], offset=2 ** 31 - 5, channel_multiplier=1)
        return to_hbm(t)

    p, i, j = np.meshgrid(np.arange(8), np.arange(3), np.arange(4), indexing="ij")
    ref = (2 ** 31 - 5 + 100 * i - j + p).reshape(8, 12).astype(np.int64).astype(np.int32)
    np.testing.assert_array_equal(run(kernel), ref)


def test_legacy_affine_select_causal_mask(rng):
    a = rand(rng, 128, 128)

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        ix, iy = nl.mgrid[0:128, 0:128]
        t = nl.load(a[ix, iy])
        nl.store(out[ix, iy], nisa.affine_select(pred=(iy < ix), on_true_tile=t[ix, iy], on_false_value=-9984.0))
        return out

    np.testing.assert_array_equal(run(kernel, a), np.where(np.tril(np.ones((128, 128)), -1) > 0, a, -9984.0))


def test_legacy_affine_select_from_psum_with_mask_and_dtype(rng):
    a = rand(rng, 64, 32)

    def kernel(a):
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        p = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.psum)
        p[...] = nl.load(a)
        buf = nl.zeros(a.shape, dtype=nl.float32)
        ix, iy = nl.mgrid[0:64, 0:32]
        buf[...] = nisa.affine_select(pred=(ix - iy >= 10), on_true_tile=p, on_false_value=-1.0,
                                      dtype=nl.float32, mask=(ix < 40))
        nl.store(out, buf)
        return out

    ix, iy = np.mgrid[0:64, 0:32]
    ref = np.where(ix - iy >= 10, a, -1.0)
    ref[40:] = 0.0
    np.testing.assert_array_equal(run(kernel, a), ref)


def test_new_generation_affine_select_pattern(rng):
    a = rand(rng, 32, 48)

    def kernel(a):
        t = to_sbuf(a, nl2.float32)
        nisa2.affine_select(dst=t, pattern=[[-1, 48]], channel_multiplier=1, on_true_tile=t,
                            on_false_value=-3.0e38, cmp_op=nl2.greater_equal, offset=5)
        return to_hbm(t)

    p, f = np.mgrid[0:32, 0:48]
    np.testing.assert_array_equal(run(kernel, a), np.where(5 + p - f >= 0, a, np.float32(-3.0e38)))


def _iota_psum():
    nisa2.iota(dst=nl2.ndarray((8, 4), dtype=nl2.int32, buffer=nl2.psum), pattern=[[1, 4]])


def _iota_size():
    nisa2.iota(dst=nl2.ndarray((8, 4), dtype=nl2.int32, buffer=nl2.sbuf), pattern=[[1, 5]])


def _iota_not_affine():
    nisa.iota(nl.arange(8)[:, None] % 3, dtype=nl.int32)


def _select_not_a_predicate():
    t = nl.zeros((8, 8), dtype=nl.float32)
    nisa.affine_select(pred=True, on_true_tile=t, on_false_value=0.0)


def _select_non_affine():
    ix, iy = nl.mgrid[0:8, 0:8]
    t = nl.zeros((8, 8), dtype=nl.float32)
    nisa.affine_select(pred=(ix % 2 == 0), on_true_tile=t, on_false_value=0.0)


def _select_cmp_op():
    t = nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.affine_select(dst=t, pattern=[[1, 8]], channel_multiplier=0, on_true_tile=t, on_false_value=0.0,
                        cmp_op=nl2.add)


REJECTS = [
    ("iota_into_psum", _iota_psum, MemoryKindError, "SBUF only"),
    ("iota_pattern_size", _iota_size, ShapeError, "cover dst"),
    ("iota_non_affine", _iota_not_affine, ShapeError, "affine index expression"),
    ("select_pred_not_a_comparison", _select_not_a_predicate, KernelError, "comparison of nl.arange"),
    ("select_non_affine_predicate", _select_non_affine, KernelError, "affine predicate"),
    ("select_cmp_op", _select_cmp_op, KernelError, "comparison"),
]


test_iota_affine_select_rejects = rejecting(REJECTS, inputs=())


def test_psum_on_true_tile_rejected_in_hardware_strict_mode(rng):
    from opennki.errors import HardwareUnsupportedError
    from opennki.sim.options import SimOptions

    def kernel():
        ix, iy = nl.mgrid[0:8, 0:8]
        p = nl.zeros((8, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.affine_select(pred=(iy < ix), on_true_tile=p, on_false_value=0.0)

    run(kernel)
    with raises_at(HardwareUnsupportedError, match="SBUF"):
        run(kernel, options=SimOptions(hardware_strict=True))
