"""ISA layer: on-chip data movement with a run-time element: predicated and dynamically offset copies,
and the cross-partition stream shuffle (spec/isa.md §6.15, §6.25).

Imports the ISA base and the vector helpers. A dynamic offset is part of the operand's view: the legacy
subscript `t[ix, offsets_tile[0, k] + iy]` (or `t[ix, offsets_tile[0, k], iz]`) adds the run-time value of
a one-element SBUF tile to a free-dim index, and `Machine.read` / `Machine.write` resolve it.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, ShapeError, expect
from opennki.machine.machine import Machine
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import (READ, WRITE, Instruction, check_dtype, check_not_both_psum,
                                       check_on_chip, check_partitions, flat, instruction, is_tensor, operand,
                                       read_operand)
from opennki.instructions.indirection import check_indirection
from opennki.instructions.vector import TensorCopy, check_elementwise
from opennki.machine.dtypes import SCALAR_TYPES

_PREDICATE_DTYPES = ("bool", "uint8", "uint16", "uint32", "int8", "int16", "int32")
_QUADRANT = 32
_KEEP = 255      # shuffle_mask entry that leaves the output partition untouched


@instruction
class TensorCopyPredicated(Instruction):
    """dst[i] = src[i] where predicate[i] != 0 (inverted with `reverse_pred`); other dst elements keep
    their contents. src is a tile shaped like dst with dst's dtype (copied bit-exactly) or a scalar;
    predicate an integer (or bool) tile shaped like dst. src and predicate cannot both be in PSUM.
    Nonzero (not just bit 0) counts as true (spec gap)."""

    opcode = "tensor_copy_predicated"
    indirect_fields = ("dst", "predicate")
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ, immediate=True)
    predicate: object = operand(READ)
    reverse_pred: bool = False

    def check(self, ctx) -> None:
        check_indirection(self, ctx)
        check_elementwise(ctx, self.dst, {"src": self.src, "predicate": self.predicate})
        check_dtype(self.predicate, "predicate", _PREDICATE_DTYPES, "an integer (or bool) tile")
        if is_tensor(self.src):
            expect(self.src.dtype is self.dst.dtype, "src and dst must have the same dtype",
                   expected=self.dst.dtype, got=self.src.dtype, error=DtypeError)
            check_not_both_psum(self.src, self.predicate, "src", "predicate")
        else:
            expect(isinstance(self.src, SCALAR_TYPES), "src must be a tile or a scalar",
                   got=type(self.src).__name__, error=DtypeError)

    def run(self, m) -> None:
        pred = read_operand(m, self.predicate, self.dst, self.mask, raw=True) != 0
        if self.reverse_pred:
            pred = ~pred
        selected = pred.reshape(self.dst.shape)
        active = Machine.effective_mask(self.dst, self.mask)
        if active is not None:
            selected = selected & active
        if is_tensor(self.src):
            values = read_operand(m, self.src, self.dst, self.mask, raw=True)
            m.write(self.dst, values.reshape(self.dst.shape), selected, raw=True)
        else:
            m.write(self.dst, np.float32(self.src) if self.dst.dtype.is_float else np.asarray(self.src),
                    selected)


def check_dynamic(view, role: str) -> None:
    """`view` has run-time offsets, each a one-element integer SBUF tile on a free dim."""
    expect(bool(view.dynamic), f"'{role}' must be indexed with a run-time offset (a one-element SBUF tile "
           "in a free-dim index)", got=view.shape, error=KernelError,
           hint="e.g. src[ix, offsets[0, k] + iy]; without a run-time offset use tensor_copy")
    for term in view.dynamic:
        idx = term.index
        expect(idx.kind is MemoryKind.SBUF and idx.dtype.is_int and idx.size == 1,
               f"the run-time offset of '{role}' must be one integer element in SBUF",
               got=f"{idx.dtype} {idx.shape} in {idx.kind.name}", error=KernelError)
        expect(not term.coeffs[0], f"the run-time offset of '{role}' must be on a free dim, not the partition "
               "dim", got=term.coeffs, error=KernelError, code="err_indirect_indices_free_dim")


@instruction
class TensorCopyDynamicSrc(TensorCopy):
    """`tensor_copy` whose src carries a run-time free-dim offset (NumPy `take` along that axis); the
    offset is read from SBUF when the instruction runs, and bounds are checked then. Engines: vector,
    scalar, gpsimd (SBUF only). New generation: NKI 0.2 only (deprecated in 0.3, removed in 0.4)."""

    opcode = "tensor_copy_dynamic_src"

    def check(self, ctx) -> None:
        super().check(ctx)
        check_dynamic(self.src, "src")
        expect(not self.dst.dynamic, "dst of tensor_copy_dynamic_src has no run-time offset",
               got="dynamic dst", error=KernelError, hint="use tensor_copy_dynamic_dst")


@instruction
class TensorCopyDynamicDst(TensorCopy):
    """`tensor_copy` whose dst carries a run-time free-dim offset (a scatter of the tile at that offset);
    see TensorCopyDynamicSrc."""

    opcode = "tensor_copy_dynamic_dst"
    result_like = ""                # it writes into a destination the kernel gives

    def check(self, ctx) -> None:
        super().check(ctx)
        check_dynamic(self.dst, "dst")
        expect(not self.src.dynamic, "src of tensor_copy_dynamic_dst has no run-time offset",
               got="dynamic src", error=KernelError, hint="use tensor_copy_dynamic_src")


@instruction
class NcStreamShuffle(Instruction):
    """Cross-partition move within each 32-partition quadrant: for every quadrant q and i < 32,
    dst[q + i] = src[q + shuffle_mask[i]] bit-exactly, except where shuffle_mask[i] == 255, which leaves
    dst partition q + i untouched. src and dst (SBUF/PSUM) have the same dtype and elements per partition;
    in-place (src is dst) is allowed. The legacy mask applies to dst."""

    opcode = "nc_stream_shuffle"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ)
    shuffle_mask: tuple = ()

    def check(self, ctx) -> None:
        for role, t in (("src", self.src), ("dst", self.dst)):
            check_on_chip(t, role)
            check_partitions(t, role, ctx.hw)
        expect(self.src.dtype is self.dst.dtype, "src and dst must have the same dtype", expected=self.src.dtype,
               got=self.dst.dtype, error=DtypeError)
        expect(self.src.free_size == self.dst.free_size, "src and dst must have the same elements per partition",
               expected=self.src.free_size, got=self.dst.free_size)
        mask = [int(v) for v in self.shuffle_mask]
        expect(len(mask) == _QUADRANT, "shuffle_mask has 32 entries (one per partition of a quadrant)",
               expected=_QUADRANT, got=len(mask))
        expect(all(0 <= v < _QUADRANT or v == _KEEP for v in mask),
               "shuffle_mask entries are source partitions 0..31, or 255 to keep the destination partition",
               got=mask)
        Ps, Pd = self.src.shape[0], self.dst.shape[0]
        for q in range(0, Pd, _QUADRANT):
            for i, v in enumerate(mask):
                if v != _KEEP and q + i < Pd:
                    expect(q + v < Ps, "shuffle_mask reads a partition beyond src", expected=f"< {Ps}",
                           got=q + v, error=ShapeError)

    def run(self, m) -> None:
        Pd = self.dst.shape[0]
        moves = [(q + i, q + v) for q in range(0, Pd, _QUADRANT)
                 for i, v in enumerate(int(v) for v in self.shuffle_mask) if v != _KEEP and q + i < Pd]
        sources = np.zeros(self.src.shape[0], bool)     # only the partitions the mask names are read
        for _, src_row in moves:
            sources[src_row] = True
        s = flat(m.read(self.src, np.broadcast_to(sources.reshape((-1,) + (1,) * (self.src.ndim - 1)),
                                                  self.src.shape)))
        out = np.empty((Pd, s.shape[1]), s.dtype)
        rows = np.zeros(Pd, bool)
        for dst_row, src_row in moves:
            out[dst_row] = s[src_row]
            rows[dst_row] = True
        written = np.broadcast_to(rows.reshape((Pd,) + (1,) * (self.dst.ndim - 1)), self.dst.shape)
        active = Machine.effective_mask(self.dst, self.mask)
        if active is not None:
            written = written & active
        m.write(self.dst, out.reshape(self.dst.shape), written, raw=True)
