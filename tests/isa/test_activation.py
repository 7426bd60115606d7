"""nisa.activation / nisa.activation_reduce and the Scalar Engine reduce registers (spec/isa.md §6.1, §6.2)."""

import math

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_sbuf

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# (op as kernels pass it, NumPy reference on float64, input range)
FUNCTIONS = [
    (np.exp, np.exp, (-3, 3)),
    (nl.exp, np.exp, (-3, 3)),
    (nl.sigmoid, _sigmoid, (-6, 6)),
    (nl.relu, lambda x: np.maximum(x, 0), (-2, 2)),
    (np.tanh, np.tanh, (-3, 3)),
    (nl.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), (-3, 3)),
    (nl.gelu_apprx_tanh, lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
     (-3, 3)),
    (nl.silu, lambda x: x * _sigmoid(x), (-4, 4)),
    (nl.softplus, lambda x: np.log1p(np.exp(x)), (-4, 4)),
    (nl.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), (-3, 3)),
    (nl.erf, _erf, (-2, 2)),
    (np.square, np.square, (-2, 2)),
    (np.copy, lambda x: x, (-2, 2)),
    (nl.sqrt, np.sqrt, (0.1, 4)),
    (nl.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 4)),
    (np.log, np.log, (0.1, 4)),
    (nl.reciprocal, lambda x: 1 / x, (0.5, 4)),
    (np.abs, np.abs, (-2, 2)),
    (np.sign, np.sign, (-2, 2)),
    (np.sin, np.sin, (-3, 3)),
    (np.arctan, np.arctan, (-1.5, 1.5)),
]


def _activation_kernel(op, scale):
    def kernel(x, bias):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.activation(op, nl.load(x), bias=nl.load(bias), scale=scale))
        return out
    return kernel


@pytest.mark.parametrize("op,ref,domain", FUNCTIONS, ids=[f[1].__name__ if hasattr(f[1], "__name__") else str(i)
                                                          for i, f in enumerate(FUNCTIONS)])
def test_activation_functions_match_numpy(rng, op, ref, domain):
    x = rng.uniform(*domain, size=(128, 64)).astype(np.float32)
    bias = rng.uniform(-0.05, 0.05, size=(128, 1)).astype(np.float32)
    pre = x.astype(np.float64) * np.float32(0.9) + bias
    got = run(_activation_kernel(op, 0.9), x, bias)
    np.testing.assert_allclose(got, ref(pre).astype(np.float32), rtol=2e-6, atol=1e-6)


def test_activation_scale_tile_and_bf16_result_rounds_once(rng):
    x = rand(rng, 64, 32)
    bias = rand(rng, 64, 1)
    scale = rand(rng, 64, 1)

    def kernel(x, bias, scale):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        y = nisa.activation(np.exp, nl.load(x), bias=nl.load(bias), scale=nl.load(scale), dtype=nl.bfloat16)
        nl.store(out, y)
        return out

    got = run(kernel, x, bias, scale)
    ref = np.exp((x * scale).astype(np.float32) + bias).astype(ml_dtypes.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float32), ref.astype(np.float32))


def test_activation_mask_leaves_masked_rows_untouched(rng):
    x = rand(rng, 128, 16)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.full((128, 16), 7.0, dtype=nl.float32)
        i_p = nl.arange(128)[:, None]
        buf[...] = nisa.activation(np.exp, nl.load(x), mask=(i_p < 40))
        nl.store(out, buf)
        return out

    got = run(kernel, x)
    np.testing.assert_allclose(got[:40], np.exp(x[:40]), rtol=1e-6)
    np.testing.assert_array_equal(got[40:], 7.0)


