"""Legacy nl composite ops against NumPy: softmax, rms_norm, where, dropout, rand / random_seed
(spec/language.md §5.2, §6.6)."""

import numpy as np
import pytest

import opennki.legacy.language as nl
from tests.language.coverage import covers
from tests.conftest import assert_within_ulps, rounded
from tests.language.helpers import apply, bf16, run


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@covers("softmax")
@pytest.mark.parametrize("shape,axis", [((64, 100), 1), ((16, 4, 30), [2]), ((16, 4, 30), [1, 2])])
def test_softmax_matches_numpy(shape, axis, rng):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    out = apply(lambda t: nl.softmax(t, axis=axis), x)
    np.testing.assert_allclose(out, _softmax(x.astype(np.float64), tuple(np.atleast_1d(axis))), rtol=1e-5,
                               atol=1e-7)


@covers("softmax", "float32", "bfloat16")
def test_softmax_compute_dtype_sets_the_precision(rng):
    x = bf16(rng.standard_normal((32, 64)))
    out32 = apply(lambda t: nl.softmax(t, axis=1, compute_dtype=nl.float32), x)
    out16 = apply(lambda t: nl.softmax(t, axis=1), x)
    ref = _softmax(x.astype(np.float64), 1)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, ref, rtol=1e-5, atol=1e-7)
    assert out16.dtype == nl.bfloat16
    r = rounded(nl.bfloat16)           # every step of nl.softmax writes a bf16 tile
    xf = x.astype(np.float32)
    e = r(np.exp(r(xf - xf.max(axis=1, keepdims=True)).astype(np.float64)))
    ref16 = r(e * r(1.0 / r(e.sum(axis=1, keepdims=True, dtype=np.float32))))
    assert_within_ulps(out16, ref16, nl.bfloat16, ulps=1)


@covers("rms_norm")
@pytest.mark.parametrize("w_rows", [1, 32])
def test_rms_norm_matches_numpy(w_rows, rng):
    x = rng.standard_normal((32, 96)).astype(np.float32)
    w = rng.standard_normal((w_rows, 96)).astype(np.float32)
    out = apply(lambda t, g: nl.rms_norm(t, g, axis=1, n=96, epsilon=1e-5), x, w)
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)


@covers("where")
def test_where_with_tile_and_scalar_alternatives(rng):
    x, y = rng.standard_normal((2, 32, 40)).astype(np.float32)
    np.testing.assert_array_equal(apply(lambda a, b: nl.where(a > b, a, b), x, y), np.where(x > y, x, y))
    np.testing.assert_array_equal(apply(lambda a: nl.where(a > 0, a, -1.0), x), np.where(x > 0, x, -1.0))


@covers("where", "int32")
def test_where_broadcasts_and_promotes(rng):
    x = rng.standard_normal((32, 40)).astype(np.float32)
    cond = (rng.random((32, 1)) > 0.5)
    ints = rng.integers(-5, 5, (1, 40)).astype(np.int32)
    out = apply(lambda c, a, b: nl.where(c, a, b), cond, x, ints)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.where(cond, x, ints))
    assert apply(lambda c, b: nl.where(c, b, 0, dtype=nl.int32), cond, ints).dtype == np.int32


@covers("where")
def test_where_does_not_mix_infinities_into_the_other_branch():
    x = np.full((8, 8), np.inf, np.float32)
    y = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = apply(lambda a, b: nl.where(b > 100, a, b), x, y)
    np.testing.assert_array_equal(out, y)


@covers("dropout")
def test_dropout_zeroes_about_rate_and_keeps_survivors_unscaled(rng):
    x = rng.uniform(1, 2, (128, 256)).astype(np.float32)
    out = apply(lambda t: nl.dropout(t, rate=0.3), x)
    dropped = out == 0
    assert 0.27 < dropped.mean() < 0.33
    np.testing.assert_array_equal(out[~dropped], x[~dropped])
    np.testing.assert_array_equal(apply(lambda t: nl.dropout(t, rate=0.0), x), x)
    assert (apply(lambda t: nl.dropout(t, rate=1.0), x) == 0).all()


@covers("dropout", "full")
def test_dropout_with_a_one_element_rate_tile(rng):
    x = rng.uniform(1, 2, (64, 128)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        rate = nl.full((1, 1), 0.5, dtype=nl.float32)
        nl.store(out, nl.dropout(nl.load(x), rate=rate))
        return out
    out = run(kernel, x)
    assert 0.45 < (out == 0).mean() < 0.55


@covers("rand", "random_seed")
@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_rand_is_uniform_in_unit_interval_and_seeded(target, rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)

    def kernel(seed):
        out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.random_seed(seed=7)
        nl.store(out[0], nl.rand((128, 64)))
        nl.random_seed(seed=nl.load(seed))
        nl.store(out[1], nl.rand((128, 64), dtype=nl.float32))
        nl.random_seed(seed=7)
        nl.store(out[2], nl.rand((128, 64)))
        return out
    out = run(kernel, np.array([[7]], np.int32))
    assert out.min() >= 0 and out.max() < 1
    assert abs(out.mean() - 0.5) < 0.02 and abs(out.var() - 1 / 12) < 0.01
    np.testing.assert_array_equal(out[0], out[1])     # the same seed, as a scalar or a tile
    np.testing.assert_array_equal(out[0], out[2])
