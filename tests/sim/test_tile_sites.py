"""An unnamed on-chip tensor made at a call site that made one of the same region, shape and dtype before is
made from what that call decided (`program.MEMO_TILE_SITES`, `Program._made_again`): kernels give the values,
the errors (class, text, kernel line), the capacity errors, the spills and the listeners' events of the plain
path, where every tensor takes the whole of `new_tensor` and `Memory.new_storage`."""

import dataclasses

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from examples.tiled_matmul import tiled_matmul
from opennki.errors import OpenNKIError
from opennki.events import TensorAllocated
from opennki.listeners import Recorder
from opennki.sim import program
from tests.isa.helpers import rand
from tests.sim.outcomes import assert_same_outcome


def _both(monkeypatch, run):
    """`run()` with the site memo and without it: (memo, plain), each the result or the error. The memo run
    makes some tensors from the memo."""
    out, made = [], []
    made_again = program.Program._made_again

    def counted(prog, key, code):
        view = made_again(prog, key, code)
        if view is not None:
            made.append(view)
        return view

    monkeypatch.setattr(program.Program, "_made_again", counted)
    for memo in (True, False):
        monkeypatch.setattr(program, "MEMO_TILE_SITES", memo)
        try:
            out.append(run())
        except OpenNKIError as e:
            out.append(e)
        assert bool(made) == memo
        made.clear()
    return out


