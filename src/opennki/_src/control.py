"""Language layer: loops, `loop_reduce` and the SPMD queries shared by both generations.

Imports sim, instructions and language.core / dependencies. Loops are real iterators over Python ints (no
tracing, no source rewriting): the kernel body runs once per iteration. They tell the running program which
loop iteration is executing (`Program.loops`, for the loop events listeners see, the legacy affine_range
dependency check and the loop-scope rule). `loop_reduce` reads, from the bytecode right after its call,
which variable the kernel assigns the result to.
"""

from __future__ import annotations

import contextlib
import operator

from opennki.errors import KernelError, ShapeError, location_of, user_location
from opennki.events import LoopFinished, LoopIteration, LoopStarted, positional_maker
from opennki.instructions.ops import alu
from opennki.instructions.registers import RuntimeInt, VirtualRegister
from opennki.instructions.scalars import NkiScalar
from opennki.instructions.vector import TensorTensor
from opennki._src import core, dependencies, rules
from opennki.releases import Change, Generation, level_of, release
from opennki.sim.frames import peek_variable, pending_store_target, stores_into_subscript, user_frame
from opennki.sim.program import NO_REORDER, active, current


class LoopFrame:
    """A loop running in a program (`Program.loops`, outermost first).

    Attributes:
        loop_id: launch-wide loop number (the loop events carry it too).
        kind: `affine_range`, `sequential_range`, `static_range`, `range`, or a device loop's `dynamic_range` /
            `fori_loop`.
        iteration: the current iteration value.
        location: the kernel line of the loop.
        legacy: True for the legacy generation's loops, whose kinds carry semantics (independent affine
            iterations, loop-local tensors); the new generation's are plain aliases of `range`.
        is_parallel: iterations must be independent (legacy affine_range).
        is_scope: tensors created in the body are local to it (legacy affine / sequential ranges; NKI unrolls
            static_range while tracing).
        finished: the loop has finished (its tensors, which refer to it, are out of scope: _src/rules.py).
    The last two are fixed by the kind (attributes, not properties: every instruction in a loop asks).
    """

    __slots__ = ("loop_id", "kind", "iteration", "location", "legacy", "is_parallel", "is_scope", "finished")

    def __init__(self, loop_id, kind, location, legacy):
        self.loop_id, self.kind, self.iteration, self.location, self.legacy = loop_id, kind, None, location, legacy
        self.is_parallel = legacy and kind == "affine_range"
        self.is_scope = legacy and kind != "static_range"
        self.finished = False


_new_iteration = positional_maker(LoopIteration)     # one per iteration of every loop, for listeners that take them


