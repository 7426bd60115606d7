"""Listeners layer: the race and hazard checker. Imports events and listeners.findings only.

The simulator runs what hardware runs in parallel one thing after another, so it gets the right answer
where hardware may not. This listener looks for the accesses whose order the kernel does not fix:

* **Loop-carried hazards in `affine_range`** (legacy generation; `LoopStarted.parallel`): the compiler may
  reorder or overlap the iterations, so a read-after-write, write-after-read or write-after-write between
  two iterations of one affine loop on the same elements is a bug. Exempt is accumulation, which NKI
  allows across iterations: matmul accumulating into PSUM, DMA read-modify-writes and element-wise updates
  `acc = op(acc, x)` with an associative `op` (`acc += x`, `nl.loop_reduce`), as long as every access of
  the elements by the other iteration is such an accumulation with the same operator. Iterations of
  `sequential_range`, `static_range`, `range` and device loops are ordered, as are the accesses of one
  iteration; tensors created inside an iteration are new storage each time, so they never conflict.
* **Races between programs** (SPMD grids, LNC cores): two programs touching the same bytes, one of them
  writing, with no exchange between them that orders the two (`ProgramsMet`: `core_barrier`, `sendrecv`,
  collectives). The order is a happens-before relation, not the order the simulator happened to run
  them in: for programs A and B, an access of A after its k-th exchange with B and an access of B after
  its k-th exchange with A (and before the next) may run at the same time on hardware. Such a pair has
  no first and second, so it is reported unordered (`program_race_write_write`, `program_race_write_read`),
  the lower program first: the same finding whatever order the cores were interleaved in.

Accesses are compared per storage (tensor), first by a bounding box (partitions x bytes from the
allocator's regions, relative to the tensor's address so relocation does not matter), then, when the boxes
overlap, exactly by element offsets (masks and run-time indices honoured). Each bug is reported once per
pair of kernel lines (a race between programs: for the lowest pair of programs that has it). The checker observes and reports (`report()`); it never changes results.
"""

from __future__ import annotations

import itertools

import numpy as np

from opennki.events import (AccessKind, Event, InstructionExecuted, LoopFinished, LoopIteration, LoopStarted,
                            MemoryKind, Operand, ProgramsMet, ProgramStarted, TensorAllocated)
from opennki.listeners.findings import Finding, FindingKind

# operators whose repeated application in any order gives the same result (accumulation across iterations)
ASSOCIATIVE_OPS = frozenset({"add", "multiply", "maximum", "minimum", "max", "min", "bitwise_and",
                             "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor", "abs_max",
                             "abs_min"})
# core_barrier orders accesses and touches no data; PSUM / SBUF spills and reloads are the compiler's own copies
_SKIPPED_OPCODES = frozenset({"core_barrier", "psum_spill", "psum_reload", "sbuf_spill", "sbuf_reload"})
_CHUNK_SHIFT = 8                                    # bytes per index bucket (on chip)
_ROW_SHIFT = 7                                      # rows of the first dimension per bucket (HBM: a tile)
_COLUMN_SHIFT = 6                                   # elements of the last dimension per bucket (HBM)
_WIDE_CHUNKS = 64


class _Access:
    """One operand access, as the checker keeps it (values only: no tensors)."""

    __slots__ = ("writes", "reads", "accumulate", "p0", "p1", "b0", "b1", "dims", "operand", "mask", "location",
                 "loops", "program", "sync", "seq", "_offsets", "keys")

    def __init__(self, operand: Operand, base: int, writes: bool, reads: bool, accumulate, mask, event, loops,
                 sync):
        r = operand.region
        self.writes, self.reads, self.accumulate = writes, reads, accumulate
        self.p0, self.p1 = r.partition_start, r.partition_start + r.partition_count
        self.b0, self.b1 = r.byte_start - base, r.byte_end - base
        self.operand, self.mask, self.location = operand, mask, event.location
        self.loops, self.program, self.sync, self.seq = loops, event.program, sync, event.seq
        self.dims = _dim_box(operand)
        self._offsets = None
        self.keys = _Index.keys_of(self)        # its index buckets (None: too many, compared with all)

    def boxes_overlap(self, other: "_Access") -> bool:
        if not (self.b0 < other.b1 and other.b0 < self.b1 and self.p0 < other.p1 and other.p0 < self.p1):
            return False
        if self.dims is not None and other.dims is not None:
            return all(a0 <= b1 and b0 <= a1 for (a0, a1), (b0, b1) in zip(self.dims, other.dims))
        return True

    def offsets(self) -> np.ndarray:
        """Sorted unique element offsets (into the tensor) the access touches."""
        if self._offsets is None:
            op = self.operand
            if op.offsets is not None:
                offs = op.offsets
            elif op.strides is None:
                offs = np.arange(0)        # an indirect access without recorded offsets (shape-only run)
            else:
                offs = op.element_offsets()
                if self.mask is not None:
                    offs = offs[self.mask]
            self._offsets = np.unique(offs)
        return self._offsets


