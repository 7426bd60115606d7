"""Legacy nl reductions against NumPy: sum, prod, max, min, mean, var, all with axis lists, keepdims, mask and
dtype (spec/language.md §6.4). On-chip results never drop below 2-D ([P, F] -> [P, 1])."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.language as nl
from tests.language.coverage import covers
from tests.language.helpers import apply, run

REDUCTIONS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean, "var": np.var}


def _keep_2d(a):
    return a if a.ndim >= 2 else a[:, None]


@covers(*REDUCTIONS, via="name")
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", [1, [1, 2], (2,), [2, 3]])
def test_reduction_over_axes_matches_numpy(name, axis, rng):
    x = rng.uniform(0.5, 1.5, (16, 4, 6, 5)).astype(np.float32)
    out = apply(lambda t: getattr(nl, name)(t, axis=axis), x)
    expected = REDUCTIONS[name](x.astype(np.float64), axis=tuple(np.atleast_1d(axis)))
    np.testing.assert_allclose(out, _keep_2d(expected), rtol=3e-6, atol=1e-6)


@covers("sum", "max", "mean")
def test_keepdims_keeps_reduced_axes_as_one(rng):
    x = rng.standard_normal((8, 3, 10)).astype(np.float32)
    for fn, ref in ((nl.sum, np.sum), (nl.max, np.max), (nl.mean, np.mean)):
        out = apply(lambda t: fn(t, axis=[2], keepdims=True), x)
        assert out.shape == (8, 3, 1)
        np.testing.assert_allclose(out, ref(x, axis=2, keepdims=True), rtol=1e-5, atol=1e-6)


@covers("sum")
def test_full_free_reduction_of_a_2d_tile_is_a_column(rng):
    x = rng.standard_normal((64, 100)).astype(np.float32)
    out = apply(lambda t: nl.sum(t, axis=1), x)
    assert out.shape == (64, 1)
    np.testing.assert_allclose(out, x.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


@covers("max", "min", "mean", "arange")
def test_masked_rows_are_not_reduced_nor_written(rng):
    x = rng.standard_normal((32, 20)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray((32, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(32)[:, None]
        t = nl.load(x)
        res = nl.zeros((32, 3), dtype=nl.float32)
        res[:, 0:1] = nl.max(t, axis=1, mask=i_p < 12)
        res[:, 1:2] = nl.min(t, axis=1, mask=i_p < 12)
        res[:, 2:3] = nl.mean(t, axis=1, mask=i_p < 12)
        nl.store(out, res)
        return out
    out = run(kernel, x)
    np.testing.assert_allclose(out[:12], np.stack([x.max(1), x.min(1), x.mean(1)], 1)[:12], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(out[12:], 0)


@covers("sum", "mean", "int32", "bfloat16")
def test_dtypes_of_reductions(rng):
    ints = rng.integers(-100, 100, (16, 32)).astype(np.int32)
    seen = {}

    def kernel(i):
        t = nl.load(i)
        seen["sum"] = nl.sum(t, axis=1).dtype
        m = nl.mean(t, axis=1)
        seen["mean"] = m.dtype
        s16 = nl.sum(nl.copy(t, dtype=nl.bfloat16), axis=1, dtype=nl.float32)
        out = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:1], m)
        nl.store(out[:, 1:2], s16)
        assert t.dtype == nl.int32
        return out
    out = run(kernel, ints)
    assert seen == {"sum": np.int32, "mean": np.float32}
    np.testing.assert_allclose(out[:, 0], ints.mean(1), rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], ints.astype(ml_dtypes.bfloat16).astype(np.float64).sum(1), rtol=1e-6)


@covers("all")
def test_all_is_a_logical_and_reduction_to_bool(rng):
    x = (rng.random((16, 8, 4)) > 0.1).astype(np.float32)
    x[3] = 1.0
    out = apply(lambda t: nl.all(t, axis=[1, 2]), x)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, np.all(x != 0, axis=(1, 2))[:, None])


@covers("var")
def test_var_is_population_variance_in_fp32_even_for_large_offsets(rng):
    x = (rng.standard_normal((16, 256)) + 1000).astype(np.float32)
    out = apply(lambda t: nl.var(t, axis=1), x)
    np.testing.assert_allclose(out[:, 0], x.astype(np.float64).var(1), rtol=2e-3)
