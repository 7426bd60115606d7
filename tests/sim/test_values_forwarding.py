"""Forwarded copies (machine.py `FORWARD_COPIES`, `_forward`): a waiting load's copy into a tile that is gone when its
batch runs, and that only matmuls of the batch read, is not made; they read the load's source. The kernels give the
plain path's outputs bit for bit, its errors with their kernel lines and, with a listener, its events field by
field: the tiled matmul (fp32 forwarded, bf16 not), a source overwritten between the load and the matmul, a tile
read by two matmuls, by a matmul and a store, by a matmul and an engine, a tile still held when its batch runs,
sources of other layouts (strided, offset, transposed), a copy of a gone tile, an error after forwarded copies.
Random data, results against NumPy."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from examples.tiled_matmul import tiled_matmul
from opennki.errors import OpenNKIError
from opennki.machine import machine
from tests.isa.helpers import rand
from tests.sim.outcomes import same_both_ways
from tests.sim.test_deferred_data import tiled_reference

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def forwarded(monkeypatch):
    """The copies `_forward` dropped and the operands it forwarded, counted over the runs."""
    counts = {"copies": 0, "operands": 0}
    forward = machine._forward

    def counting(later):
        before = [args for _, args in later]
        forward(later)
        counts["copies"] += sum(step is machine._skipped for step, _ in later)
        counts["operands"] += sum(sum(a is not b for a, b in zip(old, args))
                                  for old, (step, args) in zip(before, later) if step is not machine._skipped)

    monkeypatch.setattr(machine, "_forward", counting)
    return counts


def _both(kernel, args, **launch):
    """Forwarded and plain copies: the same outputs or error, and the same events; the outcome."""
    return same_both_ways(kernel, args, machine, "FORWARD_COPIES", 3, **launch)


def test_the_fp32_tiled_matmul_reads_its_sources(rng, forwarded):
    lhsT, rhs = rand(rng, 512, 256), rand(rng, 512, 1024)
    out = _both(tiled_matmul, (lhsT, rhs))
    np.testing.assert_array_equal(out.view(np.uint8), tiled_reference(lhsT, rhs).view(np.uint8))
    # 2 x 2 output tiles of 4 k-steps: the loads of the first 3 k-steps of each (gone when the copy-out catches
    # up) are forwarded, each to one matmul operand; those of the last k-step are still held then
    assert forwarded == {"copies": 2 * 2 * 3 * 2, "operands": 2 * 2 * 3 * 2}


def test_the_bf16_tiled_matmul_makes_its_copies(rng, forwarded, monkeypatch):
    analysed = []
    forward = machine._forward
    monkeypatch.setattr(machine, "_forward", lambda later: analysed.append(len(later)) or forward(later))
    lhsT, rhs = rand(rng, 384, 256).astype(BF16), rand(rng, 384, 512).astype(BF16)
    out = _both(tiled_matmul, (lhsT, rhs))
    np.testing.assert_array_equal(out.view(np.uint8), tiled_reference(lhsT, rhs).view(np.uint8))
    assert forwarded["copies"] == 0
    # no batch holds a copy `_forward` may drop (`Machine.forwardable`): none is analysed
    assert analysed == []


def test_batches_are_analysed_only_with_an_fp32_copy_waiting(rng, forwarded, monkeypatch):
    analysed = []
    forward = machine._forward
    monkeypatch.setattr(machine, "_forward", lambda later: analysed.append(len(later)) or forward(later))
    lhsT, rhs = rand(rng, 384, 256), rand(rng, 384, 1024)
    out = _both(tiled_matmul, (lhsT, rhs))
    np.testing.assert_array_equal(out.view(np.uint8), tiled_reference(lhsT, rhs).view(np.uint8))
    # 2 x 2 output tiles of 3 k-steps: each copy-out's batch (the two loads and the matmul of each k-step) is
    # analysed, and the copies of the first 2 k-steps are dropped; the stores' own batches are not (a copy into
    # a strided HBM slice, not `_same_layout`'s)
    assert analysed == [3 * 3] * 4 and forwarded["copies"] == 4 * 2 * 2


@nki.jit
def uses(x, w):
    """Loaded tiles gone by the time their batch runs, read in other ways besides a matmul."""
    out = nl.ndarray((6, 128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    # the source overwritten after the load, before the matmul (the store waits too): the copy must stay
    nl.store(out[0], value=nl.load(x[0]))
    a = nl.load(out[0][:, 0:128])
    nl.store(out[0], value=nl.load(x[1]))
    acc += nisa.nc_matmul(a, nl.load(x[1]))
    # overwritten after the matmul: forwarded
    a = nl.load(out[0][:, 128:256])
    acc += nisa.nc_matmul(a, nl.load(x[0]))
    nl.store(out[0], value=nl.load(x[0]))
    # one tile read by two matmuls
    a = nl.load(w[0][:, 0:128])
    acc += nisa.nc_matmul(a, nl.load(x[0]))
    acc += nisa.nc_matmul(a, nl.load(x[1]))
    # read by a matmul and by a store (which waits: the copy stays)
    b = nl.load(x[1])
    acc += nisa.nc_matmul(nl.load(w[1][:, 0:128]), b)
    nl.store(out[1], value=b)
    # read by a matmul and an engine (which runs the waiting steps first: the tile is still held then)
    b = nl.load(x[0])
    acc += nisa.nc_matmul(nl.load(w[0][:, 0:128]), b)
    nl.store(out[2], value=nl.multiply(b, 3.0))
    # sources of other layouts: every other column, an odd offset, a transposing load
    acc += nisa.nc_matmul(nl.load(w[1][:, 0:256:2]), nl.load(x[0]))
    acc += nisa.nc_matmul(nl.load(w[1][:, 1:129]), nl.load(x[1]))
    acc += nisa.nc_matmul(nl.load_transpose2d(w[0][:, 0:128]), nl.load(x[1]))
    # a DMA copy of a gone tile into another tile (the first tile's copy stays)
    c = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=c, src=nl.load(w[0][:, 0:128]))
    acc += nisa.nc_matmul(c, nl.load(x[1]))
    b = None
    nl.store(out[3], value=nl.copy(acc, dtype=x.dtype))
    # a tile still held when its batch runs, read again after it
    a = nl.load(w[1][:, 0:128])
    acc2 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    acc2 += nisa.nc_matmul(a, nl.load(x[0]))
    nl.store(out[4], value=nl.copy(acc2, dtype=x.dtype))
    acc2 += nisa.nc_matmul(a, nl.load(x[1]))
    nl.store(out[5], value=nl.copy(acc2, dtype=x.dtype))
    return out


def test_other_readers_and_layouts_give_the_plain_path_values_and_events(rng, forwarded):
    for dtype in (np.float32, BF16):
        x, w = rand(rng, 2, 128, 512).astype(dtype), rand(rng, 2, 128, 256).astype(dtype)
        out = _both(uses.func, (x, w))
        x0, x1, w0, w1 = (v.astype(np.float32) for v in (x[0], x[1], w[0], w[1]))
        w0c, w1c = w0[:, 0:128], w1[:, 0:128]
        acc = np.zeros((128, 512), np.float32)
        for s, m in ((x0[:, 0:128], x1), (x1[:, 128:256], x0), (w0c, x0), (w0c, x1), (w1c, x1), (w0c, x0),
                     (w1[:, 0:256:2], x0), (w1[:, 1:129], x1), (w0c.T, x1), (w0c, x1)):
            acc += np.ascontiguousarray(s).T @ m
        np.testing.assert_array_equal(out[3], acc.astype(dtype))
        np.testing.assert_array_equal(out[0], x[0])
        np.testing.assert_array_equal(out[1], x[1])
        np.testing.assert_array_equal(out[2], (x0 * np.float32(3)).astype(dtype))
        acc2 = w1c.T @ x0
        np.testing.assert_array_equal(out[4], acc2.astype(dtype))
        np.testing.assert_array_equal(out[5], (acc2 + w1c.T @ x1).astype(dtype))
    # fp32 only: the copies of the tiles gone by the time their batch runs that only matmuls read
    assert forwarded["copies"] >= 5 and forwarded["operands"] >= forwarded["copies"]


@nki.jit
def error_after_forwarding(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(3):
        acc += nisa.nc_matmul(nl.load(x[:, k * 128:(k + 1) * 128]), nl.load(x[:, 0:512]))
    nl.store(out, value=nl.copy(acc, dtype=x.dtype))
    nl.store(out, value=nl.load(x[:, 256:768]))
    return out


def test_an_error_after_forwarded_copies_is_the_plain_path_error(rng, forwarded):
    err = _both(error_after_forwarding.func, (rand(rng, 128, 512),))
    assert isinstance(err, OpenNKIError) and "x[:, 256:768]" in err.location.source
    assert forwarded["copies"] >= 2