_ROWS: dict[tuple, tuple] = {}     # tensor shape -> the element stride of each of its dimensions


def _dim_box(operand: Operand):
    """Per dimension of the tensor, the (first, last) index the access touches, when each dimension of the
    access steps along one dimension of the tensor (slices and integer indices do); None otherwise (the
    byte range then stands for the access). A [128, 512] tile of a [2048, 2048] HBM tensor spans whole rows
    in bytes but only its own columns here."""
    strides, offset, shape = operand.strides, operand.offset, operand.storage_shape
    if strides is None or offset is None or operand.offsets is not None:
        return None
    row = _ROWS.get(shape)
    if row is None:
        row = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            row[d] = row[d + 1] * shape[d + 1]
        row = _ROWS[shape] = tuple(row)
    lo = []
    rest = offset
    for d in range(len(shape)):
        lo.append(rest // row[d])
        rest %= row[d]
    hi = list(lo)
    for n, stride in zip(operand.shape, strides):
        if n <= 1 or stride == 0:
            continue
        if stride < 0 or stride not in row:
            return None
        d = row.index(stride)
        hi[d] += n - 1
        if hi[d] >= shape[d]:
            return None
    return tuple(zip(lo, hi))


class _Index:
    """The accesses to one tensor, bucketed by what they touch so that a lookup sees only nearby ones: on
    chip by byte range; HBM by rows of the first dimension and, for tensors of two or more dimensions,
    columns of the last (tiles side by side in one row band stay apart); from three dimensions on, by each
    index of the first (the tiles of different programs or batches stay apart), rows of the second and
    columns of the last. An HBM access without an index box
    (`_dim_box` None) is in no bucket: it is compared with every access of the tensor."""

    __slots__ = ("chunks", "wide")

    def __init__(self):
        self.chunks: dict = {}
        self.wide: list[_Access] = []

    @staticmethod
    def keys_of(acc: _Access):
        """The buckets `acc` falls in, or None when it spans too many (kept in `wide`)."""
        if acc.operand.region.kind is MemoryKind.HBM:
            if acc.dims is None:        # (indirect, reshaped) no index box: compared with every access
                return None
            dims = acc.dims
            rows = dims[1] if len(dims) > 2 else dims[0]
            bands = [(rows[0] >> _ROW_SHIFT, rows[1] >> _ROW_SHIFT)]
            if len(dims) > 1:
                bands.append((dims[-1][0] >> _COLUMN_SHIFT, dims[-1][1] >> _COLUMN_SHIFT))
            if len(dims) > 2:
                bands.insert(0, dims[0])        # each index of the first dimension apart
            count = 1
            for lo, hi in bands:
                count *= hi - lo + 1
            if count > _WIDE_CHUNKS:
                return None
            return list(itertools.product(*(range(lo, hi + 1) for lo, hi in bands)))
        lo, hi = acc.b0 >> _CHUNK_SHIFT, (max(acc.b1, acc.b0 + 1) - 1) >> _CHUNK_SHIFT
        return range(lo, hi + 1) if hi - lo < _WIDE_CHUNKS else None

    def add(self, acc: _Access) -> None:
        keys = acc.keys
        if keys is None:
            self.wide.append(acc)
            return
        for c in keys:
            self.chunks.setdefault(c, []).append(acc)

    def near(self, acc: _Access, into: list) -> None:
        """Append to `into` the accesses that may overlap `acc` (each once)."""
        into += self.wide
        keys = acc.keys
        chunks = self.chunks
        if keys is None:
            lists = list(chunks.values())
        else:
            lists = [chunks[c] for c in keys if c in chunks]
        if len(lists) == 1:
            into += lists[0]
            return
        seen = set()
        for found in lists:
            for other in found:
                if id(other) not in seen:
                    seen.add(id(other))
                    into.append(other)


class _Tensor:
    """Reads, writes and accumulations (by operator) of one tensor: reads need comparing with writes and
    accumulations only, an accumulation not with accumulations of its own operator."""

    __slots__ = ("reads", "writes", "accumulations")

    def __init__(self):
        self.reads, self.writes = _Index(), _Index()
        self.accumulations: dict[str, _Index] = {}

    def candidates(self, acc: _Access) -> list:
        found: list = []
        self.writes.near(acc, found)
        if acc.writes:
            self.reads.near(acc, found)
        for op, index in self.accumulations.items():
            if op != acc.accumulate:
                index.near(acc, found)
        return found

    def add(self, acc: _Access) -> None:
        if acc.accumulate is not None:
            index = self.accumulations.get(acc.accumulate)
            if index is None:
                index = self.accumulations[acc.accumulate] = _Index()
            index.add(acc)
        else:
            (self.writes if acc.writes else self.reads).add(acc)


class _Loop:
    __slots__ = ("loop_id", "parallel", "iteration", "location", "kind")

    def __init__(self, event: LoopStarted):
        self.loop_id, self.parallel, self.location, self.kind = (event.loop_id, event.parallel, event.location,
                                                                 event.kind)
        self.iteration = None


class RaceChecker:
    """Listener: finds loop-carried hazards in affine loops and races between programs (module docstring).

    `report()` gives the findings (a list of `Finding`s, each bug once)."""

    def __init__(self):
        self.findings: list[Finding] = []
        self._reported: dict = {}                          # (rule, lines, storage) -> (programs, finding index)
        self._bases: dict[int, int] = {}                    # storage id -> its current address
        self._direct: set[int] = set()                      # storages the kernel placed itself
        self._created: dict[int, object] = {}               # storage id -> the line that created it
        self._loops: dict[tuple, list[_Loop]] = {}          # program -> loops running, outermost first
        self._loop_program: dict[int, tuple] = {}           # loop id -> program
        self._in_loops: dict[tuple, dict[int, _Tensor]] = {}  # program -> tensors accessed in affine loops
        self._shared: dict[int, _Tensor] = {}               # HBM tensors accessed by the programs of a grid
        self._sync: dict[tuple, dict] = {}                  # program -> {other program: exchanges with it}
        self._programs: set = set()
        self._multi = False

    # -- events ---------------------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        if isinstance(event, InstructionExecuted):
            self._instruction(event)
        elif isinstance(event, LoopIteration):
            program = self._loop_program.get(event.loop_id)
            if program is not None:
                self._loops[program][-1].iteration = event.iteration
        elif isinstance(event, LoopStarted):
            self._loops.setdefault(event.program, []).append(_Loop(event))
            self._loop_program[event.loop_id] = event.program
        elif isinstance(event, LoopFinished):
            program = self._loop_program.pop(event.loop_id, None)
            if program is not None:
                stack = self._loops[program]
                stack[:] = [f for f in stack if f.loop_id != event.loop_id]
                if not any(f.parallel for f in stack):
                    self._in_loops.pop(program, None)
        elif isinstance(event, TensorAllocated):
            self._bases[event.storage_id] = event.byte_start
            self._created.setdefault(event.storage_id, event.location)
            if event.direct:
                self._direct.add(event.storage_id)
        elif isinstance(event, ProgramsMet):
            counts = dict(self._sync.get(event.program, {}))
            for member in event.members:
                if member != event.program:
                    counts[member] = counts.get(member, 0) + 1
            self._sync[event.program] = counts
        elif isinstance(event, ProgramStarted):
            self._programs.add(event.program)
            self._multi = bool(event.grid)

    def report(self) -> list[Finding]:
        return list(self.findings)

    # -- accesses -------------------------------------------------------------------------------------------
    def _instruction(self, event: InstructionExecuted) -> None:
        if event.opcode in _SKIPPED_OPCODES:
            return
        program = event.program
        stack = self._loops.get(program)
        loops = ()
        if stack:
            # a loop whose first iteration has not begun yet is not running (the instruction deferred before
            # the loop is issued after the loop started)
            loops = tuple((f.loop_id, f.iteration, f.parallel) for f in stack if f.iteration is not None)
        in_affine = any(parallel for _, _, parallel in loops)
        if not in_affine and not self._multi:
            return
        sync = self._sync.get(program, {})
        for acc, storage_id in self._accesses(event, loops, sync, hbm_only=not in_affine):
            if in_affine and storage_id not in self._direct:
                tensors = self._in_loops.setdefault(program, {})
                self._check(tensors.setdefault(storage_id, _Tensor()), acc, self._loop_conflict)
            if self._multi and acc.operand.kind is MemoryKind.HBM:
                self._check(self._shared.setdefault(storage_id, _Tensor()), acc, self._program_conflict)

    def _accesses(self, event: InstructionExecuted, loops, sync, hbm_only: bool = False):
        """The instruction's operand accesses (`hbm_only`: those of HBM operands, all that programs share);
        an element-wise update `dst = op(dst, x)` with an associative operator is one accumulation of dst
        (its read of dst is part of it)."""
        operands = event.operands
        params = event.params
        acc_op = None
        if event.opcode == "nc_matmul":
            acc_op = "matmul"
        elif params.get("dst_rmw_op") is not None:
            acc_op = str(params["dst_rmw_op"])
        elif event.opcode in ("tensor_tensor", "tensor_scalar"):
            op = params.get("op") if event.opcode == "tensor_tensor" else params.get("op0")
            if str(op) in ASSOCIATIVE_OPS:
                acc_op = str(op)
        absorbed = set()
        out = []
        mask = event.mask
        for o in operands:
            if o.access is AccessKind.READ:
                continue
            accumulate = None
            if acc_op == "matmul":
                accumulate = "matmul" if o.kind is MemoryKind.PSUM else None
            elif acc_op is not None and o.role == "dst":
                if params.get("dst_rmw_op") is not None:
                    accumulate = acc_op
                else:
                    same = [r for r in operands if r.access is AccessKind.READ and r.region == o.region
                            and r.strides == o.strides and r.offset == o.offset]
                    if same:
                        accumulate = acc_op
                        absorbed.update(id(r) for r in same)
            out.append((o, True, accumulate is not None or o.access is AccessKind.ACCUMULATE, accumulate))
        for o in operands:
            if o.access is AccessKind.READ and id(o) not in absorbed:
                out.append((o, False, True, None))
        for o, writes, reads, accumulate in out:
            if hbm_only and o.kind is not MemoryKind.HBM:
                continue
            m = None
            if mask is not None and o.offsets is None and mask.shape == o.shape:
                m = mask
            sid = o.region.storage_id
            yield _Access(o, self._bases.get(sid, 0), writes, reads, accumulate, m, event, loops, sync), sid

    def _check(self, tensor: _Tensor, acc: _Access, conflict) -> None:
        for other in tensor.candidates(acc):
            if other.seq == acc.seq and other.program == acc.program:
                continue
            if not acc.boxes_overlap(other):
                continue
            found = conflict(other, acc)
            if found is None:
                continue
            rule, first, second, make = found
            key = (rule, first.location, second.location, acc.operand.region.storage_id)
            programs = (first.program, second.program)
            reported = self._reported.get(key)
            # once per pair of lines: the lowest pair of programs (whichever ran first), so the finding does
            # not depend on the interleaving
            if reported is not None and reported[0] <= programs:
                continue
            common = np.intersect1d(other.offsets(), acc.offsets(), assume_unique=True)
            if common.size:
                finding = make(first, second, int(common.size))
                if reported is None:
                    self._reported[key] = (programs, len(self.findings))
                    self.findings.append(finding)
                else:
                    self._reported[key] = (programs, reported[1])
                    self.findings[reported[1]] = finding
        tensor.add(acc)

    # -- the two orders -------------------------------------------------------------------------------------
    def _loop_conflict(self, first: _Access, second: _Access):
        """Two accesses of one program: unordered when the outermost loop whose iteration differs between
        them is an affine loop they are both in."""
        if first.program != second.program:
            return None
        for (lid_a, it_a, parallel), (lid_b, it_b, _) in zip(first.loops, second.loops):
            if lid_a != lid_b:
                return None
            if it_a != it_b:
                if not parallel:
                    return None
                loop = next((f for f in self._loops.get(second.program, ()) if f.loop_id == lid_a), None)
                rule = "affine_loop_carried_" + _hazard(first, second).lower()
                return rule, first, second, lambda a, b, n: self._loop_finding(rule, loop, it_a, it_b, a, b, n)
        return None

    def _program_conflict(self, first: _Access, second: _Access):
        """Two accesses of different programs with no exchange ordering them. They may happen in either
        order on hardware, so the finding does not depend on the order the simulator ran them in (the
        interleaving seed): it names the pair lower program first, as a write/write or write/read race."""
        if first.program == second.program:
            return None
        if first.sync.get(second.program, 0) != second.sync.get(first.program, 0):
            return None
        if second.program < first.program:
            first, second = second, first
        rule = "program_race_write_write" if first.writes and second.writes else "program_race_write_read"
        return rule, first, second, lambda a, b, n: self._program_finding(rule, a, b, n)

    # -- findings -------------------------------------------------------------------------------------------
    def _name(self, acc: _Access) -> str:
        """The tensor's name, and the line that created it when known."""
        created = self._created.get(acc.operand.region.storage_id)
        where = f" (created at line {created.lineno})" if created is not None else ""
        return f"'{acc.operand.tensor_name}'{where}"

    def _loop_finding(self, rule, loop, it_a, it_b, first, second, count) -> Finding:
        hazard = _hazard(first, second)
        name = self._name(second)
        where = f" at line {loop.location.lineno}" if loop is not None and loop.location else ""
        message = (f"{hazard} between iterations {it_a} and {it_b} of the nl.affine_range loop{where}: "
                   f"iteration {it_b} {_verb(second)} {count} element(s) of {name} that iteration {it_a} "
                   f"{_verb(first, past=True)}")
        return Finding(FindingKind.RACE, rule, message, _lines(first, second),
                       (first.operand.region, second.operand.region), (it_a, it_b), (second.program,),
                       why="NKI's compiler treats affine_range iterations as independent and may reorder or "
                           "overlap them, so on hardware the two accesses can happen in either order; the "
                           "simulator runs iterations in order and hides this",
                       fix="use nl.sequential_range for this loop, or give each iteration its own buffer "
                           "(allocate the tensor inside the loop, or index a different slice per iteration)")

    def _program_finding(self, rule, first, second, count) -> Finding:
        kind = "write/write" if first.writes and second.writes else "write/read"
        name = self._name(second)
        message = (f"{kind} race between program {list(first.program)} (line {_lineno(first)}) and program "
                   f"{list(second.program)} (line {_lineno(second)}): program {list(first.program)} "
                   f"{_verb(first)} and program {list(second.program)} {_verb(second)} the same {count} "
                   f"element(s) of {name}, with no barrier or exchange ordering the two")
        return Finding(FindingKind.RACE, rule, message, _lines(first, second),
                       (first.operand.region, second.operand.region), (), (first.program, second.program),
                       why="SPMD programs and LNC cores run at the same time on hardware; the simulator runs "
                           "one after the other and hides which access comes first",
                       fix="give each program its own slice of the tensor, or order the accesses with "
                           "nisa.core_barrier (LNC cores) / a collective")


def _hazard(first: _Access, second: _Access) -> str:
    if first.writes and second.writes:
        return "WAW"
    return "RAW" if first.writes else "WAR"


def _verb(acc: _Access, past: bool = False) -> str:
    if acc.accumulate is not None:
        return "accumulated into" if past else "accumulates into"
    if acc.writes:
        return "wrote" if past else "writes"
    return "read" if past else "reads"


def _lineno(acc: _Access):
    return acc.location.lineno if acc.location is not None else "?"


def _lines(first: _Access, second: _Access) -> tuple:
    return tuple(loc for loc in (first.location, second.location) if loc is not None)


__all__ = ["RaceChecker", "ASSOCIATIVE_OPS"]
