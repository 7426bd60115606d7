"""Numerics of the machine: round-on-write, integer saturation, tf32, promotion (spec/language.md §2.2)."""

import ml_dtypes
import numpy as np
import pytest

from opennki.machine import dtypes as dt


def test_float_to_bf16_rounds_to_nearest_even():
    ties = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8)], np.float32)   # exactly half-way
    out = dt.convert(ties, dt.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(out, [1.0, 1 + 2 ** -6, -1.0])


def test_float_overflow_to_bf16_is_inf_and_fp32_min_becomes_minus_inf():
    out = dt.convert(np.array([3.4028235e38 * 1.0, -3.4028235e38], np.float32), dt.float16)
    assert np.isinf(out).all()
    out_bf16 = dt.convert(np.array([-3.4028235e38], np.float32), dt.bfloat16).astype(np.float32)
    assert out_bf16[0] == -np.inf


@pytest.mark.parametrize("dtype,values,expected", [
    (dt.int32, [2.5, 3.5, -2.5, 1e10, -1e10, np.nan], [2, 4, -2, 2 ** 31 - 1, -2 ** 31, 0]),
    (dt.int8, [127.5, -128.7, 0.49, 300], [127, -128, 0, 127]),
    (dt.uint8, [-3, 255.5, 254.5, 7.5], [0, 255, 254, 8]),
    (dt.uint16, [70000, 0.5, 1.5], [65535, 0, 2]),
])
def test_float_to_int_rounds_half_even_and_saturates(dtype, values, expected):
    out = dt.convert(np.array(values, np.float32), dtype)
    assert out.dtype == dtype.np_dtype
    np.testing.assert_array_equal(out, expected)


def test_int_to_narrower_int_saturates():
    out = dt.convert(np.array([1000, -1000, 5], np.int32), dt.int8)
    np.testing.assert_array_equal(out, [127, -128, 5])


def test_tf32_keeps_ten_mantissa_bits():
    x = np.array([1 + 2 ** -10, 1 + 2 ** -11, 1 + 3 * 2 ** -11, np.inf], np.float32)
    out = dt.convert(x, dt.tfloat32)
    np.testing.assert_array_equal(out, [1 + 2 ** -10, 1.0, 1 + 2 ** -9, np.inf])


def test_precise_off_stores_fp32():
    out = dt.convert(np.array([1 + 2 ** -12], np.float32), dt.bfloat16, precise=False)
    assert out.dtype == np.float32 and out[0] == np.float32(1 + 2 ** -12)


@pytest.mark.parametrize("a,b,expected", [
    (dt.int32, dt.float16, dt.float16), (dt.uint16, dt.tfloat32, dt.tfloat32),
    (dt.float32, dt.tfloat32, dt.float32), (dt.float32, dt.bfloat16, dt.float32),
    (dt.float16, dt.bfloat16, dt.float32), (dt.float8_e4m3, dt.float16, dt.float16),
    (dt.float8_e4m3, dt.bfloat16, dt.bfloat16), (dt.float8_e4m3, dt.float8_e5m2, dt.bfloat16),
    (dt.int16, dt.int32, dt.int32), (dt.uint8, dt.uint16, dt.uint16), (dt.uint16, dt.int32, dt.int32),
    (dt.int8, dt.uint8, dt.int16), (dt.int8, dt.uint16, dt.int32), (dt.int32, dt.uint32, dt.float32),
])
def test_documented_promotions(a, b, expected):
    assert dt.promote(a, b) is expected
    assert dt.promote(b, a) is expected


@pytest.mark.parametrize("scalar,expected", [(True, dt.uint8), (2, dt.int32), (1.2, dt.float32),
                                             (np.float16(2), dt.float16), (np.int8(3), dt.int8)])
def test_weak_scalar_types(scalar, expected):
    assert dt.scalar_dtype(scalar) is expected


def test_scalar_promotion_examples_from_the_spec():
    assert dt.promote(dt.int8, dt.scalar_dtype(2)) is dt.int32
    assert dt.promote(dt.float16, dt.scalar_dtype(1.2)) is dt.float32


@pytest.mark.parametrize("spelling", [np.float32, np.dtype("float32"), "float32", dt.float32])
def test_dtype_spellings_normalise(spelling):
    assert dt.dtype_of(spelling) is dt.float32


def test_ml_dtypes_and_strings_compare_equal_to_datatypes():
    assert dt.bfloat16 == np.dtype(ml_dtypes.bfloat16) and np.dtype(ml_dtypes.bfloat16) == dt.bfloat16
    assert dt.bfloat16 == "bfloat16" and np.float32 == dt.float32
    assert np.zeros(2, dt.bfloat16).dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("bad", [np.float64, np.uint64, "complex64", "nonsense"])
def test_64_bit_and_unknown_dtypes_rejected(bad):
    with pytest.raises(TypeError):
        dt.dtype_of(bad)


def test_int64_is_the_nki_0_7_scalar_width():
    """NKI 0.7's scalar_load / scalar_store move nl.int64 values, so int64 tensors exist from 0.7."""
    assert dt.dtype_of(np.int64) is dt.dtype_of("int64") is dt.int64 and dt.int64.itemsize == 8


def test_poison_values():
    assert np.isnan(dt.poison_value(dt.bfloat16)) and dt.poison_value(dt.int16) == 4


def test_quiet_fp_is_errstate_ignore_and_restores_the_callers_state():
    import warnings

    from opennki.machine.dtypes import quiet_fp

    big = np.full(4, 3e38, np.float32)
    with np.errstate(all="raise"):
        outer = np.geterr()
        with quiet_fp():
            assert set(np.geterr().values()) == {"ignore"}
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with quiet_fp():                          # nested: each level restores its own
                    assert np.isinf(big + big).all() and np.isnan(np.zeros(1) / 0).all()
                assert np.isinf(big * big).all()
        assert np.geterr() == outer                       # the caller's state is back
        with pytest.raises(FloatingPointError):
            big + big
        with pytest.raises(FloatingPointError):           # also after an exception inside the block
            with quiet_fp():
                raise FloatingPointError("raised inside")
        assert np.geterr() == outer
