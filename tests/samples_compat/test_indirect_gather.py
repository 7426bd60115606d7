"""A gather by run-time row indices computed on the engines, in the style of the official nearest-neighbour
resize: `position / width` of an int32 iota is a float quotient (true division) that `nl.floor` turns into
a row index, and a mask hides the rows of the last tile past the end, whose indices are out of range
(regression: an int32 quotient rounded 58.97 up to 59 and the gather read past the tensor)."""

import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from tests.language.helpers import run


def _every_other_row(table, n_out):
    """out[r] = table[floor(r / 2)] for r < n_out, gathered 128 rows at a time."""
    out = nl.ndarray((n_out, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(table.shape[1])[None, :]
    for t in nl.affine_range((n_out + 127) // 128):
        position = t * 128 + i_p
        quotient = nisa.iota(position, dtype=nl.int32) / 2
        rows = nl.floor(quotient, dtype=nl.int32)
        valid = position < n_out
        gathered = nl.load(table[rows, i_f], mask=valid)
        nl.store(out[position, i_f], value=gathered, mask=valid)
    return out


def test_floored_true_division_indexes_a_masked_gather(rng):
    table = rng.standard_normal((100, 24)).astype(np.float32)
    out = run(_every_other_row, table, 199)
    np.testing.assert_array_equal(out, table[np.arange(199) // 2])


def test_integer_division_gives_a_float_quotient(rng):
    def kernel(a):
        q = nl.load(a) / 4
        assert q.dtype == nl.float32
        out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=q)
        return out
    a = rng.integers(-1000, 1000, (32, 16)).astype(np.int32)
    np.testing.assert_allclose(run(kernel, a), a / 4, rtol=1e-7)