def _tiles_and_poison(a, w, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(3):
        lhs = nl.load(w[k * 128:(k + 1) * 128, :])
        rhs = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(lhs, rhs)
    total = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    total[...] = nl.copy(acc)
    for i in range(4):
        x = nl.load(a, dtype=nl.bfloat16 if i % 2 else nl.float32)      # one line, two dtypes
        part = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        ip, jf = nl.mgrid[0:128, 0:64]
        part[ip, jf] = nl.multiply(x, 2.0, mask=(jf < 32 + 8 * i))   # the rest stays poisoned (NaN)
        total[...] = nl.add(total, part)
    nl.store(out, value=total)
    nl.store(low, value=nl.copy(total, dtype=nl.bfloat16))
    return out, low


def test_values_and_poison_are_the_plain_paths(rng, monkeypatch):
    a, w, b = rand(rng, 128, 64), rand(rng, 384, 128), rand(rng, 384, 64)
    memo, plain = _both(monkeypatch, lambda: nki.jit(_tiles_and_poison)(a, w, b))
    assert_same_outcome(memo, plain)
    assert np.isnan(memo[0][:, 32:]).all() and not np.isnan(memo[0][:, :32]).any()


def test_tiled_matmul_gives_the_plain_paths_values_and_events(rng, monkeypatch):
    a, b = rand(rng, 256, 256), rand(rng, 256, 1024)

    def run():
        rec = Recorder()
        out = nki.jit(tiled_matmul).launch((a, b), listeners=[rec])
        first = min(e.storage_id for e in rec.of_type(TensorAllocated))
        allocated = [(e.storage_id - first, *[getattr(e, f.name) for f in dataclasses.fields(e)][1:])
                     for e in rec.of_type(TensorAllocated)]
        return out, allocated, [(e.opcode, e.location) for e in rec.events if hasattr(e, "opcode")]

    (memo, memo_allocated, memo_issued), (plain, plain_allocated, plain_issued) = _both(monkeypatch, run)
    assert_same_outcome(memo, plain)
    assert memo_allocated == plain_allocated and memo_issued == plain_issued
    np.testing.assert_allclose(memo, a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def _kept_tiles(a, n):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for i in range(n):
        tiles.append(nl.load(a))                    # more live SBUF tiles than SBUF holds: spills
    total = nl.zeros((128, 512), nl.float32, buffer=nl.sbuf)
    for t in tiles:
        total[...] = nl.add(total, t)
    nl.store(out, value=total)
    return out


def test_spills_are_the_plain_paths(rng, monkeypatch):
    a = rand(rng, 128, 512)

    def run():
        rec = Recorder()
        out = nki.jit(_kept_tiles).launch((a, 200), listeners=[rec])
        return out, [(e.opcode, e.location) for e in rec.events if hasattr(e, "opcode")]

    (memo, memo_issued), (plain, plain_issued) = _both(monkeypatch, run)
    assert_same_outcome(memo, plain)
    assert memo_issued == plain_issued and any(op == "sbuf_spill" for op, _ in memo_issued)
    np.testing.assert_allclose(memo, 200 * a, rtol=1e-5)


def _too_big_then_out_of_bounds(a, big):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in range(3):
        t = nl.ndarray((128, 64 if i < 2 or not big else 1 << 16), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.load(a)
        x = nl.load(a[:, i * 24:i * 24 + 40])         # out of bounds in the third iteration
        nl.store(out[:, 0:40], value=x)
    return out


@pytest.mark.parametrize("big", [True, False])
def test_errors_at_a_memoised_site_are_the_plain_paths(rng, monkeypatch, big):
    a = rand(rng, 128, 64)
    memo, plain = _both(monkeypatch, lambda: nki.jit(_too_big_then_out_of_bounds)(a, big))
    assert isinstance(plain, OpenNKIError)
    assert_same_outcome(memo, plain)


def _launch_recorded(kernel, args, outcomes, events):
    """Launch `kernel` with a Recorder: its output or error goes to `outcomes`, its events' fields (storage ids by
    first appearance, in field order) to `events`; the Recorder is returned."""
    from tests.sim.outcomes import by_first_appearance, event_fields

    rec = Recorder()
    try:
        outcomes.append(nki.jit(kernel).launch(args, listeners=[rec]))
    except OpenNKIError as e:
        outcomes.append(e)
    sid = by_first_appearance()
    events.append([event_fields(e, sid, field_order=True) for e in rec.events])
    return rec


def test_released_tiles_give_the_plain_paths_events(rng, monkeypatch):
    """`Program.freed` fills the TensorFreed record's dict itself: the events (field by field, in the order of
    the record's own __init__) are those of `TensorFreed(storage_id, kind)`, and the values and the error (an
    out-of-bounds load, at its kernel line) are the same."""
    from opennki.events import TensorFreed

    def plain_freed(prog, storage_id, kind):
        prog.emit(TensorFreed(storage_id, kind))

    a, b = rand(rng, 256, 256), rand(rng, 256, 1024)
    for args, kernel in (((a, b), tiled_matmul), ((rand(rng, 128, 512), 200), _kept_tiles),
                         ((rand(rng, 128, 64), False), _too_big_then_out_of_bounds)):
        outcomes, events = [], []
        for plain in (False, True):
            with monkeypatch.context() as m:
                if plain:
                    m.setattr(program.Program, "freed", plain_freed)
                rec = _launch_recorded(kernel, args, outcomes, events)
        assert_same_outcome(*outcomes)
        assert events[0] == events[1]
        assert any(ev[0] == "TensorFreed" for ev in events[0])
        if kernel is tiled_matmul:
            np.testing.assert_allclose(outcomes[0], a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
        else:
            assert isinstance(outcomes[0], OpenNKIError) == (kernel is _too_big_then_out_of_bounds)


def test_allocations_at_a_site_give_the_plain_paths_events(rng, monkeypatch):
    """`Program.allocated` fills a tensor made at a kernel call site in from the fields kept with the site
    (`SITE_ALLOCATIONS`): the events (field by field, in the record's field order), the values and the errors
    are those of the plain path, which reads every field from the storage, through spills and reloads, a
    relocation (test_fragmentation's kernel) and an out-of-bounds load; most allocations take the site's fields."""
    from opennki.events import TensorFreed
    from tests.samples_compat.test_fragmentation import UNIT, _fragmenting

    a, b = rand(rng, 256, 256), rand(rng, 256, 1024)
    cases = (((a, b), tiled_matmul), ((rand(rng, 128, 512), 200), _kept_tiles),
             ((rand(rng, 128, 64), False), _too_big_then_out_of_bounds),
             ((rng.standard_normal((2, 27 * UNIT)).astype(np.float32),), _fragmenting))
    fields_of = program.Program._allocation_fields
    for args, kernel in cases:
        outcomes, events, made = [], [], []
        for sites in (True, False):
            with monkeypatch.context() as m:
                if kernel is _fragmenting:
                    m.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
                m.setattr(program, "SITE_ALLOCATIONS", sites)
                m.setattr(program.Program, "_allocation_fields",
                          lambda prog, storage: made.append(storage.id) or fields_of(prog, storage))
                rec = _launch_recorded(kernel, args, outcomes, events)
            allocated = rec.of_type(TensorAllocated)
            if sites:       # the site's fields, made once per site, served the other allocations there
                assert len(made) < len(allocated)
            else:
                assert len(made) >= len(allocated)
            made.clear()
        assert_same_outcome(*outcomes)
        assert events[0] == events[1]
        if kernel is _kept_tiles:       # spilled tiles placed again (their reloads)
            assert any(getattr(e, "opcode", None) == "sbuf_reload" for e in rec.events)
        if kernel is _fragmenting:      # a relocation: a TensorFreed and a TensorAllocated of one storage
            moved = [e.storage_id for e in rec.events if isinstance(e, TensorFreed)]
            assert any(e.storage_id in moved for e in rec.of_type(TensorAllocated)[1:])
