"""Directly placed tensors over the same bytes alias each other, as on hardware: a declaration in another
dtype reinterprets the bytes, a partial overlap sees the overlapping part, and a tensor declared again in
the next loop iteration at the same address finds what the previous one left (machine/physical.py). A
reshape of a whole tile reinterpreted with `.view(dtype)` aliases it the same way."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.language as nl
from opennki.errors import UnsupportedError
from opennki.legacy.language import par_dim


def _reinterpret(x):
    out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    as_float = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    as_int = nl.ndarray((par_dim(128), 64), dtype=nl.int32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    as_float[...] = nl.load(x)
    nl.store(out, value=as_int)
    return out


def test_a_declaration_in_another_dtype_reinterprets_the_bytes(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(nki.jit(_reinterpret)(x), x.view(np.int32))


def _bits_through_a_reshape(x):
    """t's bits are written as float32 through a reshape of t, then read as bfloat16 pairs the same way."""
    out = nl.ndarray((16, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    halves = nl.ndarray((16, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 4, 8), dtype=nl.int32, buffer=nl.sbuf)
    as_float = t.reshape((16, 32)).view(nl.float32)
    as_float[...] = nl.load(x)
    nl.store(out, value=t.reshape((16, 32)))
    as_bf16 = t.reshape((16, 32)).view(nl.bfloat16)                 # the last dim doubles
    nl.store(halves, value=as_bf16)
    return out, halves


def test_a_reshape_of_a_whole_tile_reinterprets_its_bits(rng):
    x = rng.standard_normal((16, 32)).astype(np.float32)
    out, halves = nki.jit(_bits_through_a_reshape)(x)
    np.testing.assert_array_equal(out, x.view(np.int32))
    np.testing.assert_array_equal(halves.view(np.uint16), x.view(ml_dtypes.bfloat16).view(np.uint16))


def _bits_through_a_slice(x):
    """Half of t's free elements are written as float32 through a slice of t reinterpreted as float32."""
    out = nl.ndarray((16, 2, 32), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.zeros((16, 2, 32), dtype=nl.int32, buffer=nl.sbuf)
    as_float = t[:, 1, :].view(nl.float32)                           # same size: any view
    as_float[...] = nl.load(x)
    nl.store(out, value=t)
    return out


def test_a_slice_reinterpreted_as_a_dtype_of_the_same_size_aliases_it(rng):
    x = rng.standard_normal((16, 32)).astype(np.float32)
    out = nki.jit(_bits_through_a_slice)(x)
    np.testing.assert_array_equal(out[:, 1], x.view(np.int32))
    np.testing.assert_array_equal(out[:, 0], 0)


def test_a_part_of_a_tile_cannot_be_reinterpreted_as_a_dtype_of_another_size(rng):
    def kernel(x):
        t = nl.ndarray((16, 4, 8), dtype=nl.int32, buffer=nl.sbuf)
        t[:, 0:2, :].reshape((16, 16)).view(nl.bfloat16)            # <- half of t, another size
        return x
    with pytest.raises(UnsupportedError, match="only whole tensors, or reshapes of them"):
        nki.jit(kernel)(rng.standard_normal((16, 4)).astype(np.float32))


def _partial_overlap(x, y):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    whole = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    upper = nl.ndarray((par_dim(64), 16), dtype=nl.float32,            # partitions 64-127, bytes 128-191
                       buffer=ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (64, 128)))
    whole[...] = nl.load(x)
    upper[...] = nl.load(y)
    nl.store(out, value=whole)
    return out


def test_a_partial_overlap_writes_through(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    y = rng.standard_normal((64, 16)).astype(np.float32)
    expected = x.copy()
    expected[64:, 32:48] = y
    np.testing.assert_array_equal(nki.jit(_partial_overlap)(x, y), expected)


def _carried_over(x):
    """Each iteration declares `keep` anew at the same bytes and adds its slice to what is there."""
    out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    first = nl.ndarray((par_dim(128), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    first[...] = nl.load(x[0])
    for i in nl.sequential_range(1, x.shape[0]):
        keep = nl.ndarray((par_dim(128), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        part = nl.ndarray((par_dim(128), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        part[...] = nl.load(x[i])
        keep[...] = nl.add(keep, part)
    last = nl.ndarray((par_dim(128), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    nl.store(out, value=last)
    return out


def test_a_new_declaration_finds_the_bytes_its_range_holds(rng):
    x = rng.standard_normal((4, 128, 32)).astype(np.float32)
    np.testing.assert_allclose(nki.jit(_carried_over)(x), x.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_never_written_direct_memory_reads_as_nan(rng):
    def kernel(x):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        fresh = nl.ndarray((par_dim(128), 8), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        nl.store(out, value=fresh)
        return out
    assert np.isnan(nki.jit(kernel)(np.zeros((1, 1), np.float32))).all()
