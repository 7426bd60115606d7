"""nisa.local_gather and nisa.nc_n_gather (spec/isa.md §6.26, §6.27): gathers within partitions on GpSimd."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, OutOfBoundsError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _local_gather_ref(src, index, k, valid):
    P = src.shape[0]
    flat = src.reshape(P, -1)
    out = np.empty((P, valid, k), src.dtype)
    for core in range(P // 16):
        rows = slice(16 * core, 16 * core + 16)
        offsets = index[rows].flatten(order="F")[:valid]
        for j, h in enumerate(offsets):
            out[rows, j, :] = flat[rows, h:h + k]
    return out


@pytest.mark.parametrize("k,valid", [(4, 64), (1, None), (2, 20)])
def test_local_gather_as_documented(rng, k, valid):
    src = rand(rng, 128, 512, 4)
    index_per_core = rng.integers(0, 512, size=(16, 4)).astype(np.uint16)
    index = np.tile(index_per_core, (8, 1)) * np.uint16(k)
    if k == 2:
        index[16:32] = rng.integers(0, 1000, size=(16, 4)).astype(np.uint16)   # cores differ

    def kernel(src, index):
        V = valid if valid is not None else 64
        out = nl.ndarray((128, V, k), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nisa.local_gather(nl.load(src), nl.load(index), k, valid))
        return out

    np.testing.assert_array_equal(run(kernel, src, index), _local_gather_ref(src, index, k, valid or 64))


def test_new_generation_local_gather_bf16(rng):
    src = rand(rng, 32, 64).astype(ml_dtypes.bfloat16)
    index = rng.integers(0, 63, size=(32, 2)).astype(np.uint16)

    def kernel(src, index):
        s = to_sbuf(src, nl2.bfloat16)
        i = to_sbuf(index, nl2.uint16)
        d = nl2.ndarray((32, 32), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        nisa2.local_gather(dst=d, src_buffer=s, index=i)
        return to_hbm(d)

    ref = _local_gather_ref(src, index, 1, 32).reshape(32, 32)
    np.testing.assert_array_equal(run(kernel, src, index).view(np.uint16), ref.view(np.uint16))


def test_nc_n_gather_per_partition(rng):
    data = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(64, 4, 25), dtype=np.int64).astype(np.int32)
    indices = rng.integers(0, 100, size=(64, 37)).astype(np.uint32)

    def kernel(data, indices):
        d = to_sbuf(data, nl2.int32)
        i = to_sbuf(indices, nl2.uint32)
        r = nl2.ndarray((64, 37), dtype=nl2.int32, buffer=nl2.sbuf)
        nisa2.nc_n_gather(dst=r, data=d, indices=i)
        return to_hbm(r)

    ref = np.take_along_axis(data.reshape(64, -1), indices.astype(np.int64), axis=1)
    np.testing.assert_array_equal(run(kernel, data, indices), ref)


def _lg(src_p=128, idx_p=128, k=1, valid=None, idx_dtype=nl.uint16, buffer=nl.sbuf, out_dtype=None):
    src = nl.zeros((src_p, 64), dtype=nl.float32, buffer=buffer)
    idx = nl.zeros((idx_p, 2), dtype=idx_dtype)
    return src, idx, k, valid


def _lg_partitions():
    nisa.local_gather(*_lg(src_p=24, idx_p=24))


def _lg_index_dtype():
    nisa.local_gather(*_lg(idx_dtype=nl.int32))


def _lg_elems():
    nisa.local_gather(*_lg(k=3))


def _lg_valid():
    nisa.local_gather(*_lg(valid=33))


def _lg_psum():
    nisa.local_gather(*_lg(buffer=nl.psum))


def _lg_out_of_range():
    src = nl.zeros((16, 8), dtype=nl.float32)
    idx = nl.full((16, 1), 7, dtype=nl.uint16)
    nisa.local_gather(src, idx, 2)


def _ng_dtype():
    d = nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.nc_n_gather(dst=nl2.ndarray((8, 4), dtype=nl2.bfloat16, buffer=nl2.sbuf), data=d,
                      indices=nl2.ndarray((8, 4), dtype=nl2.uint32, buffer=nl2.sbuf))


def _ng_float_indices():
    d = nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.nc_n_gather(dst=nl2.ndarray((8, 4), dtype=nl2.float32, buffer=nl2.sbuf), data=d,
                      indices=nl2.ndarray((8, 4), dtype=nl2.float32, buffer=nl2.sbuf))


def _ng_out_of_range():
    d = nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf)
    i = nl2.ndarray((8, 4), dtype=nl2.uint32, buffer=nl2.sbuf)
    nisa2.memset(dst=d, value=0.0)
    nisa2.memset(dst=i, value=8)
    nisa2.nc_n_gather(dst=nl2.ndarray((8, 4), dtype=nl2.float32, buffer=nl2.sbuf), data=d, indices=i)


REJECTS = [
    ("local_gather_partitions_not_whole_cores", _lg_partitions, ShapeError, "multiple of 16"),
    ("local_gather_index_not_uint16", _lg_index_dtype, DtypeError, "uint16"),
    ("local_gather_elems_per_index", _lg_elems, KernelError, "1, 2, 4, 8, 16 or 32"),
    ("local_gather_too_many_valid_indices", _lg_valid, KernelError, "num_valid_indices"),
    ("local_gather_psum", _lg_psum, MemoryKindError, "SBUF only"),
    ("local_gather_index_out_of_range", _lg_out_of_range, OutOfBoundsError, "out of range"),
    ("n_gather_dtype", _ng_dtype, DtypeError, "data's dtype"),
    ("n_gather_float_indices", _ng_float_indices, DtypeError, "integer"),
    ("n_gather_index_out_of_range", _ng_out_of_range, OutOfBoundsError, "out of range"),
]


test_gather_rejects = rejecting(REJECTS, inputs=())
