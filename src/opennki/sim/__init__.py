"""Simulator layer: launches, programs and the instruction issue path."""

from opennki.sim.options import SimOptions
from opennki.sim.program import Program, current
from opennki.sim.simulator import ShapeSpec, Simulator

__all__ = ["SimOptions", "Program", "current", "ShapeSpec", "Simulator"]
