"""Deferred data steps (machine.py `DEFER_DATA`, `Machine.defer`): the usual DMAs' copies and the usual matmuls'
products wait until something needs their data, and the kernels give the plain path's outputs bit for bit, its
errors with their kernel lines and, with a listener, its events field by field, whatever reads or writes the
waiting steps' arrays next: an engine instruction, a store and a load back of the same HBM (and a second store
over it), run-time indices read from a loaded tile, a masked matmul (the matmul's own plain path), a print of a
loaded tile, a returned tensor, later programs of a grid, cores running interleaved, an error after waiting
steps. Random data, results against NumPy."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from examples.tiled_matmul import tiled_matmul
from opennki.errors import OpenNKIError
from opennki.machine import machine
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand
from tests.sim.outcomes import same_both_ways

BF16 = ml_dtypes.bfloat16


def _both(kernel, args, **launch):
    """Deferred and immediate data steps: the same outputs or error, and the same events; the outcome."""
    return same_both_ways(kernel, args, machine, "DEFER_DATA", 3, **launch)


def tiled_reference(lhsT, rhs):
    """tiled_matmul's math in NumPy: per output tile an fp32 sum of the k-steps' fp32 products, in k order."""
    K, M = lhsT.shape
    out = np.empty((M, rhs.shape[1]), lhsT.dtype)
    for m in range(M // 128):
        for n in range(rhs.shape[1] // 512):
            acc = np.zeros((128, 512), np.float32)
            for k in range(K // 128):
                a = lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128].astype(np.float32)
                acc += a.T @ rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512].astype(np.float32)
            out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512] = acc.astype(out.dtype)
    return out


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_the_tiled_matmul_gives_the_plain_path_values_and_events(rng, dtype, monkeypatch):
    lhsT, rhs = rand(rng, 384, 256).astype(dtype), rand(rng, 384, 1024).astype(dtype)
    waited = []
    catch_up = machine.Machine.catch_up

    def counting(self):
        waited.append(len(self.later or ()))
        catch_up(self)

    monkeypatch.setattr(machine.Machine, "catch_up", counting)
    out = _both(tiled_matmul, (lhsT, rhs))
    np.testing.assert_array_equal(out.view(np.uint8), tiled_reference(lhsT, rhs).view(np.uint8))
    # the steps did wait: a run of a k-loop's loads and matmuls (3 k-steps) caught up at once
    assert max(waited) >= 9
    # at most LATER_BYTES of tiles wait: with a bound below one tile, every step runs when it is issued
    waited.clear()
    monkeypatch.setattr(machine, "LATER_BYTES", 1)
    out = _both(tiled_matmul, (lhsT, rhs))
    np.testing.assert_array_equal(out.view(np.uint8), tiled_reference(lhsT, rhs).view(np.uint8))
    assert waited and max(waited) <= 1


@nki.jit
def readers(x, w, idx):
    """Waiting steps followed by each kind of reader or writer of their arrays."""
    out = nl.ndarray((6, 128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        acc += nisa.nc_matmul(nl.load(w[k]), nl.load(x[k]))
    nl.store(out[0], value=nl.copy(acc, dtype=x.dtype))            # the copy-out reads the PSUM tile
    b = nl.load(x[0])
    nl.store(out[1], value=nl.multiply(b, 2.0))                    # an engine reads a loaded tile
    nl.store(scratch, value=b)                                     # a store, a load back, a store over it
    c = nl.load(scratch)
    nl.store(scratch, value=nl.load(x[1]))
    nl.store(out[2], value=c)
    ix = nl.load(idx)
    i_p, i_f = nl.mgrid[0:128, 0:512]
    nl.store(out[3], value=nl.load(scratch[ix[i_p, 0], i_f]))     # run-time indices from a loaded tile
    a = nl.load(w[1])
    acc2 = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    acc2 += nisa.nc_matmul(a, nl.load(x[1]))
    acc2[...] = nisa.nc_matmul(a, nl.load(x[0]), mask=(i_f >= 200))   # the matmul's own plain path
    nl.store(out[4], value=nl.copy(acc2, dtype=x.dtype))
    t = nl.load(x[1])
    nl.device_print("t =", t)                                      # a host-side read of a loaded tile
    nl.store(out[5], value=t)
    return out, scratch


def test_every_reader_of_waiting_steps_gives_the_plain_path_values_and_events(rng, capsys):
    for dtype in (np.float32, BF16):
        x, w = rand(rng, 2, 128, 512).astype(dtype), rand(rng, 2, 128, 128).astype(dtype)
        idx = rng.permutation(128).astype(np.int32).reshape(128, 1)
        out, scratch = _both(readers.func, (x, w, idx))
        printed = capsys.readouterr().out.split("t =")
        assert len(printed) == 3 and printed[1] == printed[2] and len(printed[1]) > 100
        f32 = [v.astype(np.float32) for v in (x[0], x[1], w[0], w[1])]
        x0, x1, w0, w1 = f32
        acc = np.zeros((128, 512), np.float32)
        acc += w0.T @ x0
        acc += w1.T @ x1
        np.testing.assert_array_equal(out[0], acc.astype(dtype))
        np.testing.assert_array_equal(out[1], (x0 * np.float32(2)).astype(dtype))
        np.testing.assert_array_equal(out[2], x[0])
        np.testing.assert_array_equal(scratch, x[1])
        np.testing.assert_array_equal(out[3], x[1][idx[:, 0]])
        masked = w1.T @ x1
        masked[:, 200:] = (w1.T @ x0)[:, 200:]
        np.testing.assert_array_equal(out[4], masked.astype(dtype))
        np.testing.assert_array_equal(out[5], x[1])


@nki.jit
def unwritten_after_waiting(x):
    """Waiting loads and a matmul, then a read of a tile nothing wrote (uninitialized="raise")."""
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    acc += nisa.nc_matmul(nl.load(x[:, 0:128]), nl.load(x))
    nl.store(out, value=nl.copy(acc, dtype=x.dtype))
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nl.store(out, value=t)
    return out


@nki.jit
def out_of_bounds_after_waiting(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=t)
    nl.store(out, value=nl.load(x[:, 256:768]))
    return out


def test_an_error_after_waiting_steps_is_the_plain_path_error(rng):
    x = rand(rng, 128, 512)
    err = _both(unwritten_after_waiting.func, (x,), options=SimOptions(uninitialized="raise"))
    assert isinstance(err, OpenNKIError) and "nl.store(out, value=t)" in err.location.source
    err = _both(out_of_bounds_after_waiting.func, (x,))
    assert isinstance(err, OpenNKIError) and "x[:, 256:768]" in err.location.source


def programs(x):
    """Four programs: each doubles its row block into shared scratch (twice, the second time into the block
    program 0 reads), then reads the block of program (i + 3) % 4: one a program before it wrote, in a grid run
    one program after another; on two cores run interleaved (`nl.nc(2) * 2`: programs 0, 1 on core 0), one the
    other core may or may not have written yet (a race on purpose: the values show the order)."""
    scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.load(x[i])
    nl.store(scratch[i], value=nl.multiply(t, 2.0))
    nl.store(scratch[3], value=nl.multiply(t, 2.0))
    nl.store(out[i], value=nl.load(scratch[(i + 3) % 4]))
    return out


def test_later_programs_and_interleaved_cores_see_the_plain_path_values(rng):
    x = rand(rng, 4, 128, 64)
    orders = set()
    for grid, seeds in ((4, (0,)), (nl.nc(2) * 2, range(8))):
        for seed in seeds:
            kernel = nki.jit(programs, interleave_seed=seed)[grid]
            outs = []
            for deferred in (True, False):
                machine.DEFER_DATA = deferred
                try:
                    outs.append(kernel(x))
                finally:
                    machine.DEFER_DATA = True
            np.testing.assert_array_equal(outs[0], outs[1])
            if grid == 4:
                np.testing.assert_array_equal(outs[0], 2 * x[[0, 0, 1, 2]])   # program 0 wrote block 3 itself
            else:
                orders.add(outs[0].tobytes())
    assert len(orders) > 1          # the cores' order shows in the values
