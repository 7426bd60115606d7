"""Cost layer: rules of control, register, synchronisation and random-state instructions. Imports events,
hw and common.

None of these has a published cost (spec/isa.md §11.1 [GAP]); each is charged as one sequencer instruction,
MIN_II cycles of the engine that runs it, plus a pass over the data it moves where it moves any.
"""

from __future__ import annotations

from opennki.cost.rules.registry import cost_rule
from opennki.cost.rules.common import elems, engine_spec, main_input, main_output, schedulable_engine
from opennki.cost.value import Cost


def sequencer_instruction(ev, hw, work: float = 0.0) -> Cost:
    engine = schedulable_engine(ev.engine)
    spec = engine_spec(hw, engine)
    floor = getattr(spec, "min_ii_cycles", 64)
    return Cost(engine, busy_ns=spec.ns(max(floor, work)))


@cost_rule("register_alloc", "register_move", "register_load", "register_store", "scalar_load", "scalar_store",
           "scalar_alu")
def register_op(ev, hw) -> Cost:
    """[GAP] chosen: one MIN_II sequencer instruction (loads/stores move a single element)."""
    return sequencer_instruction(ev, hw)


@cost_rule("core_barrier")
def core_barrier(ev, hw) -> Cost:
    """[GAP] chosen: one MIN_II instruction on the waiting engine. The cross-core wait itself is not
    modelled (programs of an LNC=2 launch are scheduled independently; see docs/cost-model.md)."""
    return sequencer_instruction(ev, hw)


@cost_rule("set_rng_seed", "rand_set_state", "rand_get_state")
def rng_state(ev, hw) -> Cost:
    """[GAP] chosen: `max(MIN_II, words per lane)` on the engine holding the generator."""
    op = main_input(ev) or main_output(ev)
    return sequencer_instruction(ev, hw, elems(ev, op))


@cost_rule("builtin_custom_op")
def builtin_custom_op(ev, hw) -> Cost:
    """[GAP] chosen (legacy library call on GpSimd, semantics unknown): GPSIMD_START plus one pass over its
    largest operand."""
    op = max(ev.operands, key=lambda o: o.free_elems, default=None)
    g = hw.cost.gpsimd
    return Cost(schedulable_engine(ev.engine), busy_ns=g.ns(g.start_cycles + elems(ev, op)))
