"""Run-time offsets in new-generation access patterns (spec/language.md §7.1): `.ap(scalar_offset=...)` shifts
the whole pattern by a value read from a [1, 1] tile, `.ap(vector_offset=...)` starts each row at its own
run-time offset; and the names NKI library kernels import around them (`nki.isa.constants`, `nki.dtype`)."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError
from tests.raises import raises_at


@nki.jit
def write_at_column(src, start, width: int, index_dtype: nki.dtype = nl.int32):
    """out = zeros (4, width) with out[2, start:start + n] = src[0, :], start read at run time."""
    n = src.shape[1]
    out = nl.ndarray((4, width), dtype=nl.float32, buffer=nl.shared_hbm)
    zeros = nl.ndarray((4, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    row = nl.ndarray((1, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=src)
    offset = nl.ndarray((1, 1), dtype=index_dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=offset, src=start)
    nisa.dma_copy(dst=out.ap(pattern=[[width, 1], [1, n]], offset=2 * width, scalar_offset=offset, indirect_dim=1),
                  src=row)
    return out


@pytest.mark.parametrize("start", [0, 5, 11])
def test_scalar_offset_shifts_the_pattern_at_run_time(rng, start):
    src = rng.standard_normal((1, 5)).astype(np.float32)
    want = np.zeros((4, 16), np.float32)
    want[2, start:start + 5] = src[0]
    got = write_at_column(src, np.array([[start]], np.int32), 16)
    np.testing.assert_array_equal(got, want)


def test_scalar_offset_beyond_the_tensor_is_an_error(rng):
    """The pattern spans the flat storage: past the row it goes on into the next one, past the end it is out
    of bounds (checked when the DMA runs, with the run-time value)."""
    src = rng.standard_normal((1, 5)).astype(np.float32)
    with pytest.raises(IndexError, match="out of bounds for axis 0") as exc:     # run-time: NKI's plain form
        write_at_column(src, np.array([[30]], np.int32), 16)
    assert "Out-of-bound access" in exc.value.__notes__[0]
    assert "nisa.dma_copy(dst=out.ap(" in exc.value.location.source


@nki.jit
def gather_rows(table, rows):
    """out[p, :] = table[rows[p], :] with one DMA over a vector_offset access pattern."""
    n = rows.shape[0]
    m = table.shape[1]
    idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    got = nl.ndarray((n, m), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=table.ap(pattern=[[m, n], [1, m]], offset=0, vector_offset=idx, indirect_dim=0))
    out = nl.ndarray((n, m), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_vector_offset_gathers_rows(rng):
    table = rng.standard_normal((40, 24)).astype(np.float32)
    rows = rng.integers(0, 40, size=(16, 1)).astype(np.int32)
    np.testing.assert_array_equal(gather_rows(table, rows), table[rows[:, 0]])


def test_scalar_offset_must_be_an_integer_tile(rng):
    def kernel(x):
        off = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=off, value=1.0)
        view = x.ap(pattern=[[8, 1], [1, 4]], offset=0, scalar_offset=off, indirect_dim=1)
        return view

    with raises_at(KernelError, match="scalar_offset must be an on-chip integer tile") as exc:
        nki.simulate(kernel)(rng.standard_normal((2, 8)).astype(np.float32))
    assert "x.ap(" in exc.value.location.source


def test_isa_constants_module_holds_the_isa_enums():
    from opennki.isa import constants
    assert constants.dge_mode is nisa.dge_mode and constants.engine is nisa.engine
    assert constants.oob_mode is nisa.oob_mode and constants.reduce_cmd is nisa.reduce_cmd


@nki.jit
def window_of_vector(v, start, k: int):
    """out[0, :] = v[start:start + k] for a 1-D v, read through its (1, n) reshape at a run-time start."""
    n = v.shape[0]
    s = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=start)
    got = nl.ndarray((1, k), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=v.reshape((1, n)).ap(pattern=[[n, 1], [1, k]], offset=0, scalar_offset=s,
                                                     indirect_dim=1))
    out = nl.ndarray((1, k), dtype=v.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_scalar_offset_scales_by_the_reshaped_tensors_rows(rng):
    v = rng.integers(-100, 100, size=(24,)).astype(np.int32)
    np.testing.assert_array_equal(window_of_vector(v, np.array([7], np.int32), 5), v[None, 7:12])


@nki.jit
def scatter_rows(values, rows, n_rows: int):
    """out (n_rows, m), zero except out[rows[p], :] = values[p, :]: one DMA whose destination rows come from a
    vector_offset given as a [P, 1, 1] access pattern over the index tile."""
    p, m = values.shape
    out = nl.ndarray((n_rows, m), dtype=values.dtype, buffer=nl.shared_hbm)
    zeros = nl.ndarray((n_rows, m), dtype=values.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.dma_copy(dst=out, src=zeros)
    idx = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=rows)
    v = nl.ndarray((p, m), dtype=values.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=v, src=values)
    column = idx.ap(pattern=[[1, p], [1, 1], [1, 1]], offset=0)
    nisa.dma_copy(dst=out.ap([[m, p], [1, m]], offset=0, vector_offset=column, indirect_dim=0), src=v)
    return out


def test_vector_offset_may_be_a_column_view_with_trailing_unit_dims(rng):
    values = rng.standard_normal((8, 6)).astype(np.float32)
    rows = rng.permutation(20)[:8].astype(np.int32).reshape(8, 1)
    want = np.zeros((20, 6), np.float32)
    want[rows[:, 0]] = values
    np.testing.assert_array_equal(scatter_rows(values, rows, 20), want)
