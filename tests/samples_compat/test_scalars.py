"""Scalars as the official kernels use them: a single HBM element loaded as a [1, 1] tile (`nl.load(seed[0])`,
`nl.load(sinks[b, h])`) and broadcast against a column, and an ml_dtypes scalar (`nl.finfo(nl.bfloat16).min`)
as a fill value or an immediate (regressions: "a loaded tile needs at least 2 dimensions" and "memset value
must be a scalar")."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import ShapeError
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


def test_a_one_dimensional_load_of_several_elements_is_still_rejected(rng):
    def kernel(v):
        nl.load(v[0:8])
    with pytest.raises(ShapeError, match="Insufficient rank"):
        run(kernel, rng.standard_normal(16).astype(np.float32))


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
