"""ISA layer: every instruction, defined once (see base.py). Importing this package registers them all."""

from opennki.instructions import dma, gpsimd, scalar, tensor_engine, vector  # noqa: F401  (registration)
from opennki.instructions.base import REGISTRY, Instruction

__all__ = ["REGISTRY", "Instruction"]
