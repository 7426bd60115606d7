"""ISA layer: DMA instructions (spec/isa.md §7.1, §7.2).

Imports the ISA base and machine dtypes. `dma_copy` moves elements between HBM and SBUF (either direction,
or within one memory), in row-major order of both access patterns, so source and destination may differ in
shape but not in element count. `dma_transpose` permutes the axes of a 2-4-D tensor on the way into SBUF.
Different dtypes convert through fp32; equal dtypes copy bits. Run-time (indirect) indices come with the
views (`data[idx_tile, i_f]` in the legacy generation) and are resolved by the machine; `oob_mode=skip`
turns an out-of-range run-time index into a skipped element (the destination keeps its bits) instead of
an error.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError, expect
from opennki.machine.machine import Machine
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import (READ, WRITE, Instruction, require, instruction,
                                       operand)
from opennki.instructions.enums import dge_mode, dge_mode_of, oob_mode, oob_mode_of
from opennki.instructions.ops import alu
from opennki.machine.dtypes import to_float32

_DMA_MEMORIES = (MemoryKind.HBM, MemoryKind.SBUF)
# A DMA without mask, accumulation or conversion between same-shaped views in the usual case copies in one step
# (`Machine.copy_plain`); False: every DMA takes the plain path (tests/sim/test_usual_matmuls.py compares them)
USUAL_DMAS = True


def _check_dge(ctx, mode: dge_mode) -> None:
    if mode is dge_mode.hwdge:
        require(ctx, "hwdge", "dge_mode=hwdge (hardware descriptor generation)")


def _in_bounds(m, view, mask) -> np.ndarray:
    """For oob_mode=skip: the elements of an indirect view whose run-time index is in range (and active)."""
    active = view.in_range(m.dynamic_values(view))
    if mask is not None:
        active &= np.broadcast_to(m.effective_mask(view, mask), view.shape)
    return active


@instruction
class DmaCopy(Instruction):
    """dst = src, element by element in row-major order (or dst = dst + src with `dst_rmw_op=add`).

    Args:
        dst: HBM or SBUF access pattern, possibly with run-time (indirect) row indices.
        src: HBM, SBUF (or, in the legacy generation, PSUM) access pattern with as many elements as dst.
        dst_rmw_op: None, or `add` for a read-modify-write accumulation in fp32. Every element of src is
            added, also when run-time indices send several of them to the same destination element (the
            atomic scatter-add `nl.atomic_rmw` relies on): the contributions are summed in fp32 and the
            destination rounded once. Only with oob_mode=error.
        oob_mode: `error` (default) or `skip` for indirect accesses.
        dge_mode: descriptor generation; `hwdge` (NeuronCore-v3+) moves raw bytes and needs equal dtypes.
        engine, priority: the new generation's queue selection (no functional effect).
    Raises:
        MemoryKindError: destination outside HBM/SBUF.
        ShapeError: element counts differ.
        DtypeError: `hwdge` with different dtypes.
    """

    opcode = "dma_copy"
    default_engine = Engine.DMA
    defers_data = True                  # `run`'s usual copy may wait (`Machine.defer`); its plain path catches up

    dst: object = operand(WRITE)
    src: object = operand(READ)
    dst_rmw_op: object = None
    oob_mode: object = None
    dge_mode: object = None
    engine: object = None
    priority: object = None

    def check(self, ctx) -> None:
        # every DMA of a kernel passes here: rules are tested before their messages are formatted
        if self.dst.kind not in _DMA_MEMORIES:
            raise MemoryKindError("DMA destination must be in HBM or SBUF", expected="HBM/SBUF",
                                  got=self.dst.kind.name, code="err_unsupported_memory")
        expect(self.src.size == self.dst.size, "source and destination must have the same number of elements",
               expected=self.dst.size, got=self.src.size)
        if self.dst.is_on_chip and self.dst.shape[0] > ctx.hw.tiles.pmax:
            raise ShapeError(f"dst partition dimension {self.dst.shape[0]} exceeds maximum {ctx.hw.tiles.pmax}",
                             got=self.dst.shape, code="err_num_partition_exceed_arch_limit")
        mode = dge_mode_of(self.dge_mode)
        _check_dge(ctx, mode)
        if mode is dge_mode.hwdge:
            expect(self.src.dtype is self.dst.dtype, "dge_mode=hwdge moves raw bytes: dtypes must match",
                   expected=self.dst.dtype, got=self.src.dtype, error=DtypeError,
                   hint="use .view(dtype) to reinterpret, or let the DGE mode default")
        oob = oob_mode_of(self.oob_mode)
        if self.dst_rmw_op is not None:
            expect(alu(self.dst_rmw_op).name == "add", "dst_rmw_op must be add", got=alu(self.dst_rmw_op).name,
                   error=KernelError)
            expect(oob is oob_mode.error, "dst_rmw_op needs oob_mode=error", got=oob.name, error=KernelError)

    def run(self, m) -> None:
        if (USUAL_DMAS and self.mask is None and self.dst_rmw_op is None
                and self.src.storage.dtype is self.dst.storage.dtype       # (the views' dtypes, without the property)
                and tuple.__eq__(self.src.shape, self.dst.shape) and m.copy_plain(self.dst, self.src)):
            return
        if m.later:
            m.catch_up()                # the plain path reads and writes at once (`Machine.defer`)
        same_shape = tuple.__eq__(self.src.shape, self.dst.shape)
        read_mask = write_mask = self.mask
        if not same_shape:
            read_mask = None
        if (self.oob_mode is not None and oob_mode_of(self.oob_mode) is oob_mode.skip
                and (self.src.dynamic or self.dst.dynamic)):
            # the elements to move, in row-major order: the same ones on both sides, whatever their shapes
            active = _in_bounds(m, self.src if self.src.dynamic else self.dst, self.mask)
            read_mask, write_mask = active.reshape(self.src.shape), active.reshape(self.dst.shape)
        values = m.read(self.src, read_mask)
        if not same_shape:
            values = np.ascontiguousarray(values).reshape(self.dst.shape)
        if self.dst_rmw_op is not None:
            self._accumulate(m, to_float32(values, self.src.dtype), write_mask)
        elif self.src.dtype is self.dst.dtype:
            m.write(self.dst, values, write_mask, raw=True)
        else:
            m.write(self.dst, to_float32(values, self.src.dtype), write_mask)

    def _accumulate(self, m, values: np.ndarray, mask) -> None:
        scatter_add(m, self.dst, values, mask)


def scatter_add(m, dst, values: np.ndarray, mask=None) -> None:
    """dst += values in fp32 with np.add.at semantics: every contribution to the same destination element
    (duplicate run-time indices) is summed, and the destination is rounded once."""
    current = m.read_f32(dst, mask)
    offsets = dst.flat_offsets(m.dynamic_values(dst) if dst.dynamic else None)
    active = Machine.effective_mask(dst, mask)
    on = np.ones(dst.shape, bool) if active is None else active
    unique, inverse = np.unique(offsets[on], return_inverse=True)
    sums = np.zeros(unique.size, np.float32)
    np.add.at(sums, inverse, np.asarray(values, np.float32)[on])
    result = np.array(current, dtype=np.float32)
    result[on] = result[on] + sums[inverse]
    m.write(dst, result, on)


def _same_access(a, b) -> bool:
    """Same elements of the same tensor, with the same run-time index tiles (compared by identity: tiles
    compare element-wise)."""
    return (a.storage is b.storage and a.shape == b.shape and a.amap == b.amap and a.consts == b.consts
            and len(a.dynamic) == len(b.dynamic)
            and all(t.index is u.index and t.lead == u.lead and t.coeffs == u.coeffs
                    for t, u in zip(a.dynamic, b.dynamic)))


@instruction
class DmaCompute(Instruction):
    """dst = srcs[0] + srcs[1] + ... element by element in flattened row-major order, summed in fp32 by the
    DMA engines and rounded once into dst (new generation, NKI >= 0.2).

    Args:
        srcs: 1 to 16 HBM/SBUF access patterns with dst's element count. If one of them is dst itself
            (the same view, e.g. with the same run-time row indices), the instruction is a read-add-write
            of dst: the other sources are scatter-added into it, every duplicate index contributing
            (unique_indices only promises the hardware there are none).
        reduce_op: add only; scales: None or all 1.0 (the only documented values).
        oob_mode: error, or skip run-time rows out of range (not for a read-add-write).
    """

    opcode = "dma_compute"
    default_engine = Engine.DMA

    dst: object = operand(WRITE)
    srcs: tuple = operand(READ)
    reduce_op: object = "add"
    scales: object = None
    unique_indices: bool = True
    oob_mode: object = None

    def _rmw_source(self):
        return next((i for i, v in enumerate(self.srcs) if _same_access(v, self.dst)), None)

    def check(self, ctx) -> None:
        expect(self.dst.kind in _DMA_MEMORIES, "DMA destination must be in HBM or SBUF", expected="HBM/SBUF",
               got=self.dst.kind.name, code="err_unsupported_memory", error=MemoryKindError)
        expect(1 <= len(self.srcs) <= 16, "dma_compute takes 1 to 16 sources", got=len(self.srcs),
               error=KernelError)
        for i, v in enumerate(self.srcs):
            expect(v.kind in _DMA_MEMORIES, f"source {i} must be in HBM or SBUF", got=v.kind.name,
                   code="err_unsupported_memory", error=MemoryKindError)
            expect(v.size == self.dst.size, f"source {i} must have dst's element count", expected=self.dst.size,
                   got=v.size)
        expect(alu(self.reduce_op).name == "add", "dma_compute reduces with add only",
               got=alu(self.reduce_op).name, error=KernelError)
        expect(self.scales is None or all(float(x) == 1.0 for x in self.scales),
               "dma_compute scales must be 1.0", got=self.scales, error=KernelError)
        if oob_mode_of(self.oob_mode) is oob_mode.skip:
            expect(self._rmw_source() is None, "a read-add-write dma_compute needs oob_mode=error",
                   got="skip", error=KernelError)

    def run(self, m) -> None:
        rmw = self._rmw_source()
        mask = self.mask
        dynamic = next((v for v in (self.dst, *self.srcs) if v.dynamic), None)
        if dynamic is not None and oob_mode_of(self.oob_mode) is oob_mode.skip:
            mask = _in_bounds(m, dynamic, mask)
        total = np.zeros(self.dst.shape, np.float32)
        for i, v in enumerate(self.srcs):
            if i != rmw:
                values = m.read_f32(v, mask if v.shape == self.dst.shape else None)
                total = total + np.ascontiguousarray(values).reshape(self.dst.shape)
        if rmw is not None:
            scatter_add(m, self.dst, total, mask)
        else:
            m.write(self.dst, total, mask)


DEFAULT_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@instruction
class DmaTranspose(Instruction):
    """dst = np.transpose(src, axes) by DMA, into SBUF, bit-exact for equal dtypes (different dtypes
    convert through fp32, except with hwdge).

    Args:
        src: HBM or SBUF, 2-D, 3-D or 4-D, 2- or 4-byte dtype (4-byte only off the hwdge path,
            spec/isa.md §12.1 C31); may carry run-time row indices (new generation; the legacy API rejects them).
        dst: SBUF, exactly the permuted shape (at most pmax partitions).
        axes: the only permutations the hardware has: (1, 0), (2, 1, 0), (3, 1, 2, 0) (None: that one).
        dge_mode: hwdge (NeuronCore-v3+) additionally needs a 2-byte dtype, src.shape[0] in {1, 2, 4, 8, 16},
            (src.shape[0] * src.shape[-2]) % 16 == 0 for 3-/4-D and src.shape[-1] <= 128 (NKI 2.32 limits).
        oob_mode: skip rows whose run-time index is out of range.
    """

    opcode = "dma_transpose"
    default_engine = Engine.DMA

    dst: object = operand(WRITE)
    src: object = operand(READ)
    axes: object = None
    dge_mode: object = None
    oob_mode: object = None
    priority: object = None

    @classmethod
    def result(cls, *, src, axes=None):
        """`src`'s shape permuted by `axes` (by default the permutation of its rank), its dtype."""
        perm = tuple(axes) if axes is not None else DEFAULT_AXES.get(src.ndim, tuple(range(src.ndim)))
        return tuple(src.shape[a] for a in perm), src.dtype

    def permutation(self) -> tuple[int, ...]:
        return tuple(self.axes) if self.axes is not None else DEFAULT_AXES.get(self.src.ndim, ())

    def check(self, ctx) -> None:
        expect(self.src.kind in _DMA_MEMORIES, "dma_transpose reads HBM or SBUF", expected="HBM/SBUF",
               got=self.src.kind.name, code="err_unsupported_memory", error=MemoryKindError)
        expect(self.dst.kind is MemoryKind.SBUF, "dma_transpose writes SBUF", expected="SBUF",
               got=self.dst.kind.name, code="err_unsupported_memory", error=MemoryKindError)
        nd = self.src.ndim
        expect(nd in DEFAULT_AXES, "dma_transpose takes a 2-D, 3-D or 4-D source", got=self.src.shape,
               error=ShapeError)
        axes = self.permutation()
        expect(axes == DEFAULT_AXES[nd], f"a {nd}-D DMA transpose permutes axes as {DEFAULT_AXES[nd]}",
               expected=DEFAULT_AXES[nd], got=axes, error=KernelError)
        permuted = tuple(self.src.shape[a] for a in axes)
        expect(self.dst.shape == permuted, "dst must have exactly the transposed shape", expected=permuted,
               got=self.dst.shape)
        expect(self.dst.shape[0] <= ctx.hw.tiles.pmax, f"dst partition dimension exceeds {ctx.hw.tiles.pmax}",
               got=self.dst.shape, code="err_num_partition_exceed_arch_limit")
        expect(self.src.itemsize in (2, 4), "dma_transpose moves 2- or 4-byte elements", got=self.src.dtype,
               error=DtypeError)
        mode = dge_mode_of(self.dge_mode)
        _check_dge(ctx, mode)
        if mode is dge_mode.hwdge or self.src.dynamic:
            expect(self.src.itemsize == 2, "hwdge and indirect DMA transposes need a 2-byte dtype",
                   got=self.src.dtype, error=DtypeError)
            expect(self.src.dtype is self.dst.dtype, "hwdge and indirect DMA transposes do not convert",
                   expected=self.src.dtype, got=self.dst.dtype, error=DtypeError)
        if mode is dge_mode.hwdge:
            s = self.src.shape
            expect(s[0] in (1, 2, 4, 8, 16) and s[-1] <= 128 and (nd == 2 or (s[0] * s[-2]) % 16 == 0),
                   "hwdge transpose limits: src.shape[0] in {1, 2, 4, 8, 16}, src.shape[-1] <= 128, "
                   "(src.shape[0] * src.shape[-2]) % 16 == 0", got=s)
        if self.src.dynamic:
            expect(self.src.kind is MemoryKind.HBM, "an indirect DMA transpose reads HBM", got=self.src.kind.name,
                   error=MemoryKindError)
        oob_mode_of(self.oob_mode)

    def run(self, m) -> None:
        axes = self.permutation()
        inverse = tuple(int(a) for a in np.argsort(axes))
        dst_active = Machine.effective_mask(self.dst, self.mask)
        src_mask = None if dst_active is None else np.transpose(dst_active, inverse)
        if oob_mode_of(self.oob_mode) is oob_mode.skip and self.src.dynamic:
            src_mask = _in_bounds(m, self.src, src_mask)
        values = np.transpose(m.read(self.src, src_mask), axes)
        out_mask = None if src_mask is None else np.transpose(src_mask, axes)
        if self.src.dtype is self.dst.dtype:
            m.write(self.dst, values, out_mask, raw=True)
        else:
            m.write(self.dst, to_float32(values, self.src.dtype), out_mask)
