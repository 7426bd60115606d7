"""A DMA's usual case taken in one step (dma.py `USUAL_DMAS`, `Machine.copy_plain`: same shape and dtype, no
mask or accumulation, direct in-bounds views) gives the plain path's outputs bit for bit, its errors with their
kernel lines and, with a listener, its events field by field; so do the DMAs it hands on (a dtype conversion, a
reshape, `mask=`, run-time indices, an accumulate, uninitialised reads, a view of part of a tile). Random
data, results against NumPy."""

import ml_dtypes
import numpy as np

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import OpenNKIError
from opennki.instructions import dma
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand
from tests.sim.outcomes import same_both_ways

BF16 = ml_dtypes.bfloat16


@nki.jit
def moves(x, idx):
    """Whole-tile loads and stores, SBUF -> SBUF, parts of tiles, a conversion, a reshape, a masked store, a
    gather by run-time indices and a DMA accumulate."""
    out = nl.ndarray((7, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x[0])
    nl.store(out[0], value=t)
    u = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=t)                                        # SBUF -> SBUF
    half = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=half[:, 0:32], src=u[:, 32:64])                  # part of a tile (the rest poisoned)
    nisa.dma_copy(dst=half[:, 32:64], src=u[:, 0:32])
    nl.store(out[1], value=half)
    wide = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wide, src=t)                                     # a conversion
    nl.store(out[2], value=nl.copy(wide, dtype=x.dtype))
    flat = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=flat, src=t)                                     # a reshape (same element count)
    rs = nl.ndarray((64, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(rs, value=flat)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    nl.store(out[3], value=u, mask=(i_f < 40))
    nl.store(out[3], value=half, mask=(i_f >= 40))
    ix = nl.load(idx)
    g = nl.load(x[1][ix[i_p, 0], i_f])                                 # run-time row indices
    nl.store(out[4], value=g)
    nl.store(out[5], value=t)
    nisa.dma_copy(dst=out[5], src=u, dst_rmw_op=np.add)                # accumulate
    nl.store(out[6], value=nl.load(x[1]))
    return out, rs


@nki.jit
def unwritten_source(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.sbuf)
    nl.store(out, value=t)
    return out


def _both(kernel, args, **launch):
    """One step and plain DMAs (dma.USUAL_DMAS): the same outputs or error, and the same events; the outcome."""
    return same_both_ways(kernel, args, dma, "USUAL_DMAS", 3, **launch)


def test_usual_dmas_give_the_plain_path_values_and_events(rng):
    for dtype in (np.float32, BF16):
        x = rand(rng, 2, 128, 64).astype(dtype)
        idx = rng.permutation(128).astype(np.int32).reshape(128, 1)
        out, rs = _both(moves.func, (x, idx))
        t = x[0]
        np.testing.assert_array_equal(out[0], t)
        np.testing.assert_array_equal(out[1], np.concatenate([t[:, 32:], t[:, :32]], axis=1))
        np.testing.assert_array_equal(out[2], t)
        np.testing.assert_array_equal(out[3][:, :40], t[:, :40])
        np.testing.assert_array_equal(out[3][:, 40:], out[1][:, 40:])
        np.testing.assert_array_equal(out[4], x[1][idx[:, 0]])
        np.testing.assert_array_equal(out[5], (t.astype(np.float32) * 2).astype(dtype))
        np.testing.assert_array_equal(out[6], x[1])
        np.testing.assert_array_equal(rs, t.reshape(64, 128))


def test_an_uninitialised_source_gives_the_plain_path_error(rng):
    err = _both(unwritten_source.func, (rand(rng, 128, 64),), options=SimOptions(uninitialized="raise"))
    assert isinstance(err, OpenNKIError) and "nl.store" in err.location.source
