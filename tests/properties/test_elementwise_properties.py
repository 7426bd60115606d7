"""Hypothesis: random legal tile shapes and dtypes; legacy nl element-wise ops and reductions match NumPy
within the documented rounding (engines compute in fp32 and round once, to nearest even, on write;
spec/language.md §2.2, DESIGN decision 3)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opennki.legacy.language as nl
from tests.language.coverage import covers
from tests.language.helpers import apply

FLOATS = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
INTS = [np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.uint8), np.dtype(np.int8)]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def tile_shapes(draw, max_free_dims=2):
    """[P, F...]: P <= 128 partitions, one or two free dims, at most 512 elements per partition."""
    partitions = draw(st.integers(1, 128))
    free = draw(st.lists(st.integers(1, 24), min_size=1, max_size=max_free_dims))
    return (partitions, *free)


def _values(rng, shape, dtype, lo=-4.0, hi=4.0):
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(np.float32).astype(dtype)


BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
          "minimum": np.minimum}


@SETTINGS
@given(name=st.sampled_from(sorted(BINARY)), shape=tile_shapes(), dtype=st.sampled_from(FLOATS),
       seed=st.integers(0, 2 ** 16))
@covers(*BINARY, via="name")
def test_binary_float_ops_round_once_to_the_result_dtype(name, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = _values(rng, shape, dtype), _values(rng, shape, dtype)
    out = apply(getattr(nl, name), a, b)
    expected = BINARY[name](a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, expected)


@SETTINGS
@given(name=st.sampled_from(["add", "multiply"]), shape=tile_shapes(),
       dtypes=st.tuples(st.sampled_from(FLOATS + INTS), st.sampled_from(FLOATS + INTS)),
       seed=st.integers(0, 2 ** 16))
@covers("add", "multiply", via="name")
def test_mixed_dtypes_promote_and_compute_in_fp32(name, shape, dtypes, seed):
    rng = np.random.default_rng(seed)
    a, b = _values(rng, shape, dtypes[0]), _values(rng, shape, dtypes[1])
    out = apply(getattr(nl, name), a, b)
    exact = BINARY[name](a.astype(np.float64), b.astype(np.float64))
    if out.dtype.kind in "iu":
        # integer results: fp32 arithmetic then saturating conversion; small operands stay exact
        np.testing.assert_array_equal(out, np.clip(exact, np.iinfo(out.dtype).min, np.iinfo(out.dtype).max))
    else:
        eps = float(ml_dtypes.finfo(out.dtype).eps)
        np.testing.assert_allclose(out.astype(np.float64), exact, rtol=2 * eps, atol=2 * eps)


UNARY = {"exp": (np.exp, -4, 4), "tanh": (np.tanh, -4, 4), "sqrt": (np.sqrt, 0.01, 16),
         "abs": (np.abs, -4, 4), "square": (np.square, -4, 4), "sin": (np.sin, -3, 3),
         "reciprocal": (np.reciprocal, 0.25, 4)}


@SETTINGS
@given(name=st.sampled_from(sorted(UNARY)), shape=tile_shapes(), dtype=st.sampled_from(FLOATS),
       seed=st.integers(0, 2 ** 16))
@covers(*UNARY, via="name")
def test_activations_are_exact_functions_rounded_to_the_dtype(name, shape, dtype, seed):
    fn, lo, hi = UNARY[name]
    x = _values(np.random.default_rng(seed), shape, dtype, lo, hi)
    out = apply(getattr(nl, name), x)
    assert out.dtype == dtype
    eps = float(ml_dtypes.finfo(dtype).eps)
    np.testing.assert_allclose(out.astype(np.float64), fn(x.astype(np.float64)), rtol=eps, atol=eps / 64)


REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod}


@st.composite
def reduction_case(draw):
    shape = draw(tile_shapes(max_free_dims=3))
    free = list(range(1, len(shape)))
    start = draw(st.sampled_from(free))
    return shape, free[free.index(start):]          # trailing contiguous free axes (the documented rule)


@SETTINGS
@given(name=st.sampled_from(sorted(REDUCE)), case=reduction_case(), keepdims=st.booleans(),
       dtype=st.sampled_from([np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)]), seed=st.integers(0, 2 ** 16))
@covers(*REDUCE, via="name")
def test_reductions_match_numpy_in_fp32(name, case, keepdims, dtype, seed):
    shape, axes = case
    lo, hi = (0.9, 1.1) if name == "prod" else (-4, 4)
    x = _values(np.random.default_rng(seed), shape, dtype, lo, hi)
    out = apply(lambda t: getattr(nl, name)(t, axis=axes, keepdims=keepdims), x)
    exact = REDUCE[name](x.astype(np.float64), axis=tuple(axes), keepdims=keepdims)
    if exact.ndim < 2:
        exact = exact[:, None]
    count = int(np.prod([shape[a] for a in axes]))
    eps = float(ml_dtypes.finfo(out.dtype).eps)
    tol = eps * (1 + (count * 2 ** -23 / eps if out.dtype == np.float32 else 1))
    assert out.shape == exact.shape
    np.testing.assert_allclose(out.astype(np.float64), exact, rtol=tol, atol=tol * np.abs(x).max())


@SETTINGS
@given(name=st.sampled_from(["bitwise_and", "bitwise_or", "bitwise_xor"]), shape=tile_shapes(),
       dtype=st.sampled_from(INTS), seed=st.integers(0, 2 ** 16))
@covers("bitwise_and", "bitwise_or", "bitwise_xor", via="name")
def test_bitwise_ops_are_exact_on_integers(name, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a, b = (rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype) for _ in range(2))
    out = apply(getattr(nl, name), a, b)
    np.testing.assert_array_equal(out, getattr(np, name)(a, b))


@pytest.mark.parametrize("dtype", FLOATS)
def test_rounding_is_to_nearest_even(dtype):
    one = np.ones((1, 1), dtype)
    half_ulp = np.full((1, 1), float(ml_dtypes.finfo(dtype).eps) / 2, np.float32)
    # 1 + eps/2 is a tie: nearest-even keeps 1.0; a hair more rounds up
    assert apply(lambda a, b: nl.add(a, b, dtype=dtype), one, half_ulp)[0, 0] == 1
    assert apply(lambda a, b: nl.add(a, b, dtype=dtype), one, half_ulp * 1.5)[0, 0] > 1
