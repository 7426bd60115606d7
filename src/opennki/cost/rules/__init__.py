"""Cost layer: the cost rules, one per instruction opcode (`registry.py` holds `RULES`, `cost_rule`,
`cost_of`; each family module registers its rules there on import).
"""

from opennki.cost.rules import control, dma, gpsimd, scalar, tensor, vector  # noqa: F401  (they register)
from opennki.cost.rules.registry import RULES, Rule, cost_of, cost_rule

__all__ = ["RULES", "Rule", "cost_rule", "cost_of"]
