"""tensor_scalar's run cells (instructions/base.py `USUAL_RUN_CELLS`: an instruction made from a plan's template
repeats the last usual run of its template when the immediate, operator and arrays are the same) give the plain
path's outputs bit for bit, its errors with their kernel lines and, with a listener, its events field by field:
in-place chains, one call site alternating arrays, zeros of either sign (one template: its memo is keyed by
value), PSUM, bf16 and partial destinations, tiles made anew in a loop, precise-off storage (a bf16 tile held in
an fp32 array) and an uninitialised read. Random data, results against NumPy."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.errors import OpenNKIError
from opennki.instructions import base
from opennki.sim.options import SimOptions
from tests.sim.outcomes import assert_same_outcome, fast_and_plain

BF16 = ml_dtypes.bfloat16
F = np.float32


@nki.jit
def repeats(x, y):
    out = nl.ndarray((11, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((2, 128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    acc = nl.load(x)
    other = nl.load(y)
    for _ in nl.sequential_range(5):
        acc[...] = nl.add(acc, 1.25)                   # in place: the cell's arrays from the second run on
        other[...] = nl.subtract(0.5, acc)             # reversed, another tile
    nl.store(out[0], value=acc)
    nl.store(out[1], value=other)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for t in (acc, other, acc, acc, other):            # one call site, the data array changing
        r[...] = nl.multiply(t, 3.0)
        nl.store(out[2], value=r)
    for z in (0.0, -0.0, -0.0, 0.0):                   # one template for both zeros: each keeps its sign
        r[...] = nl.multiply(other, z)
    nl.store(out[3], value=r)
    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.sequential_range(3):
        p[...] = nl.add(acc, 2.0)                      # a PSUM destination: its "unwritten" state too
    nl.store(out[4], value=nl.copy(p))
    for _ in nl.sequential_range(3):
        r[:, 0:32] = nl.maximum(r[:, 32:64], -0.25)    # part of the tile
    nl.store(out[5], value=r)
    b = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    for _ in nl.sequential_range(3):
        b[...] = nl.subtract(acc, 0.1)                 # a bf16 destination: rounded on write, never a cell
    nl.store(low[0], value=b)
    for _ in nl.sequential_range(3):
        b[...] = nl.add(b, 0.3)
    nl.store(low[1], value=b)
    for i in nl.sequential_range(3):
        t = nl.load(x)                                 # a new tile each time, and a new result tile
        t[...] = nl.add(t, 1.0)
        nl.store(out[6 + i], value=nl.minimum(t, 7))
    q = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    q[...] = nl.multiply(acc, 5.0)
    for d in (r, q, r):                                # one call site, the destination array changing
        d[...] = nl.add(other, 6.0)
        r[...] = nl.subtract(r, 1.0)
    nl.store(out[9], value=r)
    nl.store(out[10], value=q)
    return out, low


def _both(kernel, args, **launch):
    """With and without run cells: the same outputs or error, and the same events; the outcome."""
    outcomes, events = fast_and_plain(kernel, args, base, "USUAL_RUN_CELLS", **launch)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 10 and events[0] == events[1]
    return outcomes[0]


@pytest.mark.parametrize("precise", [True, False])
def test_run_cells_give_the_plain_path_values_and_events(rng, precise):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    x[::7, ::5] = np.nan
    out, low = _both(repeats.func, (x, y), options=SimOptions(precise_fp=precise))
    acc, other = x.copy(), y.copy()
    for _ in range(5):
        acc = acc + F(1.25)
        other = F(0.5) - acc
    r = other * F(3.0)
    expected = [acc, other, r, other * F(0.0), acc + F(2.0)]
    r = other * F(0.0)
    for _ in range(3):
        r[:, 0:32] = np.maximum(r[:, 32:64], F(-0.25))
    expected += [r] + [np.minimum(x + F(1.0), F(7))] * 3
    q = other + F(6.0)
    expected += [q - F(1.0), q]
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(expected).view(np.uint32))
    b = (acc - F(0.1)).astype(BF16)
    b1 = b
    for _ in range(3):
        b1 = (b1.astype(np.float32) + F(0.3)).astype(BF16)
    if precise:
        np.testing.assert_array_equal(low.view(np.uint16), np.stack([b, b1]).view(np.uint16))
    else:                                              # fp32 in between, rounded by the store
        np.testing.assert_allclose(low.astype(np.float32), np.stack([b, b1]).astype(np.float32), rtol=2e-2)


@nki.jit
def half_written(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r[:, 0:32] = nl.load(x[:, 0:32])
    for _ in nl.sequential_range(3):
        r[:, 0:32] = nl.add(r[:, 0:32], 1.0)
    s = nl.add(r, 1.0)                                 # half of it never written
    nl.store(out, value=s)
    return out


def test_an_uninitialised_read_gives_the_plain_path_error(rng):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    err = _both(half_written.func, (x,), options=SimOptions(uninitialized="raise"))
    assert isinstance(err, OpenNKIError) and "s = nl.add(r, 1.0)" in err.location.source
