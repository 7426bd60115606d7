"""nisa.select_reduce (spec/isa.md §6.20): predicated select with a max-reduction into the DVE accumulators."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError
from tests.isa.helpers import rand, rejecting, run, to_hbm


@pytest.mark.parametrize("pred_dtype,reverse,column", [(np.uint8, False, False), (np.bool_, True, False),
                                                       (np.int16, False, True)])
def test_select_and_max_reduce(rng, pred_dtype, reverse, column):
    x, off = rand(rng, 128, 64), rand(rng, 128, 1)
    pred = (rng.random((128, 64)) < 0.4).astype(pred_dtype)

    def kernel(x, pred, off):
        out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        red = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        dst = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
        res = nl.ndarray((128, 1), dtype=nl.float32)
        nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(x),
                           on_false=nl.load(off) if column else -7.5, reduce_res=res,
                           reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=np.max, reverse_pred=reverse)
        nl.store(out, dst)
        nl.store(red, res)
        return out, red

    y, red = run(kernel, x, pred, off)
    keep = (pred != 0) ^ reverse
    ref = np.where(keep, x, off if column else np.float32(-7.5))
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(red[:, 0], ref.max(1))


def test_bf16_on_true_and_new_generation(rng):
    x = rand(rng, 32, 16).astype(ml_dtypes.bfloat16)
    pred = (rng.random((32, 16)) < 0.5).astype(np.uint8)

    def kernel(x, pred):
        t = nl2.ndarray((32, 16), dtype=nl2.bfloat16, buffer=nl2.sbuf)
        p = nl2.ndarray((32, 16), dtype=nl2.uint8, buffer=nl2.sbuf)
        r = nl2.ndarray((32, 17), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=t, src=x)
        nisa2.dma_copy(dst=p, src=pred)
        nisa2.select_reduce(dst=r[:, 0:16], predicate=p, on_true=t, on_false=-1.0, reduce_res=r[:, 16:17],
                            reduce_cmd=nisa2.reduce_cmd.reset_reduce)
        return to_hbm(r)

    got = run(kernel, x, pred)
    ref = np.where(pred != 0, x.astype(np.float32), np.float32(-1))
    np.testing.assert_array_equal(got[:, :16], ref)
    np.testing.assert_array_equal(got[:, 16], ref.max(1))


def _args(x, **kw):
    args = dict(dst=nl.ndarray((128, 16), dtype=nl.float32), predicate=nl.zeros((128, 16), dtype=nl.uint8),
                on_true=nl.load(x), on_false=0.0)
    args.update(kw)
    return args


def _float_pred(x):
    nisa.select_reduce(**_args(x, predicate=nl.load(x)))


def _int32_on_true(x):
    nisa.select_reduce(**_args(x, on_true=nl.zeros((128, 16), dtype=nl.int32)))


def _both_psum(x):
    nisa.select_reduce(**_args(x, on_true=nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum),
                               predicate=nl.zeros((128, 16), dtype=nl.uint8, buffer=nl.psum)))


def _reduce_add(x):
    nisa.select_reduce(**_args(x, reduce_op=np.add, reduce_cmd=nisa.reduce_cmd.reset_reduce))


def _idle_read_out(x):
    nisa.select_reduce(**_args(x, reduce_res=nl.ndarray((128, 1), dtype=nl.float32)))


def _on_false_tile(x):
    nisa.select_reduce(**_args(x, on_false=nl.load(x)))


REJECTS = [
    ("float_predicate", _float_pred, DtypeError, "predicate"),
    ("int32_on_true", _int32_on_true, DtypeError, "int32"),
    ("on_true_and_predicate_in_psum", _both_psum, MemoryKindError, "both be in PSUM"),
    ("reduce_op_add", _reduce_add, KernelError, "maximum only"),
    ("read_out_with_default_idle", _idle_read_out, KernelError, "undefined"),
    ("on_false_not_a_column", _on_false_tile, Exception, r"\[P, 1\]"),
]


test_select_reduce_rejects = rejecting(REJECTS, api="nisa.select_reduce")
