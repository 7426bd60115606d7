"""Helpers for the cost tests: run a kernel shape-only and pick its instruction events."""

from opennki.events import InstructionExecuted
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.sim import ShapeSpec, SimOptions


def events(kernel, *args, target="trn2"):
    rec = Recorder()
    run_kernel(kernel, args, target=target, options=SimOptions(target=target, shape_only=True), listeners=[rec])
    return [e for e in rec.events if isinstance(e, InstructionExecuted)]


def event(kernel, *args, opcode, target="trn2", index=0):
    return [e for e in events(kernel, *args, target=target) if e.opcode == opcode][index]


def spec(shape, dtype="float32"):
    return ShapeSpec(shape, dtype)
