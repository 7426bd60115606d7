"""The DMA descriptor model: how access patterns split into descriptors and what a DMA engine spends on them,
against hand computations (trn2: 23 B/ns per engine, 2.2 ns per descriptor, 8 partitions per engine)."""

import dataclasses

import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.cost import cost_of
from opennki.perf.estimate import estimate
from opennki.cost.rules.descriptors import split
from opennki.events import Engine
from opennki.hw import TRN1, TRN2
from tests.cost.helpers import spec
from tests.cost.test_rule_formulas import HBM, SB, R, W, ev, operand

B, T_DESC = 23.0, 2.2


def engine_ns(e, hw=TRN2):
    """Time each DMA engine spends on the transfer of event `e`."""
    work = cost_of(e, hw).dma
    engines = -(-work.partition_count // 8) if work.partition_count else 16
    return work.size_bytes / engines / (hw.cost.dma.engine_bandwidth_bytes_per_ns * work.efficiency)


def indirect(op, offsets=None):
    """`op` as an indirect access (no affine strides; the touched offsets when known)."""
    return dataclasses.replace(op, strides=None, offset=None, offsets=offsets)


def load(dst, src, **params):
    return ev("dma_copy", Engine.DMA, dst, src, **params)


def test_contiguous_rows_are_one_descriptor_per_partition():
    e = load(operand("dst", W, SB, (128, 2048)), operand("src", R, HBM, (128, 2048)))
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors, work.descriptor_bytes) == ("copy", 128, 8192)
    assert engine_ns(e) == pytest.approx(8 * T_DESC + 8 * 8192 / B)


def test_row_strided_source_keeps_row_descriptors():
    # a [128, 512] column block of a [128, 2048] HBM matrix: rows of 2 KiB, 8 KiB apart
    src = operand("src", R, HBM, (128, 512), strides=(2048, 1))
    e = load(operand("dst", W, SB, (128, 512)), src)
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors, work.descriptor_bytes) == ("copy", 128, 2048)
    assert engine_ns(e) == pytest.approx(8 * T_DESC + 8 * 2048 / B)


def test_short_hbm_runs_split_each_partition_row():
    # an 8 x 8 window of a 56 x 56 image per partition: 8 runs of 32 B per partition
    src = operand("src", R, HBM, (64, 8, 8), strides=(3136, 56, 1))
    e = load(operand("dst", W, SB, (64, 8, 8)), src)
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors, work.descriptor_bytes) == ("copy", 512, 32)
    assert engine_ns(e) == pytest.approx(64 * T_DESC + 8 * 256 / B)             # 8 engines for 64 partitions


def test_element_strided_store_pays_one_descriptor_per_element():
    # a transposing store: partition p's 128 fp32 elements land 512 B apart in HBM
    dst = operand("dst", W, HBM, (128, 128), strides=(1, 128))
    e = load(dst, operand("src", R, SB, (128, 128)))
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors, work.descriptor_bytes) == ("strided", 128 * 128, 4)
    assert engine_ns(e) == pytest.approx(1024 * T_DESC + 8 * 512 / B)
    bf16 = load(operand("dst", W, HBM, (128, 128), "bfloat16", strides=(1, 128)),
                operand("src", R, SB, (128, 128), "bfloat16"))
    assert cost_of(bf16, TRN2).dma.path == "strided"        # the transpose path does not write HBM


def test_two_byte_transposing_copy_into_sbuf_takes_the_transpose_path():
    src = operand("src", R, HBM, (128, 512), "bfloat16", strides=(1, 128))     # [512, 128] in HBM, transposed
    e = load(operand("dst", W, SB, (128, 512), "bfloat16"), src)
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors) == ("transpose", 128)
    assert engine_ns(e) == pytest.approx((8 * T_DESC + 8 * 1024 / B) / 0.9)    # 90% of a copy from HBM
    fp32 = load(operand("dst", W, SB, (128, 512)), operand("src", R, HBM, (128, 512), strides=(1, 128)))
    assert cost_of(fp32, TRN2).dma.path == "strided"
    assert cost_of(e, TRN1).dma.path == "strided"           # no DmaTranspose path before NeuronCore-v3


def test_dma_transpose_rows_at_the_transpose_efficiency_and_per_element_on_v2():
    src = operand("src", R, HBM, (512, 128), "bfloat16")
    dst = operand("dst", W, SB, (128, 512), "bfloat16")
    e = ev("dma_transpose", Engine.DMA, dst, src)
    assert cost_of(e, TRN2).dma.path == "transpose"
    assert engine_ns(e) == pytest.approx((8 * T_DESC + 8 * 1024 / B) / 0.9)
    sbuf = ev("dma_transpose", Engine.DMA, dst, operand("src", R, SB, (128, 512), "bfloat16"))
    assert engine_ns(sbuf) == pytest.approx((8 * T_DESC + 8 * 1024 / B) / 0.5)  # SBUF->SBUF at 50%
    v2 = cost_of(e, TRN1).dma
    assert (v2.path, v2.descriptors) == ("strided", 128 * 512)
    assert engine_ns(e, TRN1) == pytest.approx(4096 * T_DESC + 8 * 1024 / 17.0)


def test_indirect_gather_is_one_descriptor_per_gathered_row():
    src = indirect(operand("src", R, HBM, (128, 256)))          # rows picked by a run-time index
    e = load(operand("dst", W, SB, (128, 256)), src, dge_mode="swdge")
    work = cost_of(e, TRN2).dma
    assert (work.path, work.descriptors, work.descriptor_bytes) == ("indirect", 128, 1024)
    assert engine_ns(e) == pytest.approx(8 * T_DESC + 8 * 1024 / B)
    assert work.queue == "qGpSimdDynamic"


def test_indirect_offsets_give_the_runs_when_known():
    dst = operand("dst", W, SB, (4, 8))
    # rows 0 and 1 adjacent (one run of 16 elements), then two scattered rows of 8
    offsets = np.concatenate([np.arange(16), 100 + np.arange(8), 300 + np.arange(8)])
    src = indirect(operand("src", R, HBM, (4, 8)), offsets)
    pieces = split(dst, [src])
    # on chip the runs still break at each partition row: 4 pieces of 8 elements
    assert (pieces.path, pieces.count) == ("indirect", 4)
    hbm_dst = operand("dst", W, HBM, (4, 8))
    assert split(hbm_dst, [src]).count == 3


def test_a_stream_of_same_size_loads_reproduces_the_efficiency_curve():
    """The queue's setup (one transfer at a time) overlapping the previous transfer's data gives each transfer
    max(setup, data): the published curve (hardware.md §6.3) within 5% at every point from 256 B to 32 KiB."""
    def loads(a):
        for i in range(a.shape[0] // 128):
            x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[i * 128:(i + 1) * 128, :])
        return a
    dma = TRN2.cost.dma
    for size, eff in ((256, 0.103), (1024, 0.424), (2048, 0.813), (4096, 0.966), (32768, 1.0)):
        r = estimate(loads, (spec((128 * 12, size // 4)),), target="trn2")
        recs = r.records
        period = (recs[-1].end - recs[1].end) / (len(recs) - 2)
        curve = 8 * size / (dma.engine_bandwidth_bytes_per_ns * eff)
        assert period == pytest.approx(curve, rel=0.05), size
