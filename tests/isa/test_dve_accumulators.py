"""The Vector Engine accumulators are one register file shared by range_select, select_reduce,
tensor_scalar_reduce and tensor_scalar_cumulative (spec/isa.md §2.4): interleaving them changes results."""

import numpy as np

import opennki.isa as nisa2
import opennki.language as nl2
from tests.isa.helpers import rand, run, to_hbm, to_sbuf


def _tiles(x, pred):
    t = to_sbuf(x, nl2.float32)
    p = nl2.ndarray(x.shape, dtype=nl2.uint8, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=p, src=pred)
    return t, p


def test_one_max_accumulation_across_three_instruction_kinds(rng):
    x, pred = rand(rng, 128, 32), (rng.random((128, 32)) < 0.5).astype(np.uint8)

    def kernel(x, pred):
        t, p = _tiles(x, pred)
        d = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        r = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.range_select(dst=d, on_true_tile=t, comp_op0=nl2.greater_equal, comp_op1=nl2.less, bound0=0.0,
                           bound1=8.0)                                                   # reset_reduce
        nisa2.select_reduce(dst=d, predicate=p, on_true=t, on_false=-100.0, reduce_cmd=nisa2.reduce_cmd.reduce)
        nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.multiply, operand0=-1.0, reduce_op=nl2.maximum,
                                   reduce_cmd=nisa2.reduce_cmd.reduce, reduce_res=r)
        return to_hbm(r)

    ref = np.maximum.reduce([x[:, :8].max(1), np.where(pred != 0, x, -100).max(1), (-x).max(1)])
    np.testing.assert_array_equal(run(kernel, x, pred)[:, 0], ref)


def test_an_idle_instruction_leaves_the_accumulators_undefined(rng):
    x, pred = rand(rng, 16, 8), np.ones((16, 8), np.uint8)

    def kernel(x, pred):
        t, p = _tiles(x, pred)
        d = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        r = nl2.ndarray((16, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=0.0, reduce_op=nl2.maximum)
        nisa2.select_reduce(dst=d, predicate=p, on_true=t, on_false=0.0)             # reduce_cmd=idle
        nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=0.0, reduce_op=nl2.maximum,
                                   reduce_cmd=nisa2.reduce_cmd.reduce, reduce_res=r)
        return to_hbm(r)

    assert np.all(np.isnan(run(kernel, x, pred)))


def test_scalar_engine_registers_are_separate_from_the_vector_accumulators(rng):
    x = rand(rng, 32, 16)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        d = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        r = nl2.ndarray((32, 2), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=0.0, reduce_op=nl2.add)
        nisa2.activation(dst=d, op=nl2.copy, data=t, reduce_op=nl2.add, reduce_cmd=nisa2.reduce_cmd.reset_reduce)
        nisa2.activation(dst=d, op=nl2.copy, data=t, reduce_op=nl2.add, reduce_cmd=nisa2.reduce_cmd.reduce,
                         reduce_res=r[:, 0:1])
        nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=0.0, reduce_op=nl2.add,
                                   reduce_cmd=nisa2.reduce_cmd.reduce, reduce_res=r[:, 1:2])
        return to_hbm(r)

    got = run(kernel, x)
    np.testing.assert_allclose(got[:, 0], 2 * x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], 2 * x.sum(1), rtol=1e-5, atol=1e-5)
