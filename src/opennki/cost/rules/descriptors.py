"""Cost layer: how a DMA's access patterns split into descriptors, and what that costs a DMA engine. Imports
events and numpy only.

A DMA engine moves a transfer as a list of descriptors, each a piece contiguous on both sides (spec/
hardware.md §6.1: "a transfer gathers a list of contiguous source buffers and scatters into destination
buffers"; an SBUF tile needs at least one per partition). `split()` finds them:

* **copy**: the pieces are the longest runs contiguous on both sides (a partition row of an on-chip operand at
  most; consecutive HBM bytes);
* **strided**: an element stride on either side makes every element its own descriptor (a transposing store,
  a column gather, a broadcast inner dim);
* **transpose**: the DMA engines' transpose path: `dma_transpose` on NeuronCore-v3+, and on v3+ a 2-byte
  `dma_copy` into SBUF whose pattern is a transpose (the compiler lowers those to DmaTranspose, which exists
  for HBM->SBUF and SBUF->SBUF only); it moves the destination's partition rows at the transpose efficiency
  (§6.5) instead of element descriptors;
* **indirect**: run-time indices (a gather or scatter): one descriptor per contiguous run of the touched
  elements when the offsets are known, else per row of the innermost dim.

`engine_ns()` is the time one DMA engine spends moving its share: its descriptors at `descriptor_ns` each
plus its bytes at the engine bandwidth. The per-transfer overhead that the efficiency curve (§6.3) shows for
small transfers is the queue's setup, placed by the scheduler (`DmaCost.fixed_latency_ns`); the curve is
the stream throughput that results, and is not extrapolated below its smallest point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opennki.events import MemoryKind, Operand

COPY, STRIDED, TRANSPOSE, INDIRECT = "copy", "strided", "transpose", "indirect"


@dataclass(frozen=True)
class Split:
    """A transfer as descriptors: `path` (module docstring), `count` descriptors of `piece_bytes` each (the
    destination's bytes), and `partition_bytes`, the bytes per partition (the efficiency curve's x)."""

    path: str
    count: int
    piece_bytes: float
    partition_bytes: float


def contiguous_run(op: Operand) -> int:
    """Elements of the longest contiguous innermost run of an affine access (free dims only on chip)."""
    first = 1 if op.kind is not MemoryKind.HBM else 0
    run, expected = 1, 1
    for a in range(len(op.shape) - 1, first - 1, -1):
        n = op.shape[a]
        if n == 1:
            continue
        if op.strides[a] != expected:
            break
        run *= n
        expected *= n
    return run


def _indirect_run(op: Operand) -> float:
    """Average elements per contiguous run of an indirect access: from the touched offsets when the event has
    them (runs also break at partition rows on chip), else one row of the innermost dim."""
    row = max(1, op.shape[-1]) if op.shape else 1
    if op.offsets is None:
        return float(row)
    flat = np.asarray(op.offsets, dtype=np.int64).reshape(-1)
    if flat.size <= 1:
        return float(max(flat.size, 1))
    breaks = np.count_nonzero(np.diff(flat) != 1)
    if op.kind is not MemoryKind.HBM and op.partitions > 1:
        breaks = max(breaks, op.partitions - 1)
    return flat.size / (breaks + 1)


def _is_permutation(op: Operand) -> bool:
    """An element-strided access that is contiguous along some other axis (a transpose, not a sparse gather)."""
    return any(s == 1 and n > 1 for n, s in zip(op.shape, op.strides))


def partition_bytes(dst: Operand, srcs: list[Operand]) -> float:
    """Bytes per partition of the transfer's on-chip side (the destination's if both are on chip); an
    HBM-to-HBM copy is spread like a 128-partition tile ([GAP] chosen)."""
    for op in [dst] + srcs:
        if op.kind is not MemoryKind.HBM:
            return float(op.free_elems * op.itemsize)
    return dst.size_bytes / 128.0


def split(dst: Operand, srcs: list[Operand], *, transpose: bool = False, element_transpose: bool = False,
          transpose_path: bool = False) -> Split:
    """The descriptors of a transfer from `srcs` into `dst` (module docstring).

    Args:
        transpose: the instruction is a DMA transpose (`dma_transpose`).
        element_transpose: a transpose runs as element descriptors (NeuronCore-v2).
        transpose_path: the target has the DmaTranspose path for 2-byte transposing copies (v3+).
    """
    elements = dst.partitions * dst.free_elems
    x = partition_bytes(dst, srcs)
    rows = max(1, dst.partitions) if dst.kind is not MemoryKind.HBM else max(1, math.ceil(elements /
                                                                                          max(1, dst.shape[-1])))
    if transpose and not element_transpose:
        return Split(TRANSPOSE, rows, dst.size_bytes / rows, x)
    if transpose:
        return Split(STRIDED, elements, float(dst.itemsize), x)
    ops = [dst] + srcs
    if any(o.strides is None for o in ops):
        run = min(_indirect_run(o) if o.strides is None else float(contiguous_run(o)) for o in ops)
        count = max(1, math.ceil(elements / max(run, 1.0)))
        return Split(INDIRECT, count, dst.size_bytes / count, x)
    run = max(1, min(contiguous_run(o) for o in ops))
    count = max(1, math.ceil(elements / run))
    strided = [o for o in ops if contiguous_run(o) == 1 and _extent(o) > 1]
    if run > 1 or not strided:
        return Split(COPY, count, dst.size_bytes / count, x)
    if (transpose_path and dst.kind is MemoryKind.SBUF and all(o.itemsize == 2 for o in ops)
            and all(_is_permutation(o) for o in strided)):
        return Split(TRANSPOSE, rows, dst.size_bytes / rows, x)
    return Split(STRIDED, count, dst.size_bytes / count, x)


def _extent(op: Operand) -> int:
    """Elements a run of `op` could span: one partition row on chip, the whole access in HBM."""
    return op.free_elems if op.kind is not MemoryKind.HBM else op.partitions * op.free_elems


def engine_ns(dma, split_: Split, size_bytes: float, engines: int, factor: float = 1.0) -> float:
    """Time one of `engines` DMA engines spends on its share of a transfer of `size_bytes` (module
    docstring): `(ceil(descriptors / engines) x descriptor_ns + bytes / engines / bandwidth) / factor`."""
    share = size_bytes / engines
    pieces_ns = math.ceil(split_.count / engines) * dma.descriptor_ns + share / dma.engine_bandwidth_bytes_per_ns
    return pieces_ns / factor
