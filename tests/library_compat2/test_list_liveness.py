"""Tensors held only by a list that a local variable holds and never reads again give their SBUF range back
when SBUF is full, as tensors held directly by such variables do: NKI Library kernels keep per-tile lists
(`weights = [nl.ndarray(...) for ...]`) alive in locals long after their last use, which the compiler's
liveness would not count."""

import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import AllocationError
from tests.isa.helpers import rand, run


def _phases(x, reread_first):
    """4 + 1 + 4 tiles of 32 KiB per partition: more than SBUF holds, unless the first list is dead."""
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        first = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(4)]
        for t in first:
            nisa.dma_copy(dst=t, src=x)
        total = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=first[0], data2=first[1], op=nl.add)
        second = [[nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)] for _ in range(2)]
        for pair in second:
            for t in pair:
                nisa.tensor_scalar(dst=t, data=total, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=total, data1=second[0][0], data2=second[1][1], op=nl.add)
        nisa.dma_copy(dst=out, src=total)
        return out

    def rereading(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        first = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(4)]
        for t in first:
            nisa.dma_copy(dst=t, src=x)
        total = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=total, data1=first[0], data2=first[1], op=nl.add)
        second = [[nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)] for _ in range(2)]
        for pair in second:
            for t in pair:
                nisa.tensor_scalar(dst=t, data=total, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=total, data1=second[0][0], data2=first[3], op=nl.add)
        nisa.dma_copy(dst=out, src=total)
        return out

    return rereading if reread_first else kernel


def test_a_dead_list_of_tiles_gives_its_memory_back(rng):
    x = rand(rng, 2, 8192)
    np.testing.assert_allclose(run(_phases(x, False), x), 8 * x, rtol=1e-6)


def test_a_list_read_later_keeps_its_tiles(rng):
    with pytest.raises(AllocationError, match="SBUF overflow"):
        run(_phases(None, True), rand(rng, 2, 8192))
