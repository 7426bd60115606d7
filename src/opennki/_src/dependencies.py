"""Language layer: the `affine_range` output-dependency check (`err_unexpected_output_dependencies`).

Imports sim (Observer), instructions (operator table) and errors. Iterations of a legacy `nl.affine_range`
loop are independent by contract: the compiler may run them in any order or in parallel, so two iterations
that write the same location make the result depend on the schedule (spec/language.md §5.6, §8.7). NKI's
compiler rejects such kernels; opennki, which runs iterations in order, checks every write instead:

* A program gets an `OutputDependencyChecker` observer when it first enters an affine loop. While affine loops
  run (`Program.loops`) it keeps the writes made: tensor, the iterations of the affine loops running then,
  per-dimension bounding box and, lazily, the exact element offsets (masks and run-time indices honoured); a
  write is compared, per running loop, with those made in its other iterations. The writes of a tensor are
  bucketed by box (`_Writes`), so a write is compared only with earlier writes near it, not with all of
  them: a loop writing one tile per iteration costs linear time, not quadratic.
* A write that hits an element written by another iteration of an enclosing affine loop raises a
  KernelError naming both kernel lines. Iterations of a `sequential_range` / `static_range` / `range` loop
  inside one affine iteration are ordered, so they never conflict with each other.
* Allowed exceptions: accumulation into a buffer defined outside the loop — matmul accumulation into PSUM
  (`acc += nl.matmul(...)`), DMA read-modify-writes (`nl.atomic_rmw`), and element-wise instructions whose
  destination is also their input with an associative operator (`acc += x`, `acc[...] = acc + x`,
  `nl.loop_reduce`).
* Tensors created inside the loop are new in every iteration, so they never conflict. Physical tiles that
  direct allocation shares between several logical blocks (modulo allocation) are exempt: the compiler
  reasons about logical blocks there (`exempt`).

Reads are not checked (a read-after-write across iterations is the loop-carried dependency NKI calls
unsafe, but the compiler does not report it either).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from opennki.errors import KernelError
from opennki.events import AccessKind
from opennki.instructions.ops import alu
from opennki.machine.machine import Machine
from opennki.machine.tensor import strided_offsets
from opennki.sim.program import Observer

STATE = "opennki._src.dependencies"
_WRITE = AccessKind.WRITE       # looking an enum member up on its class is slow (every write in a loop asks)


class _Write:
    """One write: the iterations of the affine loops running when it was made (`frames`: (loop id,
    iteration) pairs, one record for all of them), the tensor's bounding box per storage dim, and its element
    offsets (`offsets`), or what they are computed from when a later write overlaps the box (`spec`: the
    view's shape, strides, offset and active elements; the common case is no overlap at all, each iteration
    writing its own tile or slice). Keeps numbers, never the view, so the tensor can still be freed."""

    __slots__ = ("frames", "box", "offsets", "spec", "location", "name")

    def __init__(self, frames, box, offsets, location, name, spec=None):
        self.frames = frames            # the running loops' (loop id, iteration) pairs, shared by many writes
        self.box = box
        self.offsets = offsets
        self.spec = spec
        self.location = location
        self.name = name

    def iteration(self, loop_id: int, default=None):
        """The iteration of loop `loop_id` that made this write (`default` if that loop was not running)."""
        for lid, i in self.frames:
            if lid == loop_id:
                return i
        return default

    def elements(self) -> np.ndarray:
        """The sorted unique flat storage offsets written."""
        if self.offsets is None:
            shape, strides, offset, active = self.spec
            offs = strided_offsets(shape, strides, offset)
            if active is not None:
                offs = offs[np.broadcast_to(active, shape)]
            self.offsets, self.spec = np.unique(offs), None
        return self.offsets


def _spec(view, strides, offset, mask) -> tuple:
    """What `_Write.elements` computes a direct view's written offsets from (the view's geometry given):
    its shape, strides, offset and active elements (None: all; a constant `mask=True` over a view without its
    own mask activates all)."""
    if view.mask is None and (mask is None or mask is True):
        return view.shape, strides, offset, None
    return view.shape, strides, offset, Machine.effective_mask(view, mask)


def _box(view) -> tuple[tuple[int, int], ...] | None:
    """Per storage dim (lo, hi) of a direct view; None for an indirect one (its offsets say more)."""
    if view.dynamic:
        return None
    return (view._geo or view._geometry())[0]


def _overlaps(a, b) -> bool:
    if a is None or b is None:
        return True
    return all(alo <= bhi and blo <= ahi for (alo, ahi), (blo, bhi) in zip(a, b))


def _offsets(m, view, mask) -> np.ndarray:
    """Sorted unique flat storage offsets written through `view` by the instruction that just ran."""
    recorded = m.offsets.get(id(view))
    if recorded is not None:
        return np.unique(recorded)
    offs = view.flat_offsets()
    active = Machine.effective_mask(view, mask)
    if active is not None:
        offs = offs[np.broadcast_to(active, view.shape)]
    return np.unique(offs)


def _is_accumulation(instr, view) -> bool:
    """An element-wise update `dst = op(dst, x)` with an associative operator, or a DMA accumulate."""
    if getattr(instr, "dst_rmw_op", None) is not None:
        return True
    if instr.opcode == "tensor_tensor":
        op = instr.op
    elif instr.opcode == "tensor_scalar":
        op = instr.op0
    else:
        return False
    if not alu(op).reducible:
        return False
    return any(access is AccessKind.READ and other.same_view(view) for _, other, access in instr.operands())


def _write_kind(cls):
    """How `executed` treats the writes of an instruction of class `cls` (remembered per class in `_KINDS`):
    `_NO_WRITES` (no operand field is written: nc_matmul accumulates, reads are not checked), `_RMW` (a class
    with a `dst_rmw_op` field: its writes are accumulations exactly when that is set, as `_is_accumulation`
    says), `_ALU` (element-wise tensor_tensor / tensor_scalar: `_is_accumulation` decides) or `_PLAIN`."""
    kind = _KINDS.get(cls)
    if kind is None:
        if not any(access is _WRITE for _, access in cls._operand_fields):
            kind = _NO_WRITES
        elif cls.opcode in ("tensor_tensor", "tensor_scalar"):
            kind = _ALU
        elif hasattr(cls, "dst_rmw_op"):
            kind = _RMW
        else:
            kind = _PLAIN
        _KINDS[cls] = kind
    return kind


_NO_WRITES, _RMW, _ALU, _PLAIN = "no writes", "rmw", "alu", "plain"
_KINDS: dict = {}        # instruction class -> _write_kind


_INDEXED_DIMS = 2          # storage dims the box buckets of `_Writes` cut along
_WIDE_CELLS = 64           # a write spanning more buckets than this is compared with every later write


class _Writes:
    """The writes of one tensor in one loop, in order, bucketed by bounding box: `near(box)` gives, in
    write order, every earlier write whose box may overlap `box` (a superset; the exact test follows). The
    bucket widths are the first boxed write's extents along the first storage dims (tiles written by a
    loop are usually alike); writes without a box (run-time indices) or spanning many buckets are kept
    aside and always returned. Writes are bucketed when `near` first needs them: most tensors a loop writes
    are tiles written once per iteration, whose buckets nothing would ever ask for."""

    __slots__ = ("items", "widths", "cells", "wide", "indexed")

    def __init__(self):
        self.items: list[_Write] = []
        self.widths: tuple[int, ...] | None = None
        self.cells: dict[tuple, list[int]] = {}
        self.wide: list[int] = []
        self.indexed = 0                # items[:indexed] are in the buckets

    def _cells(self, box):
        """The bucket keys `box` spans, or None when it has no box or spans too many."""
        if box is None:
            return None
        if self.widths is None:
            self.widths = tuple(max(1, hi - lo + 1) for lo, hi in box[:_INDEXED_DIMS])
        ranges = [range(lo // w, hi // w + 1) for (lo, hi), w in zip(box, self.widths)]
        if math.prod(len(r) for r in ranges) > _WIDE_CELLS:
            return None
        return itertools.product(*ranges)

    def near(self, box) -> list:
        if not self.items:
            return self.items
        while self.indexed < len(self.items):
            self._index(self.indexed)
            self.indexed += 1
        cells = self._cells(box)
        if cells is None:
            return self.items
        found = set(self.wide)
        for cell in cells:
            found.update(self.cells.get(cell, ()))
        return [self.items[i] for i in sorted(found)]

    def add(self, write: _Write) -> None:
        self.items.append(write)

    def _index(self, position: int) -> None:
        cells = self._cells(self.items[position].box)
        if cells is None:
            self.wide.append(position)
            return
        for cell in cells:
            self.cells.setdefault(cell, []).append(position)


class OutputDependencyChecker(Observer):
    """Per-program checker (module docstring). `writes` keeps, per tensor, the writes made while affine loops
    run, each with the iterations of the loops running then (`_Write.frames`); a write is compared, for each
    affine loop running now, with the earlier writes made in another iteration of that loop. Loop ids are new
    for every run of a loop, so the writes of a finished loop never match a running one; all are dropped when
    no affine loop runs any more. One record per tensor (not one per running loop), a tuple until a second
    write comes, keeps the usual write, a tile's first, to a look-up and an insertion."""

    def __init__(self):
        # storage id -> writes: a first write, kept as its `_Write`'s arguments (most tensors are tiles written
        # once), then the `_Write`, then a `_Writes` index of all
        self.writes: dict[int, tuple | _Write | _Writes] = {}
        self.exempt: set[int] = set()
        self.frames: tuple | None = None    # (loop id, iteration) of the running affine loops; None: stale

    def iteration_started(self, frame) -> None:
        """The affine loop `frame` started an iteration: the running iterations changed. The next iteration of the
        innermost affine loop the kept pairs hold (a loop is pushed or popped only at its first iteration or once
        it finished, which leave the pairs stale) changes its pair alone."""
        frames = self.frames
        if frames and frames[-1][0] == frame.loop_id:
            self.frames = frames[:-1] + ((frame.loop_id, frame.iteration),)
        else:
            self.frames = None

    def loop_finished(self, prog) -> None:
        self.frames = None
        for frame in prog.loops:
            if frame.is_parallel:
                return
        self.writes.clear()

    def executed(self, prog, instr, location) -> None:
        frames = self.frames
        if frames is None:
            frames = self.frames = tuple([(f.loop_id, f.iteration) for f in prog.loops if f.is_parallel])
        if not frames:
            return
        kind = _KINDS.get(type(instr)) or _write_kind(type(instr))
        if kind is _NO_WRITES:
            return
        if kind is _RMW and instr.dst_rmw_op is not None:
            return                      # every write is the accumulation (`_is_accumulation`)
        exempt, writes = self.exempt, self.writes
        for _, view, access in instr._operands or instr.operands():
            if access is not _WRITE:
                continue
            st = view.storage
            sid = st.id
            if sid in exempt:
                continue
            if kind is _ALU and _is_accumulation(instr, view):
                continue
            if sid not in writes and not view.dynamic:
                # the tensor's first write in the running loops (most are tiles written once): nothing to
                # compare it with, and its offsets are computed only if a later write overlaps its box
                box, strides, offset = view._geo or view._geometry()
                # kept as `_Write`'s arguments: `_record` makes the `_Write` if a second write comes (`_spec`'s
                # first case inline)
                mask = instr.mask
                writes[sid] = (frames, box, None, location, st.name, (view.shape, strides, offset, None) if (
                    view.mask is None and (mask is None or mask is True)) else _spec(view, strides, offset, mask))
                continue
            self._record(prog, instr, view, frames, location)

    def _record(self, prog, instr, view, frames, location) -> None:
        """Compare the write with the earlier writes of its tensor made in another iteration of each running
        affine loop (outermost loop first, earlier writes first), then keep it. A tensor's writes are a single
        `_Write` until a second one comes (most tensors are tiles written once), then a `_Writes` index."""
        sid = view.storage.id
        box = _box(view)
        writes = self.writes
        previous = writes.get(sid)
        mine = None
        if type(previous) is tuple:     # a first write, as `executed` keeps it
            previous = writes[sid] = _Write(*previous)
        if previous is not None:
            near = (previous,) if type(previous) is _Write else previous.near(box)
            for loop_id, iteration in frames:
                for w in near:
                    theirs_at = w.iteration(loop_id, iteration)
                    if theirs_at == iteration or not _overlaps(w.box, box):
                        continue
                    if mine is None:
                        mine = _offsets(prog.machine, view, instr.mask)
                    common = np.intersect1d(w.elements(), mine, assume_unique=True)
                    if common.size:
                        self._report(prog, loop_id, w, iteration, view, common)
        if mine is None and view.dynamic:
            mine = _offsets(prog.machine, view, instr.mask)   # run-time offsets are only known now
        spec = None
        if mine is None:
            _, strides, offset = view._geo or view._geometry()
            spec = _spec(view, strides, offset, instr.mask)
        write = _Write(frames, box, mine, location, view.name, spec)
        if previous is None:
            writes[sid] = write
        elif type(previous) is _Write:
            index = writes[sid] = _Writes()
            index.add(previous)
            index.add(write)
        else:
            previous.add(write)

    def _report(self, prog, loop_id, first, iteration, view, common) -> None:
        where = f" (first written at line {first.location.lineno})" if first.location else ""
        raise KernelError(
            f"iterations {first.iteration(loop_id)} and {iteration} of an nl.affine_range loop both write "
            f"{common.size} element(s) of tensor '{view.name}'{where}; affine_range iterations must be "
            "independent", code="err_unexpected_output_dependencies",
            hint="use nl.sequential_range for a loop-carried dependency, write a different slice in each "
                 "iteration, or allocate the tensor inside the loop")


def checker(prog) -> OutputDependencyChecker:
    """The program's checker, installed on first use."""
    found = prog.state.get(STATE)
    if found is None:
        found = prog.state[STATE] = OutputDependencyChecker()
        prog.observers.append(found)
    return found


def exempt(prog, storage) -> None:
    """Exclude a physical tile shared by several logical blocks from the check (module docstring)."""
    checker(prog).exempt.add(storage.id)


__all__ = ["OutputDependencyChecker", "checker", "exempt"]
