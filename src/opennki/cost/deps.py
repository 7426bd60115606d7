"""Cost layer: data dependencies between instructions, from the memory regions they touch. Imports events.

Every operand of an executed instruction names a physical region (allocator addresses) and, through its
strides, the exact box of its tensor it touches. `AccessTracker` remembers, per storage, when each box was
last written and last read, and answers "when may this access start": after the last overlapping write
(read-after-write), and for a write also after the overlapping reads and writes (write-after-read,
write-after-write).

Address reuse: when a tensor is freed (or its program ends), its range becomes a *retired interval* stamped
with the last time it was used; a new tensor allocated over it cannot be touched before then. This is what
makes a tensor allocated inside a loop (next-fit gives each iteration a new address) overlap across
iterations, while one buffer rewritten every iteration serialises them.
"""

from __future__ import annotations

import functools
from types import MappingProxyType

from opennki.events import AccessKind, Engine, MemoryKind

NO_PRODUCER = -1
_NO_FLOOR = (0.0, NO_PRODUCER)
_NO_EDGES = MappingProxyType({})
# `Dependency.accesses`: an access of a storage's one box (no page index: `_StorageAccesses`)
_ONE_BOX = -2
# a storage accessed as one box keeps its slots without an address index (`_StorageAccesses`); False: the
# plain path, every storage indexed from its first access
ONE_BOX = True
# an operand with a layout number (`Operand.layout`) takes the box of the first operand of that number
# (`_LAYOUT_BOXES`: one look-up by an int, where `box_of` hashes four tuples); False: every box by `box_of`
LAYOUT_BOXES = True
_LAYOUT_BOXES: dict = {}          # Operand.layout -> box_of(...) of its operands (numbers are never reused)
_LAYOUT_BOXES_LIMIT = 1 << 16
# whether two boxes overlap is kept per pair of layout numbers (`_OVERLAPS`: a look-up by an int where
# `_boxes_overlap` is a call comparing every dimension; a box is a function of its layout's fields, and numbers
# are never reused); False: every pair of boxes compared
LAYOUT_OVERLAPS = True
_OVERLAPS: dict = {}              # Operand.layout -> {a slot's layout number -> whether their boxes overlap}
_OVERLAPS_LIMIT = 1 << 12
# a read of an indexed storage takes what the search of its writes found for the last read of the same layout
# number at the same place, when no write came since (`_StorageAccesses.searched`; only without the dependence
# edges, which list every slot met); False: every read searches
SEARCHED_READS = True
# enum members bound once: looking them up on their class is slow in per-operand loops (Python 3.11)
_READ, _ACCUMULATE = AccessKind.READ, AccessKind.ACCUMULATE
_HBM = MemoryKind.HBM
_HBM_VALUE = _HBM.value


@functools.lru_cache(maxsize=1 << 16)
def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


