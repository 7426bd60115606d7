"""nisa.tensor_scalar_cumulative (new generation; spec/isa.md §6.11): a running accumulation through the DVE
accumulator."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
from opennki.errors import DtypeError, KernelError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


def _cumulative_ref(v, op1, start):
    acc = start.astype(np.float32).copy()
    out = np.empty_like(v)
    for i in range(v.shape[1]):
        acc = op1(v[:, i], acc).astype(np.float32)
        out[:, i] = acc
    return out


def _kernel(op0, op1, cmd, with_imm1):
    def kernel(x, init):
        t = to_sbuf(x, nl2.float32)
        it = nl2.ndarray((x.shape[0], 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=it, src=init)
        d = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_scalar_cumulative(dst=d, src=t, op0=op0, op1=op1, imm0=0.5, imm1=it if with_imm1 else None,
                                       reduce_cmd=cmd)
        return to_hbm(d)
    return kernel


@pytest.mark.parametrize("op1,ref_op,identity", [(nl2.add, np.add, 0.0), (nl2.maximum, np.maximum, -np.inf),
                                                 (nl2.subtract, np.subtract, 0.0)])
def test_reset_reduce_starts_from_the_identity(rng, op1, ref_op, identity):
    x, init = rand(rng, 64, 24), rand(rng, 64, 1)
    got = run(_kernel(nl2.multiply, op1, nisa2.reduce_cmd.reset_reduce, False), x, init)
    ref = _cumulative_ref(x * np.float32(0.5), ref_op, np.full(64, identity))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_load_reduce_starts_from_imm1(rng):
    x, init = rand(rng, 64, 24), rand(rng, 64, 1)
    got = run(_kernel(nl2.add, nl2.add, nisa2.reduce_cmd.load_reduce, True), x, init)
    np.testing.assert_allclose(got, init + np.cumsum(x + np.float32(0.5), axis=1), rtol=1e-5, atol=1e-5)


def test_reduce_continues_the_previous_accumulation(rng):
    x = rand(rng, 32, 16)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        d = nl2.ndarray((32, 32), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.tensor_scalar_cumulative(dst=d[:, 0:16], src=t, op0=nl2.add, op1=nl2.add, imm0=0.0)
        nisa2.tensor_scalar_cumulative(dst=d[:, 16:32], src=t, op0=nl2.add, op1=nl2.add, imm0=0.0,
                                       reduce_cmd=nisa2.reduce_cmd.reduce)
        return to_hbm(d)

    np.testing.assert_allclose(run(kernel, x), np.cumsum(np.concatenate([x, x], 1), axis=1), rtol=1e-5, atol=1e-5)


def _int32(x):
    t = nl2.ndarray((128, 16), dtype=nl2.int32, buffer=nl2.sbuf)
    nisa2.tensor_scalar_cumulative(dst=t, src=t, op0=nl2.add, op1=nl2.add, imm0=1.0)


def _op1(x):
    t = nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_scalar_cumulative(dst=t, src=t, op0=nl2.add, op1=nl2.divide, imm0=1.0)


def _idle(x):
    t = nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf)
    nisa2.tensor_scalar_cumulative(dst=t, src=t, op0=nl2.add, op1=nl2.add, imm0=1.0, reduce_cmd=nisa2.reduce_cmd.idle)


REJECTS = [
    ("int32_dtype", _int32, DtypeError, "int32"),
    ("op1_divide", _op1, KernelError, "op1 must be"),
    ("idle", _idle, KernelError, "reduce_cmd=idle"),
]


test_cumulative_rejects = rejecting(REJECTS, api="nisa.tensor_scalar_cumulative")
