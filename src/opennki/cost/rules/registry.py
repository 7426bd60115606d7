"""Cost layer: the registry of cost rules, one per instruction opcode. Imports events and the cost value.

A rule is `rule(event, hw) -> Cost`: it reads only the `InstructionExecuted` event (operands with their
memories, shapes, dtypes and strides; the instruction's plain parameters) and the target's `CostParams`,
never live machine state. Rules are registered by NKI opcode name with `@cost_rule("opcode", ...)`, so
`RULES` can be checked against the instruction registry: an instruction without a rule is *uncosted* and is
reported as such, never silently free.

Formulas come from spec/isa.md §11 (engine cycles; N = elements per partition of the main input) with the
v3/v4 perf modes of spec/hardware.md §5.3; where the spec has none, the rule's docstring says what was chosen.
"""

from __future__ import annotations

from typing import Callable

from opennki.cost.value import Cost
from opennki.events import InstructionExecuted

Rule = Callable[[InstructionExecuted, object], Cost]
RULES: dict[str, Rule] = {}


def cost_rule(*opcodes: str):
    """Register the decorated function as the cost rule of every opcode in `opcodes`."""
    def register(fn: Rule) -> Rule:
        for opcode in opcodes:
            if opcode in RULES:
                raise RuntimeError(f"cost rule for {opcode} defined twice")
            RULES[opcode] = fn
        return fn
    return register


_MEMO: dict[int, tuple[object, dict]] = {}     # id(hw) -> (hw, {signature: Cost}); hw held, so ids stay unique
_MEMO_LIMIT = 4096


def _signature(ev: InstructionExecuted) -> tuple | None:
    """What a rule can see of an event: equal signatures give equal costs (rules are pure). None when the
    event cannot be keyed (a legacy mask, run-time offsets); unhashable parameters show when it is used."""
    if ev.mask is not None:
        return None
    key = [ev.opcode, id(ev.engine)]
    for o in ev.operands:
        if o.offsets is not None:
            return None
        r = o.region
        # enum members by id(): they are singletons, and hashing an Enum runs Python code
        key += (o.role, id(o.access), id(r.kind), r.partition_start, o.shape, o.dtype, o.itemsize, o.strides)
    # params in their given order (one order per instruction class): the key is exact either way, and sorting
    # every event's parameters cost more than an occasional miss would
    key += ev.params.items()
    return tuple(key)


def cost_of(ev: InstructionExecuted, hw) -> Cost | None:
    """The cost of one executed instruction on `hw`, or None when its opcode has no rule. Rules are pure
    functions of what the event shows, so costs are memoised by that (loops repeat the same shapes)."""
    rule = RULES.get(ev.opcode)
    if rule is None:
        return None
    key = _signature(ev)
    if key is None:
        return rule(ev, hw)
    entry = _MEMO.get(id(hw))
    if entry is None:
        entry = _MEMO[id(hw)] = (hw, {})
    memo = entry[1]
    try:
        cost = memo.get(key)            # hashes the key once (a tuple does not keep its hash)
    except TypeError:                   # an unhashable parameter value: not memoised
        return rule(ev, hw)
    if cost is None:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        cost = memo[key] = rule(ev, hw)
    return cost


__all__ = ["RULES", "Rule", "cost_rule", "cost_of"]
