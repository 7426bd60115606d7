"""Result tiles of retargeted temporaries are reused at their call site (Program.spare): kernels give the
values and the errors of the plain path, where every result tile is a new tensor; a tile anything still
refers to is never reused."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from opennki.machine import memory
from opennki.sim import program
from tests.isa.helpers import rand
from tests.sim.outcomes import event_fields


def _exp_of(t):
    return nl.exp(t)                    # a helper's result feeding `buf[...] = ...`: a temporary too


def mixed(a, w, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    out2 = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    x = nl.load(a)
    acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    acc[...] = nl.multiply(x, 0.5)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    for i in nl.sequential_range(6):
        acc[...] = nl.add(acc, x)
        acc[...] = nl.maximum(acc, -1.0 + i)
        low[...] = nl.multiply(acc, 1.25, dtype=nl.bfloat16)    # the same line, another dtype each time
        acc[...] = _exp_of(nl.multiply(acc, 0.1))
    psum = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(2):
        lhs = nl.load(w[k * 128:(k + 1) * 128, :])
        rhs = nl.load(b[k * 128:(k + 1) * 128, :])
        psum += nisa.nc_matmul(lhs, rhs)
    acc[...] = nl.add(acc, psum)
    parts = nl.ndarray((2, 128, 32), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(2):
        parts[j] = nl.subtract(acc[:, j * 32:(j + 1) * 32], 0.25)
    nl.store(out[:, 0:32], value=parts[0])
    nl.store(out[:, 32:64], value=parts[1])
    nl.store(out2, value=low)
    return out, out2


def _storages_made(fn, *args):
    """fn(*args), and the number of Storage objects made meanwhile (a reused tile takes a new storage id, so
    the ids say nothing of it)."""
    made = []
    init = memory.Storage.__init__

    def counting(self, *a, **k):
        made.append(1)
        init(self, *a, **k)
    memory.Storage.__init__ = counting
    try:
        result = fn(*args)
    finally:
        memory.Storage.__init__ = init
    return result, len(made)


def test_reused_result_tiles_give_the_plain_path_values(rng, monkeypatch):
    a, w, b = rand(rng, 128, 64), rand(rng, 256, 128), rand(rng, 256, 64)
    kernel = nki.jit(mixed)
    fast, made_fast = _storages_made(kernel, a, w, b)
    monkeypatch.setattr(program, "REUSE_RESULT_TILES", False)
    plain, made_plain = _storages_made(kernel, a, w, b)
    assert made_fast < made_plain - 20               # the fast path did reuse tiles
    for got, want in zip(fast, plain):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    acc = np.float32(0.5) * a
    for i in range(6):
        acc = np.exp(np.float32(0.1) * np.maximum(acc + a, np.float32(-1.0 + i)))
    want = acc + (w.T.astype(np.float64) @ b).astype(np.float32) - np.float32(0.25)
    np.testing.assert_allclose(fast[0], want, rtol=1e-5, atol=1e-4)   # a 256-term fp32 matmul


class _Keeper:
    """A kernel-side object whose `obj[key] = value` keeps the value besides storing it into a tile."""

    def __init__(self, tile):
        self.tile, self.kept = tile, []

    def __setitem__(self, key, value):
        self.kept.append(value)
        self.tile[key] = value


def keeps_a_temporary(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    held = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    keeper = _Keeper(nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf))
    for i in range(3):
        keeper[...] = nl.add(x, float(i))          # the temporary is retargeted, and kept by `keeper`
        y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        y[...] = nl.add(x, 10.0)                   # another site: its own tiles
    nl.store(out, value=keeper.tile)
    first = keeper.kept[0]                         # never written: a retarget writes the destination
    assert all(t.storage is not first.storage for t in keeper.kept[1:])
    nl.store(held, value=nl.add(first, 0.0))       # reading it finds the poison the plain path finds
    return out, held


def test_a_result_tile_something_still_refers_to_is_never_reused(rng, monkeypatch):
    a = rand(rng, 128, 64)
    kernel = nki.jit(keeps_a_temporary)
    fast = kernel(a)
    monkeypatch.setattr(program, "REUSE_RESULT_TILES", False)
    plain = kernel(a)
    for got, want in zip(fast, plain):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(fast[0], a + np.float32(2.0))
    assert np.isnan(fast[1]).all()


def out_of_scope(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    for i in nl.sequential_range(3):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.add(x, 1.0)
        x[...] = nl.add(t, x)
    for i in nl.sequential_range(2):
        x[...] = nl.add(x, 1.0)                    # reused tiles from the same line, in a new loop
    x[...] = nl.add(t, 1.0)                        # `t` belongs to the finished first loop
    nl.store(out, value=x)
    return out


@pytest.mark.parametrize("reuse", [True, False])
def test_the_scope_rule_still_names_the_line_with_reused_tiles(rng, monkeypatch, reuse):
    monkeypatch.setattr(program, "REUSE_RESULT_TILES", reuse)
    with pytest.raises(KernelError) as exc:
        nki.jit(out_of_scope)(rand(rng, 128, 64))
    assert exc.value.code == "err_local_variable_used_out_of_scope"
    assert exc.value.location.lineno == out_of_scope.__code__.co_firstlineno + 9


def test_with_a_listener_reused_tiles_give_the_plain_path_events_storage_ids_included(rng, monkeypatch):
    """A reused tile takes the storage id a new tile would take, so the events are the plain path's field by
    field, storage ids included (counted from the launch's first id, as ids count up across launches)."""

    from opennki.kernel import run_kernel
    from opennki.listeners import Recorder

    def heard(*args):
        rec = Recorder()
        first = next(memory._ids)
        return run_kernel(mixed, args, listeners=(rec,)), [event_fields(e, lambda sid: sid - first) for e in rec.events]

    a, w, b = rand(rng, 128, 64), rand(rng, 256, 128), rand(rng, 256, 64)
    ((fast, _), fast_events), made_fast = _storages_made(heard, a, w, b)
    monkeypatch.setattr(program, "REUSE_RESULT_TILES", False)
    ((plain, _), plain_events), made_plain = _storages_made(heard, a, w, b)
    assert made_fast < made_plain - 20              # the fast path did reuse tiles, with a listener too
    assert len(fast_events) > 50 and fast_events == plain_events
    np.testing.assert_array_equal(fast, plain)



def _row_sum(t):
    return nisa.tensor_reduce(np.add, t, axis=1)    # its result tile is made at this line every call


def helper_in_and_after_a_loop(a):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    total = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.sequential_range(3):
        total[...] = _row_sum(x)        # the helper's result tile is made inside the loop ...
    total[...] = _row_sum(x)            # ... and again after it: a new tile there, with no loop scope
    nl.store(out, value=total)
    return out


def test_a_tile_reused_after_its_loop_has_no_loop_scope(rng):
    a = rand(rng, 128, 40)
    out = nki.jit(helper_in_and_after_a_loop)(a)
    np.testing.assert_allclose(out[:, 0], a.sum(axis=1), rtol=1e-5)
