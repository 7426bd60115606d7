"""Cost layer: helpers the cost rules share (operand lookup, sizes, engine timing). Imports events and hw.

Rules read only what an `InstructionExecuted` event carries: operands by role (falling back to "the first
input" / "the first output" so a rule keeps working when an instruction names its operands differently),
their memories, dtypes, sizes and strides, and the instruction's plain parameters.
"""

from __future__ import annotations

import numpy as np

from opennki.events import AccessKind, Engine, InstructionExecuted, MemoryKind, Operand

SIXTEEN_BIT_FLOATS = ("bfloat16", "float16")


def find(ev: InstructionExecuted, *roles: str) -> Operand | None:
    """The first operand whose role is one of `roles` (in the order given)."""
    for role in roles:
        for o in ev.operands:
            if o.role == role:
                return o
    return None


def inputs(ev: InstructionExecuted) -> list[Operand]:
    """Data inputs: operands read, without run-time index tiles."""
    return [o for o in ev.operands if o.access is AccessKind.READ and not o.role.startswith("index:")]


def outputs(ev: InstructionExecuted) -> list[Operand]:
    return [o for o in ev.operands if o.access is not AccessKind.READ]


def named(ev: InstructionExecuted, *roles: str) -> Operand:
    """The first operand whose role is one of `roles`; a rule naming roles the event lacks is a bug of the
    rule (tests/cost/test_rule_roles.py checks every name against the instruction's operand fields), so it
    raises instead of guessing another operand."""
    o = find(ev, *roles)
    if o is None:
        raise LookupError(f"cost rule of {ev.opcode}: no operand {' / '.join(roles)} (operands: "
                          f"{[x.role for x in ev.operands]})")
    return o


def main_input(ev: InstructionExecuted, *roles: str) -> Operand | None:
    """The operand whose size drives the cost: the first of `roles` (which must be present), or without
    roles the largest data input, else the first output (instructions such as memset or iota only write)."""
    if roles:
        return named(ev, *roles)
    ins = inputs(ev)
    if ins:
        return max(ins, key=lambda x: x.free_elems)
    outs = outputs(ev)
    return outs[0] if outs else None


def main_output(ev: InstructionExecuted, *roles: str) -> Operand | None:
    """The first of `roles` (which must be present), or without roles the first output."""
    if roles:
        return named(ev, *roles)
    outs = outputs(ev)
    return outs[0] if outs else None


def active_ratio(ev: InstructionExecuted) -> float:
    """Share of each partition's free elements the legacy `mask=` leaves active (the busiest partition's,
    since the 128 lanes run in lock step); 1.0 without a mask."""
    if ev.mask is None or ev.mask.size == 0:
        return 1.0
    m = np.asarray(ev.mask)
    if m.ndim < 2:
        return float(np.count_nonzero(m)) / m.size
    rows = m.reshape(m.shape[0], -1)
    return float(rows.sum(axis=1).max()) / rows.shape[1]


def elems(ev: InstructionExecuted, op: Operand | None) -> float:
    """Elements per partition `op` contributes to the instruction (after the mask)."""
    if op is None:
        return 0.0
    return op.free_elems * active_ratio(ev)


def gathered_steps(op: Operand) -> np.ndarray | None:
    """The element steps between neighbours along the innermost dim of a tensor-indirection access, from the
    offsets it touched; None when the run recorded none (shape-only, or masked elements left out)."""
    offs = op.offsets
    if offs is None or offs.size != int(np.prod(op.shape)) or len(op.shape) < 2:
        return None
    return np.diff(offs.reshape(op.shape), axis=-1)


def is_contiguous(op: Operand) -> bool:
    """The innermost free dimension is unit-stride (or a single element). A tensor-indirection access is,
    only where the offsets it touched were consecutive (unknown offsets count as not)."""
    if op.gathered and op.shape[-1] != 1:
        steps = gathered_steps(op)
        return steps is not None and bool((steps == 1).all())
    if not op.strides or len(op.shape) < 2:
        return True
    return op.shape[-1] == 1 or op.strides[-1] == 1


def is_strided(op: Operand) -> bool:
    """The innermost stride exceeds 16 bytes: engines then get half the SBUF/PSUM bandwidth
    (spec/hardware.md §2, "Strided penalty"). A tensor-indirection access counts by the steps between the
    offsets it touched; with unknown offsets (a shape-only run) it counts as strided ([GAP]: the Trainium3
    guide gives tensor indirection no rate of its own; arbitrary columns are the penalty's worst case)."""
    if op.gathered and op.shape[-1] != 1:
        steps = gathered_steps(op)
        return steps is None or bool((np.abs(steps) * op.itemsize > 16).any())
    if not op.strides or len(op.shape) < 2 or op.shape[-1] == 1:
        return False
    return abs(op.strides[-1]) * op.itemsize > 16


def in_memory(op: Operand | None, kind: MemoryKind) -> bool:
    return op is not None and op.kind is kind


def param_name(ev: InstructionExecuted, key: str) -> str | None:
    """A parameter as a lower-case name (ops, enums, strings)."""
    value = ev.params.get(key)
    if value is None:
        return None
    return str(value).split(".")[-1].lower()


_SPECS: dict[int, tuple] = {}


def engine_spec(hw, engine: Engine):
    """The EngineCost record of a compute engine (Sync for anything without one)."""
    specs = _SPECS.get(id(hw))
    if specs is None or specs[0] is not hw:
        c = hw.cost
        by_engine = [c.sync] * (max(e.value for e in Engine) + 1)
        for e, spec in ((Engine.VECTOR, c.vector), (Engine.SCALAR, c.scalar), (Engine.GPSIMD, c.gpsimd),
                        (Engine.TENSOR, c.tensor)):
            by_engine[e.value] = spec
        specs = _SPECS[id(hw)] = (hw, by_engine)
    return specs[1][engine._value_]


_UNKNOWN, _SYNC = Engine.UNKNOWN, Engine.SYNC     # bound once: class lookups of members are slow (3.11)


def schedulable_engine(engine: Engine) -> Engine:
    """The engine queue an instruction is placed on (register and control instructions without a stated
    engine run on the Sync sequencer)."""
    return _SYNC if engine is _UNKNOWN else engine
