"""`tensor.ap(...)` as the NKI Library uses it (spec/language.md §7): patterns applied to views narrower than
their storage (addressing the view's own rows), and run-time offsets (`scalar_offset`, `vector_offset`) for
gathers of rows from HBM."""

import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import OutOfBoundsError
from tests.isa.helpers import rand, run
from tests.raises import raises_at


def _quarters(x):
    """x [P, 4F]: negate the last quarter through a pattern over the view of the right half."""
    p, f4 = x.shape
    f = f4 // 4
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=x)
    right = buf.ap([[f4, p], [1, 2 * f]], offset=2 * f)            # columns [2F, 4F)
    last = right.ap([[2 * f, p], [1, f]], offset=f)                 # the view's columns [F, 2F)
    nisa.tensor_scalar(dst=last, data=last, op0=nl.multiply, operand0=-1.0)
    whole = right.ap([[f4, p], [1, f4]], offset=0)                  # the storage's step: the whole tensor
    nisa.tensor_scalar(dst=whole, data=whole, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=buf)
    return out


def test_a_pattern_with_the_views_row_length_addresses_the_view(rng):
    x = rand(rng, 64, 32)
    ref = x.copy()
    ref[:, 24:] *= -1
    np.testing.assert_array_equal(run(_quarters, x), ref + 1)


def _gather(table, rows, picked):
    """out[i] = table[rows[i]] (vector_offset) and out2 = table[picked[0, 0]] (scalar_offset)."""
    n, d = table.shape
    p = rows.shape[0]
    out = nl.ndarray((p, d), dtype=table.dtype, buffer=nl.shared_hbm)
    one = nl.ndarray((1, d), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((p, 1), dtype=rows.dtype, buffer=nl.sbuf)
    pick = nl.ndarray((1, 1), dtype=picked.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    nisa.dma_copy(dst=pick, src=picked)
    t = nl.ndarray((p, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=table.ap([[d, p], [1, d]], offset=0, vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=out, src=t)
    r = nl.ndarray((1, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=r, src=table.ap([[d, 1], [1, d]], offset=0, scalar_offset=pick, indirect_dim=0))
    nisa.dma_copy(dst=one, src=r)
    return out, one


def test_dynamic_offsets_gather_rows(rng):
    table = rand(rng, 200, 24)
    rows = rng.integers(0, 200, size=(96, 1)).astype(np.int32)
    picked = np.array([[123]], np.int32)
    out, one = run(_gather, table, rows, picked)
    np.testing.assert_array_equal(out, table[rows[:, 0]])
    np.testing.assert_array_equal(one, table[123:124])


def test_a_vector_offset_past_the_end_is_reported_at_the_kernel_line(rng):
    table = rand(rng, 50, 8)
    rows = np.array([[3], [50]], np.int32)
    with pytest.raises(IndexError, match="out of bounds for axis 0") as exc:     # run-time: NKI's plain form
        run(_gather, table, rows, np.array([[0]], np.int32))
    assert "vector_offset=idx" in exc.value.location.source


def _tail_columns(x, start):
    """Doubles x[:, start:start + 16] in SBUF; a pattern past the end is made for every start but used only
    when it fits, as loops over incomplete last tiles do."""
    p, f = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=buf, src=x)
    cols = buf.ap([[f, p], [1, 16]], offset=start)
    if start + 16 <= f or start == 100:
        nisa.tensor_scalar(dst=cols, data=cols, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out, src=buf)
    return out


def test_an_out_of_range_pattern_is_an_error_only_when_used(rng):
    x = rand(rng, 32, 64)
    np.testing.assert_array_equal(run(_tail_columns, x, 60), x)
    with raises_at(OutOfBoundsError) as exc:
        run(_tail_columns, x, 100)
    assert "nisa.tensor_scalar(" in exc.value.location.source
