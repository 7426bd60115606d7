"""nisa.tensor_copy (spec/isa.md §6.15): bit-exact for equal dtypes, else through fp32 (RNE, saturation)."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf
from tests.raises import raises_at


def _kernel(dtype=None, engine=nisa.unknown_engine, via_psum=False):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        if via_psum:
            p = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.psum)
            p[...] = t
            t = p
        nl.store(out, nisa.tensor_copy(t, dtype=dtype, engine=engine))
        return out
    return kernel


@pytest.mark.parametrize("engine", [nisa.vector_engine, nisa.gpsimd_engine, nisa.scalar_engine])
def test_same_dtype_copies_are_bit_exact(rng, engine):
    x = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(128, 32), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(run(_kernel(engine=engine), x, target="trn2"), x)
    f = rand(rng, 64, 16)
    f.view(np.uint32)[0, :4] = [0x7FC00001, 0x7F800000, 0xFF800000, 0x80000000]   # NaN payload, +-inf, -0
    np.testing.assert_array_equal(run(_kernel(engine=engine), f, target="trn2").view(np.uint32), f.view(np.uint32))


def test_v2_scalar_engine_copies_through_fp32():
    x = np.full((16, 4), 2 ** 24 + 1, np.int32)
    np.testing.assert_array_equal(run(_kernel(engine=nisa.scalar_engine), x, target="trn1"), 2 ** 24)
    np.testing.assert_array_equal(run(_kernel(engine=nisa.vector_engine), x, target="trn1"), x)


def test_conversions_round_to_nearest_even_and_saturate(rng):
    x = rand(rng, 128, 64)
    got = run(_kernel(dtype=nl.bfloat16), x)
    np.testing.assert_array_equal(got.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    halves = np.array([[0.5, 1.5, 2.5, -2.5, 300.0, -300.0, 127.5, -128.5]], np.float32).repeat(4, 0)
    np.testing.assert_array_equal(run(_kernel(dtype=nl.int8), halves),
                                  np.array([[0, 2, 2, -2, 127, -128, 127, -128]] * 4, np.int8))


def test_psum_source_and_mask(rng):
    x = rand(rng, 128, 32)
    np.testing.assert_array_equal(run(_kernel(via_psum=True), x), x)

    def masked(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.zeros((128, 32), dtype=nl.float32)
        i_p, i_f = nl.mgrid[0:128, 0:32]
        buf[...] = nisa.tensor_copy(nl.load(x), mask=(i_p >= 64) & (i_f < 16))
        nl.store(out, buf)
        return out

    ref = np.zeros_like(x)
    ref[64:, :16] = x[64:, :16]
    np.testing.assert_array_equal(run(masked, x), ref)


def test_new_generation_copy_and_dtype_keyword(rng):
    x = rand(rng, 32, 8)

    def kernel(x):
        a = to_sbuf(x, nl2.float32)
        b = nl2.ndarray(x.shape, dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=b, src=a, dtype=nl2.float16)
        return to_hbm(b)

    np.testing.assert_array_equal(run(kernel, x), x.astype(np.float16))

    def wrong_dtype(x):
        b = nl2.ndarray(x.shape, dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.tensor_copy(dst=b, src=b, dtype=nl2.float32)

    with raises_at(DtypeError, match="dst.dtype"):
        run(wrong_dtype, x)


def _gpsimd_psum(x):
    nisa.tensor_copy(nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum), engine=nisa.gpsimd_engine)


def _tensor_engine(x):
    nisa.tensor_copy(nl.load(x), engine=nisa.tensor_engine)


def _free_size(x):
    d = nl2.ndarray((128, 8), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_copy(dst=d, src=nl.load(x))


def _hbm(x):
    nisa.tensor_copy(x)


REJECTS = [
    ("gpsimd_psum", _gpsimd_psum, MemoryKindError, "GpSimd cannot access PSUM"),
    ("tensor_engine", _tensor_engine, KernelError, "tensor engine"),
    ("free_size", _free_size, ShapeError, "elements per partition"),
    ("hbm_source", _hbm, MemoryKindError, "SBUF/PSUM"),
]


test_tensor_copy_rejects = rejecting(REJECTS, api="nisa.tensor_copy")
