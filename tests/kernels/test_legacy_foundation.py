"""Foundation kernels of the legacy generation against NumPy on random data (fp32, and bf16 where it makes
sense)."""

import numpy as np
import pytest

from opennki.legacy import simulate_kernel
from tests.conftest import assert_within_ulps, bf16, rounded
from tests.kernels import legacy_kernels as K

F32_TOL = dict(rtol=1e-5, atol=1e-5)


def test_add_tile_fp32(rng):
    a, b = rng.standard_normal((2, 128, 512), dtype=np.float32)
    np.testing.assert_array_equal(K.add_tile(a, b), a + b)


def test_add_tile_bf16_rounds_once(rng):
    a, b = bf16(rng.standard_normal((2, 128, 512)))
    out = K.add_tile(a, b)
    assert out.dtype == a.dtype
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(a.dtype)
    np.testing.assert_array_equal(out.astype(np.float32), expected.astype(np.float32))


def test_add_spmd_2d_grid(rng):
    a, b = rng.standard_normal((2, 256, 1024), dtype=np.float32)
    np.testing.assert_array_equal(K.add_spmd[2, 2](a, b), a + b)
    np.testing.assert_array_equal(simulate_kernel(K.add_spmd[2, 2], a, b), a + b)


def test_add_spmd_partial_grid_leaves_rest_unwritten(rng):
    a, b = rng.standard_normal((2, 256, 1024), dtype=np.float32)
    out = K.add_spmd[1, 2](a, b)
    np.testing.assert_array_equal(out[:128], (a + b)[:128])
    assert np.isnan(out[128:]).all()          # never written: poisoned memory shows up


def test_transpose2d(rng):
    x = rng.standard_normal((128, 8 * 16), dtype=np.float32)
    out = K.transpose2d(x, (8, 16))
    expected = x.reshape(128, 8, 16).transpose(0, 2, 1).reshape(128, -1)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("rows", [200, 128, 77])
def test_softmax_ragged_rows(rng, rows):
    x = rng.standard_normal((rows, 96), dtype=np.float32) * 3
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(K.softmax_rows(x), e / e.sum(axis=1, keepdims=True), **F32_TOL)


def test_softmax_bf16(rng):
    x = bf16(rng.standard_normal((130, 64)))
    xf = x.astype(np.float32)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    out = K.softmax_rows(x)
    assert out.dtype == x.dtype
    r = rounded(x.dtype)                # each nl call of softmax_rows writes a bf16 tile
    e = r(np.exp(r(xf - xf.max(axis=1, keepdims=True)).astype(np.float64)))
    ref = r(e / r(e.sum(axis=1, keepdims=True, dtype=np.float32)))
    assert_within_ulps(out, ref, x.dtype, ulps=1)


def _rmsnorm_ref(a, g):
    return a / np.sqrt(np.mean(a * a, axis=1, keepdims=True) + 1e-6) * g


@pytest.mark.parametrize("n", [256, 300])
def test_rmsnorm(rng, n):
    a = rng.standard_normal((n, 128), dtype=np.float32)
    g = rng.standard_normal(128, dtype=np.float32)
    np.testing.assert_allclose(K.rmsnorm(a, g), _rmsnorm_ref(a, g), rtol=1e-4, atol=1e-5)


def _layernorm_ref(x, gamma, beta, eps):
    mu = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("kernel", [K.layernorm_meanvar, K.layernorm_bn], ids=["mean-var", "bn_stats"])
@pytest.mark.parametrize("d", [256, 1000])
def test_layernorm(rng, kernel, d):
    x = rng.standard_normal((256, d), dtype=np.float32) * 2 + 0.5
    gamma, beta = rng.standard_normal((2, d), dtype=np.float32)
    np.testing.assert_allclose(kernel(x, gamma, beta, 1e-5), _layernorm_ref(x, gamma, beta, 1e-5),
                               rtol=1e-4, atol=1e-4)


def test_layernorm_bf16(rng):
    x = bf16(rng.standard_normal((128, 256)))
    gamma, beta = bf16(rng.standard_normal((2, 256)))
    out = K.layernorm_bn(x, gamma, beta, 1e-5)
    # statistics in fp32 (bn_stats/bn_aggr, rsqrt); tensor_scalar, * gamma and + beta each write bf16
    r, xf = rounded(x.dtype), x.astype(np.float32)
    mean = xf.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
    inv = (1.0 / np.sqrt(xf.var(axis=1, keepdims=True, dtype=np.float64) + 1e-5)).astype(np.float32)
    y = r((xf - mean) * inv)
    ref = r(r(y * gamma.astype(np.float32)) + beta.astype(np.float32))
    assert_within_ulps(out, ref, x.dtype, ulps=1)


@pytest.mark.parametrize("pool", [2, 4])
def test_avgpool2d_with_mgrid(rng, pool):
    x = rng.standard_normal((64, 16, 24), dtype=np.float32)
    c, h, w = x.shape
    ref = x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))
    np.testing.assert_allclose(K.avgpool2d(x, pool), ref, rtol=1e-5, atol=1e-6)


def test_matmul_single_tile(rng):
    lhsT = rng.standard_normal((128, 64), dtype=np.float32)
    rhs = rng.standard_normal((128, 512), dtype=np.float32)
    np.testing.assert_allclose(K.matmul_single(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


def test_matmul_single_tile_bf16(rng):
    lhsT, rhs = bf16(rng.standard_normal((128, 64))), bf16(rng.standard_normal((128, 512)))
    ref = lhsT.astype(np.float32).T @ rhs.astype(np.float32)      # fp32 products, fp32 accumulation
    out = K.matmul_single(lhsT, rhs)
    np.testing.assert_array_equal(out.astype(np.float32), ref.astype(lhsT.dtype).astype(np.float32))


def assert_tiled_matmul(kernel, shape, rng):
    """`kernel(lhsT, rhs)` on random fp32 lhsT [K, M] and rhs [K, N] (`shape` = (K, M, N)) equals lhsT.T @ rhs
    (the tiled matmul check of both generations: test_new_foundation.py runs it too)."""
    K_, M, N = shape
    lhsT = rng.standard_normal((K_, M), dtype=np.float32)
    rhs = rng.standard_normal((K_, N), dtype=np.float32)
    np.testing.assert_allclose(kernel(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("shape", [(256, 256, 1024), (128, 384, 512)])
def test_matmul_tiled_psum_accumulation(rng, shape):
    assert_tiled_matmul(K.matmul_tiled, shape, rng)


def test_matmul_nested_load_untransposed(rng):
    x = rng.standard_normal((96, 128), dtype=np.float32)
    y = rng.standard_normal((128, 256), dtype=np.float32)
    np.testing.assert_allclose(K.matmul_nested_load(x, y), x @ y, rtol=1e-4, atol=1e-4)


def test_inputs_not_modified(rng):
    a, b = rng.standard_normal((2, 128, 512), dtype=np.float32)
    a0, b0 = a.copy(), b.copy()
    K.add_tile(a, b)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
