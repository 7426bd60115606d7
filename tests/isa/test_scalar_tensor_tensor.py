"""nisa.scalar_tensor_tensor (spec/isa.md §6.6): op1(op0(data, operand0), operand1) with a tile operand1."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf

CASES = [
    # op0, operand0 ("col": the [P, 1] input), op1, reverse0, reverse1
    (np.multiply, 0.5, np.add, False, False),
    (np.subtract, "col", np.multiply, False, False),
    (np.subtract, "col", np.divide, True, True),
    (np.maximum, 0.0, np.subtract, False, True),
]


@pytest.mark.parametrize("op0,o0,op1,r0,r1", CASES)
def test_scalar_tensor_tensor_matches_numpy(rng, op0, o0, op1, r0, r1):
    x, u, c = rand(rng, 128, 48), rand(rng, 128, 48, low=0.5), rand(rng, 128, 1)

    def kernel(x, u, c):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        operand0 = nl.load(c) if o0 == "col" else o0
        y = nisa.scalar_tensor_tensor(data=nl.load(x), op0=op0, operand0=operand0, op1=op1, operand1=nl.load(u),
                                      reverse0=r0, reverse1=r1)
        nl.store(out, y)
        return out

    a = c if o0 == "col" else np.float32(o0)
    t = op0(a, x) if r0 else op0(x, a)
    ref = op1(u, t) if r1 else op1(t, u)
    np.testing.assert_allclose(run(kernel, x, u, c), ref, rtol=1e-6)


def test_bf16_inputs_compute_in_fp32_and_round_once(rng):
    x = rand(rng, 64, 32).astype(ml_dtypes.bfloat16)
    u = rand(rng, 64, 32).astype(ml_dtypes.bfloat16)

    def kernel(x, u):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        p = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.psum)
        p[...] = nl.load(x)
        nl.store(out, nisa.scalar_tensor_tensor(data=p, op0=np.subtract, operand0=0.3, op1=np.multiply,
                                                operand1=nl.load(u)))
        return out

    ref = ((x.astype(np.float32) - np.float32(0.3)) * u.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(kernel, x, u).view(np.uint16), ref.view(np.uint16))


def test_new_generation_scalar_tensor_tensor(rng):
    x, u = rand(rng, 32, 16), rand(rng, 32, 16)

    def kernel(x, u):
        a = to_sbuf(x, nl2.float32)
        b = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=b, src=u)
        nisa2.scalar_tensor_tensor(dst=a, data=a, op0=nl2.add, operand0=1.0, op1=nl2.maximum, operand1=b)
        return to_hbm(a)

    np.testing.assert_allclose(run(kernel, x, u), np.maximum(x + 1, u), rtol=1e-6)


def _both_psum(x):
    p = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    q = nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.scalar_tensor_tensor(data=p, op0=np.add, operand0=1.0, op1=np.add, operand1=q)


def _bitvec(x):
    t = nl.zeros((128, 16), dtype=nl.int32)
    nisa.scalar_tensor_tensor(data=t, op0=np.bitwise_and, operand0=1, op1=np.add, operand1=t)


def _operand1_scalar(x):
    nisa.scalar_tensor_tensor(data=nl.load(x), op0=np.add, operand0=1.0, op1=np.add, operand1=2.0)


def _operand1_shape(x):
    nisa.scalar_tensor_tensor(data=nl.load(x), op0=np.add, operand0=1.0, op1=np.add,
                              operand1=nl.zeros((128, 8), dtype=nl.float32))


def _unary_op1(x):
    t = nl.load(x)
    nisa.scalar_tensor_tensor(data=t, op0=np.add, operand0=1.0, op1=np.abs, operand1=t)


REJECTS = [
    ("data_and_operand1_in_psum", _both_psum, MemoryKindError, "both be in PSUM"),
    ("bitvec_operator", _bitvec, KernelError, "arithmetic operator"),
    ("operand1_not_a_tile", _operand1_scalar, DtypeError, "operand 'operand1' must be a tensor"),
    ("operand1_free_size", _operand1_shape, ShapeError, "elements per partition"),
    ("op1_unary", _unary_op1, KernelError, "binary"),
]


test_scalar_tensor_tensor_rejects = rejecting(REJECTS, api="nisa.scalar_tensor_tensor")
