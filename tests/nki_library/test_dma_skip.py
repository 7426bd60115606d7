"""`dma_copy(oob_mode=skip)` between access patterns of different shapes (same elements in row-major order):
the rows whose run-time index is out of range are skipped on both sides, as the NKI Library's MoE backward
kernel does with a [P, 1, F] indirect source and a [P, F] destination."""

import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.isa.constants import oob_mode


@nki.jit
def gather_rows_or_keep(table, rows):
    """out[p] = table[rows[p]] where rows[p] is a row of table, else -7 (skipped rows keep the fill)."""
    n, width = rows.shape[0], table.shape[1]
    idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    got = nl.ndarray((n, width), dtype=table.dtype, buffer=nl.sbuf)
    nisa.memset(dst=got, value=-7.0)
    nisa.dma_copy(dst=got, src=table.ap(pattern=[[width, n], [1, 1], [1, width]], offset=0, vector_offset=idx,
                                        indirect_dim=0), oob_mode=oob_mode.skip)
    out = nl.ndarray((n, width), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_skipped_rows_of_a_reshaped_indirect_copy(rng):
    table = rng.standard_normal((6, 8)).astype(np.float32)
    rows = np.array([[3], [-1], [0], [6], [5]], np.int32)
    want = np.full((5, 8), -7, np.float32)
    for p, r in enumerate(rows[:, 0]):
        if 0 <= r < 6:
            want[p] = table[r]
    np.testing.assert_array_equal(gather_rows_or_keep(table, rows), want)
