"""The allocator: next-fit placement, release, PSUM bank rules, capacity errors."""

import gc


from opennki.errors import AllocationError
from opennki.events import MemoryKind
from opennki.hw import get_target
from opennki.machine.dtypes import float32
from opennki.machine.memory import Allocator, Memory, MemoryRegion
from tests.raises import raises_at


def test_next_fit_does_not_reuse_a_just_freed_range():
    a = Allocator(MemoryKind.SBUF, 1000, 4, "trn2")
    first = a.allocate(100, "a")
    a.free(first)
    second = a.allocate(100, "b")
    assert second == 100          # a fresh range, like a multi-buffering compiler
    assert a.allocate(100, "c") == 200


def test_next_fit_wraps_around_to_free_space():
    a = Allocator(MemoryKind.SBUF, 300, 4, "trn2")
    x = a.allocate(100, "x")
    a.allocate(100, "y")
    a.allocate(100, "z")
    a.free(x)
    assert a.allocate(100, "w") == 0


def test_capacity_error_names_numbers_and_target():
    a = Allocator(MemoryKind.SBUF, 256, 4, "trn1")
    a.allocate(200, "big")
    with raises_at(AllocationError) as exc:
        a.allocate(100, "more")
    msg = str(exc.value)
    assert "100 bytes per partition needed" in msg and "56 of 256" in msg and "trn1" in msg


def test_psum_small_tiles_never_straddle_a_bank():
    a = Allocator(MemoryKind.PSUM, 16384, 4, "trn2", bank_bytes=2048)
    starts = [a.allocate(1536, f"t{i}") for i in range(4)]
    for s in starts:
        assert s // 2048 == (s + 1535) // 2048
    big = a.allocate(4096, "two banks")
    assert big % 2048 == 0


def test_psum_holds_eight_bank_sized_tiles():
    a = Allocator(MemoryKind.PSUM, 16384, 4, "trn2", bank_bytes=2048)
    for i in range(8):
        a.allocate(2048, f"bank{i}")
    with raises_at(AllocationError):
        a.allocate(4, "ninth")


def test_storage_memory_is_released_when_unreachable():
    hw = get_target("trn2")
    hbm = Allocator(MemoryKind.HBM, hw.memory.hbm_bytes, 64, hw.name)
    mem = Memory(hw, hbm, precise=True, shape_only=False, program=())
    st = mem.new_storage(MemoryRegion.sbuf, float32, (128, 1024), "t", None)
    assert mem.sbuf.used_bytes == 4096
    del st
    gc.collect()
    assert mem.sbuf.used_bytes == 0


def test_storage_memory_is_released_once_when_it_dies_in_a_cycle_or_early():
    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, hw.memory.hbm_bytes, 64, hw.name), precise=True, shape_only=False,
                 program=())
    st = mem.new_storage(MemoryRegion.sbuf, float32, (128, 1024), "t", None)
    holder = [st]
    holder.append(holder)           # only a reference cycle keeps it: the collector frees it
    st.site = holder
    del st, holder
    assert mem.sbuf.used_bytes == 4096
    gc.collect()
    assert mem.sbuf.used_bytes == 0
    early = mem.new_storage(MemoryRegion.sbuf, float32, (128, 1024), "e", None)
    Memory.release_early(early)     # released now; its death later frees nothing more
    other = mem.new_storage(MemoryRegion.sbuf, float32, (128, 512), "o", None)
    del early
    gc.collect()
    assert mem.sbuf.used_bytes == 2048 and other.release.alive


def test_fresh_storage_is_poisoned():
    import numpy as np
    hw = get_target("trn3")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    st = mem.new_storage(MemoryRegion.psum, float32, (4, 4), "p", None)
    assert np.isnan(st.array).all()
