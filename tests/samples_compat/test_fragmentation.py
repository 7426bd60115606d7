"""SBUF fragmentation, as in the official select-and-scatter kernel: when no free range is big enough but
the free bytes are, the allocator relocates live tensors, moving the fewest bytes (regression: "SBUF
overflow ... 50176 bytes per partition needed, 94024 ... free")."""

import gc

import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.events import MemoryKind, TensorAllocated, TensorFreed
from opennki.hw import get_target
from opennki.listeners import Recorder
from opennki.machine.memory import Allocator

UNIT = get_target("trn3").memory.sbuf_usable_bytes_per_partition // 20 // 4     # fp32 elements
SIZES = {"a": 6, "x1": 1, "b": 6, "x2": 1, "d": 5, "e": 8}                       # in UNITs


def _columns(name):
    start = sum(SIZES[k] for k in list(SIZES)[:list(SIZES).index(name)]) * UNIT
    return slice(start, start + SIZES[name] * UNIT)


def _fragmenting(x):
    """Loads fill SBUF as a(6) x1(1) b(6) x2(1) d(5) of 20 units; dropping a and b leaves gaps of 6, 6 and 1
    units, so e (8 units) fits only once x1 moves out of the way."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x[:, _columns("a")])
    x1 = nl.load(x[:, _columns("x1")])
    b = nl.load(x[:, _columns("b")])
    x2 = nl.load(x[:, _columns("x2")])
    d = nl.load(x[:, _columns("d")])
    nl.store(out[:, _columns("a")], value=a)
    nl.store(out[:, _columns("b")], value=b)
    del a, b
    e = nl.load(x[:, _columns("e")])
    for name, tile in (("x1", x1), ("x2", x2), ("d", d), ("e", e)):
        nl.store(out[:, _columns(name)], value=tile)
    return out


def test_a_fragmented_sbuf_relocates_the_smallest_live_tensor(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    x = rng.standard_normal((2, 27 * UNIT)).astype(np.float32)
    rec = Recorder()
    np.testing.assert_array_equal(nki.jit(_fragmenting).launch((x,), listeners=[rec]), x)
    sbuf = [e for e in rec.events if isinstance(e, (TensorAllocated, TensorFreed)) and e.kind is MemoryKind.SBUF]
    placed = {}
    moved = []
    for i, event in enumerate(sbuf):
        if isinstance(event, TensorAllocated):
            if event.storage_id in placed:
                assert isinstance(sbuf[i - 1], TensorFreed) and sbuf[i - 1].storage_id == event.storage_id
                moved.append((placed[event.storage_id], event))
            placed[event.storage_id] = event
    assert [(old.byte_start, new.byte_start, new.size_bytes) for old, new in moved] == \
        [(6 * UNIT * 4, 8 * UNIT * 4, UNIT * 4)]          # only x1 moved: e takes [0, 8) units, x1 [8, 9)


def _spans(allocator):
    return sorted((a, b) for a, (b, _) in allocator.live.items())


def test_relocation_plan_moves_the_fewest_bytes():
    alloc = Allocator(MemoryKind.SBUF, 700, 4, "test")
    starts = [alloc.allocate(n, name) for n, name in ((200, "big"), (40, "small"), (300, "mid"), (60, "x"))]
    alloc.free(starts[0])
    alloc.free(starts[2])
    # free: [0, 200), [240, 540), [600, 700); 340 bytes fit nowhere, but moving `small` (40) opens one
    assert alloc._find(0, 340) is None
    moves = alloc.plan_relocation(340, movable=lambda start: True)
    assert moves == [(200, 340)]
    alloc.move(moves)
    assert _spans(alloc) == [(340, 380), (540, 600)]
    assert alloc._find(0, 340) == 0
    assert alloc.plan_relocation(650, movable=lambda start: True) is None      # not enough free bytes
    assert alloc.plan_relocation(400, movable=lambda start: False) is None     # nothing may move


def test_relocation_keeps_psum_tiles_inside_their_banks():
    psum = Allocator(MemoryKind.PSUM, 4 * 2048, 4, "test", bank_bytes=2048)
    starts = [psum.allocate(1024, f"t{i}") for i in range(8)]
    for start in starts[::2]:
        psum.free(start)
    moves = psum.plan_relocation(2048, movable=lambda start: True)
    assert moves is not None
    psum.move(moves)
    spans = _spans(psum)
    assert all(a // 2048 == (b - 1) // 2048 for a, b in spans)
    assert psum._find(0, 2048) is not None


def _relocate_then_reuse(x):
    """z needs a relocation; once dropped, its memory must come back at once for w (regression: the failed
    first attempt's exception kept the allocating frames, and so z, alive until a garbage collection)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.load(x[:, _columns("a")])
    x1 = nl.load(x[:, _columns("x1")])
    b = nl.load(x[:, _columns("b")])
    x2 = nl.load(x[:, _columns("x2")])
    d = nl.load(x[:, _columns("d")])
    nl.store(out[:, _columns("a")], value=a)
    nl.store(out[:, _columns("b")], value=b)
    del a, b
    z = nl.zeros((x.shape[0], SIZES["e"] * UNIT), dtype=nl.float32)
    nl.store(out[:, _columns("e")], value=z)
    del z
    w = nl.load(x[:, _columns("e")])              # 8 units: fits only in the space z left
    nl.store(out[:, _columns("e")], value=w)
    for name, tile in (("x1", x1), ("x2", x2), ("d", d)):
        nl.store(out[:, _columns(name)], value=tile)
    return out


def test_a_relocated_tensor_is_freed_as_soon_as_it_is_dropped(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    x = rng.standard_normal((2, 27 * UNIT)).astype(np.float32)
    gc.disable()
    try:
        out = nki.jit(_relocate_then_reuse)(x)
    finally:
        gc.enable()
    np.testing.assert_array_equal(out, x)