def test_act_registers_chain_across_instructions(rng):
    """reset_reduce then reduce accumulate both tiles; reduce_res reads the registers out."""
    a, b = rand(rng, 128, 32), rand(rng, 128, 48)

    def kernel(a, b):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((128, 1), dtype=nl.float32)
        nisa.activation(np.exp, nl.load(a), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation(np.exp, nl.load(b), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=res)
        nl.store(out, res)
        return out

    got = run(kernel, a, b)
    ref = np.exp(a).sum(1, keepdims=True) + np.exp(b).sum(1, keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_act_reset_without_fold_and_idle_keeps_registers(rng):
    a, b = rand(rng, 32, 8), rand(rng, 32, 8)

    def kernel(a, b):
        out = nl.ndarray((32, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        r1 = nl.ndarray((32, 1), dtype=nl.float32)
        r2 = nl.ndarray((32, 1), dtype=nl.float32)
        nisa.activation(np.copy, nl.load(a), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset, reduce_res=r1)
        nisa.activation(np.copy, nl.load(a), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(np.copy, nl.load(b), reduce_cmd=nisa.reduce_cmd.idle, reduce_res=r2)
        t = nl.ndarray((32, 2), dtype=nl.float32)
        t[:, 0:1] = nl.copy(r1)
        t[:, 1:2] = nl.copy(r2)
        nl.store(out, t)
        return out

    got = run(kernel, a, b)
    np.testing.assert_array_equal(got[:, 0], 0.0)
    np.testing.assert_allclose(got[:, 1], a.sum(1), rtol=1e-5)


def test_activation_reduce_resets_and_sums_all_free_dims(rng):
    a, b = rand(rng, 128, 4, 8), rand(rng, 128, 32)

    def kernel(a, b):
        out = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.activation(np.exp, nl.load(b), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        res = nl.ndarray((128, 1), dtype=nl.float32)
        y = nisa.activation_reduce(np.tanh, nl.load(a), reduce_op=np.add, reduce_res=res, scale=2.0)
        nl.store(out, y)
        nl.store(sums, res)
        return out, sums

    y, sums = run(kernel, a, b)
    np.testing.assert_allclose(y, np.tanh(2 * a), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sums[:, 0], np.tanh(2 * a).reshape(128, -1).sum(1), rtol=1e-5, atol=1e-5)


def test_new_generation_activation_and_activation_reduce(rng):
    x, bias = rand(rng, 128, 64), rand(rng, 128, 1)

    def kernel(x, bias):
        out = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.shared_hbm)
        sums = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.shared_hbm)
        xt = to_sbuf(x, nl2.float32)
        bt = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=bt, src=bias)
        yt = nl2.ndarray(x.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        st = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.activation_reduce(dst=yt, op=nl2.exp, data=xt, reduce_op=nl2.add, reduce_res=st, bias=bt)
        nisa2.activation(dst=xt, op=nl2.relu, data=yt, bias=-1.5)   # scalar bias: NeuronCore-v3+
        nisa2.dma_copy(dst=out, src=xt)
        nisa2.dma_copy(dst=sums, src=st)
        return out, sums

    out, sums = run(kernel, x, bias)
    e = np.exp(x + bias)
    np.testing.assert_allclose(out, np.maximum(e - 1.5, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sums[:, 0], e.sum(1), rtol=1e-5)


def _reject_scale_dtype(x):
    nisa.activation(np.exp, nl.load(x), scale=nl.zeros((128, 1), dtype=nl.bfloat16))


def _reject_bias_dtype(x):
    nisa.activation(np.exp, nl.load(x), bias=nl.zeros((128, 1), dtype=nl.int32))


def _reject_scalar_bias(x):
    nisa.activation(np.exp, nl.load(x), bias=0.5)


def _reject_reduce_op(x):
    nisa.activation(np.exp, nl.load(x), reduce_op=np.multiply, reduce_cmd=nisa.reduce_cmd.reset_reduce)


def _reject_not_activation(x):
    nisa.activation(np.floor, nl.load(x))


def _reject_hbm_data(x):
    nisa.activation(np.exp, x)


def _reject_reduce_res_partitions(x):
    nisa.activation_reduce(np.exp, nl.load(x), reduce_op=np.add, reduce_res=nl.ndarray((64, 1), dtype=nl.float32))


def _reject_reciprocal_bias_v2(x):
    nisa.activation(nl.reciprocal, nl.load(x), bias=nl.zeros((128, 1), dtype=nl.float32))


def _reject_bias_shape(x):
    nisa.activation(np.exp, nl.load(x), bias=nl.zeros((128, 2), dtype=nl.float32))


REJECTS = [
    ("scale_tile_not_fp32", _reject_scale_dtype, "trn3", DtypeError, "scale must be fp32"),
    ("bias_int32", _reject_bias_dtype, "trn3", DtypeError, "bias"),
    ("scalar_bias_on_v2", _reject_scalar_bias, "trn1", DtypeError, "NeuronCore-v3"),
    ("reduce_op_not_add", _reject_reduce_op, "trn3", KernelError, "reduce_op must be add"),
    ("op_not_an_activation", _reject_not_activation, "trn3", KernelError, "not an activation"),
    ("data_in_hbm", _reject_hbm_data, "trn3", MemoryKindError, "SBUF/PSUM"),
    ("reduce_res_partitions", _reject_reduce_res_partitions, "trn3", ShapeError, "same number of partitions"),
    ("reciprocal_bias_on_v2", _reject_reciprocal_bias_v2, "trn1", KernelError, r"reciprocal\) with a bias needs NeuronCore-v3 \(trn2\)"),
    ("bias_not_a_column", _reject_bias_shape, "trn3", ShapeError, r"\[P, 1\]"),
]


test_activation_rejects = rejecting(REJECTS)


def test_new_generation_rejects_unknown_keyword():
    def kernel():
        t = nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.activation(dst=t, op=nl2.exp, data=t, mask=None)
    with pytest.raises(TypeError, match="mask"):
        run(kernel)


def test_reduction_folds_fp32_values_before_rounding_into_dst(rng):
    x = rand(rng, 32, 64)

    def kernel(x):
        out = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((32, 1), dtype=nl.float32)
        nisa.activation_reduce(np.exp, nl.load(x), reduce_op=np.add, reduce_res=res, dtype=nl.bfloat16)
        nl.store(out, res)
        return out

    got = run(kernel, x)[:, 0]
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)).sum(1), rtol=1e-6)
    rounded = np.exp(x).astype(ml_dtypes.bfloat16).astype(np.float64).sum(1)
    assert np.abs(got - rounded).max() > 1e-4                             # not the sum of the bf16 outputs


def test_an_unsupported_reduce_cmd_names_the_allowed_ones_at_the_kernel_line(rng):
    from tests.raises import raises_at
    a = rand(rng, 32, 8)

    def kernel(a):
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        y = nisa.activation(np.exp, nl.load(a), reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(out, y)
        return out

    with raises_at(KernelError, match="activation does not support reduce_cmd=load_reduce",
                   line="y = nisa.activation(") as info:
        run(kernel, a)
    assert info.value.expected == "idle/reset/reduce/reset_reduce" and info.value.got == "load_reduce"
