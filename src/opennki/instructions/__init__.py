"""ISA layer: every instruction, defined once (see base.py). Importing this package registers them all."""

from opennki.instructions import (dma, gpsimd, lnc, mx, registers, rng, scalar, tensor_engine,  # noqa: F401
                                  vector, vector_accumulate, vector_move, vector_stats)
from opennki.instructions.base import REGISTRY, Instruction

__all__ = ["REGISTRY", "Instruction"]
