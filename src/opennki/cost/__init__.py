"""Cost layer: a NeuronCore cost model driven by the simulator's instruction events.

Imports events, hw and its own modules; nothing below it imports it. `CostModel` is the listener
(scheduler; `opennki.perf.estimate` runs a kernel shape-only with it); `RULES` holds one cost rule per
instruction opcode; `CostResult` is what comes out. See docs/cost-model.md for parameters and sources.
"""

from opennki.cost.result import CostResult, InstructionRecord, Row
from opennki.cost.roofline import Roofline, roofline
from opennki.cost.rules import RULES, cost_of, cost_rule
from opennki.cost.scheduler import CostModel
from opennki.cost.value import Cost, DmaWork

__all__ = ["CostModel", "CostResult", "InstructionRecord", "Row", "Roofline", "roofline", "RULES", "cost_of",
           "cost_rule", "Cost", "DmaWork"]
