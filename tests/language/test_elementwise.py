"""Legacy nl element-wise ops against NumPy: unary math and activations, binary arithmetic, comparisons,
logical and bitwise ops; result dtypes (type promotion, `dtype=`) and `mask=` (spec/language.md §2.2, §6)."""

import math

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.language as nl
from tests.language.coverage import covers
from tests.language.helpers import apply, bf16, erf, gelu, run, sigmoid, softplus

SHAPE = (32, 48)

# name -> (NumPy reference on float64, input range)
UNARY = {
    "exp": (np.exp, (-4, 4)),
    "log": (np.log, (0.01, 50)),
    "tanh": (np.tanh, (-4, 4)),
    "sigmoid": (sigmoid, (-8, 8)),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3)),
    "gelu": (gelu, (-4, 4)),
    "gelu_dx": (lambda x: 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
                (-4, 4)),
    "gelu_apprx_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
                        (-4, 4)),
    "gelu_apprx_sigmoid": (lambda x: x * sigmoid(1.702 * x), (-4, 4)),
    "silu": (lambda x: x * sigmoid(x), (-6, 6)),
    "silu_dx": (lambda x: sigmoid(x) * (1 + x * (1 - sigmoid(x))), (-6, 6)),
    "softplus": (softplus, (-6, 6)),
    "mish": (lambda x: x * np.tanh(softplus(x)), (-4, 4)),
    "erf": (erf, (-3, 3)),
    "erf_dx": (lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), (-3, 3)),
    "square": (np.square, (-5, 5)),
    "sqrt": (np.sqrt, (0.01, 100)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 100)),
    "reciprocal": (np.reciprocal, (0.1, 10)),
    "abs": (np.abs, (-5, 5)),
    "sign": (np.sign, (-5, 5)),
    "sin": (np.sin, (-3, 3)),
    "cos": (np.cos, (-6, 6)),
    "tan": (np.tan, (-1.2, 1.2)),
    "arctan": (np.arctan, (-1.5, 1.5)),
    "negative": (np.negative, (-5, 5)),
    "ceil": (np.ceil, (-5, 5)),
    "floor": (np.floor, (-5, 5)),
    "trunc": (np.trunc, (-5, 5)),
}


def assert_unary_matches(run_op, op, ref, bounds, rng):
    """`run_op(op, x)` on a random fp32 tile `x` in `bounds` (a table entry's range) is fp32 and matches
    NumPy's `ref` on float64 (the unary check of both generations: test_new_names.py runs it too)."""
    lo, hi = bounds
    x = rng.uniform(lo, hi, SHAPE).astype(np.float32)
    out = run_op(op, x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=2e-6, atol=2e-6)


@covers(*UNARY, via="name")
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_matches_numpy(name, rng):
    ref, bounds = UNARY[name]
    assert_unary_matches(apply, getattr(nl, name), ref, bounds, rng)


def _shift_right_logical(a, b):
    return (a.view(np.uint32) >> b.astype(np.uint32)).view(np.int32)


# name -> (NumPy reference, input kind)
BINARY = {
    "add": (np.add, "float"), "subtract": (np.subtract, "float"), "multiply": (np.multiply, "float"),
    "divide": (np.divide, "nonzero"), "maximum": (np.maximum, "float"), "minimum": (np.minimum, "float"),
    "power": (np.power, "positive"), "fmod": (np.fmod, "nonzero"), "mod": (np.mod, "nonzero"),
    "bitwise_and": (np.bitwise_and, "int"), "bitwise_or": (np.bitwise_or, "int"),
    "bitwise_xor": (np.bitwise_xor, "int"), "left_shift": (np.left_shift, "shift"),
    "right_shift": (_shift_right_logical, "shift"),
}


def _operands(kind, rng):
    if kind == "int":
        return rng.integers(-2 ** 31, 2 ** 31 - 1, (2,) + SHAPE, dtype=np.int64).astype(np.int32)
    if kind == "shift":
        a = rng.integers(-2 ** 31, 2 ** 31 - 1, SHAPE, dtype=np.int64).astype(np.int32)
        return a, rng.integers(0, 31, SHAPE).astype(np.int32)
    a, b = rng.uniform(-4, 4, (2,) + SHAPE).astype(np.float32)
    if kind == "positive":
        a = np.abs(a) + 0.1
    if kind == "nonzero":
        b = np.where(np.abs(b) < 0.25, 0.5, b).astype(np.float32)
    return a, b


