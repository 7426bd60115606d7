"""ISA layer: DMA instructions (spec/isa.md §7.1).

`dma_copy` moves elements between HBM and SBUF (either direction, or within one memory), in row-major
order of both access patterns, so source and destination may differ in shape but not in element count.
Different dtypes convert through fp32; equal dtypes copy bits. Run-time (indirect) indices come with the
views (`data[idx_tile, i_f]` in the legacy generation).
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, MemoryKindError, expect
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, instruction, operand
from opennki.instructions.enums import dge_mode, dge_mode_of, oob_mode, oob_mode_of
from opennki.instructions.ops import alu
from opennki.machine.dtypes import to_float32

_DMA_MEMORIES = (MemoryKind.HBM, MemoryKind.SBUF)


@instruction
class DmaCopy(Instruction):
    """dst = src, element by element in row-major order (optionally dst = dst + src: `dst_rmw_op=add`).

    Args:
        dst: HBM or SBUF access pattern.
        src: HBM, SBUF (or, in the legacy generation, PSUM) access pattern with as many elements as dst.
        dst_rmw_op: None, or `add` for a read-modify-write accumulation in fp32.
        oob_mode: `error` (default) or `skip` for indirect accesses.
        dge_mode: descriptor generation; `hwdge` moves raw bytes and needs equal dtypes.
    Raises:
        MemoryKindError: an operand in PSUM as destination, or outside HBM/SBUF/PSUM.
        ShapeError: element counts differ.
        DtypeError: `hwdge` with different dtypes.
    """

    opcode = "dma_copy"
    default_engine = Engine.DMA

    dst: object = operand(WRITE)
    src: object = operand(READ)
    dst_rmw_op: object = None
    oob_mode: object = None
    dge_mode: object = None
    engine: object = None
    priority: object = None

    def check(self, ctx) -> None:
        expect(self.dst.kind in _DMA_MEMORIES, "DMA destination must be in HBM or SBUF",
               expected="HBM/SBUF", got=self.dst.kind.name, code="err_unsupported_memory", error=MemoryKindError)
        expect(self.src.size == self.dst.size, "source and destination must have the same number of elements",
               expected=self.dst.size, got=self.src.size)
        if self.dst.is_on_chip:
            expect(self.dst.shape[0] <= ctx.hw.tiles.pmax,
                   f"dst partition dimension {self.dst.shape[0]} exceeds maximum {ctx.hw.tiles.pmax}",
                   got=self.dst.shape, code="err_num_partition_exceed_arch_limit")
        if dge_mode_of(self.dge_mode) is dge_mode.hwdge:
            expect(self.src.dtype is self.dst.dtype, "dge_mode=hwdge moves raw bytes: dtypes must match",
                   expected=self.dst.dtype, got=self.src.dtype, error=DtypeError,
                   hint="use .view(dtype) to reinterpret, or let the DGE mode default")
        if self.dst_rmw_op is not None:
            expect(alu(self.dst_rmw_op).name == "add", "dst_rmw_op must be add", got=alu(self.dst_rmw_op).name)
        oob_mode_of(self.oob_mode)

    def run(self, m) -> None:
        same_shape = self.src.shape == self.dst.shape
        mask = self.mask
        skip = oob_mode_of(self.oob_mode) is oob_mode.skip
        if skip and (self.src.dynamic or self.dst.dynamic):
            mask = _in_bounds_rows(m, self.src if self.src.dynamic else self.dst, mask)
        values = m.read(self.src, mask if same_shape else None)
        if not same_shape:
            values = np.ascontiguousarray(values).reshape(self.dst.shape)
        if self.dst_rmw_op is not None:
            m.accumulate(self.dst, to_float32(values, self.src.dtype), mask)
        elif self.src.dtype is self.dst.dtype:
            m.write(self.dst, values, mask, raw=True)
        else:
            m.write(self.dst, to_float32(values, self.src.dtype), mask)


def _in_bounds_rows(m, view, mask):
    """For oob_mode=skip: a mask that switches off the elements whose run-time index is out of range."""
    active = np.ones(view.shape, bool)
    if mask is not None:
        active &= np.broadcast_to(m.effective_mask(view, mask), view.shape)
    values = m._dynamic_values(view)
    for d, dim_size in enumerate(view.coords):
        pos = view._dim_values(d)
        for term, v in zip(view.dynamic, values):
            pos = pos + term.coeffs[d] * v
        active &= (pos >= 0) & (pos < dim_size)
    return active
