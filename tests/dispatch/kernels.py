"""This project's own kernels for the dispatch tests (legacy and new generation)."""

import opennki as nki_new
import opennki.isa as nisa_new
import opennki.language as nl_new
import opennki.legacy as nki
import opennki.legacy.language as nl


def scale_rows(x, factor):
    """out = x * factor for an [n*128, d] input, one 128-row tile per SPMD program along axis 0 (or all
    tiles in a loop when there is no grid)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n_tiles = x.shape[0] // 128
    i_p, i_f = nl.arange(128)[:, None], nl.arange(x.shape[1])[None, :]
    tiles = [nl.program_id(0)] if nl.program_ndim() else range(n_tiles)
    for t in tiles:
        tile = nl.load(x[t * 128 + i_p, i_f])
        nl.store(out[t * 128 + i_p, i_f], value=nl.multiply(tile, factor))
    return out


def add_into(a, b, result):
    """Old calling convention: result = a + b written into the argument, nothing returned."""
    nl.store(result, value=nl.add(nl.load(a), nl.load(b)))


def double_helper(tile):
    return nl.multiply(tile, 2.0)


def calls_helper(x, helper):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=helper(nl.load(x)))
    return out


def returns_sbuf(x):
    tile = nl.load(x)
    return tile


def sum_and_max(x):
    """Two outputs: row sums and row maxima of a [128, d] tile."""
    s = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nl.store(s, value=nl.sum(tile, axis=[1], keepdims=True))
    nl.store(m, value=nl.max(tile, axis=[1], keepdims=True))
    return s, m


# ------------------------------------------------------------------------------------------ new generation

@nki_new.jit
def lnc_halves(x):
    """With LNC=2 each core negates its half of the rows; with LNC=1 one program does both halves."""
    out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
    half = x.shape[0] // 2
    n = nl_new.num_programs()
    for h in range(2 // n):
        row = (nl_new.program_id(0) if n == 2 else h) * half
        tile = nl_new.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=tile, src=x[row:row + half, :])
        neg = nl_new.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.tensor_scalar(dst=neg, data=tile, op0=nl_new.multiply, operand0=-1.0)
        nisa_new.dma_copy(dst=out[row:row + half, :], src=neg)
    return out


def new_private_output(x):
    out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.hbm)
    tile = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=tile, src=x)
    nisa_new.dma_copy(dst=out, src=tile)
    return out


@nki_new.jit
def new_copy(x):
    out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
    tile = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=tile, src=x)
    nisa_new.dma_copy(dst=out, src=tile)
    return out


@nki_new.jit
def new_increment_inplace(x):
    """Writes x + 1 back into its input (an in-place update) and returns nothing."""
    tile = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=tile, src=x)
    nisa_new.tensor_scalar(dst=tile, data=tile, op0=nl_new.add, operand0=1.0)
    nisa_new.dma_copy(dst=x, src=tile)


jit_scale_rows = nki.jit(scale_rows)
jit_add_into = nki.jit(add_into)
jit_sum_and_max = nki.jit(sum_and_max)
