"""New-generation NeuronCore-v4 instructions nisa.activate2 (spec/isa.md §6.3) and nisa.exponential (§6.13),
and the v3+ GpSimd nisa.nonzero_with_count (§6.29)."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
from opennki.errors import DtypeError, KernelError
from tests.isa.helpers import rand, rejecting, run, to_hbm


def _load(x, dtype=nl2.float32):
    t = nl2.ndarray(x.shape, dtype=dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=t, src=x)
    return t


def _abs_pick(x, pick):
    return np.take_along_axis(x, pick(np.abs(x), axis=1)[:, None], 1)[:, 0]


@pytest.mark.parametrize("op0,op1,rev0,rev1", [("multiply", "add", False, False), ("multiply", "subtract", False, True),
                                               ("subtract", "bypass", True, False), ("bypass", "bypass", False, False)])
@pytest.mark.parametrize("reduce_op", ["add", "maximum", "abs_max", "abs_min"])
def test_activate2_stages_and_reductions(rng, op0, op1, rev0, rev1, reduce_op):
    x, c = rand(rng, 64, 40), rand(rng, 64, 1)

    def kernel(x, c):
        t, ct = _load(x), _load(c)
        r = nl2.ndarray((64, 41), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.activate2(dst=r[:, 0:40], op=nl2.tanh, data=t, imm0=ct, imm1=0.25, op0=getattr(nl2, op0),
                        op1=getattr(nl2, op1), reverse0=rev0, reverse1=rev1, reduce_op=getattr(nl2, reduce_op),
                        reduce_res=r[:, 40:41],
                        reduce_cmd=nisa2.reduce_cmd.reset_reduce)
        return to_hbm(r)

    fns = {"multiply": np.multiply, "add": np.add, "subtract": np.subtract}
    v = x
    for name, imm, rev in ((op0, c, rev0), (op1, np.float32(0.25), rev1)):
        if name != "bypass":
            v = fns[name](imm, v) if rev else fns[name](v, imm)
    y = np.tanh(v.astype(np.float64)).astype(np.float32)
    red = {"add": lambda a: a.sum(1), "maximum": lambda a: a.max(1),
           "abs_max": lambda a: _abs_pick(a, np.argmax), "abs_min": lambda a: _abs_pick(a, np.argmin)}[reduce_op]
    got = run(kernel, x, c)
    np.testing.assert_allclose(got[:, :40], y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[:, 40], red(y), rtol=1e-5, atol=1e-6)


def test_activate2_prelu_with_per_partition_slope(rng):
    x, alpha = rand(rng, 32, 16), rand(rng, 32, 1, low=0.01, high=0.3)

    def kernel(x, alpha):
        out = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.shared_hbm)
        t, a = _load(x), _load(alpha)
        nisa2.activate2(dst=t, op=nl2.prelu, data=t, imm0=2.0, imm1=None, op0=nl2.multiply, op1=nl2.bypass,
                        relu_param=a)
        nisa2.dma_copy(dst=out, src=t)
        return out

    v = 2 * x
    np.testing.assert_allclose(run(kernel, x, alpha), np.where(v > 0, v, alpha * v), rtol=1e-6)


def test_exponential_with_max_subtraction_and_chained_sum(rng):
    x = rand(rng, 128, 64)
    mx = x.max(1, keepdims=True)

    def kernel(x, mx):
        t, m = _load(x), _load(mx)
        r = nl2.ndarray((128, 65), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.exponential(dst=r[:, 0:32], src=t[:, 0:32], max_value=m, reduce_cmd=nisa2.reduce_cmd.load_reduce,
                          reduce_init=1.0)
        nisa2.exponential(dst=r[:, 32:64], src=t[:, 32:64], max_value=m, reduce_cmd=nisa2.reduce_cmd.reduce,
                          reduce_res=r[:, 64:65])
        return to_hbm(r)

    got = run(kernel, x, mx)
    e = np.exp(x - mx)
    np.testing.assert_allclose(got[:, :64], e, rtol=1e-6)
    np.testing.assert_allclose(got[:, 64], 1.0 + e.sum(1), rtol=1e-5)


def test_nonzero_with_count_on_core_partitions(rng):
    src = ((rng.random((64, 20)) < 0.3) * rand(rng, 64, 20)).astype(np.float32)

    def kernel(src):
        s = _load(src)
        d = nl2.ndarray((64, 21), dtype=nl2.int32, buffer=nl2.sbuf)
        nisa2.memset(dst=d, value=-9)
        nisa2.nonzero_with_count(dst=d, src=s, index_offset=100, padding_val=-1)
        return to_hbm(d)

    got = run(kernel, src)
    for p in range(64):
        if p % 16:
            np.testing.assert_array_equal(got[p], -9)
            continue
        nz = np.flatnonzero(src[p]) + 100
        np.testing.assert_array_equal(got[p, :nz.size], nz)
        np.testing.assert_array_equal(got[p, nz.size:20], -1)
        assert got[p, 20] == nz.size


def _activate2_v3(x):
    t = _load(x)
    nisa2.activate2(dst=t, op=nl2.exp, data=t, imm0=1.0, imm1=0.0, op0=nl2.multiply, op1=nl2.add)


def _activate2_pair(x):
    t = _load(x)
    nisa2.activate2(dst=t, op=nl2.exp, data=t, imm0=1.0, imm1=0.0, op0=nl2.add, op1=nl2.multiply)


def _activate2_reverse_without_stage(x):
    t = _load(x)
    nisa2.activate2(dst=t, op=nl2.exp, data=t, imm0=1.0, imm1=None, op0=nl2.multiply, op1=nl2.bypass, reverse1=True)


def _prelu_in_activation(x):
    t = _load(x)
    nisa2.activation(dst=t, op=nl2.prelu, data=t)


def _exponential_dtype(x):
    t = _load(x)
    d = nl2.ndarray(x.shape, dtype=nl2.uint32, buffer=nl2.sbuf)
    nisa2.exponential(dst=d, src=t)


def _nonzero_dtype(x):
    t = _load(x)
    nisa2.nonzero_with_count(dst=nl2.ndarray((128, 17), dtype=nl2.float32, buffer=nl2.sbuf), src=t)


REJECTS = [
    ("activate2_needs_v4", _activate2_v3, "trn2", KernelError, "NeuronCore-v4"),
    ("activate2_stage_pair", _activate2_pair, "trn3", KernelError, "documented pairs"),
    ("activate2_reverse1_without_op1", _activate2_reverse_without_stage, "trn3", KernelError, "need their stage"),
    ("prelu_needs_activate2", _prelu_in_activation, "trn3", KernelError, "not an activation function"),
    ("exponential_uint32_dst", _exponential_dtype, "trn3", DtypeError, "dst"),
    ("nonzero_float_dst", _nonzero_dtype, "trn3", DtypeError, "int32"),
]


test_v4_rejects = rejecting(REJECTS)
