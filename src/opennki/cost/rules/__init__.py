"""Cost layer: the cost rules, one per instruction opcode. Imports events, hw and the rule modules.

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


def rule_for(opcode: str) -> Rule | None:
    return RULES.get(opcode)


def cost_of(ev: InstructionExecuted, hw) -> Cost | None:
    """The cost of one executed instruction on `hw`, or None when its opcode has no rule."""
    rule = RULES.get(ev.opcode)
    return None if rule is None else rule(ev, hw)


# the rule modules register themselves on import
from opennki.cost.rules import control, dma, gpsimd, scalar, tensor, vector  # noqa: E402,F401

__all__ = ["RULES", "Rule", "cost_rule", "rule_for", "cost_of"]
