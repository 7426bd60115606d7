"""nisa.reciprocal (spec/isa.md §6.14): 1 / x in fp32 on the Vector Engine."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_sbuf


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_reciprocal_matches_numpy(rng, dtype):
    x = rand(rng, 128, 64, low=0.1, high=8.0).astype(dtype)
    x[0, :2] = [-3.0, 0.0]

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.reciprocal(nl.load(x)))
        return out

    with np.errstate(divide="ignore"):
        ref = (np.float32(1.0) / x.astype(np.float32)).astype(dtype)
    got = run(kernel, x)
    np.testing.assert_array_equal(got.astype(np.float32), ref.astype(np.float32))
    assert got[0, 1] == np.inf


def test_reciprocal_into_fp32_with_mask_and_new_generation(rng):
    x = rand(rng, 64, 16, low=0.5)

    def legacy(x):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        buf = nl.zeros((64, 16), dtype=nl.float32)
        i_f = nl.arange(16)[None, :]
        buf[...] = nisa.reciprocal(nl.load(x), mask=(i_f < 5))
        nl.store(out, buf)
        return out

    got = run(legacy, x)
    np.testing.assert_allclose(got[:, :5], 1 / x[:, :5], rtol=1e-7)
    np.testing.assert_array_equal(got[:, 5:], 0.0)

    def new(x):
        out = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.shared_hbm)
        t = to_sbuf(x, nl2.float32)
        nisa2.reciprocal(dst=t, data=t)
        nisa2.dma_copy(dst=out, src=t)
        return out

    np.testing.assert_allclose(run(new, x), 1 / x, rtol=1e-7)


def _hbm(x):
    nisa.reciprocal(x)


def _shape(x):
    t = nl.load(x)
    nisa.scalar_tensor_tensor  # noqa: B018 - keep the table uniform
    d = nl.ndarray((128, 8), dtype=nl.float32)
    d[...] = nisa.reciprocal(t)


REJECTS = [
    ("hbm", _hbm, MemoryKindError, "SBUF/PSUM"),
    ("dst_shape", _shape, ShapeError, "destination"),
]


test_reciprocal_rejects = rejecting(REJECTS)