@covers(*BINARY, via="name")
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_matches_numpy(name, rng):
    ref, kind = BINARY[name]
    a, b = _operands(kind, rng)
    out = apply(getattr(nl, name), a, b)
    assert out.dtype == a.dtype
    if a.dtype.kind == "i":
        np.testing.assert_array_equal(out, ref(a, b))
    else:
        expected = ref(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
           "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
           "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}


@covers(*COMPARE, via="name")
@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_and_logical_ops_give_bool_tiles(name, rng):
    a, b = rng.integers(0, 3, (2,) + SHAPE).astype(np.float32)
    if name.startswith("logical"):
        a, b = (a > 1).astype(np.float32), (b > 1).astype(np.float32)
    out = apply(getattr(nl, name), a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, COMPARE[name](a, b))


@covers("logical_not", "invert")
def test_logical_not_and_invert(rng):
    flags = (rng.random(SHAPE) > 0.5).astype(np.float32)
    np.testing.assert_array_equal(apply(nl.logical_not, flags), flags == 0)
    ints = rng.integers(-1000, 1000, SHAPE).astype(np.int16)
    out = apply(nl.invert, ints)
    assert out.dtype == np.int16
    np.testing.assert_array_equal(out, np.invert(ints))


@covers("add", "multiply", "subtract")
def test_partition_and_free_broadcasting(rng):
    a = rng.standard_normal((32, 16)).astype(np.float32)
    row = rng.standard_normal((1, 16)).astype(np.float32)
    col = rng.standard_normal((32, 1)).astype(np.float32)
    np.testing.assert_allclose(apply(nl.add, a, row), a + row, rtol=1e-6)
    np.testing.assert_allclose(apply(nl.multiply, a, col), a * col, rtol=1e-6)
    np.testing.assert_allclose(apply(nl.subtract, col, row), col - row, rtol=1e-6)


@covers("add", "divide", "multiply")
def test_scalar_operands_either_side(rng):
    a = rng.uniform(1, 2, SHAPE).astype(np.float32)
    np.testing.assert_allclose(apply(lambda t: nl.add(t, 3.0), a), a + 3, rtol=1e-6)
    np.testing.assert_allclose(apply(lambda t: nl.divide(1.0, t), a), 1 / a, rtol=1e-6)
    np.testing.assert_allclose(apply(lambda t: nl.multiply(2, t), a), 2 * a, rtol=1e-6)


PROMOTION = [
    (np.int32, np.float16, np.float16), (np.float32, ml_dtypes.bfloat16, np.float32),
    (np.float16, ml_dtypes.bfloat16, np.float32), (ml_dtypes.float8_e4m3, np.float16, np.float16),
    (ml_dtypes.float8_e4m3, ml_dtypes.bfloat16, ml_dtypes.bfloat16),
    (ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16), (np.int16, np.int32, np.int32),
    (np.uint8, np.uint16, np.uint16), (np.uint16, np.int32, np.int32), (np.int8, np.uint8, np.int16),
    (np.int8, np.uint16, np.int32), (np.int32, np.uint32, np.float32),
]


@covers("add")
@pytest.mark.parametrize("da,db,expected", PROMOTION)
def test_type_promotion_of_two_tiles(da, db, expected, rng):
    a = rng.integers(0, 4, SHAPE).astype(da)
    b = rng.integers(0, 4, SHAPE).astype(db)
    out = apply(nl.add, a, b)
    assert out.dtype == np.dtype(expected)
    np.testing.assert_array_equal(out.astype(np.float64), a.astype(np.float64) + b.astype(np.float64))


@covers("add", "multiply", "int8", "float16")
def test_weak_python_scalars_widen_and_numpy_scalars_keep_their_type(rng):
    ints = rng.integers(-5, 5, SHAPE).astype(np.int8)
    halfs = rng.uniform(-2, 2, SHAPE).astype(np.float16)
    seen = {}

    def kernel(i, h):
        ti, th = nl.load(i), nl.load(h)
        seen["int8+2"] = nl.add(ti, 2).dtype
        seen["fp16*1.2"] = nl.multiply(th, 1.2).dtype
        seen["fp16*np.fp16"] = nl.multiply(th, np.float16(2)).dtype
        assert ti.dtype == nl.int8 and th.dtype == nl.float16
        out = nl.ndarray(i.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nl.add(ti, 2))
        return out
    out = run(kernel, ints, halfs)
    assert seen == {"int8+2": np.int32, "fp16*1.2": np.float32, "fp16*np.fp16": np.float16}
    np.testing.assert_array_equal(out, ints.astype(np.int32) + 2)


@covers("add", "exp", "bfloat16")
def test_explicit_dtype_rounds_the_result_once(rng):
    a, b = rng.standard_normal((2,) + SHAPE).astype(np.float32)
    out = apply(lambda x, y: nl.add(x, y, dtype=nl.bfloat16), a, b)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out, bf16(a + b))
    e = apply(lambda x: nl.exp(x, dtype=nl.bfloat16), a)
    np.testing.assert_array_equal(e.astype(np.float32), bf16(np.exp(a.astype(np.float64))).astype(np.float32))


@covers("exp", "arange")
def test_mask_skips_computing_and_writing(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(32)[:, None], nl.arange(16)[None, :]
        keep = nl.load(x)
        keep[i_p, i_f] = nl.exp(keep, mask=(i_p < 20) & (i_f >= 4))
        nl.store(out, keep)
        return out
    out = run(kernel, x)
    expected = x.copy()
    expected[:20, 4:] = np.exp(x[:20, 4:])
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@covers("maximum", "minimum")
def test_tile_operators_match_the_functions(rng):
    a, b = rng.standard_normal((2,) + SHAPE).astype(np.float32)
    out = apply(lambda x, y: nl.maximum(x, y) - nl.minimum(x, y) * 2 + (x > y), a, b)
    np.testing.assert_allclose(out, np.maximum(a, b) - np.minimum(a, b) * 2 + (a > b), rtol=1e-6)
