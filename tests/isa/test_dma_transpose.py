"""nisa.dma_transpose (spec/isa.md §7.2): axis permutation by DMA into SBUF, bit-exact."""

import ml_dtypes
import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, rejects, run, to_hbm


@pytest.mark.parametrize("shape,axes", [((64, 128), (1, 0)), ((4, 32, 16), (2, 1, 0)),
                                        ((2, 3, 5, 96), (3, 1, 2, 0))])
@pytest.mark.parametrize("from_sbuf", [False, True])
def test_documented_permutations_from_hbm_and_sbuf(rng, shape, axes, from_sbuf):
    x = rand(rng, *shape).astype(ml_dtypes.bfloat16)
    out_shape = tuple(shape[a] for a in axes)

    def kernel(x):
        out = nl.ndarray(out_shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        src = x
        if from_sbuf:
            src = nl.ndarray(shape, dtype=nl.bfloat16)
            nisa.dma_copy(dst=src, src=x)
        nl.store(out, nisa.dma_transpose(src))
        return out

    np.testing.assert_array_equal(run(kernel, x).view(np.uint16), np.transpose(x, axes).view(np.uint16))


def test_fp32_with_dtype_conversion_and_mask(rng):
    x = rand(rng, 48, 128)

    def kernel(x):
        out = nl.ndarray((128, 48), dtype=nl.float16, buffer=nl.shared_hbm)
        buf = nl.zeros((128, 48), dtype=nl.float16)
        i_p, i_f = nl.mgrid[0:128, 0:48]
        buf[...] = nisa.dma_transpose(x, dtype=nl.float16, mask=(i_f < 40))
        nl.store(out, buf)
        return out

    ref = x.T.astype(np.float16)
    ref[:, 40:] = 0
    np.testing.assert_array_equal(run(kernel, x), ref)


def test_new_generation_indirect_rows_with_oob_skip(rng):
    table = rand(rng, 100, 64).astype(np.float16)
    rows = np.array([5, 99, 130, 0, 42, -3, 77, 7] * 2, np.int32)[:, None]

    def kernel(table, rows):
        idx = nl2.ndarray((16, 1), dtype=nl2.int32, buffer=nl2.sbuf)
        t = nl2.ndarray((64, 16), dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=idx, src=rows)
        nisa2.memset(dst=t, value=-1.0)
        nisa2.dma_transpose(dst=t, src=table[idx, nl.arange(64)[None, :]], oob_mode=nisa2.oob_mode.skip)
        return to_hbm(t)

    got = run(kernel, table, rows)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < 100)
    np.testing.assert_array_equal(got[:, ok], table[rows[ok, 0]].T)
    np.testing.assert_array_equal(got[:, ~ok], -1.0)


def test_new_generation_hwdge_limits(rng):
    x = rand(rng, 16, 128).astype(np.float16)

    def kernel(x):
        t = nl2.ndarray((128, 16), dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.dma_transpose(dst=t, src=x, dge_mode=nisa2.dge_mode.hwdge)
        return to_hbm(t)

    np.testing.assert_array_equal(run(kernel, x, target="trn2"), x.T)


def _axes(x):
    nisa.dma_transpose(x, axes=(0, 1))


def _one_byte(x):
    nisa.dma_transpose(nl.zeros((16, 16), dtype=nl.int8))


def _legacy_indirect(x):
    idx = nl.zeros((16, 1), dtype=nl.int32)
    nisa.dma_transpose(x[idx, nl.arange(16)[None, :]])


def _dst_shape(x):
    nisa2.dma_transpose(dst=nl2.ndarray((32, 64), dtype=nl2.float32, buffer=nl2.sbuf), src=x)


def _psum_dst(x):
    nisa2.dma_transpose(dst=nl2.ndarray((16, 128), dtype=nl2.float32, buffer=nl2.psum), src=x)


def _rank5(x):
    nisa.dma_transpose(nl.zeros((2, 2, 2, 2, 2), dtype=nl.float32))


REJECTS = [
    ("axes_not_the_hardware_permutation", _axes, KernelError, "permutes axes"),
    ("one_byte_dtype", _one_byte, DtypeError, "2- or 4-byte"),
    ("legacy_indirect_source", _legacy_indirect, KernelError, "err_indirect_indices_are_not_supported"),
    ("dst_not_the_transposed_shape", _dst_shape, ShapeError, "transposed shape"),
    ("psum_destination", _psum_dst, MemoryKindError, "writes SBUF"),
    ("rank_5", _rank5, ShapeError, "2-D, 3-D or 4-D"),
]


test_dma_transpose_rejects = rejecting(REJECTS, target="trn2")


def test_hwdge_needs_two_byte_elements_and_v3(rng):
    def fp32_hwdge(x):
        nisa2.dma_transpose(dst=nl2.ndarray((16, 16), dtype=nl2.float32, buffer=nl2.sbuf), src=x[0:16, :],
                            dge_mode=nisa2.dge_mode.hwdge)

    def hwdge(x):
        t = nl2.ndarray((16, 16), dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.dma_transpose(dst=t, src=t, dge_mode=nisa2.dge_mode.hwdge)

    rejects(fp32_hwdge, rand(rng, 16, 16), error=DtypeError, match="2-byte", target="trn2")
    rejects(hwdge, rand(rng, 16, 16), error=KernelError, match="NeuronCore-v3", target="trn1")
