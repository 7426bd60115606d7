"""Language layer: loops and SPMD queries shared by both generations.

Loops are real iterators over Python ints (no tracing, no source rewriting): the kernel body runs once per
iteration. They tell the running program which loop iteration is executing (for the loop events listeners
see and for the race checker) and nothing else.
"""

from __future__ import annotations

import operator

from opennki.errors import KernelError, user_location
from opennki.events import LoopFinished, LoopIteration, LoopStarted
from opennki.sim.program import active, current


class LoopRange:
    """`nl.affine_range` / `nl.sequential_range` / `nl.static_range`: range-like, iterating plain ints."""

    def __init__(self, kind: str, *args, **kwargs):
        if kwargs:
            extra = set(kwargs) - {"start", "stop", "step"}
            if extra:
                raise KernelError(f"nl.{kind}() got unexpected keyword arguments {sorted(extra)}")
            if "start" in kwargs and not args:
                args = (kwargs["start"],)
            if "stop" in kwargs:
                args = args + (kwargs["stop"],) if len(args) == 1 else (0, kwargs["stop"])
            if "step" in kwargs:
                args = args + (kwargs["step"],)
        try:
            self.range = range(*(operator.index(a) for a in args))
        except TypeError:
            raise KernelError(f"nl.{kind} bounds must be integers known before the loop runs", got=args) from None
        self.kind = kind
        self.location = user_location()

    def __len__(self):
        return len(self.range)

    def __iter__(self):
        prog = active()
        if prog is None:
            yield from self.range
            return
        sim = prog.sim
        loop_id = next(prog.launch.loop_ids)
        listening = bool(sim.listeners)
        if listening:
            sim.emit(LoopStarted(loop_id, self.kind, len(self.range), self.location))
        prog.loops.append([loop_id, self.kind, None])
        try:
            for i in self.range:
                prog.loops[-1][2] = i
                if listening:
                    sim.emit(LoopIteration(loop_id, i))
                yield i
        finally:
            prog.loops.pop()
            if listening:
                sim.emit(LoopFinished(loop_id))

    def __repr__(self):
        return f"nl.{self.kind}({self.range.start}, {self.range.stop}, {self.range.step})"


def affine_range(*args, **kwargs) -> LoopRange:
    """Parallel loop: iterations must not depend on each other except through associative accumulation."""
    return LoopRange("affine_range", *args, **kwargs)


def sequential_range(*args, **kwargs) -> LoopRange:
    """Sequential loop: loop-carried dependencies allowed."""
    return LoopRange("sequential_range", *args, **kwargs)


def static_range(*args, **kwargs) -> LoopRange:
    """Fully unrolled loop (the loop variable is a Python int)."""
    return LoopRange("static_range", *args, **kwargs)


def program_id(axis=0) -> int:
    """Index of the running program along grid `axis`."""
    prog = current("nl.program_id")
    grid = prog.grid
    axis = int(axis)
    if not grid:
        if axis == 0:
            return 0
        raise KernelError("nl.program_id axis out of range for a launch without a grid", got=axis)
    if not 0 <= axis < len(grid):
        raise KernelError("nl.program_id axis out of range", expected=f"[0, {len(grid) - 1}]", got=axis)
    return prog.ids[axis]


def num_programs(axes=None) -> int:
    """Programs along `axes` (an int or tuple); None: all programs of the grid."""
    prog = current("nl.num_programs")
    grid = prog.grid or (1,)
    if axes is None:
        axes = tuple(range(len(grid)))
    elif isinstance(axes, int):
        axes = (axes,)
    total = 1
    for a in axes:
        if not 0 <= int(a) < len(grid):
            raise KernelError("nl.num_programs axis out of range", expected=f"[0, {len(grid) - 1}]", got=a)
        total *= grid[int(a)]
    return total


def program_ndim() -> int:
    return len(current("nl.program_ndim").grid)
