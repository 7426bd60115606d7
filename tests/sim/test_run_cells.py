"""tensor_scalar's and tensor_tensor's run cells (instructions/base.py `USUAL_RUN_CELLS`: an instruction made
from a plan's template repeats the last usual run of its template when the immediate and arrays are the same)
give the plain path's outputs bit for bit, its errors with their kernel lines, its uninitialised-read findings
and, with a listener, its events field by field: in-place chains, one call site alternating each array, zeros
of either sign (one template: its memo is keyed by value), [P, 1] column operands (one a view of the
destination), PSUM, bf16 and partial destinations, a PSUM operand, both operands one tile, tiles made anew in
a loop, precise-off storage (a bf16 tile held in an fp32 array) and uninitialised reads. Random data, results
against NumPy."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.errors import OpenNKIError
from opennki.instructions import base
from opennki.sim.options import SimOptions
from tests.sim.outcomes import assert_same_outcome, fast_and_plain, same_both_ways

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


@nki.jit
def tile_repeats(x, y):
    out = nl.ndarray((7, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    acc = nl.load(x)
    other = nl.load(y)
    for _ in nl.sequential_range(4):
        acc[...] = nl.add(acc, other)                  # in place
        other[...] = nl.subtract(other, acc)
    nl.store(out[0], value=acc)
    nl.store(out[1], value=other)
    r = nl.load(y)
    q = nl.load(x)
    total = nl.load(x)
    for t, u, d in ((acc, other, r), (acc, other, r), (other, other, r), (other, acc, r), (acc, acc, q),
                    (acc, other, q), (acc, other, r), (acc, other, r)):
        d[...] = nl.multiply(t, u)                     # one call site, each array changing
        total[...] = nl.add(total, d)
    r[...] = nl.maximum(r, q)
    nl.store(out[2], value=total)
    nl.store(out[3], value=q)
    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.sequential_range(3):
        p[...] = nl.add(acc, other)                    # a PSUM destination
        r[...] = nl.minimum(p, q)                      # a PSUM operand
    nl.store(out[4], value=r)
    for _ in nl.sequential_range(3):
        r[:, 0:32] = nl.subtract(r[:, 32:64], q[:, 0:32])    # part of the tile
    nl.store(out[5], value=r)
    b = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    for _ in nl.sequential_range(3):
        b[...] = nl.add(acc, other)                    # a bf16 destination: never a cell
        b[...] = nl.multiply(b, q)
    nl.store(low, value=b)
    for i in nl.sequential_range(2):
        t = nl.load(x)                                 # new tiles each time
        nl.store(out[6], value=nl.add(t, q))
    return out, low


@nki.jit
def column_repeats(x, y):
    out = nl.ndarray((6, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.load(x)
    other = nl.load(y)
    c1 = nl.load(y[:, 0:1])
    c2 = nl.load(x[:, 5:6])
    for _ in nl.sequential_range(4):
        acc[...] = nl.multiply(acc, c1)                # a [P, 1] column, in place
        other[...] = nl.subtract(c2, other)            # reversed
    nl.store(out[0], value=acc)
    nl.store(out[1], value=other)
    r = nl.load(x)
    for c in (c1, c1, c2, c2, c1):                     # one call site, the column changing
        r[...] = nl.add(r, c)
    nl.store(out[2], value=r)
    for _ in nl.sequential_range(3):
        r[...] = nl.multiply(r, r[:, 3:4])             # the column a view of the destination
    nl.store(out[3], value=r)
    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    for _ in nl.sequential_range(3):
        p[...] = nl.maximum(other, other[:, 1:2])      # a PSUM destination, a column of a bigger tile
        c2[...] = nl.multiply(c2, 0.5)                 # the column's values change between runs
        other[...] = nl.minimum(other, c2)
    nl.store(out[4], value=nl.copy(p))
    nl.store(out[5], value=other)
    return out


def _both(kernel, args, **launch):
    """With and without run cells: the same outputs or error, and the same events; the outcome."""
    return same_both_ways(kernel, args, base, "USUAL_RUN_CELLS", 10, **launch)


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


def test_array_immediates_give_the_scalar_immediates_values_and_events(rng):
    """vector.ARRAY_IMMEDIATES: a cell's immediate as a read-only 0-d fp32 array gives the bits the fp32 scalar
    gives (every operator, reversed, zeros of either sign, an int immediate; NaN and infinities in the data), the
    same events, and leaves the cell's immediate unchanged."""
    from opennki.instructions import vector
    x = rng.standard_normal((128, 64), dtype=np.float32) * F(1e3)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    x[::7, ::5] = np.nan
    x[3::11, 1::6] = np.inf
    y[5::13, ::7] = -np.inf
    outcomes, events = fast_and_plain(repeats.func, (x, y), vector, "ARRAY_IMMEDIATES")
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 10 and events[0] == events[1]
    out, low = outcomes[0]
    acc = x.copy()
    for _ in range(5):
        acc = acc + F(1.25)
    np.testing.assert_array_equal(out[0].view(np.uint32), acc.view(np.uint32))
    np.testing.assert_array_equal(out[1].view(np.uint32), (F(0.5) - acc).view(np.uint32))


