"""nisa.tensor_scalar_reduce (spec/isa.md §6.10): one ALU stage, reduced into the DVE accumulators."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_sbuf


def _legacy(op0, operand0, reduce_op, dtype=None, column=False):
    def kernel(x, c):
        out = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        y = nisa.tensor_scalar_reduce(data=nl.load(x), op0=op0, operand0=nl.load(c) if column else operand0,
                                      reduce_op=reduce_op, reduce_res=res, dtype=dtype)
        nl.store(out, y)
        nl.store(red, res)
        return out, red
    return kernel


REDUCTIONS = [(np.add, lambda r: r.sum(1)), (np.max, lambda r: r.max(1)), (np.minimum, lambda r: r.min(1)),
              (np.multiply, lambda r: r.prod(1)), (np.subtract, lambda r: 0 - r.sum(1))]


@pytest.mark.parametrize("reduce_op,ref", REDUCTIONS, ids=["add", "max", "min", "multiply", "subtract"])
def test_reduce_ops(rng, reduce_op, ref):
    x, c = rand(rng, 128, 3, 8, low=0.8, high=1.2), rand(rng, 128, 1)
    y, red = run(_legacy(np.multiply, 1.1, reduce_op), x, c)
    r = x * np.float32(1.1)
    np.testing.assert_allclose(y, r, rtol=1e-6)
    np.testing.assert_allclose(red[:, 0], ref(r.reshape(128, -1)), rtol=1e-5)


def test_unary_op0_and_column_operand(rng):
    x, c = rand(rng, 64, 32), rand(rng, 64, 1)
    y, red = run(_legacy(np.abs, 0.0, np.max), x, c)
    np.testing.assert_array_equal(red[:, 0], np.abs(x).max(1))
    y, red = run(_legacy(np.subtract, None, np.add, column=True), x, c)
    np.testing.assert_allclose(red[:, 0], (x - c).sum(1), rtol=1e-5, atol=1e-5)


def test_reduction_folds_fp32_values_before_rounding(rng):
    x = rand(rng, 32, 64)
    y, red = run(_legacy(np.multiply, 1.0 / 3.0, np.add, dtype=nl.bfloat16), x, np.zeros((32, 1), np.float32))
    exact = x * np.float32(1 / 3)
    np.testing.assert_array_equal(y.astype(np.float32), exact.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_allclose(red[:, 0], exact.sum(1), rtol=1e-6, atol=1e-6)


def _new_kernel(x, init):
    out = nl2.ndarray((x.shape[0], 3), dtype=nl2.float32, buffer=nl2.shared_hbm)
    t = to_sbuf(x, nl2.float32)
    it = nl2.ndarray((x.shape[0], 1), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=it, src=init)
    d = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
    res = nl2.ndarray((x.shape[0], 3), dtype=nl2.float32, buffer=nl2.sbuf)
    # chain: reset_reduce (no read-out), then reduce with the read-out
    nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=1.0, reduce_op=nl2.add)
    nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.multiply, operand0=2.0, reduce_op=nl2.add,
                               reduce_cmd=nisa2.reduce_cmd.reduce, reduce_res=res[:, 0:1])
    # load_reduce from a per-partition initial value, negated read-out
    nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.maximum, operand0=0.0, reduce_op=nl2.maximum,
                               reduce_cmd=nisa2.reduce_cmd.load_reduce, reduce_init=it, reduce_res=res[:, 1:2],
                               reduce_res_negate=True)
    nisa2.tensor_scalar_reduce(dst=d, data=t, op0=nl2.add, operand0=0.0, reduce_op=nl2.minimum,
                               reduce_cmd=nisa2.reduce_cmd.load_reduce, reduce_init=-5.0, reduce_res=res[:, 2:3])
    nisa2.dma_copy(dst=out, src=res)
    return out


def test_new_generation_reduce_cmd_chain_load_and_negate(rng):
    x, init = rand(rng, 64, 16), rand(rng, 64, 1, low=-1, high=3)
    got = run(_new_kernel, x, init)
    np.testing.assert_allclose(got[:, 0], (x + 1).sum(1) + (2 * x).sum(1), rtol=1e-5)
    np.testing.assert_allclose(got[:, 1], -np.maximum(init[:, 0], np.maximum(x, 0).max(1)), rtol=1e-6)
    np.testing.assert_allclose(got[:, 2], np.minimum(-5.0, x.min(1)), rtol=1e-6)


def _reverse0(x):
    nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.subtract, operand0=1.0, reduce_op=np.add,
                              reduce_res=nl.ndarray((128, 1), dtype=nl.float32), reverse0=True)


def _bitwise_reduce(x):
    nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.add, operand0=1.0, reduce_op=np.bitwise_or,
                              reduce_res=nl.ndarray((128, 1), dtype=nl.float32))


def _bitvec_op0(x):
    nisa.tensor_scalar_reduce(data=nl.zeros((128, 4), dtype=nl.int32), op0=np.bitwise_and, operand0=1,
                              reduce_op=np.add, reduce_res=nl.ndarray((128, 1), dtype=nl.float32))


def _reduce_res_shape(x):
    nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.add, operand0=1.0, reduce_op=np.add,
                              reduce_res=nl.ndarray((128, 2), dtype=nl.float32))


def _init_without_load(x):
    t = nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_scalar_reduce(dst=t, data=t, op0=nl2.add, operand0=1.0, reduce_op=nl2.add, reduce_init=1.0)


def _idle_read_out(x):
    t = nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf)
    r = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_scalar_reduce(dst=t, data=t, op0=nl2.add, operand0=1.0, reduce_op=nl2.add, reduce_res=r,
                               reduce_cmd=nisa2.reduce_cmd.idle)


REJECTS = [
    ("reverse0", _reverse0, KernelError, "reverse0"),
    ("bitwise_reduce_op", _bitwise_reduce, KernelError, "reduce_op must be"),
    ("bitvec_op0", _bitvec_op0, KernelError, "arithmetic operator"),
    ("reduce_res_not_a_column", _reduce_res_shape, ShapeError, r"\[P, 1\]"),
    ("reduce_init_without_load_reduce", _init_without_load, KernelError, "load_reduce"),
    ("read_out_after_idle", _idle_read_out, KernelError, "undefined"),
]


test_tensor_scalar_reduce_rejects = rejecting(REJECTS, api="nisa.tensor_scalar_reduce")