class LoopRange:
    """`nl.affine_range` / `nl.sequential_range` / `nl.static_range`: range-like, iterating plain ints.

    `legacy=True` gives the legacy generation's semantics: affine iterations are checked for output
    dependencies (_src/dependencies.py) and tensors created in a body are local to it
    (_src/rules.py). The new generation's iterators are deprecated aliases of `range`."""

    def __init__(self, kind: str, *args, legacy: bool = False, kernel_frame=None, **kwargs):
        if legacy:
            # scheduling directives (`directives=nki.compiler.no_reorder()`, official attention tutorial v10/v11;
            # `precise_schedule=True`, nki-samples contributed/pipelined_attention, checked on hardware) only
            # constrain the compiler's instruction order; they do not change results
            kwargs.pop("directives", None)
            kwargs.pop("precise_schedule", None)
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
            bounds = tuple(operator.index(a) for a in args)
        except TypeError:
            raise KernelError(f"nl.{kind} bounds must be integers known before the loop runs", got=args) from None
        if not 1 <= len(bounds) <= 3:
            raise KernelError(f"nl.{kind} takes (stop), (start, stop) or (start, stop, step)", got=args)
        if len(bounds) == 3 and bounds[2] == 0:
            raise KernelError(f"nl.{kind} step must not be zero", expected="a nonzero step", got=bounds[2])
        self.range = range(*bounds)
        self.kind = kind
        self.legacy = legacy
        # the loop's kernel line: of the kernel frame if the front door knows it (`frames.as_kernel_frame`)
        self.location = location_of(kernel_frame) if kernel_frame is not None else user_location()

    def __len__(self):
        return len(self.range)

    def trips(self, prog):
        """The iteration values, known when the loop starts."""
        return self.range

    def induction(self, prog, i):
        """What the kernel's loop variable is in iteration `i`."""
        return i

    def __iter__(self):
        prog = active()
        trips = self.trips(prog)
        if prog is None:
            yield from trips
            return
        sim = prog.sim
        loop_id = next(prog.launch.loop_ids)
        # the loop's events go to listeners if one takes them (`loop_events`, listeners/__init__.py)
        listening = any(getattr(listener, "loop_events", True) for listener in sim.listeners)
        frame = LoopFrame(loop_id, self.kind, self.location, self.legacy)
        if listening:
            sim.emit(LoopStarted(loop_id, self.kind, len(trips), self.location, frame.is_parallel, prog.ids))
        checker = dependencies.checker(prog) if frame.is_parallel else None
        induction = None if type(self).induction is LoopRange.induction else self.induction     # None: `i`
        prog.loops.append(frame)
        try:
            for i in trips:
                if prog.pending is not None:    # the previous iteration's pending instruction belongs to it
                    prog.flush()
                frame.iteration = i
                if checker is not None:
                    checker.iteration_started(frame)
                if listening:
                    prog.emit(_new_iteration(loop_id, i))
                yield i if induction is None else induction(prog, i)
            prog.flush()
        finally:
            prog.loops.remove(frame)
            if frame.is_scope:
                rules.rules(prog).loop_finished(frame)
            if checker is not None:
                checker.loop_finished(prog)
            if listening:
                sim.emit(LoopFinished(loop_id))

    def __repr__(self):
        return f"nl.{self.kind}({self.range.start}, {self.range.stop}, {self.range.step})"


# The new generation's range iterators: the API stubs mark affine_range / sequential_range deprecated from SDK
# 2.29 (NKI 0.3: "This API is deprecated and will be removed in future releases"; 2.27 had no such note) and
# static_range from 2.32 (NKI 0.6; 0.3-0.5 told users to prefer it); NKI 0.7's loop guide (docs
# latest/nki/deep-dives/nki-loops) restates all three as deprecated aliases of Python range.
_ITERATOR_SOURCE = "nki.language stubs of SDK 2.29 / 2.32; docs latest/nki/deep-dives/nki-loops"
RANGE_ITERATORS = {
    kind: Change(f"nl.{kind}", "Python range (the iterator is an alias of it)", deprecated_in=since,
                 source=_ITERATOR_SOURCE)
    for kind, since in (("affine_range", "0.3"), ("sequential_range", "0.3"), ("static_range", "0.6"))}


def _range_iterator(kind: str, args, kwargs) -> LoopRange:
    loop = LoopRange(kind, *args, **kwargs)
    prog = active()
    if prog is not None:
        RANGE_ITERATORS[kind].apply(prog.options, location=loop.location)
    return loop


def affine_range(*args, **kwargs) -> LoopRange:
    """New generation: a deprecated alias of `range` (`RANGE_ITERATORS`; the legacy semantics live in
    legacy/language.py)."""
    return _range_iterator("affine_range", args, kwargs)


def sequential_range(*args, **kwargs) -> LoopRange:
    """New generation: a deprecated alias of `range` (`RANGE_ITERATORS`)."""
    return _range_iterator("sequential_range", args, kwargs)


def static_range(*args, **kwargs) -> LoopRange:
    """New generation: a deprecated alias of `range` (`RANGE_ITERATORS`)."""
    return _range_iterator("static_range", args, kwargs)


def unrolled_range(*args, **kwargs) -> LoopRange:
    """New generation `nl.range`: Python's `range` as an nl iterator (unrolled, like the deprecated aliases
    above). The spec lists no `nl.range`, but NKI Library kernels (mxfp_load_utils) loop with it on
    hardware, so NKI has it."""
    return LoopRange("range", *args, **kwargs)


