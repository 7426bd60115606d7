"""Machine layer: memory regions, tensor storage and the SBUF/PSUM/HBM allocators.

Imports events (for MemoryKind), errors and the dtype module. A `Storage` is one allocation: a NumPy array
holding its elements (None in shape-only mode), its logical shape, dtype and where it lives. On chip every
storage owns the same byte range in each of its partitions, as NKI places tiles; that range comes from an
`Allocator` and is released as soon as the storage becomes unreachable (a weak-reference callback,
`_Release`), which is when the kernel drops the last tensor or view that refers to it.

Allocation is next-fit: a new tensor goes after the most recent one, wrapping around. Like a compiler that
multi-buffers, this keeps a tensor allocated inside a loop at a different address in consecutive iterations,
so the cost model sees no false dependency between them, while a tensor allocated once and rewritten keeps
its address and does serialise.

Fragmentation: when no free range is big enough although the free bytes are, live on-chip tensors are
relocated to open one (`Memory.place`), as a compiler that knows all lifetimes would have placed them
differently from the start. A storage's elements live in its own NumPy array, so a move never changes a
value; only addresses (and so the event stream) change. The plan moves the fewest bytes: it picks the
window whose live tensors are smallest in total and fit elsewhere. Each moved tensor is reported as a
`TensorFreed` + `TensorAllocated` pair at its new address, so the cost model retires the old range (later
tensors there wait for the moved tensor's last use) and sees the new one like any reuse of memory; what it
does not see is a copy, since a compiler would never have put the tensor at the old place.

Automatic allocation never reports SBUF or PSUM full while something can be spilled (DESIGN decision 9).
PSUM's eight banks are what a compiler juggles most, and it spills PSUM tiles to SBUF when they are
oversubscribed (the official attention tutorials keep more score
tiles live than PSUM holds). When freeing and relocating do not make room, the earliest placed PSUM tensors
that the instruction does not touch give their range back and get a new one when next touched (their
values, in NumPy, are untouched). The copies a compiler issues for this are reported to listeners (the
`emit` object's `spilled` / `reloaded`, which the simulator turns into `psum_spill` / `psum_reload`
instruction events), so the cost model charges them and a profile shows where PSUM was oversubscribed; the
SBUF staging space of a spilled tile is not counted against SBUF. What cannot be placed even so (a PSUM tile
larger than PSUM, or more PSUM operands of one instruction than PSUM holds) raises, as SBUF overflows do.

SBUF spills to HBM the same way (official tutorial kernels such as the fused Mamba one keep more live SBUF
data than fits; the compiler spills, and the tutorial's profile shows the spill DMAs): the victim is the
SBUF tensor an instruction touched least recently among those the instruction does not touch, its copy out
and back in are DMA instruction events (`sbuf_spill` / `sbuf_reload`, through a staging range of HBM
reserved at the tensor's first spill), which the cost model charges and the profile's hints name. Directly
placed tensors (`address=`, `nki.compiler` allocators) are never moved or spilled: exceeding SBUF with them
raises the capacity error at the kernel line.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import math
import sys
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from opennki.errors import AllocationError, SourceLocation, ShapeError
from opennki.events import MemoryKind
from opennki.machine.dtypes import DataType, poison_value
from opennki.machine.physical import PhysicalImage, can_alias

def _count_of_a_local() -> int:
    probe = object()                    # held by this variable alone
    return sys.getrefcount(probe)


# The fast paths that ask whether anything else refers to an object (the tile and HBM array stores, the reuse of
# result tiles) compare sys.getrefcount with what this interpreter counts for an object that a variable alone
# holds (2 on CPython 3.10-3.13: the variable and getrefcount's argument). Python 3.14 documents that some loads of
# locals no longer count, and a lower count would hide a holder; so the count is measured here, in the same code
# shape, and where it is not the expected one (or the interpreter is not CPython) those fast paths are off
# (`COUNTS_AS_EXPECTED`): the plain path is always right.
CPYTHON = sys.implementation.name == "cpython"
COUNT_OF_A_LOCAL = _count_of_a_local()
COUNTS_AS_EXPECTED = CPYTHON and COUNT_OF_A_LOCAL == 2


class ArrayStore:
    """Flat NumPy arrays kept for later arrays of the same dtype and size, so that these do not take fresh pages
    from the system: glibc's malloc gives a freed block of a few hundred KiB or more back to the system (mmap, or
    a heap trimmed and grown back), and each page of a new block is a fault that zeroes 4 KiB. An array is handed
    out again (`take`) only when CPython's reference count says nothing else refers to it any more, and whoever
    takes it overwrites it whole, as a new array is, so no one sees another's values. Two policies, as the owner
    knows its arrays: `per_kind`, the most kept of one (dtype, size), the oldest of its kind making room (None: no
    such cap); `keep_held`, whether an array that `take` finds still referred to stays for a later `take` (True)
    or is dropped, left to whoever holds it (False). Past `limit_bytes` in all, the oldest array of the kind given
    least recently makes room for a newer one. Thread-safe (programs of a launch may run as threads): `keep`,
    which an owner's finalizer calls (a garbage collection may run one in the middle of this class's code, in the
    same thread), does not wait for the lock: it drops the array when the lock is held, so it never deadlocks nor
    meets a half-made change."""

    def __init__(self, limit_bytes: int, per_kind: int | None = None, keep_held: bool = True):
        self.limit_bytes = limit_bytes
        self.per_kind = per_kind
        self.keep_held = keep_held
        self.nbytes = 0                         # the bytes kept
        # (dtype, size) -> its arrays, oldest first; the kinds given least recently first
        self._kept: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def take(self, dtype: np.dtype, size: int) -> np.ndarray | None:
        """A kept flat array of `size` elements of `dtype` that nothing else refers to, the oldest first (the most
        recently given are the likeliest still held: a deferred step's view of its dead tile), its elements
        undefined (the caller overwrites them all); None if there is none."""
        lock = self._lock
        lock.acquire()                  # (`with` costs twice the calls: some 190 ns against 80, timeit)
        try:
            kept = self._kept.get((dtype, size))
            if kept:
                i = 0
                for arr in kept:
                    # its list, this variable and getrefcount's argument hold it, nothing else: a view of it that
                    # a deferred step, an earlier launch's tensor or the caller held is gone by now
                    if sys.getrefcount(arr) == COUNT_OF_A_LOCAL + 1:
                        del kept[i]
                        self.nbytes -= arr.nbytes
                        if i and not self.keep_held:
                            self._drop(kept, i)
                        return arr
                    i += 1
                if not self.keep_held:
                    self._drop(kept, i)
        finally:
            lock.release()
        return None

    def _drop(self, kept: list, n: int) -> None:
        """Drop the first `n` of `kept`, which `take` found still held: left to their holders."""
        self.nbytes -= sum(arr.nbytes for arr in kept[:n])
        del kept[:n]

    def keep(self, arr: np.ndarray) -> None:
        """Keep `arr`, a flat array of its own memory that its owner no longer needs (`take` hands it out only
        once nothing else refers to it), within the limits (class docstring)."""
        nbytes = arr.nbytes
        if nbytes > self.limit_bytes or not self._lock.acquire(False):     # (not waiting; by keyword: 2.5x)
            return
        try:
            kinds = self._kept
            kind = (arr.dtype, arr.size)
            kept = kinds.pop(kind, None)        # given again: the kind goes last
            if kept is None:
                kept = []
                if len(kinds) >= 64:            # (kinds none of whose arrays is kept any more go)
                    self._kept = kinds = {k: v for k, v in kinds.items() if v}
            elif len(kept) == self.per_kind:
                self.nbytes -= kept.pop(0).nbytes
            kinds[kind] = kept
            while self.nbytes + nbytes > self.limit_bytes:
                for oldest in kinds.values():
                    if oldest:
                        self.nbytes -= oldest.pop(0).nbytes
                        break
            kept.append(arr)
            self.nbytes += nbytes
        finally:
            self._lock.release()


# A dead on-chip tile's array is made again for the next tile of its storage dtype and size (`TILE_ARRAYS`): a
# loop that makes and drops a tile of a few hundred KiB in every iteration would otherwise take fresh pages from
# the system for every tile (ArrayStore; the fp32 2048^3 tiled matmul's [128, 512] loads, 256 KiB: some 7,700
# faults a run). A tile of TILE_ARRAY_BYTES or more (`Storage._own` makes it a `_TileStorage`) gives its array
# here when it dies, and `new_array` / `Storage.fresh_array` take one that nothing else refers to any more (a
# deferred step's NumPy view of a dead tile often still holds its array when the tile dies: the array stays for
# a later tile) before asking NumPy for a new one; it is then overwritten whole (poison, fill, or the write that
# covers it). False: every array is a new one (the plain path, which tests compare against).
RECYCLE_TILE_ARRAYS = COUNTS_AS_EXPECTED
TILE_ARRAY_BYTES = 64 << 10         # measured: at 128 KiB, the churn of the 64 KiB tiles left 1,300 faults a run
TILE_ARRAYS = ArrayStore(limit_bytes=16 << 20, per_kind=8, keep_held=True)


def empty_array(dtype: np.dtype, size: int) -> np.ndarray:
    """`np.empty(size, dtype)` for a new tile: a dead tile's array (TILE_ARRAYS) if one is free."""
    if RECYCLE_TILE_ARRAYS and TILE_ARRAYS.nbytes:
        arr = TILE_ARRAYS.take(dtype, size)
        if arr is not None:
            return arr
    return np.empty(size, dtype)

_HBM = MemoryKind.HBM      # looking an enum member up on its class is slow in hot paths (Python 3.11)
_bisect_left, _bisect_right = bisect.bisect_left, bisect.bisect_right     # (every placement and release)


class MemoryRegion(enum.Enum):
    """Where a tensor lives, as kernels name it (`nl.sbuf`, `nl.psum`, `nl.hbm`, `nl.shared_hbm`...).

    The new generation's `nl.MemoryRegion` is this enum; the legacy generation's buffer objects are its
    members too. `nl.hbm` is the same member as `nl.private_hbm`.
    """

    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    @property
    def kind(self) -> MemoryKind:
        return _REGION_KIND[self._value_]

    def __repr__(self) -> str:
        return f"nl.{self.name}"


# keyed by value: every allocation asks, and hashing an Enum member runs Python code
_REGION_KIND = {MemoryRegion.sbuf.value: MemoryKind.SBUF, MemoryRegion.psum.value: MemoryKind.PSUM,
                MemoryRegion.private_hbm.value: MemoryKind.HBM, MemoryRegion.shared_hbm.value: MemoryKind.HBM}

_ids = itertools.count(1)
# the next storage id (`Storage.id`): a reused result tile takes one as a new tile would (Program.new_tensor)
next_storage_id = _ids.__next__


@dataclass(slots=True)
class Placement:
    """Where a storage sits: first partition and byte address (per partition on chip, linear in HBM).
    Mutable: a relocated storage gets a new address, and views reinterpreting it (`Storage.base`) share its
    Placement object."""

    partition: int
    address: int


class Storage:
    """One allocation. See the module docstring.

    Attributes:
        id: unique id (events refer to storages by it).
        region: the MemoryRegion it was allocated in.
        dtype: element type.
        shape: logical shape at creation (dim 0 is the partition dim on chip).
        array: flat NumPy array of all elements in row-major order, or None in shape-only mode. A poisoned
            storage gets it on first use (`poison_later`): a result tile that is retargeted is never
            touched, and one whose first write covers it whole is never poisoned (Machine.write).
        placement: partition and byte address from the allocator.
        name: the tensor's name (kernel argument name, `name=` of `nl.ndarray`, or generated).
        location: the kernel line that created it.
        is_kernel_arg: True for tensors that wrap the caller's arrays.
        read_only: a kernel argument wrapping a read-only NumPy array: instructions may not write it.
        declared: True for tensors the kernel declared (`nl.ndarray`, `nl.zeros`...); False for the result
            tiles of API calls, which the legacy compiler places (and moves) as their consumers need.
        written: set by the first write (used to copy modified inputs back to the caller).
        program: the SPMD program that owns it (None for shared HBM).
        physical: for a directly placed on-chip tensor, the PhysicalImage through which it shares bytes with
            the other directly placed tensors overlapping it (machine/physical.py); None otherwise.
        initialized: with `uninitialized="raise"`, a flat bool array: which elements were written (reads of
            the others are recorded by `Machine.read`); None when not tracked (kernel arguments, tensors with
            an initial value, directly placed tensors, which start with the bytes earlier tensors left).
        arrays: the NumPy arrays of views of a part of it, per layout (`TensorView.np_view`), made when first asked.
    """

    __slots__ = ("id", "region", "kind", "dtype", "shape", "_array", "_poison", "placement", "name", "location",
                 "is_kernel_arg", "written", "program", "matmul_written", "unwritten", "base", "release",
                 "declared", "physical", "spilled", "read_only", "initialized", "last_touch", "spill_address", "site",
                 "direct", "nbytes", "scope", "arrays", "__weakref__")

    def __init__(self, region: MemoryRegion, dtype: DataType, shape: tuple[int, ...], array,
                 placement: Placement, name: str, location: SourceLocation | None, program=None):
        self.id = next(_ids)
        self.region = region
        self.kind = _REGION_KIND[region._value_]     # region.kind, without the property call
        self.dtype = dtype
        self.shape = shape
        self._array = array
        self._poison = None          # (dtype, size, precise, storage dtype) until the poisoned array is made
        self.placement = placement
        self.name = name
        self.location = location
        self.is_kernel_arg = False
        self.read_only = False
        self.written = False
        self.program = program
        self.matmul_written = None   # PSUM only: per-element "last written by nc_matmul" flags
        self.unwritten = None        # PSUM only, once written: per-element "not written since declared" flags
        self.base = None             # for reinterpreting views (`t.view(dtype)`): the storage owning the memory
        self.release = None          # once placed: the _Release that returns its address range to the allocator
        self.declared = False        # created by a tensor declaration (`nl.ndarray`...), not as an API result
        self.physical = None         # directly placed on chip: the PhysicalImage whose bytes it shares
        self.spilled = False         # on chip: its range was given back under pressure (Memory._spill)
        self.last_touch = 0          # on chip: when an instruction last touched it (SBUF spills the least recent)
        self.spill_address = None    # SBUF: the HBM address its spilled copy goes to (reserved at its first spill)
        self.initialized = None      # uninitialized="raise": per-element "written" flags (None: not tracked)
        self.site = None             # its kernel call site (Program.new_tensor): spare tiles, allocation fields
        self.direct = False          # placed by the kernel (`address=`, nki.compiler allocation), not the allocator
        self.nbytes = None           # its footprint (`Memory.footprint`), once new_storage computed it
        self.scope = None            # the language layer's loop the tensor is local to (_src/rules.record_scope)
        self.arrays = None           # layout -> the NumPy array of its views of part of this storage (np_view)

    @property
    def array(self):
        arr = self._array
        poison = self._poison
        if arr is None and poison is not None:
            arr = self._array = self._own(new_array(poison[0], poison[1], poison[2]))
            self._poison = None
        return arr

    @array.setter
    def array(self, value) -> None:
        self._array = value
        self._poison = None
        self.arrays = None

    def poison_later(self, precise: bool) -> None:
        """Make the poisoned array only when something first reads or partly writes it."""
        dtype = self.dtype
        self._poison = (dtype, math.prod(self.shape), precise, dtype.storage_dtype(precise))

    def fresh_array(self):
        """For a write covering every element: the array, made without poisoning if not made yet."""
        poison = self._poison
        if self._array is None and poison is not None:
            self._array = self._own(empty_array(poison[3], poison[1]))
            self._poison = None
        return self._array

    def _own(self, arr):
        """`arr`, just made for this storage: an on-chip tile of TILE_ARRAY_BYTES or more becomes a
        _TileStorage, which gives it to TILE_ARRAYS when it dies."""
        if arr.nbytes >= TILE_ARRAY_BYTES and RECYCLE_TILE_ARRAYS and self.kind is not _HBM and not self.direct:
            self.__class__ = _TileStorage
        return arr

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.kind.is_on_chip else 1

    @property
    def row_elems(self) -> int:
        """Elements per partition on chip; all elements in HBM."""
        return math.prod(self.shape[1:]) if self.kind.is_on_chip else self.size

    def __repr__(self) -> str:
        return f"<{self.region.name} {self.name} {self.shape} {self.dtype}>"


class _TileStorage(Storage):
    """A Storage whose on-chip array of TILE_ARRAY_BYTES or more (`Storage._own`) goes to TILE_ARRAYS when it
    dies, if nothing else refers to the array."""

    __slots__ = ()

    def __del__(self):
        arr = self._array
        if arr is not None:
            self._array = None
            self.arrays = None          # its views' NumPy arrays refer to the array
            # an array of its own memory (not a view of another), which may still be referred to (by a
            # deferred step's view, say): TILE_ARRAYS takes it again only once nothing else does
            if arr.base is None and arr.ndim == 1 and arr.flags.c_contiguous and arr.flags.writeable:
                TILE_ARRAYS.keep(arr)


def new_array(dtype: DataType, size: int, precise: bool, fill=None) -> np.ndarray:
    """A flat backing array, poisoned (NaN / 4) unless `fill` is given."""
    storage_dtype = dtype.storage_dtype(precise)
    arr = empty_array(storage_dtype, size)
    if fill is None:
        arr.fill(poison_value(dtype))       # NaN or a small integer: fits every storage type
        return arr
    with np.errstate(invalid="ignore", over="ignore"):
        arr.fill(fill)
    return arr


class Allocator:
    """Next-fit allocator of byte ranges shared by all partitions of SBUF or PSUM (or a linear HBM).

    Args:
        kind: the memory it manages.
        capacity_bytes: usable bytes per partition (on chip) or in total (HBM).
        alignment: address alignment in bytes.
        bank_bytes: PSUM only: an allocation no larger than a bank never straddles a bank boundary, and a
            larger one starts on a bank boundary (matmul results must sit in one bank).
        target: target name, for error messages.
    """

    def __init__(self, kind: MemoryKind, capacity_bytes: int, alignment: int, target: str,
                 bank_bytes: int | None = None):
        self.kind = kind
        self.capacity_bytes = capacity_bytes
        self.alignment = alignment
        self.bank_bytes = bank_bytes
        self.target = target
        self.live: dict[int, tuple[int, str]] = {}   # start -> (end, name)
        self._starts: list[int] = []                  # the starts of `live`, in order
        self.cursor = 0
        self.peak_bytes = 0
        self._used = 0                                # the sum of the live ranges, kept as they change
        self._aligned: dict[int, int] = {}            # footprint -> its size rounded up to the alignment (`take`)

    @property
    def used_bytes(self) -> int:
        return self._used

    def _fit(self, candidate: int, size: int) -> int:
        if self.bank_bytes:
            bank = self.bank_bytes
            if size <= bank:
                if candidate // bank != (candidate + size - 1) // bank:
                    candidate = (candidate // bank + 1) * bank
            elif candidate % bank:
                candidate = (candidate // bank + 1) * bank
        return candidate

    def _find(self, start: int, size: int, spans=None) -> int | None:
        """The first start at or after `start` where `size` bytes fit between the occupied `spans` ((start,
        end) pairs; the live ranges by default)."""
        candidate = self._fit(-(-start // self.alignment) * self.alignment, size)
        if spans is None:
            return self._find_live(candidate, size)
        spans = sorted(spans)
        moved = True
        while moved:
            moved = False
            if candidate + size > self.capacity_bytes:
                return None
            for a, b in spans:
                if a < candidate + size and candidate < b:
                    candidate = self._fit(-(-b // self.alignment) * self.alignment, size)
                    moved = True
                    break
        return candidate

    def _find_live(self, candidate: int, size: int) -> int | None:
        """`_find` among the live ranges, by bisection: they never overlap, so their ends are in the order
        of their starts and the first range ending after the candidate's start is the first (by start) that
        can overlap it, the one the scan of `_find` moves past."""
        starts, live = self._starts, self.live
        while candidate + size <= self.capacity_bytes:
            i = bisect.bisect_right(starts, candidate) - 1
            if i < 0 or live[starts[i]][0] <= candidate:
                i += 1
            if i == len(starts) or starts[i] >= candidate + size:
                return candidate
            end = live[starts[i]][0]
            candidate = self._fit(-(-end // self.alignment) * self.alignment, size)
        return None

    def plan_relocation(self, nbytes: int, movable) -> list[tuple[int, int]] | None:
        """Moves `(old start, new start)` of live ranges that open a free range for `nbytes`, moving the
        fewest bytes; None when the free bytes do not suffice or no plan exists. `movable(start)` says
        whether the range at `start` may move."""
        size = -(-max(nbytes, 1) // self.alignment) * self.alignment
        if self.capacity_bytes - self._used < size:
            return None
        spans = sorted((a, b) for a, (b, _) in self.live.items())
        best_cost, best = None, None
        for start in sorted({0, *(a for a, _ in spans), *(b for _, b in spans)}):
            window = self._fit(-(-start // self.alignment) * self.alignment, size)
            if window + size > self.capacity_bytes:
                continue
            victims = [(a, b) for a, b in spans if a < window + size and window < b]
            cost = sum(b - a for a, b in victims)
            if best_cost is not None and cost >= best_cost or not all(movable(a) for a, _ in victims):
                continue
            occupied = [span for span in spans if span not in victims] + [(window, window + size)]
            moves = []
            for a, b in sorted(victims, key=lambda span: span[0] - span[1]):     # biggest first
                new = self._find(0, b - a, occupied)
                if new is None:
                    break
                occupied.append((new, new + b - a))
                moves.append((a, new))
            else:
                best_cost, best = cost, moves
        return best

    def move(self, moves: list[tuple[int, int]]) -> None:
        """Apply a relocation plan (`plan_relocation`)."""
        spans = [(old, new, self.live.pop(old)) for old, new in moves]
        for old, new, (end, name) in spans:
            self.live[new] = (new + end - old, name)
        self._starts = sorted(self.live)

    def allocate(self, nbytes: int, name: str, location: SourceLocation | None = None) -> int:
        """The start of a new range of `nbytes` for tensor `name` (created at `location`, which an overflow
        error names)."""
        start = self.take(nbytes, name)
        if start is None:
            self.overflow(nbytes, name, location)
        return start

    def take(self, nbytes: int, name: str) -> int | None:
        """`allocate` without the error: the start of a new range of `nbytes`, or None when none fits (every
        placement asks, and most fit at the cursor, so the live-range search is inlined for that case). The
        cursor is always aligned (a range's start and size are), and a footprint's aligned size is looked up
        (`_aligned`): a kernel's tiles have few sizes."""
        size = self._aligned.get(nbytes)
        if size is None:
            alignment = self.alignment
            size = self._aligned[nbytes] = -(-(nbytes if nbytes > 0 else 1) // alignment) * alignment
        candidate = self.cursor
        if self.bank_bytes:
            candidate = self._fit(candidate, size)
        end = candidate + size
        starts = self._starts
        i = _bisect_right(starts, candidate)
        if end > self.capacity_bytes or (i and self.live[starts[i - 1]][0] > candidate) or \
                (i < len(starts) and starts[i] < end):
            start = self._find_live(candidate, size)      # the cursor's range is taken: search from it
            if start is None:
                start = self._find(0, size)
            if start is None:
                return None
            i = _bisect_right(starts, start)
            end = start + size
        else:
            start = candidate
        self.live[start] = (end, name)
        starts.insert(i, start)
        self.cursor = end
        used = self._used = self._used + size
        if used > self.peak_bytes:
            self.peak_bytes = used
        return start

    def overflow(self, nbytes: int, name: str, location: SourceLocation | None = None):
        """Raise the capacity error for a tensor `name` of `nbytes` that does not fit."""
        unit = "per partition " if self.kind.is_on_chip else ""
        if location is not None:
            name = f"{name} (created at {location})"
        raise AllocationError(
            f"{self.kind.name} overflow while allocating {name!r}: {nbytes} bytes {unit}needed, "
            f"{self.capacity_bytes - self.used_bytes} of {self.capacity_bytes} bytes {unit}free "
            f"({len(self.live)} live tensors) on target {self.target}",
            expected=f"<= {self.capacity_bytes - self.used_bytes} bytes {unit}".strip(),
            got=f"{nbytes} bytes",
            hint="allocate big tensors once outside loops, use smaller tiles, or let temporaries go out "
                 "of scope (opennki frees a tensor when the kernel drops its last reference)")

    def free(self, start: int) -> None:
        span = self.live.pop(start, None)
        if span is not None:
            self._used -= span[0] - start
            starts = self._starts
            del starts[_bisect_left(starts, start)]


class Memory:
    """The memories of one SPMD program: its own SBUF and PSUM allocators, plus the launch's shared HBM.

    `new_storage` creates, poisons and places a tensor; its _Release frees the range when it dies.
    """

    def __init__(self, hw, hbm: Allocator, precise: bool, shape_only: bool, program, listeners_emit=None,
                 uninitialized: str = "nan"):
        mem = hw.memory
        # uninitialized="zero": fresh memory holds zeros; "raise": which elements were written is tracked
        self.fresh_fill = 0 if uninitialized == "zero" else None
        self.track_initialized = uninitialized == "raise"
        self.hw = hw
        self.sbuf = Allocator(MemoryKind.SBUF, mem.sbuf_usable_bytes_per_partition, hw.tiles.sbuf_min_align,
                              hw.name)
        self.psum = Allocator(MemoryKind.PSUM, mem.psum_bytes_per_partition, hw.tiles.psum_min_align,
                              hw.name, bank_bytes=mem.psum_bank_bytes)
        self.hbm = hbm
        self.precise = precise
        self.shape_only = shape_only
        self.program = program
        self.emit = listeners_emit
        # by kind value: hashing an Enum member runs Python code, and every placement looks its allocator up
        self._allocators = {MemoryKind.SBUF.value: self.sbuf, MemoryKind.PSUM.value: self.psum,
                            MemoryKind.HBM.value: hbm}
        # the claims not fired or detached yet (_Release), by id, in the order they were made
        self._releases: dict[int, _Release] = {}
        self._images: dict[str, PhysicalImage] = {}       # kind -> bytes shared by directly placed tensors
        self._sizes: dict[tuple, int] = {}       # (kind value, shape, item size) -> footprint (`_size_of`)

    def allocator(self, kind: MemoryKind) -> Allocator:
        return self._allocators[kind._value_]

    def new_storage(self, region: MemoryRegion, dtype: DataType, shape: tuple[int, ...], name: str,
                    location: SourceLocation | None, fill=None, array=None,
                    address: tuple[int, int] | None = None, lazy: bool = False) -> Storage:
        """Create a storage (poisoned unless `fill`). With `lazy`, an on-chip storage gets its address only
        when an instruction first touches it (`place`), as a compiler allocates by liveness: in
        `t = nl.ndarray(...)` inside a loop, the previous iteration's `t` is released before the new one is
        used, so both never have to fit at once."""
        kind = _REGION_KIND[region._value_]          # region.kind, without the property call
        shape = tuple(map(int, shape))
        key = (kind._value_, shape, dtype.itemsize)
        nbytes = self._sizes.get(key)
        if nbytes is None:
            nbytes = self._size_of(kind, dtype, shape, name, location)
            self._sizes[key] = nbytes
        allocator = self._allocators[kind._value_]
        on_chip = kind is not _HBM
        fresh = array is None and fill is None
        if fresh and self.fresh_fill is not None:
            fill = self.fresh_fill                      # uninitialized="zero"
        poison = array is None and not self.shape_only and fill is None
        filled = array is None and not self.shape_only and fill is not None
        if filled:
            array = new_array(dtype, math.prod(shape), self.precise, fill)
        program = self.program if on_chip or region is MemoryRegion.private_hbm else None
        storage = Storage(region, dtype, shape, array, None, name, location, program)
        storage.nbytes = nbytes
        if filled and address is None:
            storage._own(array)         # (`_own` decides; a directly placed one is not `direct` yet here)
        if poison:
            storage.poison_later(self.precise)
        if fresh and self.track_initialized and not self.shape_only and address is None:
            storage.initialized = np.zeros(math.prod(shape), bool)
        if address is not None:
            partition, start = address
            if on_chip and int(start) + nbytes > allocator.capacity_bytes:
                raise AllocationError(
                    f"{kind.name} overflow: {name!r} placed at byte {int(start)} needs {nbytes} bytes per "
                    f"partition, ending at {int(start) + nbytes}, past the {allocator.capacity_bytes} usable "
                    f"bytes per partition on target {allocator.target}",
                    expected=f"an address <= {allocator.capacity_bytes - nbytes}", got=int(start),
                    location=location, hint="directly placed tensors are never spilled: choose addresses that "
                                            "fit, or let the compiler place the tensor (no address=)")
            storage.placement = Placement(int(partition), int(start))
            storage.direct = True
            if on_chip and can_alias(storage):
                storage.physical = self._images.get(kind.value) or \
                    self._images.setdefault(kind.value, PhysicalImage(kind, self.hw.memory.partitions))
                storage.physical.join(storage)
            if self.emit is not None:
                self.emit.allocated(storage, self.footprint(storage), direct=True)
        elif not (lazy and on_chip):
            self.place(storage)
        return storage

    def _size_of(self, kind: MemoryKind, dtype: DataType, shape: tuple[int, ...], name: str, location) -> int:
        """The footprint of a new tensor of `shape` (`footprint`), after the rules on its shape and size; a
        pure function of the kind, shape and element size, so `new_storage` asks once per such triple."""
        if any(s <= 0 for s in shape):
            raise ShapeError(f"tensor {name!r} has a non-positive dimension", got=shape)
        if kind.is_on_chip:
            if len(shape) < 2:
                raise ShapeError(f"on-chip tensor {name!r} must have at least 2 dimensions "
                                 "(partition dim first); Insufficient rank", got=shape,
                                 hint="use a [P, 1] tile instead of a 1-D one")
            pmax = self.hw.tiles.pmax
            if shape[0] > pmax:
                raise ShapeError(f"number of partitions {shape[0]} exceed architecture limitation of {pmax}",
                                 expected=f"partition dim <= {pmax}", got=shape,
                                 code="err_num_partition_exceed_arch_limit",
                                 hint="split the tensor into tiles of at most 128 partitions")
        nbytes = math.prod(shape[1:] if kind.is_on_chip else shape) * dtype.itemsize
        allocator = self.allocator(kind)
        if nbytes > allocator.capacity_bytes:         # can never fit: say so before allocating the array
            allocator.overflow(nbytes, name, location)
        return nbytes

    @staticmethod
    def footprint(storage: Storage) -> int:
        """Bytes the storage occupies: per partition on chip, in total in HBM."""
        return storage.row_elems * storage.dtype.itemsize

    def place(self, storage: Storage, reclaim=None, keep=None, context=None) -> None:
        """Give `storage` an address range (released when the storage dies). When the memory is full:
        `reclaim(kind, context)` (a callback that may free ranges of tensors the kernel no longer needs,
        returning True if it did), then relocation (module docstring), then, in PSUM only, spilling: the
        earliest placed tensors give their range back (they get a new one when next touched), as the compiler
        spills PSUM tiles to SBUF; `keep(context)` names the storage ids that must stay (the instruction's
        operands). Raises AllocationError when none of this makes room. (Callbacks of the caller's `context`,
        not closures: every placement would make them, and few need them.)"""
        kind = storage.kind
        nbytes = storage.nbytes
        if nbytes is None:
            nbytes = self.footprint(storage)
        allocator = self._allocators[kind._value_]
        start = allocator.take(nbytes, storage.name)
        if start is None:
            start = self._make_room(allocator, storage, nbytes, reclaim, keep, context)
        storage.placement = Placement(0, start)
        self._track(storage, allocator, start)
        if self.emit is not None:
            self.emit.allocated(storage, nbytes)
        if storage.spilled:
            storage.spilled = False
            if self.emit is not None:
                self.emit.reloaded(storage)

    def _make_room(self, allocator: Allocator, storage: Storage, nbytes: int, reclaim, keep, context) -> int:
        """`place` when no free range fits: reclaim, relocate, spill (on chip), in this order, else raise."""
        kind = storage.kind
        start = None
        if reclaim is not None and reclaim(kind, context):
            start = allocator.take(nbytes, storage.name)
        if start is None and kind.is_on_chip and self._relocate(allocator, kind, nbytes):
            start = allocator.take(nbytes, storage.name)
        if start is None and kind.is_on_chip:
            start = self._spill(allocator, storage, nbytes, keep(context) if keep is not None else ())
        if start is None:
            start = allocator.allocate(nbytes, storage.name, storage.location)    # raises the overflow error
        return start

    def _track(self, storage: Storage, allocator: Allocator, start: int) -> None:
        """Claim the range at `start` for `storage` (its _Release, registered as the module docstring says:
        made here, not through a Python-level constructor, since every placement makes one)."""
        release = storage.release = _new_release(_Release, storage, _Release.fire)
        release.args = (allocator.free, start, self.emit, storage.id, storage.kind)
        registry = release.registry = self._releases
        registry[id(release)] = release

    def placed(self, kind: MemoryKind) -> list[Storage]:
        """The live on-chip storages of `kind` that hold an address range now, earliest placed first: the
        claims in the registry (`_releases`, in the order they were made, a relocation's anew) whose storage
        still holds them."""
        out = []
        for release in list(self._releases.values()):
            st = release()
            if st is not None and st.kind is kind and st.release is release and st.placement is not None:
                out.append(st)
        return out

    def _spill(self, allocator: Allocator, storage: Storage, nbytes: int, keep) -> int | None:
        """Release on-chip tensors not in `keep` until `storage` fits (see `place`): in PSUM the earliest
        placed, in SBUF the least recently touched by an instruction (`Storage.last_touch`), as a compiler
        spills to HBM the tile whose next use is furthest away, which an eager run approximates by the last."""
        victims = self.placed(storage.kind)
        if storage.kind is MemoryKind.SBUF:
            victims.sort(key=lambda st: st.last_touch)
        for victim in victims:
            if victim.id in keep or victim is storage:
                continue
            if self.emit is not None:
                self.emit.spilled(victim)
            Memory.release_early(victim)
            victim.spilled = True
            start = allocator.take(nbytes, storage.name)
            if start is None and self._relocate(allocator, storage.kind, nbytes):
                start = allocator.take(nbytes, storage.name)
            if start is not None:
                return start
        return None

    def _relocate(self, allocator: Allocator, kind: MemoryKind, nbytes: int) -> bool:
        """Open a free range of `nbytes` by moving live tensors (module docstring); False if impossible."""
        owners = {st.placement.address: st for st in self.placed(kind)}
        moves = allocator.plan_relocation(nbytes, lambda start: start in owners)
        if not moves:
            return False
        storages = [owners[old] for old, _ in moves]
        allocator.move(moves)
        for storage, (_, new) in zip(storages, moves):
            storage.release.detach()
            storage.placement.address = new
            self._track(storage, allocator, new)
            if self.emit is not None:
                self.emit.freed(storage.id, kind)
                self.emit.allocated(storage, self.footprint(storage))
        return True

    @staticmethod
    def release_early(storage: Storage) -> None:
        """Return a storage's range now (it is dead though still referenced); if it is touched again it
        simply gets a new range. Addresses only shape the event stream, never values."""
        if storage.release is not None:
            storage.release.fire()
        storage.placement = None
        storage.release = None


class _Release(weakref.ref):
    """A placed storage's claim on its address range: `fire` (called when the storage dies, or early) returns
    the range to its allocator and tells the listeners, once; `detach` drops the claim without that. What
    `weakref.finalize` does, at a quarter of its cost (a placement per tile of a loop): a weak reference with
    a callback, which its Memory's registry keeps alive until it fires or is detached (one the garbage
    collector finds dead together with its storage would never call back). Called, it gives the storage
    (None once dead), as any weak reference; `Memory.placed` looks storages up through it."""

    __slots__ = ("args", "registry")     # (allocator.free, start, emit, storage id, kind) until it fires

    @property
    def alive(self) -> bool:
        return self.args is not None

    def fire(self) -> None:
        args = self.args
        if args is not None:
            self.args = None
            self.registry.pop(id(self), None)
            free, start, emit, storage_id, kind = args
            free(start)
            if emit is not None:
                emit.freed(storage_id, kind)

    def detach(self) -> None:
        self.args = None
        self.registry.pop(id(self), None)


_new_release = weakref.ref.__new__      # a _Release for a storage (Memory._track)
