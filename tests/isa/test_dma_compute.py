"""nisa.dma_compute (new generation; spec/isa.md §7.3): sums of DMA sources, and scatter-add into HBM."""

import ml_dtypes
import numpy as np

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.language as nl
from opennki.errors import KernelError, ShapeError
from tests.isa.helpers import rand, rejecting, run


def test_sum_of_sources_rounds_once(rng):
    a, b, c = rand(rng, 64, 16), rand(rng, 64, 16), rand(rng, 1024, 1)

    def kernel(a, b, c):
        out = nl2.ndarray((64, 16), dtype=nl2.bfloat16, buffer=nl2.shared_hbm)
        t = nl2.ndarray((64, 16), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=t, src=a)
        nisa2.dma_compute(dst=out, srcs=[t, b, c], reduce_op=nl2.add)
        return out

    ref = (a.astype(np.float32) + b + c.reshape(64, 16)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(kernel, a, b, c).view(np.uint16), ref.view(np.uint16))


def test_scatter_add_through_run_time_rows_with_duplicates(rng):
    table, values = rand(rng, 30, 8), rand(rng, 96, 8)
    rows = rng.integers(0, 30, size=(96, 1)).astype(np.int32)

    def kernel(table, values, rows):
        out = nl2.ndarray((30, 8), dtype=nl2.float32, buffer=nl2.shared_hbm)
        nisa2.dma_copy(dst=out, src=table)
        idx = nl2.ndarray((96, 1), dtype=nl2.int32, buffer=nl2.sbuf)
        v = nl2.ndarray((96, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=idx, src=rows)
        nisa2.dma_copy(dst=v, src=values)
        target = out[idx, nl.arange(8)[None, :]]
        nisa2.dma_compute(dst=target, srcs=[target, v], reduce_op=nl2.add, unique_indices=False)
        return out

    ref = table.astype(np.float64).copy()
    np.add.at(ref, rows[:, 0], values)
    np.testing.assert_allclose(run(kernel, table, values, rows), ref, rtol=1e-5, atol=1e-5)


def _count(x):
    nisa2.dma_compute(dst=nl2.ndarray((128, 8), dtype=nl2.float32, buffer=nl2.sbuf), srcs=[x], reduce_op=nl2.add)


def _op(x):
    nisa2.dma_compute(dst=nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf), srcs=[x],
                      reduce_op=nl2.maximum)


def _scales(x):
    nisa2.dma_compute(dst=nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf), srcs=[x, x],
                      reduce_op=nl2.add, scales=[1.0, 2.0])


def _no_sources(x):
    nisa2.dma_compute(dst=nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf), srcs=[], reduce_op=nl2.add)


REJECTS = [
    ("element_count", _count, ShapeError, "element count"),
    ("reduce_op", _op, KernelError, "add only"),
    ("scales", _scales, KernelError, "1.0"),
    ("no_sources", _no_sources, KernelError, "1 to 16"),
]


test_dma_compute_rejects = rejecting(REJECTS, api="nisa.dma_compute")
