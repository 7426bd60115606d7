"""nisa.range_select (spec/isa.md §6.19): select by index range and max-reduce into the DVE accumulators."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf

FP32_MIN = np.float32(-3.4028235e38)


def _select_ref(x, b0, b1, cmp0, cmp1, start):
    idx = (start + np.arange(x.shape[1])).astype(np.float32)[None, :]
    keep = cmp0(idx, b0) & cmp1(idx, b1)
    return np.where(keep, x, FP32_MIN).astype(np.float32)


def _kernel(cmp0, cmp1, start, dtype=None):
    def kernel(x, b0, b1):
        out = nl.ndarray(x.shape, dtype=dtype or x.dtype, buffer=nl.shared_hbm)
        red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((x.shape[0], 1), dtype=nl.float32)
        y = nisa.range_select(on_true_tile=nl.load(x), comp_op0=cmp0, comp_op1=cmp1, bound0=nl.load(b0),
                              bound1=nl.load(b1), reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=res,
                              reduce_op=np.max, range_start=start, on_false_value=nisa.fp32.min, dtype=dtype)
        nl.store(out, y)
        nl.store(red, res)
        return out, red
    return kernel


@pytest.mark.parametrize("cmp0,cmp1,start", [(np.greater_equal, np.less, 32), (np.greater, np.less_equal, 0),
                                             (np.equal, np.greater_equal, 5)])
def test_range_select_and_reduce(rng, cmp0, cmp1, start):
    x = rand(rng, 128, 96)
    b0 = rng.integers(0, 60, size=(128, 1)).astype(np.float32)
    b1 = b0 + rng.integers(1, 60, size=(128, 1)).astype(np.float32)
    y, red = run(_kernel(cmp0, cmp1, start), x, b0, b1, target="trn2")
    ref = _select_ref(x, b0, b1, cmp0, cmp1, start)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(red, ref.max(1, keepdims=True))


def test_bf16_dst_turns_fp32_min_into_minus_inf_while_the_reduction_stays_fp32(rng):
    x = rand(rng, 32, 16)
    b0, b1 = np.full((32, 1), 4, np.float32), np.full((32, 1), 8, np.float32)
    y, red = run(_kernel(np.greater_equal, np.less, 0, dtype=nl.bfloat16), x, b0, b1)
    assert np.all(np.isneginf(y[:, :4].astype(np.float32))) and np.all(np.isneginf(y[:, 8:].astype(np.float32)))
    np.testing.assert_array_equal(red[:, 0], x[:, 4:8].max(1))          # fp32 values were folded


def test_chained_reduction_across_instructions(rng):
    """Example of the NKI docs: reset_reduce without read-out, then reduce, read out by the last one."""
    x = rand(rng, 128, 64)
    b0, b1 = np.zeros((128, 1), np.float32), np.full((128, 1), 150, np.float32)

    def kernel(x, b0, b1):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        t, lo, hi = nl.load(x), nl.load(b0), nl.load(b1)
        res = nl.ndarray((128, 1), dtype=nl.float32)
        for i in range(3):
            last = i == 2
            nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal, comp_op1=np.less, bound0=lo, bound1=hi,
                              reduce_cmd=nisa.reduce_cmd.reset_reduce if i == 0 else nisa.reduce_cmd.reduce,
                              reduce_res=res if last else None, reduce_op=np.max, range_start=64 * i)
            t[...] = nl.add(t, 1.0)
        nl.store(out, res)
        return out

    ref = np.full((128,), -np.inf, np.float32)
    for i in range(3):
        ref = np.maximum(ref, _select_ref(x + i, b0, b1, np.greater_equal, np.less, 64 * i).max(1))
    np.testing.assert_array_equal(run(kernel, x, b0, b1)[:, 0], ref)


def test_new_generation_defaults_to_reset_reduce(rng):
    x = rand(rng, 64, 32)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        lo = nl2.ndarray((64, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        r = nl2.ndarray((64, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.iota(dst=lo, pattern=[[0, 1]], offset=0, channel_multiplier=0)  # an int pattern into fp32: 0
        nisa2.range_select(dst=t, on_true_tile=t, comp_op0=nl2.greater, comp_op1=nl2.less, bound0=lo, bound1=10.0,
                           reduce_res=r)
        return to_hbm(r)

    np.testing.assert_array_equal(run(kernel, x)[:, 0], x[:, 1:10].max(1))


@pytest.mark.parametrize("on_false", [-3.4028235e38, float(np.finfo(np.float32).min), nisa.fp32.min])
def test_any_literal_rounding_to_fp32_min_is_fp32_min(rng, on_false):
    """The value is an fp32 immediate: kernels write the decimal literal -3.4028235e38, which as a Python float
    differs from float(np.finfo(np.float32).min) but rounds to the same fp32."""
    x = rand(rng, 32, 16)

    def kernel(x):
        t = to_sbuf(x, nl2.float32)
        nisa2.range_select(dst=t, on_true_tile=t, comp_op0=nl2.greater_equal, comp_op1=nl2.less, bound0=3.0,
                           bound1=9.0, on_false_value=on_false)
        return to_hbm(t)

    ref = np.where((np.arange(16) >= 3) & (np.arange(16) < 9), x, FP32_MIN)
    np.testing.assert_array_equal(run(kernel, x), ref)


def _call(x, **kw):
    args = dict(on_true_tile=nl.load(x), comp_op0=np.greater_equal, comp_op1=np.less,
                bound0=nl.zeros((128, 1), dtype=nl.float32), bound1=nl.full((128, 1), 4, dtype=nl.float32),
                reduce_cmd=nisa.reduce_cmd.reset_reduce)
    args.update(kw)
    return args


def _plain(x):
    nisa.range_select(**_call(x))


def _on_false(x):
    nisa.range_select(**_call(x, on_false_value=0.0))


def _comparison(x):
    nisa.range_select(**_call(x, comp_op0=np.add))


def _bound_dtype(x):
    nisa.range_select(**_call(x, bound0=nl.zeros((128, 1), dtype=nl.bfloat16)))


def _reduce_op(x):
    nisa.range_select(**_call(x, reduce_op=np.add))


def _int_on_true(x):
    nisa.range_select(**_call(x, on_true_tile=nl.zeros((128, 16), dtype=nl.int32)))


def _idle_read_out(x):
    nisa.range_select(**_call(x, reduce_cmd=nisa.reduce_cmd.idle, reduce_res=nl.ndarray((128, 1), dtype=nl.float32)))


def _range_start(x):
    nisa.range_select(**_call(x, range_start=2 ** 24))


REJECTS = [
    ("needs_v3", _plain, "trn1", KernelError, "NeuronCore-v3"),
    ("on_false_not_fp32_min", _on_false, "trn2", KernelError, "fp32.min"),
    ("comp_op_not_a_comparison", _comparison, "trn2", KernelError, "comparison"),
    ("bound_not_fp32", _bound_dtype, "trn2", DtypeError, "fp32"),
    ("reduce_op_not_max", _reduce_op, "trn2", KernelError, "maximum only"),
    ("integer_on_true", _int_on_true, "trn2", DtypeError, "float dtype"),
    ("read_out_after_idle", _idle_read_out, "trn2", KernelError, "undefined"),
    ("range_start_beyond_fp32_integers", _range_start, "trn2", ShapeError, "2\\^24"),
]


test_range_select_rejects = rejecting(REJECTS)
