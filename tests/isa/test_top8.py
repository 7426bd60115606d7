"""nisa.max8, nisa.nc_find_index8, nisa.nc_match_replace8 (spec/isa.md §6.22-6.24) and their top-k use."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _find_index_ref(data, vals, missing):
    out = np.full(vals.shape, missing, np.int64)
    for p in range(data.shape[0]):
        used = set()
        for j in range(8):
            for k in np.flatnonzero(data[p] == vals[p, j]):
                if k not in used:
                    out[p, j] = k
                    used.add(k)
                    break
    return out


def _match_replace_ref(data, vals, imm):
    d = data.copy()
    idx = np.zeros(vals.shape, np.int64)
    for p in range(d.shape[0]):
        for j in reversed(range(8)):
            hits = np.flatnonzero(d[p] == vals[p, j])
            if hits.size:
                idx[p, j] = hits[0]
                d[p, hits[0]] = imm
    return d, idx


@pytest.mark.parametrize("shape,dtype", [((128, 64), np.float32), ((32, 4, 5), ml_dtypes.bfloat16),
                                         ((8, 16384), np.float32)])
def test_max8_descending(rng, shape, dtype):
    x = rand(rng, *shape).astype(dtype)

    def kernel(x):
        out = nl.ndarray((shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.max8(src=nl.load(x), dtype=nl.float32))
        return out

    ref = -np.sort(-x.astype(np.float32).reshape(shape[0], -1), axis=1)[:, :8]
    np.testing.assert_array_equal(run(kernel, x), ref)


def test_find_index8_with_duplicates_and_missing_values(rng):
    data = rng.integers(0, 20, size=(64, 40)).astype(np.float32)
    vals = rng.integers(0, 25, size=(64, 8)).astype(np.float32)     # duplicates, some values absent

    def kernel(data, vals):
        out32 = nl.ndarray((64, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        out16 = nl.ndarray((64, 8), dtype=nl.uint16, buffer=nl.shared_hbm)
        d, v = nl.load(data), nl.load(vals)
        nl.store(out32, nisa.nc_find_index8(data=d, vals=v))
        nl.store(out16, nisa.nc_find_index8(data=d, vals=v, dtype=nl.uint16))
        return out32, out16

    i32, i16 = run(kernel, data, vals)
    np.testing.assert_array_equal(i32, _find_index_ref(data, vals, 0xFFFFFFFF))
    np.testing.assert_array_equal(i16, _find_index_ref(data, vals, 0xFFFF))


def test_match_replace8_documented_duplicate_example():
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(16, 0)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32).repeat(16, 0)

    def kernel(data, vals):
        out = nl.ndarray(data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        idx_out = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        idx = nl.ndarray((16, 8), dtype=nl.uint32)
        nl.store(out, nisa.nc_match_replace8(data=nl.load(data), vals=nl.load(vals), imm=-1.0, dst_idx=idx))
        nl.store(idx_out, idx)
        return out, idx_out

    out, idx = run(kernel, data, vals)
    np.testing.assert_array_equal(idx[0], [2, 10, 9, 8, 7, 6, 5, 4])
    np.testing.assert_array_equal(out[0], [1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1])


def test_top16_by_max8_and_match_replace(rng):
    """Top-k the way kernels do it: max8, replace those by -inf, max8 again, then find the indices."""
    x = rand(rng, 128, 256)

    def kernel(x):
        vals_out = nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        idx_out = nl.ndarray((128, 16), dtype=nl.uint32, buffer=nl.shared_hbm)
        t = nl.load(x)
        vals = nl.ndarray((128, 16), dtype=nl.float32)
        idx = nl.ndarray((128, 16), dtype=nl.uint32)
        vals[:, 0:8] = nisa.max8(src=t)
        work = nisa.nc_match_replace8(data=t, vals=vals[:, 0:8], imm=float("-inf"))
        vals[:, 8:16] = nisa.max8(src=work)
        idx[:, 0:8] = nisa.nc_find_index8(data=t, vals=vals[:, 0:8])
        idx[:, 8:16] = nisa.nc_find_index8(data=t, vals=vals[:, 8:16])
        nl.store(vals_out, vals)
        nl.store(idx_out, idx)
        return vals_out, idx_out

    vals, idx = run(kernel, x)
    order = np.argsort(-x, axis=1, kind="stable")[:, :16]
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(idx, order)


def test_new_generation_top8_instructions(rng):
    data = rand(rng, 32, 64)
    data[:, 10] = data[:, 20]                                # a tie

    def kernel(data):
        t = to_sbuf(data, nl2.float32)
        m = nl2.ndarray((32, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        i = nl2.ndarray((32, 8), dtype=nl2.uint32, buffer=nl2.sbuf)
        r = nl2.ndarray((32, 80), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.max8(dst=m, src=t)
        nisa2.nc_find_index8(dst=i, data=t, vals=m)
        nisa2.nc_match_replace8(dst=r[:, 0:64], data=t, vals=m, imm=0.0)
        nisa2.tensor_copy(dst=r[:, 64:72], src=m)
        nisa2.tensor_copy(dst=r[:, 72:80], src=i)
        return to_hbm(r)

    got = run(kernel, data)
    top = -np.sort(-data, 1)[:, :8]
    np.testing.assert_array_equal(got[:, 64:72], top)
    np.testing.assert_array_equal(got[:, 72:80], _find_index_ref(data, top, 0xFFFFFFFF))
    np.testing.assert_array_equal(got[:, :64], _match_replace_ref(data, top, 0.0)[0])


def _max8_too_small(x):
    nisa.max8(src=nl.load(x)[:, 0:7])


def _find_index_dtype(x):
    t = nl.load(x)
    nisa.nc_find_index8(data=t, vals=t[:, 0:8], dtype=nl.int32)


def _vals_count(x):
    t = nl.load(x)
    nisa.nc_match_replace8(data=t, vals=t[:, 0:4], imm=0.0)


def _imm_tile(x):
    t = nl.load(x)
    nisa.nc_match_replace8(data=t, vals=t[:, 0:8], imm=t)


def _dst_idx_float(x):
    t = nl.load(x)
    nisa.nc_match_replace8(data=t, vals=t[:, 0:8], imm=0.0, dst_idx=nl.ndarray((128, 8), dtype=nl.float32))


REJECTS = [
    ("max8_fewer_than_8_elements", _max8_too_small, ShapeError, "8..16384"),
    ("find_index8_dtype", _find_index_dtype, DtypeError, "uint16/uint32"),
    ("match_replace8_vals_count", _vals_count, ShapeError, "exactly 8"),
    ("match_replace8_imm_tile", _imm_tile, DtypeError, "imm"),
    ("match_replace8_float_dst_idx", _dst_idx_float, DtypeError, "integer"),
]


test_top8_rejects = rejecting(REJECTS)


def test_gap_decisions_nan_ranks_last_and_absent_values_leave_dst_idx(rng):
    data = rand(rng, 16, 12)
    data[:, 0] = np.nan
    data[:, 5] = np.inf

    def kernel(data):
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        idx_out = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.shared_hbm)
        d = nl.load(data)
        m = nisa.max8(src=d)
        idx = nl.full((16, 8), 77, dtype=nl.uint32)
        vals = nl.full((16, 8), 123.0, dtype=nl.float32)                 # absent from data
        vals[:, 0:4] = nl.copy(m[:, 0:4])
        nisa.nc_match_replace8(data=d, vals=vals, imm=0.0, dst_idx=idx)
        nl.store(out, m)
        nl.store(idx_out, idx)
        return out, idx_out

    top, idx = run(kernel, data)
    ref = -np.sort(-np.where(np.isnan(data), -np.inf, data), 1)[:, :8]
    np.testing.assert_array_equal(top, ref)                               # NaN never ranks among the 8
    assert top[0, 0] == np.inf
    np.testing.assert_array_equal(idx[:, 4:], 77)                         # not found: slot left unwritten
    np.testing.assert_array_equal(idx[:, 0], 5)
