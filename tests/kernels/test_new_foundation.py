"""Foundation kernels of the new generation (`dst=` style) against NumPy on random data."""

import numpy as np
import pytest

import opennki as nki
from tests.conftest import assert_within_ulps, bf16
from tests.kernels import new_kernels as K
from tests.kernels.test_legacy_foundation import assert_tiled_matmul


@pytest.mark.parametrize("n", [128, 300])
def test_add(rng, n):
    a, b = rng.standard_normal((2, n, 256), dtype=np.float32)
    np.testing.assert_array_equal(K.add(a, b), a + b)
    np.testing.assert_array_equal(nki.simulate(K.add)(a, b), a + b)


def test_add_bf16(rng):
    a, b = bf16(rng.standard_normal((2, 128, 64)))
    out = K.add(a, b)
    np.testing.assert_array_equal(out.astype(np.float32),
                                  (a.astype(np.float32) + b.astype(np.float32)).astype(a.dtype).astype(np.float32))


@pytest.mark.parametrize("shape", [(128, 128, 512), (384, 256, 1024)])
def test_matmul_tiled(rng, shape):
    assert_tiled_matmul(K.matmul_tiled, shape, rng)


def test_matmul_tiled_bf16(rng):
    lhsT, rhs = bf16(rng.standard_normal((256, 128))), bf16(rng.standard_normal((256, 512)))
    # bf16 products are exact in fp32 and PSUM accumulates in fp32; the result rounds once, to bf16
    exact = lhsT.astype(np.float64).T @ rhs.astype(np.float64)
    out = K.matmul_tiled(lhsT, rhs)
    assert out.dtype == lhsT.dtype
    terms = np.abs(lhsT.astype(np.float64)).T @ np.abs(rhs.astype(np.float64))
    assert_within_ulps(out, exact, lhsT.dtype, ulps=0.5, atol=256 * float(np.finfo(np.float32).eps) * terms.max())


@pytest.mark.parametrize("n", [128, 200])
def test_softmax_explicit_instructions(rng, n):
    x = rng.standard_normal((n, 80), dtype=np.float32) * 2
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(K.softmax(x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
