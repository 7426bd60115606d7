"""nisa.tensor_copy_predicated (spec/isa.md §6.15): dst = src where the predicate is nonzero."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run, to_hbm, to_sbuf


@pytest.mark.parametrize("pred_dtype,reverse", [(np.bool_, False), (np.uint8, True), (np.uint32, False),
                                                (np.uint16, False)])
def test_copy_where_predicate(rng, pred_dtype, reverse):
    src, old = rand(rng, 128, 64), rand(rng, 128, 64)
    pred = rng.integers(0, 3, size=(128, 64)).astype(pred_dtype)     # 0, 1, 2: nonzero counts as true

    def kernel(src, old, pred):
        out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        dst = nl.load(old)
        nisa.tensor_copy_predicated(src=nl.load(src), dst=dst, predicate=nl.load(pred), reverse_pred=reverse)
        nl.store(out, dst)
        return out

    keep = (pred != 0) ^ reverse
    np.testing.assert_array_equal(run(kernel, src, old, pred), np.where(keep, src, old))


def test_bf16_bit_exact_psum_source_scalar_source_and_mask(rng):
    src = rand(rng, 64, 32).astype(ml_dtypes.bfloat16)
    pred = (rng.random((64, 32)) < 0.5).astype(np.uint8)

    def kernel(src, pred):
        out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
        p = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.psum)
        p[...] = nl.load(src)
        dst = nl.full(src.shape, 3.0, dtype=nl.bfloat16)
        i_p = nl.arange(64)[:, None]
        nisa.tensor_copy_predicated(src=p, dst=dst, predicate=nl.load(pred), mask=(i_p < 48))
        nisa.tensor_copy_predicated(src=-1.0, dst=dst, predicate=nl.load(pred), reverse_pred=True,
                                    mask=(i_p >= 48))
        nl.store(out, dst)
        return out

    ref = np.where(pred != 0, src.astype(np.float32), 3.0)
    ref[48:] = np.where(pred[48:] != 0, 3.0, -1.0)
    np.testing.assert_array_equal(run(kernel, src, pred).astype(np.float32), ref)


def test_new_generation_copy_predicated(rng):
    src, pred = rand(rng, 32, 16), (rng.random((32, 16)) < 0.3).astype(np.uint8)

    def kernel(src, pred):
        s = to_sbuf(src, nl2.float32)
        p = nl2.ndarray(src.shape, dtype=nl2.uint8, buffer=nl2.sbuf)
        d = nl2.ndarray(src.shape, dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=p, src=pred)
        nisa2.memset(dst=d, value=0.0)
        nisa2.tensor_copy_predicated(dst=d, src=s, predicate=p)
        return to_hbm(d)

    np.testing.assert_array_equal(run(kernel, src, pred), np.where(pred != 0, src, 0))


def _float_predicate(x):
    t = nl.load(x)
    nisa.tensor_copy_predicated(src=t, dst=nl.ndarray((128, 16), dtype=nl.float32), predicate=t)


def _dtype_mismatch(x):
    nisa.tensor_copy_predicated(src=nl.load(x), dst=nl.ndarray((128, 16), dtype=nl.bfloat16),
                                predicate=nl.zeros((128, 16), dtype=nl.uint8))


def _both_psum(x):
    nisa.tensor_copy_predicated(src=nl.zeros((128, 16), dtype=nl.float32, buffer=nl.psum),
                                dst=nl.ndarray((128, 16), dtype=nl.float32),
                                predicate=nl.zeros((128, 16), dtype=nl.uint8, buffer=nl.psum))


def _shape(x):
    nisa.tensor_copy_predicated(src=nl.load(x), dst=nl.ndarray((128, 16), dtype=nl.float32),
                                predicate=nl.zeros((128, 8), dtype=nl.uint8))


REJECTS = [
    ("float_predicate", _float_predicate, DtypeError, "predicate"),
    ("dtype_mismatch", _dtype_mismatch, DtypeError, "same dtype"),
    ("src_and_predicate_in_psum", _both_psum, MemoryKindError, "both be in PSUM"),
    ("shape", _shape, ShapeError, "elements per partition"),
]


test_copy_predicated_rejects = rejecting(REJECTS, api="nisa.tensor_copy_predicated")
