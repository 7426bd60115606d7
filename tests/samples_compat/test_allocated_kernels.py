"""Direct-allocation (allocated) kernels in the style of the official samples.

* A PSUM tile declared with `nl.ndarray` (allocated kernels cannot zero-initialise) and accumulated with
  `+=`: the first matmul into it starts the accumulation group (regression: the poisoned memory made every
  result NaN).
* Addresses computed by a Python counter advanced inside an `affine_range` body: NKI traces the body once,
  so each declaration keeps its first placement in every iteration (regression: the counter ran past the
  end of SBUF).
"""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.events import TensorAllocated
from opennki.legacy.language import par_dim
from opennki.listeners import Recorder


def _tiled_products(a, b):
    """out[t] = sum_k a[t, k].T @ b[t, k] for each row tile t, with every tensor placed by hand."""
    n_tiles, n_k = a.shape[0], a.shape[1]
    out = nl.ndarray((n_tiles, 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    next_addr = 0
    for t in nl.affine_range(n_tiles):
        lhs = nl.ndarray((n_k, par_dim(128), 128), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=next_addr, num_free_tiles=(n_k,)))
        next_addr += n_k * 128 * 4
        rhs = nl.ndarray((n_k, par_dim(128), 256), dtype=nl.float32,
                         buffer=ncc.sbuf.mod_alloc(base_addr=next_addr, num_free_tiles=(n_k,)))
        next_addr += n_k * 256 * 4
        res = nl.ndarray((par_dim(128), 256), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=next_addr))
        next_addr += 256 * 4
        acc = nl.ndarray((1, par_dim(128), 256), dtype=nl.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=3, num_bank_tiles=(1,)))
        for k in nl.affine_range(n_k):
            lhs[k] = nl.load(a[t, k])
            rhs[k] = nl.load(b[t, k])
            acc[0] += nisa.nc_matmul(lhs[k], rhs[k])
        res[...] = nisa.tensor_copy(acc[0])
        nl.store(out[t], value=res)
    return out


def test_allocated_psum_accumulates_from_its_first_matmul_and_placements_are_traced_once(rng):
    a = rng.standard_normal((6, 3, 128, 128)).astype(np.float32)
    b = rng.standard_normal((6, 3, 128, 256)).astype(np.float32)
    rec = Recorder()
    out = nki.jit(_tiled_products).launch((a, b), listeners=[rec])
    np.testing.assert_allclose(out, np.einsum("tkpm,tkpn->tmn", a, b), rtol=1e-4, atol=1e-3)
    starts = {e.byte_start for e in rec.of_type(TensorAllocated) if e.kind.name == "SBUF"}
    assert max(starts) == 3 * 128 * 4 + 3 * 256 * 4          # `res`, placed as in the first iteration


def _two_groups(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=nl.psum)
    first = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(2):
        acc += nisa.nc_matmul(nl.load(a[k]), nl.load(b[k]))
    first[...] = nl.copy(acc)                      # reading the tile out does not end its value
    for k in nl.affine_range(2):
        acc += nisa.nc_matmul(nl.load(a[k + 2]), nl.load(b[k + 2]))
    nl.store(out, value=nl.add(acc, first))
    return out


def test_accumulating_after_a_read_adds_to_the_tile(rng):
    a = rng.standard_normal((4, 128, 128)).astype(np.float32)
    b = rng.standard_normal((4, 128, 64)).astype(np.float32)
    parts = np.einsum("kpm,kpn->kmn", a, b)
    expected = parts.sum(axis=0) + parts[:2].sum(axis=0)
    np.testing.assert_allclose(nki.jit(_two_groups)(a, b), expected, rtol=1e-4, atol=1e-3)


def test_accumulating_into_a_memset_tile_adds_to_its_value(rng):
    def kernel(a, b):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.full((par_dim(128), 64), 2.0, dtype=nl.float32, buffer=nl.psum)
        acc += nisa.nc_matmul(nl.load(a), nl.load(b))
        nl.store(out, value=acc)
        return out
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(nki.jit(kernel)(a, b), a.T @ b + 2.0, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("loop", ["affine_range", "static_range"])
def test_unrolled_loops_place_each_iteration_afresh(rng, loop):
    """static_range bodies are traced per iteration, so each iteration's address is its own."""
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in getattr(nl, loop)(2):
            t = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512 * i))
            t[...] = nl.load(x[i])
            nl.store(out[i], value=t)
        return out
    x = rng.standard_normal((2, 128, 64)).astype(np.float32)
    rec = Recorder()
    np.testing.assert_array_equal(nki.jit(kernel).launch((x,), listeners=[rec]), x)
    starts = sorted({e.byte_start for e in rec.of_type(TensorAllocated) if e.kind.name == "SBUF"})
    assert starts == ([0] if loop == "affine_range" else [0, 512])


def test_modulo_allocation_pairs_block_indices_and_tile_counts_from_the_left(rng):
    """A plain tile with `num_free_tiles=(2,)` sits at base_addr (the official attention tutorial's allocator
    passes counts for every tensor), and two block dims with counts (1, 3) rotate over three tiles."""
    def kernel(x):
        out = nl.ndarray((6, 128, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        plain = nl.ndarray((par_dim(128), 32), dtype=nl.float32,
                           buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        blocks = nl.ndarray((2, 3, par_dim(128), 32), dtype=nl.float32,
                            buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(1, 3)))
        plain[...] = nl.load(x[0])
        for i in nl.affine_range(2):
            for j in nl.affine_range(3):
                blocks[i, j] = nl.load(x[3 * i + j])
                nl.store(out[3 * i + j], value=blocks[i, j])
        return out
    x = rng.standard_normal((6, 128, 32)).astype(np.float32)
    rec = Recorder()
    np.testing.assert_array_equal(nki.jit(kernel).launch((x,), listeners=[rec]), x)
    starts = sorted({e.byte_start for e in rec.of_type(TensorAllocated) if e.kind.name == "SBUF"})
    assert starts == [0, 1024, 1024 + 128, 1024 + 256]


def _per_tile_sums(a, b):
    """out[t] = sum_k a[t, k].T @ b[t, k]; every logical block of `acc` lives in the same PSUM bank."""
    n_t, n_k = a.shape[0], a.shape[1]
    out = nl.ndarray((n_t, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((n_t, par_dim(128), 64), dtype=nl.float32,
                     buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
    lhs = nl.ndarray((par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    rhs = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    res = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=768))
    for t in nl.sequential_range(n_t):
        for k in nl.sequential_range(n_k):
            lhs[...] = nl.load(a[t, k])
            rhs[...] = nl.load(b[t, k])
            acc[t] += nisa.nc_matmul(lhs, rhs)
        res[...] = nisa.tensor_copy(acc[t])
        nl.store(out[t], value=res)
    return out


def test_logical_psum_blocks_sharing_a_bank_each_start_their_own_accumulation(rng):
    """The official attention tutorial v9 keeps all `attn_out_psum[i]` in bank 7: the first `+=` into
    each logical block starts a new accumulation group (regression: block 1 added onto block 0's sums)."""
    a = rng.standard_normal((3, 2, 128, 128)).astype(np.float32)
    b = rng.standard_normal((3, 2, 128, 64)).astype(np.float32)
    np.testing.assert_allclose(nki.jit(_per_tile_sums)(a, b), np.einsum("tkpm,tkpn->tmn", a, b),
                               rtol=1e-4, atol=1e-3)
