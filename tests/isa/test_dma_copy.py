"""nisa.dma_copy (spec/isa.md §7.1): DMA between HBM and SBUF, conversion through fp32, run-time row
indices with oob_mode, and read-modify-write accumulation."""

import ml_dtypes
import numpy as np

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError
from tests.isa.helpers import rand, rejecting, run


def test_round_trip_with_reshape_and_conversion(rng):
    x = rand(rng, 256, 3)

    def kernel(x):
        out = nl.ndarray((128, 6), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 6), dtype=nl.float32)
        nisa.dma_copy(dst=t, src=x)                          # same element count, different shape
        nisa.dma_copy(dst=out, src=t)                        # fp32 -> bf16 (RNE)
        return out

    np.testing.assert_array_equal(run(kernel, x).view(np.uint16),
                                  x.reshape(128, 6).astype(ml_dtypes.bfloat16).view(np.uint16))


def test_same_dtype_copies_bits_and_sbuf_to_sbuf(rng):
    x = rng.integers(-2 ** 31, 2 ** 31 - 1, size=(64, 16), dtype=np.int64).astype(np.int32)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
        a = nl.ndarray(x.shape, dtype=nl.int32)
        b = nl.ndarray(x.shape, dtype=nl.int32)
        nisa.dma_copy(dst=a, src=x)
        nisa.dma_copy(dst=b, src=a)
        nisa.dma_copy(dst=out, src=b)
        return out

    np.testing.assert_array_equal(run(kernel, x), x)


def test_indirect_row_gather_and_scatter(rng):
    table = rand(rng, 300, 32)
    rows = rng.permutation(300)[:128].astype(np.int32)[:, None]

    def kernel(table, rows):
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        back = nl.ndarray((300, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=back, src=table)
        idx = nl.load(rows)
        i_f = nl.arange(32)[None, :]
        t = nl.ndarray((128, 32), dtype=nl.float32)
        nisa.dma_copy(dst=t, src=table[idx, i_f])
        nisa.dma_copy(dst=out, src=t)
        nisa.dma_copy(dst=back[idx, i_f], src=nl.zeros((128, 32), dtype=nl.float32))
        return out, back

    out, back = run(kernel, table, rows)
    np.testing.assert_array_equal(out, table[rows[:, 0]])
    ref = table.copy()
    ref[rows[:, 0]] = 0
    np.testing.assert_array_equal(back, ref)


def test_oob_mode_skip_leaves_destination_untouched(rng):
    table = rand(rng, 50, 8)
    rows = np.array([3, 70, 49, -1, 0, 50, 12, 7] * 4, np.int32)[:, None]

    def kernel(table, rows):
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        idx = nl.load(rows)
        t = nl.full((32, 8), 5.0, dtype=nl.float32)
        nisa.dma_copy(dst=t, src=table[idx, nl.arange(8)[None, :]], mode=nisa.oob_mode.skip)   # legacy alias
        nisa.dma_copy(dst=out, src=t)
        return out

    got = run(kernel, table, rows)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < 50)
    np.testing.assert_array_equal(got[ok], table[rows[ok, 0]])
    np.testing.assert_array_equal(got[~ok], 5.0)


def test_rmw_add_accumulates_every_duplicate_index(rng):
    """np.add.at semantics: the atomic scatter-add behind nl.atomic_rmw."""
    acc = rand(rng, 20, 16)
    values = rand(rng, 128, 16)
    rows = rng.integers(0, 20, size=(128, 1)).astype(np.int32)

    def kernel(acc, values, rows):
        out = nl.ndarray((20, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=acc)
        idx = nl.load(rows)
        nisa.dma_copy(dst=out[idx, nl.arange(16)[None, :]], src=nl.load(values), dst_rmw_op=np.add)
        return out

    ref = acc.astype(np.float64).copy()
    np.add.at(ref, rows[:, 0], values)
    np.testing.assert_allclose(run(kernel, acc, values, rows), ref, rtol=1e-5, atol=1e-5)


def test_rmw_add_direct_bf16_destination(rng):
    a, b = rand(rng, 32, 8).astype(ml_dtypes.bfloat16), rand(rng, 32, 8)

    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=a)
        nisa.dma_copy(dst=out, src=nl.load(b), dst_rmw_op=np.add)
        return out

    ref = (a.astype(np.float32) + b).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(kernel, a, b).view(np.uint16), ref.view(np.uint16))


def test_new_generation_dma_copy_hwdge(rng):
    x = rand(rng, 64, 16).astype(np.float16)

    def kernel(x):
        out = nl2.ndarray(x.shape, dtype=nl2.float16, buffer=nl2.shared_hbm)
        t = nl2.ndarray(x.shape, dtype=nl2.float16, buffer=nl2.sbuf)
        nisa2.dma_copy(dst=t, src=x, dge_mode=nisa2.dge_mode.hwdge, engine=nisa2.scalar_engine)
        nisa2.dma_copy(dst=out, src=t, name="store")
        return out

    np.testing.assert_array_equal(run(kernel, x, target="trn2"), x)


def _psum_dst(x):
    nisa.dma_copy(dst=nl.ndarray((128, 16), dtype=nl.float32, buffer=nl.psum), src=x)


def _count(x):
    nisa.dma_copy(dst=nl.ndarray((128, 8), dtype=nl.float32), src=x)


def _hwdge_dtypes(x):
    nisa.dma_copy(dst=nl.ndarray((128, 16), dtype=nl.bfloat16), src=x, dge_mode=nisa.dge_mode.hwdge)


def _hwdge_v2(x):
    nisa.dma_copy(dst=nl.ndarray((128, 16), dtype=nl.float32), src=x, dge_mode=nisa.dge_mode.hwdge)


def _rmw_op(x):
    nisa.dma_copy(dst=x, src=nl.load(x), dst_rmw_op=np.multiply)


def _rmw_skip(x):
    nisa.dma_copy(dst=x, src=nl.load(x), dst_rmw_op=np.add, oob_mode=nisa.oob_mode.skip)


def _oob_error(x):
    idx = nl.full((4, 1), 200, dtype=nl.int32)
    nisa.dma_copy(dst=nl.ndarray((4, 16), dtype=nl.float32), src=x[idx, nl.arange(16)[None, :]])


def _bad_enum(x):
    nisa2.dma_copy(dst=nl2.ndarray((128, 16), dtype=nl2.float32, buffer=nl2.sbuf), src=x, oob_mode=1)


REJECTS = [
    ("psum_destination", _psum_dst, "trn2", MemoryKindError, "HBM or SBUF"),
    ("element_count", _count, "trn2", ShapeError, "same number of elements"),
    ("hwdge_converts_nothing", _hwdge_dtypes, "trn2", DtypeError, "dtypes must match"),
    ("hwdge_before_v3", _hwdge_v2, "trn1", KernelError, "NeuronCore-v3"),
    ("rmw_op_not_add", _rmw_op, "trn2", KernelError, "must be add"),
    ("rmw_with_skip", _rmw_skip, "trn2", KernelError, "oob_mode=error"),
    ("indirect_out_of_bounds", _oob_error, "trn2", IndexError, "out of bounds for axis 0 with size"),
    ("raw_int_enum_new_generation", _bad_enum, "trn2", KernelError, "raw integers"),
]


test_dma_copy_rejects = rejecting(REJECTS, api="nisa.dma_copy")