@functools.lru_cache(maxsize=1 << 16)
def box_of(storage_shape: tuple[int, ...], strides: tuple[int, ...] | None, offset: int | None,
           shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The [lo, hi) box of storage coordinates an affine access covers (a superset for stepped axes), or
    None when the access is not a box (indirect, negative strides, merged or wrapping dims)."""
    if strides is None or offset is None or len(strides) != len(shape):
        return None
    ss = _row_major(storage_shape)
    lo, rem = [], offset
    for s in ss:
        c, rem = divmod(rem, s)
        lo.append(c)
    hi = [c + 1 for c in lo]
    used = set()
    for n, st in zip(shape, strides):
        if n == 1 or st == 0:
            continue
        if st < 0:
            return None
        d = next((d for d, s in enumerate(ss) if st % s == 0 and d not in used), None)
        if d is None:
            return None
        ext = (st // ss[d]) * (n - 1) + 1
        if lo[d] + ext > storage_shape[d]:
            return None
        hi[d] = lo[d] + ext
        used.add(d)
    return tuple(lo), tuple(hi)


def _layout_box(op):
    """`box_of` of `op`, kept for its layout number: every operand of that number has the fields it reads."""
    if len(_LAYOUT_BOXES) >= _LAYOUT_BOXES_LIMIT:
        _LAYOUT_BOXES.clear()
    box = _LAYOUT_BOXES[op.layout] = box_of(op.storage_shape, op.strides, op.offset, op.shape)
    return box


def _overlaps_of(layout) -> dict | None:
    """What `_OVERLAPS` keeps for boxes of `layout` (None: nothing kept, without a number or the switch)."""
    if layout is None or not LAYOUT_OVERLAPS:
        return None
    over = _OVERLAPS.get(layout)
    if over is None:
        if len(_OVERLAPS) >= _OVERLAPS_LIMIT:
            _OVERLAPS.clear()
        over = _OVERLAPS[layout] = {}
    return over


def _slot_overlap(over: dict, box, slot) -> bool:
    """Whether `box` (of the layout `over` is kept for) overlaps `slot`'s box, kept in `over` by the slot's
    layout number when it has one."""
    hit = _boxes_overlap(box, slot[_S_BOX])
    layout = slot[_S_LAYOUT]
    if layout is not None:
        if len(over) >= _OVERLAPS_LIMIT:
            over.clear()
        over[layout] = hit
    return hit


def _boxes_overlap(a, b) -> bool:
    """Whether two [lo, hi) boxes (of one storage: as many dims) share a point: every dimension's ranges
    overlap (a loop over the two or three dims, faster than map/all chains; unrolled for three, the block
    tensors' [block, partition, free] boxes, which the searches of a blocked matmul compare)."""
    (alo, ahi), (blo, bhi) = a, b
    if len(alo) == 3:
        return (alo[0] < bhi[0] and blo[0] < ahi[0] and alo[1] < bhi[1] and blo[1] < ahi[1] and alo[2] < bhi[2]
                and blo[2] < ahi[2])
    i = 0
    for lo in alo:
        if lo >= bhi[i] or blo[i] >= ahi[i]:
            return False
        i += 1
    return True


# A slot: the latest write, or the latest-ending read, of one box of a storage, as a list (made for most
# accesses of a kernel: a list display costs a fifth of an instance's __init__) of
# [region, box, end, producer, engine, core, accumulate, page, layout]; `page`: the first address page its
# storage's index lists it on (it is listed on every page from there to the last its region spans); `layout`:
# the layout number of the access that made it (its box is that number's), or None
_S_REGION, _S_BOX, _S_END, _S_PRODUCER, _S_ENGINE, _S_CORE, _S_ACCUMULATE, _S_PAGE, _S_LAYOUT = range(9)
_S_READ = slice(_S_END, _S_ACCUMULATE)      # what a read sets: end, producer, engine, core
_S_WRITE = slice(_S_END, _S_PAGE)           # what a write sets: end, producer, engine, core, accumulate


class _StorageAccesses:
    """Write and read slots of one storage: by key (box, or region for accesses that are not boxes), in
    creation order (`slots`), and indexed by address page (`writes`, `reads`).

    A storage accessed so far as one box only (a fresh tile written once and read once, a PSUM accumulator;
    `ONE_BOX`) has no index: `writes` is None, `box` and the byte range are its accesses' and `write`/`read`
    its slots (at most one of each). The index's search would find just those, the write first (one page
    lists both), so the search takes them directly; an access of another box, or of the same box over another
    byte range, first builds the index (`index`) as the slots' creation would have."""

    __slots__ = ("shift", "writes", "reads", "write_slots", "read_slots", "slots", "last_end", "write_serial",
                 "box", "byte_start", "byte_end", "write", "read", "searched")

    def __init__(self, region, box):
        self.slots: list[list] = []
        self.last_end = 0.0
        self.write_serial = 0
        if box is None:
            self._index_for(region)
        else:
            self.writes = None
            self.box, self.byte_start, self.byte_end = box, region.byte_start, region.byte_end
            self.write = self.read = None

    def _index_for(self, region) -> None:
        """Empty page and key indices, with pages sized by the storage's first access `region`."""
        self.shift = max(6, (region.byte_end - region.byte_start).bit_length() - 1)
        self.writes: dict[int, list[list]] = {}
        self.reads: dict[int, list[list]] = {}
        self.write_slots: dict[tuple, list] = {}
        self.read_slots: dict[tuple, list] = {}
        # layout number of a read -> (write_serial, byte_start, partition_start, end, producer): the first
        # latest-ending write slot its search met (end -1.0: none), as of that write_serial and for a region at
        # that place (`SEARCHED_READS`). A read's search meets write slots only, which change only with a write,
        # and its box is its layout number's
        self.searched: dict[int, tuple[int, int, int, float, int]] = {}

    def index(self) -> None:
        """Leave the one-box form: the indices its slots would have had, filled in their creation order."""
        slots = self.slots
        self._index_for(slots[0][_S_REGION])      # (the storage's first access made the first slot)
        shift = self.shift
        for slot in slots:
            if slot is self.write:
                self.write_slots[slot[_S_BOX]] = slot
                index = self.writes
            else:
                self.read_slots[slot[_S_BOX]] = slot
                index = self.reads
            region = slot[_S_REGION]
            first = slot[_S_PAGE] = region.byte_start >> shift
            for page in range(first, ((region.byte_end - 1) >> shift) + 1):
                listed = index.get(page)
                if listed is None:
                    index[page] = [slot]
                else:
                    listed.append(slot)


class Dependency:
    """When an access may start, and why: `producer` is the record index that gates it (NO_PRODUCER if
    nothing does), `kind` one of "raw", "war", "waw", "reuse". `edges` maps every (producer, kind) the
    instruction depends on to the index of its operand that carries the dependence (the region); it is
    filled only when asked for (`AccessTracker.dependency(..., edges=True)`). `accesses` holds what
    `AccessTracker.record` needs of each operand, found while looking for the dependency."""

    __slots__ = ("ready", "producer", "kind", "edges", "accesses")

    def __init__(self):
        self.edges: dict[tuple[int, str], int] = {}
        self.accesses: list = []
        self.ready = 0.0
        self.producer = NO_PRODUCER
        self.kind = None

    def consider(self, end: float, producer: int, kind: str, operand: int = 0) -> None:
        if producer != NO_PRODUCER:
            self.edges.setdefault((producer, kind), operand)
        # on a tie a read-after-write wins: an in-place update waits for its input, not for a reused buffer
        if end > self.ready or (end == self.ready and kind == "raw" and self.kind != "raw"):
            self.ready, self.producer, self.kind = end, producer, kind


_new = object.__new__


class AccessTracker:
    """See the module docstring. Spaces are (memory kind, core) on chip and the shared HBM."""

    # keyed by MemoryKind value: spaces are (kind value, core) on chip and ("hbm",), since hashing an Enum
    # member runs Python code and every tensor's allocation and release looks its space up
    RETIRED_BUCKET_BYTES = {MemoryKind.SBUF.value: 4096, MemoryKind.PSUM.value: 2048, MemoryKind.HBM.value: 1 << 20}

    def __init__(self):
        self.storages: dict[int, _StorageAccesses] = {}
        self.floor: dict[int, tuple[float, int]] = {}          # storage id -> (time, producer)
        self.live: dict[int, tuple[tuple, int, int, int, tuple]] = {}   # id -> (space, start, end, parts, prog)
        self.retired: dict[tuple, dict[int, list[tuple[int, int, int, float, int]]]] = {}

    @staticmethod
    def space(kind: MemoryKind, core: int) -> tuple:
        """The address space of a tensor of `kind` on `core`: each core's SBUF and PSUM, and the shared HBM."""
        return (kind._value_, core) if kind is not _HBM else (_HBM_VALUE,)

    # -- allocation lifetime --------------------------------------------------------------------------
    def allocated(self, storage_id: int, space: tuple, byte_start: int, size_bytes: int, partitions: int,
                  program: tuple) -> None:
        end = byte_start + max(size_bytes, 1)
        self.live[storage_id] = (space, byte_start, end, partitions, program)
        buckets = self.retired.get(space)
        if not buckets:
            return
        if partitions <= 0:
            return                               # occupies nothing: no retired interval overlaps it
        width = _BUCKET_BYTES[space[0]]
        best, producer = 0.0, NO_PRODUCER
        # (items (s, e, parts, t, prod) all have parts > 0: `freed`)
        for b in range(byte_start // width, (end - 1) // width + 1):
            items = buckets.get(b)
            if not items:
                continue
            covered = None
            for item in items:
                if item[0] < end and byte_start < item[1]:
                    if item[3] > best:
                        best, producer = item[3], item[4]
                    if byte_start <= item[0] and item[1] <= end and item[2] <= partitions:
                        if covered is None:
                            covered = [item]
                        else:
                            covered.append(item)
            if covered is not None:              # the new tensor's retirement supersedes what it covers
                for item in covered:
                    items.remove(item)
        if best > 0.0:
            self.floor[storage_id] = (best, producer)

    def freed(self, storage_id: int) -> None:
        info = self.live.pop(storage_id, None)
        acc = self.storages.pop(storage_id, None)
        floor = self.floor.pop(storage_id, _NO_FLOOR)
        if info is None:
            return
        space, start, end, parts, _ = info
        t, prod = floor
        if acc is not None and acc.last_end > t:
            # the producer of the latest-ending slot, the first created of equal ones (as max() finds it; a
            # loop over a tile's few slots takes a third of max()'s time with a key)
            t, latest = acc.last_end, None
            for slot in acc.slots:
                if latest is None or slot[_S_END] > latest[_S_END]:
                    latest = slot
            prod = NO_PRODUCER if latest is None else latest[_S_PRODUCER]
        if t <= 0.0 or parts <= 0:
            return                               # (an interval on no partition overlaps no tensor)
        width = _BUCKET_BYTES[space[0]]
        buckets = self.retired.get(space)
        if buckets is None:
            buckets = self.retired[space] = {}
        item = (start, end, parts, t, prod)
        for b in range(start // width, (end - 1) // width + 1):
            items = buckets.get(b)
            if items is None:
                buckets[b] = [item]
            else:
                items.append(item)

    def program_finished(self, program: tuple) -> None:
        """On-chip tensors of a finished program are retired (the next program's allocator reuses them)."""
        for sid in [sid for sid, info in self.live.items() if info[4] == program and info[0][0] != _HBM_VALUE]:
            self.freed(sid)

    # -- dependencies ---------------------------------------------------------------------------------
    def dependency(self, operands, engine: Engine, core: int, edges: bool = True) -> Dependency:
        """The dependency of an instruction with `operands` running on `engine` of `core` (`edges`: also
        list every dependence, `Dependency.edges`)."""
        accesses, floors, storages, layout_boxes = [], self.floor, self.storages, _LAYOUT_BOXES
        # the running answer in locals (Dependency.consider, inlined: this runs for every operand)
        ready, producer, kind = 0.0, NO_PRODUCER, None
        found = {} if edges else None
        i = -1
        for op in operands:
            i += 1
            region = op.region
            sid = region.storage_id
            layout = op.layout if LAYOUT_BOXES else None
            if layout is not None:
                try:
                    box = layout_boxes[layout]      # (a subscript: cheaper than `get` when it hits, as it mostly does)
                except KeyError:
                    box = _layout_box(op)
            else:
                box = box_of(op.storage_shape, op.strides, op.offset, op.shape)
            acc = storages.get(sid)
            access = op.access
            if sid in floors:
                end, prod = floors[sid]
                if found is not None and prod != NO_PRODUCER:
                    found.setdefault((prod, "reuse"), i)
                if end > ready:
                    ready, producer, kind = end, prod, "reuse"
            # nothing to search: a storage not accessed yet, or a read of one never written (kernel inputs)
            if acc is None:
                accesses.append((region, box, access, None, -1, -1, layout))
                continue
            if acc.writes is None:
                # one box so far: its write, then its read (what the index's search would meet)
                # (another box first: this way round the comparisons' jumps are short, and Python 3.11
                # specialises no comparison followed by a long jump)
                if box is not acc.box or region.byte_start != acc.byte_start or region.byte_end != acc.byte_end:
                    acc.index()
                else:
                    accesses.append((region, box, access, acc, _ONE_BOX, 0, layout))
                    slot = acc.write
                    if access is _READ:
                        if slot is not None:
                            end = slot[_S_END]
                            if found is not None and slot[_S_PRODUCER] != NO_PRODUCER:
                                found.setdefault((slot[_S_PRODUCER], "raw"), i)
                            if end > ready or (end == ready and kind != "raw"):
                                ready, producer, kind = end, slot[_S_PRODUCER], "raw"
                        continue
                    if slot is not None and not (access is _ACCUMULATE and slot[_S_ACCUMULATE]
                                                 and slot[_S_ENGINE] is engine and slot[_S_CORE] == core):
                        end = slot[_S_END]
                        if found is not None and slot[_S_PRODUCER] != NO_PRODUCER:
                            found.setdefault((slot[_S_PRODUCER], "waw"), i)
                        if end > ready:
                            ready, producer, kind = end, slot[_S_PRODUCER], "waw"
                    slot = acc.read
                    if slot is not None:
                        end = slot[_S_END]
                        if found is not None and slot[_S_PRODUCER] != NO_PRODUCER:
                            found.setdefault((slot[_S_PRODUCER], "war"), i)
                        if end > ready:
                            ready, producer, kind = end, slot[_S_PRODUCER], "war"
                    continue
            writes = acc.writes
            top = None
            if access is _READ:
                if not writes:
                    # nothing to search (a kernel input read again): `record` finds the pages if it makes a slot
                    accesses.append((region, box, access, acc, -1, -1, layout))
                    continue
                if found is None and layout is not None and SEARCHED_READS:
                    kept = acc.searched.get(layout)
                    if (kept is not None and kept[0] == acc.write_serial and kept[1] == region.byte_start
                            and kept[2] == region.partition_start):
                        # what the search would do: the slots it meets set (end, producer, "raw") from the
                        # first latest-ending one, if that ends later, or as late while `kind` is not "raw"
                        end = kept[3]
                        if end > ready or (end == ready and kind != "raw"):
                            ready, producer, kind = end, kept[4], "raw"
                        accesses.append((region, box, access, acc, -1, -1, layout))   # (`record` finds the pages)
                        continue
                    top, top_producer = -1.0, NO_PRODUCER
            shift = acc.shift
            first, last = region.byte_start >> shift, (region.byte_end - 1) >> shift
            accesses.append((region, box, access, acc, first, last, layout))
            if access is not _READ:
                if writes or acc.reads:
                    ready, producer, kind = self._pages(acc, first, last, region, box, layout, access, engine, core,
                                                        i, found, ready, producer, kind)
            else:
                # a read (the usual case): `_pages` over its writes, inlined; a slot listed on several pages
                # is taken on the first of them the access spans (the slot's page)
                page = first
                over = _OVERLAPS.get(layout) if LAYOUT_OVERLAPS else None     # (made at its first comparison)
                while True:
                    for slot in writes.get(page, ()):
                        if page != first and slot[_S_PAGE] < page:
                            continue                 # (met on an earlier page)
                        slot_box = slot[_S_BOX]
                        if box is not None and slot_box is not None:
                            if slot_box is not box:
                                if over is None:
                                    over = _overlaps_of(layout)
                                if over is not None:
                                    hit = over.get(slot[_S_LAYOUT], over)       # (`over` itself: not kept)
                                    if hit is over:
                                        hit = _slot_overlap(over, box, slot)
                                    if not hit:
                                        continue
                                elif not _boxes_overlap(box, slot_box):
                                    continue
                        elif not region.overlaps(slot[_S_REGION]):
                            continue
                        end = slot[_S_END]
                        if found is not None and slot[_S_PRODUCER] != NO_PRODUCER:
                            found.setdefault((slot[_S_PRODUCER], "raw"), i)
                        if end > ready or (end == ready and kind != "raw"):
                            ready, producer, kind = end, slot[_S_PRODUCER], "raw"
                        if top is not None and end > top:
                            top, top_producer = end, slot[_S_PRODUCER]
                    if page == last:
                        break
                    page += 1
                if top is not None:
                    acc.searched[layout] = (acc.write_serial, region.byte_start, region.partition_start, top,
                                            top_producer)
        dep = _new(Dependency)                  # (its fields set here: no __init__ call per instruction)
        dep.ready, dep.producer, dep.kind, dep.accesses = ready, producer, kind, accesses
        dep.edges = found if found is not None else _NO_EDGES
        return dep

    @staticmethod
    def _pages(acc, first, last, region, box, layout, access, engine, core, i, found, ready, producer, kind):
        """`dependency`'s search over the address pages `first`..`last` of a write: (ready, producer, kind)
        after their slots, in the order of `Dependency.consider` (inlined: this runs for every operand). A slot
        is listed once per page it spans, so over several pages each is taken on the first page of the access
        it is listed on: the first page the access spans, or its own first page (the slot's page)."""
        writes, reads = acc.writes, acc.reads
        kinds = (writes, "waw", access is _ACCUMULATE), (reads, "war", False)
        over = _OVERLAPS.get(layout) if LAYOUT_OVERLAPS else None     # (made at its first comparison)
        for page in range(first, last + 1):
            for slots, slot_kind, accumulate in kinds:
                if not slots:
                    continue
                for slot in slots.get(page, ()):
                    if page != first and slot[_S_PAGE] < page:
                        continue                     # (met on an earlier page)
                    slot_box = slot[_S_BOX]
                    if box is not None and slot_box is not None:
                        if slot_box is not box:      # (a box always overlaps itself: box_of's boxes are shared)
                            if over is None:
                                over = _overlaps_of(layout)
                            if over is not None:
                                hit = over.get(slot[_S_LAYOUT], over)       # (`over` itself: not kept)
                                if hit is over:
                                    hit = _slot_overlap(over, box, slot)
                                if not hit:
                                    continue
                            elif not _boxes_overlap(box, slot_box):
                                continue
                    elif not region.overlaps(slot[_S_REGION]):
                        continue
                    if accumulate and slot[_S_ACCUMULATE] and slot[_S_ENGINE] is engine and slot[_S_CORE] == core:
                        continue                 # an accumulation group: in order on the engine, no wait
                    end, prod = slot[_S_END], slot[_S_PRODUCER]
                    if found is not None and prod != NO_PRODUCER:
                        found.setdefault((prod, slot_kind), i)
                    if end > ready or (end == ready and slot_kind == "raw" and kind != "raw"):
                        ready, producer, kind = end, prod, slot_kind
        return ready, producer, kind

    def record(self, dep: Dependency, end: float, producer: int, engine: Engine, core: int) -> None:
        """Remember that the instruction whose dependency `dep` was (with its operands' accesses) finished at
        `end`."""
        storages = self.storages
        for region, box, access, acc, first, last, layout in dep.accesses:
            if acc is None:
                sid = region.storage_id
                acc = storages.get(sid)          # (an earlier operand of the instruction may have made it)
                if acc is None:
                    if box is not None and ONE_BOX:
                        # (`_StorageAccesses(region, box)`, its fields set here: no class call per new tile; with
                        # this access's slot, as the one-box path below makes it in a fresh one)
                        acc = storages[sid] = _new(_StorageAccesses)
                        acc.writes, acc.box = None, box
                        acc.byte_start, acc.byte_end = region.byte_start, region.byte_end
                        acc.last_end = end if end > 0.0 else 0.0
                        if access is _READ:
                            slot = acc.read = [region, box, end, producer, engine, core, False, 0, layout]
                            acc.write, acc.write_serial = None, 0
                        else:
                            slot = acc.write = [region, box, end, producer, engine, core, access is _ACCUMULATE, 0,
                                                layout]
                            acc.read, acc.write_serial = None, 1
                        acc.slots = [slot]
                        continue
                    acc = storages[sid] = _StorageAccesses(region, None)
                    first = _ONE_BOX                 # (its one box, if it has no index)
            if acc.writes is None:
                if first == _ONE_BOX or (box is acc.box and region.byte_start == acc.byte_start
                                         and region.byte_end == acc.byte_end):
                    if access is _READ:
                        slot = acc.read
                        if slot is None:
                            slot = acc.read = [region, box, end, producer, engine, core, False, 0, layout]
                            acc.slots.append(slot)
                        elif end >= slot[_S_END]:
                            slot[_S_READ] = end, producer, engine, core
                    else:
                        acc.write_serial += 1
                        slot = acc.write
                        if slot is None:
                            slot = acc.write = [region, box, end, producer, engine, core, access is _ACCUMULATE, 0,
                                                   layout]
                            acc.slots.append(slot)
                        else:
                            slot[_S_WRITE] = end, producer, engine, core, access is _ACCUMULATE
                    if end > acc.last_end:
                        acc.last_end = end
                    continue
                acc.index()
                first = -1
            key = box if box is not None else (region.partition_start, region.partition_count, region.byte_start,
                                               region.byte_end)
            if access is _READ:
                slot = acc.read_slots.get(key)
                if slot is not None:
                    if end >= slot[_S_END]:
                        slot[_S_READ] = end, producer, engine, core
                    if end > acc.last_end:
                        acc.last_end = end
                    continue
            else:
                acc.write_serial += 1
                slot = acc.write_slots.get(key)
                if slot is not None:
                    slot[_S_WRITE] = end, producer, engine, core, access is _ACCUMULATE
                    if end > acc.last_end:
                        acc.last_end = end
                    continue
            if first < 0:           # (the storage was not indexed, or not searched, when its dependency was found)
                shift = acc.shift
                first, last = region.byte_start >> shift, (region.byte_end - 1) >> shift
            if access is _READ:
                slot = acc.read_slots[key] = [region, box, end, producer, engine, core, False, first, layout]
                index = acc.reads
            else:
                slot = acc.write_slots[key] = [region, box, end, producer, engine, core, access is _ACCUMULATE, first,
                                               layout]
                index = acc.writes
            acc.slots.append(slot)
            page = first
            while True:
                slots = index.get(page)
                if slots is None:
                    index[page] = [slot]
                else:
                    slots.append(slot)
                if page == last:
                    break
                page += 1
            if end > acc.last_end:
                acc.last_end = end


# the class's table, read as a global by `allocated` and `freed` (Python 3.11 does not specialise a class attribute
# read through an instance: a generic look-up for every tensor)
_BUCKET_BYTES = AccessTracker.RETIRED_BUCKET_BYTES