class DeviceRange(LoopRange):
    """`nl.dynamic_range` / `nl.fori_loop`: a device loop, run by the sequencers rather than unrolled.

    `start` / `stop` are ints, `VirtualRegister`s or (NKI 0.7) 32-bit `NkiScalar`s, read when the loop starts
    (as the sequencer does); `step` is a positive compile-time int. The loop variable is a read-only run-time
    integer (a new one per loop) holding the iteration value, never a Python int: a `VirtualRegister` for
    `dynamic_range`, and for `fori_loop` from NKI 0.7 an int32 `NkiScalar` unless a bound is a
    VirtualRegister (docs: nki.language.fori_loop, v2.33). A shape-only run knows no run-time value: with
    such a bound it traces the body once."""

    def __init__(self, kind: str, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        for role, bound in (("start", start), ("stop", stop)):
            if isinstance(bound, NkiScalar):
                if bound.dtype.itemsize != 4:
                    raise KernelError(f"nl.{kind} {role} must be 32-bit: the loop's trip-count comparison has no "
                                      "64-bit form", got=f"{bound.nki_name} ({bound.dtype.name})",
                                      hint="compute 64-bit values inside the body and use them as offsets there")
            elif not isinstance(bound, RuntimeInt):
                try:
                    operator.index(bound)
                except TypeError:
                    raise KernelError(f"nl.{kind} {role} must be an int, a VirtualRegister or an NkiScalar",
                                      got=type(bound).__name__) from None
        if isinstance(step, RuntimeInt) or not isinstance(step, int) or step <= 0:
            raise KernelError(f"nl.{kind} step must be a positive compile-time int", got=step)
        self.kind, self.legacy, self.location = kind, False, user_location()
        self.bounds = (start, stop, step)

    def __len__(self):
        raise TypeError(f"nl.{self.kind} is a device loop: its trip count is known only when it runs")

    def loop_variable(self, prog):
        """A new read-only run-time integer for the loop's iteration value (class docstring)."""
        start, stop, _ = self.bounds
        scalar = (self.kind == "fori_loop" and level_of(prog.options, Generation.NEW) >= release("0.7")
                  and not any(isinstance(b, VirtualRegister) for b in (start, stop)))
        return NkiScalar(prog.machine, "int32", prog.issue) if scalar else VirtualRegister(prog.machine, frozen=True)

    def trips(self, prog):
        if prog is None:
            raise KernelError(f"nl.{self.kind} is a device loop: it runs inside a kernel")
        _outside_no_reorder(f"nl.{self.kind}")
        self.register = self.loop_variable(prog)
        start, stop, step = self.bounds
        self.known = not any(isinstance(b, RuntimeInt) and b.is_unknown for b in (start, stop))
        if not self.known:
            return range(1)
        start, stop = (b.index(f"nl.{self.kind} bound") if isinstance(b, RuntimeInt) else operator.index(b)
                       for b in (start, stop))
        return range(start, stop, step)

    def induction(self, prog, i):
        if self.known:
            prog.machine.registers[self.register.number] = i
        return self.register

    def __repr__(self):
        return f"nl.{self.kind}{self.bounds}"


DYNAMIC_RANGE = Change("a `for i in nl.dynamic_range(...)` loop", "nl.fori_loop(lower, upper, body) (the body takes "
                       "the loop value)", deprecated_in="0.6", removed_in="0.7",
                       source="Migrating from NKI 0.5.0 to NKI 0.6.0; NKI 0.7.0 release notes")


def dynamic_range(start, stop=None, step=1) -> DeviceRange:
    """New generation (NKI 0.2-0.5, deprecated in 0.6 for `fori_loop`, removed in 0.7: `DYNAMIC_RANGE`): a
    device loop (see DeviceRange)."""
    prog = active()
    if prog is not None:
        DYNAMIC_RANGE.apply(prog.options)
    return DeviceRange("dynamic_range", start, stop, step)


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """New generation (NKI 0.6): `body_fun(i)` for each i of the device loop [lower, upper) by `step`
    (see DeviceRange); the body returns None."""
    for i in DeviceRange("fori_loop", lower, upper, step):
        result = body_fun(i)
        if result is not None:
            raise KernelError("nl.fori_loop body_fun must return None", got=type(result).__name__)


def while_loop(init, body_fun) -> None:
    """New generation (NKI 0.6): `r = init; while r != 0: r = body_fun(r)`, a device loop on a register
    (checked before each iteration, so it may run zero times); `body_fun` returns the next condition
    register."""
    _outside_no_reorder("nl.while_loop")
    cond = init
    while _nonzero(cond):
        cond = body_fun(cond)
        if not isinstance(cond, RuntimeInt):
            raise KernelError("nl.while_loop body_fun must return the next condition register",
                              got=type(cond).__name__)


def _nonzero(cond) -> bool:
    """A while_loop condition: a register's or (NKI 0.7) a scalar's value is nonzero (unknown in a
    shape-only run: true once)."""
    if isinstance(cond, VirtualRegister):
        return cond.is_nonzero()
    if isinstance(cond, NkiScalar):
        if cond.is_unknown:
            cond.machine.registers[cond.number] = 0
            return True
        return cond.value("nl.while_loop") != 0
    raise KernelError("nl.while_loop's condition is a VirtualRegister or an NkiScalar", got=type(cond).__name__)


_no_reorder_depth = NO_REORDER


@contextlib.contextmanager
def no_reorder():
    """New generation: `with nl.no_reorder(): ...` keeps program order for the instructions inside (a
    scheduling constraint of the compiler; eager execution already issues them in order, so values are
    unchanged; their events say `ordered`, and the cost model keeps them in order on their engines).
    Unrolled loops may run inside; register-based device loops may not (spec/language.md §5.6)."""
    token = _no_reorder_depth.set(_no_reorder_depth.get() + 1)
    try:
        yield
    finally:
        _no_reorder_depth.reset(token)


def _outside_no_reorder(api: str) -> None:
    if _no_reorder_depth.get():
        raise KernelError(f"{api} is a device loop, which is not allowed inside nl.no_reorder()",
                          instruction=api, hint="move the device loop out of the no_reorder block")


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


# ------------------------------------------------------------------------------------------ loop_reduce

def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, api: str = "nl.loop_reduce", **kwargs):
    """Accumulate tile `x` into the assignment target across loop iterations: `b = nl.loop_reduce(a, op,
    loop_indices=[k])` is `b = op(b, a)` (the destination is also an operand), which the compiler may keep
    parallel across the listed `affine_range` loops because `op` is associative.

    The eager simulator finds the destination the way the statement names it: for `b = ...` it reads the
    current `b` (a tile created before the loop, e.g. with nl.zeros) and updates it in place; for
    `t[...] = ...` the update is retargeted to `t[...]` by the assignment. `loop_indices` (loop variables or
    ints) only guide the compiler and are validated, not used."""
    prog = core.current(api)
    core.require_tile(x, "x", api)
    opdef = alu(op)
    if not opdef.reducible:
        raise KernelError(f"{api} needs an associative reduction operator", got=opdef.name, instruction=api,
                          expected="add, multiply, maximum, minimum, bitwise/logical and/or/xor")
    indices = loop_indices if isinstance(loop_indices, (list, tuple)) else (loop_indices,)
    for k in indices:
        try:
            operator.index(k)
        except TypeError:
            raise KernelError(f"{api} loop_indices are loop variables or integers", got=k,
                              instruction=api) from None
    frame = user_frame()
    name = pending_store_target(frame) if frame is not None else None
    current_value = peek_variable(frame, name) if name is not None else None
    if core.is_tensor(current_value):
        if current_value.shape != x.shape:
            raise ShapeError(f"{api}: the destination {name!r} must have the shape of x", instruction=api,
                             expected=x.shape, got=current_value.shape)
        prog.issue(TensorTensor(dst=current_value, data1=current_value, data2=x, op=opdef, mask=mask), api)
        return current_value
    if frame is not None and stores_into_subscript(frame):
        result = core.alloc(x.shape, dtype if dtype is not None else x.dtype)
        return prog.defer(TensorTensor(dst=result, data1=result, data2=x, op=opdef, mask=mask), result, api)
    raise KernelError(f"{api} accumulates into its assignment target, which must be a tile created before the "
                      "loop", got=name or "an unsupported target", instruction=api,
                      hint="b = nl.zeros(shape, dtype) before the loop, then b = nl.loop_reduce(a, np.add, [i])")
