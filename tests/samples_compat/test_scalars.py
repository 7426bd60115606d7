"""Scalars and columns as the official kernels use them: a single HBM element loaded as a [1, 1] tile
(`nl.load(seed[0])`, `nl.load(sinks[b, h])`) and broadcast against a column, a 1-D access loaded as a [P, 1]
column, and an ml_dtypes scalar (`nl.finfo(nl.bfloat16).min`) as a fill value or an immediate (regressions: "a
loaded tile needs at least 2 dimensions" and "memset value must be a scalar")."""

import ml_dtypes
import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from tests.language.helpers import run


def _shift_by_element(x, table):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    one = nl.load(table[1, 2], dtype=nl.float32)                      # [1, 1]
    column = nl.add(nl.zeros((x.shape[0], 1), dtype=nl.float32), one)  # broadcast to [P, 1]
    nl.store(out, value=nl.add(nl.load(x), column))
    return out


def test_single_element_loads_as_a_one_by_one_tile(rng):
    x = rng.standard_normal((64, 24)).astype(np.float32)
    table = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(_shift_by_element, x, table), x + table[1, 2], rtol=1e-6)


def _scale_rows(x, scales):
    """Each row of x times one column of `scales` loaded as a [P, 1] column (`scales[0:P, j]`, as the official
    mamba tutorial loads `A[c0:c1, i_state]`)."""
    out = nl.ndarray((scales.shape[1],) + x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    for j in nl.affine_range(scales.shape[1]):
        column = nl.load(scales[0:x.shape[0], j])                          # [P, 1]
        nl.store(out[j], value=nisa.activation(op=nl.copy, data=tile, scale=column))
    return out


def test_a_masked_one_dimensional_load_skips_the_rows_past_the_end(rng):
    def kernel(v):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        column = nl.load(v[0:128], mask=(i_p < 100))                    # v has 100 elements
        nl.store(out, value=nl.add(column, 1.0, mask=(i_p < 100)), mask=(i_p < 100))
        return out
    v = rng.standard_normal(100).astype(np.float32)
    np.testing.assert_allclose(run(kernel, v)[:100, 0], v + 1.0, rtol=1e-6)


def test_a_one_dimensional_load_is_a_column(rng):
    x = rng.standard_normal((96, 40)).astype(np.float32)
    scales = rng.standard_normal((96, 3)).astype(np.float32)
    expected = np.stack([x * scales[:, j:j + 1] for j in range(3)])
    np.testing.assert_allclose(run(_scale_rows, x, scales), expected, rtol=1e-6)


def _pad_with_lowest(x):
    out = nl.ndarray((x.shape[0], x.shape[1] + 2), dtype=x.dtype, buffer=nl.shared_hbm)
    padded = nl.full((x.shape[0], x.shape[1] + 2), dtype=x.dtype, buffer=nl.sbuf,
                     fill_value=nl.finfo(x.dtype).min)
    padded[:, 1:x.shape[1] + 1] = nl.load(x)
    floor = nisa.tensor_scalar(padded, np.maximum, nl.finfo(x.dtype).min)
    nl.store(out, value=floor)
    return out


def test_ml_dtypes_scalars_are_immediates(rng):
    x = rng.standard_normal((32, 10)).astype(ml_dtypes.bfloat16)
    lowest = ml_dtypes.finfo(ml_dtypes.bfloat16).min
    expected = np.full((32, 12), lowest, ml_dtypes.bfloat16)
    expected[:, 1:11] = x
    np.testing.assert_array_equal(run(_pad_with_lowest, x), expected)
