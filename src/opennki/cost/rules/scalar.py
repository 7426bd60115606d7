"""Cost layer: Scalar Engine (ACT) rules (spec/isa.md §6.1-6.3, §11.1). Imports events, hw and common.

`func(data * scale + bias)` is one pass: `max(MIN_II, N)` ACT cycles with scale and bias free. Writing
`reduce_res` adds an `ActReadAccumulator` (about MIN_II cycles). An instruction whose function needs an
activation table names it in `Cost.table`; the scheduler charges a table load when the engine switches
tables (spec/hardware.md §5.4 [OBS]).
"""

from __future__ import annotations

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import elems, find, main_input, param_name
from opennki.cost.rules.vector import elementwise
from opennki.cost.value import Cost


def _table(ev, hw) -> str | None:
    fn = param_name(ev, "op")
    if fn is None or fn in hw.cost.scalar.tableless_functions:
        return None
    return fn


def _activation(ev, hw, *, always_readout: bool) -> Cost:
    n = elems(ev, main_input(ev, "data"))
    act = hw.cost.scalar
    readout = act.read_accumulator_cycles if (always_readout or find(ev, "reduce_res") is not None) else 0
    cost = elementwise(ev, hw, n, extra_cycles=readout)
    return Cost(cost.engine, busy_ns=cost.busy_ns, elem_ops=cost.elem_ops, table=_table(ev, hw))


@cost_rule("activation")
def activation(ev, hw) -> Cost:
    """`max(MIN_II, N)`, + ActReadAccumulator when `reduce_res` is written."""
    return _activation(ev, hw, always_readout=False)


@cost_rule("activation_reduce")
def activation_reduce(ev, hw) -> Cost:
    """`max(MIN_II, N) + MIN_II` (Activate + ActReadAccumulator)."""
    return _activation(ev, hw, always_readout=True)


@cost_rule("activate2")
def activate2(ev, hw) -> Cost:
    """[GAP] chosen: like `activation` (one fused pass; its two ALU stages and the reduction are in the
    pipeline), + ActReadAccumulator when `reduce_res` is written."""
    return _activation(ev, hw, always_readout=False)
