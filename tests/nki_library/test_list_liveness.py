"""Tensors held only by a list that a local variable holds and never reads again give their SBUF range back
when SBUF is full, as tensors held directly by such variables do: NKI Library kernels keep per-tile lists
(`weights = [nl.ndarray(...) for ...]`) alive in locals long after their last use, which the compiler's
liveness would not count."""

import numpy as np

import opennki.isa as nisa
import opennki.language as nl
from opennki.events import InstructionExecuted
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from tests.isa.helpers import rand, run


def _first_phase(x):
    """out, four loaded tiles of 32 KiB per partition, and their partial sum."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    first = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(4)]
    for t in first:
        nisa.dma_copy(dst=t, src=x)
    total = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=first[0], data2=first[1], op=nl.add)
    return out, first, total


def _second_phase(total):
    """Four more tiles (nested lists) of 2 * total: with the first four, more than SBUF holds."""
    second = [[nl.ndarray(total.shape, dtype=total.dtype, buffer=nl.sbuf) for _ in range(2)] for _ in range(2)]
    for pair in second:
        for t in pair:
            nisa.tensor_scalar(dst=t, data=total, op0=nl.multiply, operand0=2.0)
    return second


def _finish(out, total, last):
    nisa.tensor_tensor(dst=total, data1=total, data2=last, op=nl.add)
    nisa.dma_copy(dst=out, src=total)


def _first_list_dead(x):
    out, first, total = _first_phase(x)
    second = _second_phase(total)
    _finish(out, total, second[1][1])
    return out


def _first_list_read_later(x):
    out, first, total = _first_phase(x)
    _second_phase(total)
    _finish(out, total, first[3])
    return out


def test_a_dead_list_of_tiles_gives_its_memory_back(rng):
    x = rand(rng, 2, 8192)
    np.testing.assert_allclose(run(_first_list_dead, x), 6 * x, rtol=1e-6)


def test_a_list_read_later_keeps_its_tiles_through_spills(rng):
    """The first list is read again at the end: its tiles are spilled to HBM (not freed) when the second
    phase needs SBUF, and the one read again comes back."""
    x = rand(rng, 2, 8192)
    rec = Recorder()
    out = run_kernel(_first_list_read_later, (x,), target="trn3", listeners=[rec])
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)
    opcodes = [e.opcode for e in rec.of_type(InstructionExecuted)]
    assert "sbuf_spill" in opcodes and "sbuf_reload" in opcodes