@pytest.mark.parametrize("precise", [True, False])
def test_tile_operand_run_cells_give_the_plain_path_values_and_events(rng, precise):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    y[::11, ::3] = np.inf
    out, low = _both(tile_repeats.func, (x, y), options=SimOptions(precise_fp=precise))
    acc, other = x.copy(), y.copy()
    with np.errstate(all="ignore"):
        for _ in range(4):
            acc = acc + other
            other = other - acc
        r, q, total = y.copy(), x.copy(), x.copy()
        for t, u, d in ((acc, other, r), (acc, other, r), (other, other, r), (other, acc, r), (acc, acc, q),
                        (acc, other, q), (acc, other, r), (acc, other, r)):
            d[...] = t * u
            total = total + d
        r = np.maximum(r, q)
        expected = [acc, other, total, q]
        p = acc + other
        r = np.minimum(p, q)
        expected.append(r.copy())
        for _ in range(3):
            r[:, 0:32] = r[:, 32:64] - q[:, 0:32]
        expected += [r, x + q]
        b = ((acc + other).astype(BF16).astype(np.float32) * q).astype(BF16)
    assert np.isfinite(np.stack(expected)).mean() > 0.5
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(expected).view(np.uint32))
    if precise:
        np.testing.assert_array_equal(low.view(np.uint16), b.view(np.uint16))


@pytest.mark.parametrize("precise", [True, False])
def test_column_run_cells_give_the_plain_path_values_and_events(rng, precise):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    out = _both(column_repeats.func, (x, y), options=SimOptions(precise_fp=precise))
    acc, other, c1, c2 = x.copy(), y.copy(), y[:, 0:1].copy(), x[:, 5:6].copy()
    for _ in range(4):
        acc = acc * c1
        other = c2 - other
    expected = [acc, other]
    r = x.copy()
    for c in (c1, c1, c2, c2, c1):
        r = r + c
    expected.append(r)
    for _ in range(3):
        r = r * r[:, 3:4]
    expected.append(r)
    for _ in range(3):
        p = np.maximum(other, other[:, 1:2])
        c2 = c2 * F(0.5)
        other = np.minimum(other, c2)
    expected += [p, other]
    assert np.isfinite(np.stack(expected)).mean() > 0.9
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(expected).view(np.uint32))


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


def half_written_twice(x):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r[:, 0:32] = nl.load(x[:, 0:32])
    s = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    for _ in nl.sequential_range(3):
        s[...] = nl.add(r, 1.0)                        # half of r never written: a finding here
        s[...] = nl.multiply(r, s)
    for _ in nl.sequential_range(3):
        s[...] = nl.add(r, 1.0)                        # the same templates at other lines: findings here too
        s[...] = nl.multiply(r, s)
    nl.store(out[0], value=s)
    return out


def test_uninitialised_reads_found_on_every_line_as_on_the_plain_path(rng, monkeypatch):
    from opennki.listeners.findings import collecting
    x = rng.standard_normal((128, 64), dtype=np.float32)
    lines = []
    for cells in (True, False):
        monkeypatch.setattr(base, "USUAL_RUN_CELLS", cells)
        with collecting() as found:
            out = nki.jit(half_written_twice, uninitialized="raise")(x)
        lines.append(sorted(loc.source.strip() for f in found for loc in f.lines))
        np.testing.assert_array_equal(out[0][:, 0:32], x[:, 0:32] * (x[:, 0:32] + F(1.0)))
    assert lines[0] == lines[1] and len(lines[0]) == 8, lines


def _strided(x):
    out = nl2.ndarray((4, 128, 32), dtype=nl2.float32, buffer=nl2.shared_hbm)
    big = nl2.ndarray((128, 4, 32), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=big, src=x)
    v, w = big[:, 1:3, 0:16], big[:, 1:3, 16:32]      # [P, 2, 16]: flattened to [P, 32] by a copy
    d = nl2.ndarray((128, 32), dtype=nl2.float32, buffer=nl2.sbuf)
    for i in range(4):
        nisa2.tensor_tensor(dst=d, data1=v, data2=w, op=nl2.add)
        nisa2.tensor_scalar(dst=big, data=big, op0=nl2.multiply, operand0=1.5)
        nisa2.dma_copy(dst=out[i], src=d)
    return out


def test_a_cell_never_keeps_a_flattened_copy(rng, monkeypatch):
    """Operands that are not [P, F] are flattened by a copy: a cell holding it would add stale values. Every
    tensor_tensor here shares one cell (as a template's instructions do: the class's, for one built by keywords;
    its template's, for those the new generation's planned front door builds after it, isa `PLANNED_DOORS`)."""
    from opennki.instructions.vector import TensorTensor
    from opennki.kernels.base import run_kernel
    x = rng.standard_normal((128, 4, 32), dtype=np.float32)
    monkeypatch.setattr(TensorTensor, "_usual", [None])
    out = run_kernel(_strided, (x,), target="trn2")
    expected = []
    big = x.copy()
    for _ in range(4):
        expected.append((big[:, 1:3, 0:16] + big[:, 1:3, 16:32]).reshape(128, 32))
        big = big * F(1.5)
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(expected).view(np.uint32))
