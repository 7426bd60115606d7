"""ISA layer: the variable-length collectives among one rank (nki.collectives.all_to_all_v / all_gather_v and
NKI 0.7's prepare / trigger splits of them).

Imports the ISA base. opennki is one device, rank 0 (opennki/collectives.py). Over a replica group holding
only that rank, a variable-length collective moves one chunk of the flat source to the flat destination:
  * `all_to_all_v`: `dst[rd : rd + c] = src[sd : sd + c]` with c = send count (metadata row 0), sd = send
    displacement (row 1), rd = receive displacement (row 3 when `has_rdispls`, else 0) of rank 0;
  * `all_gather_v`: the chunk `src[sd : sd + c]` lands in rank 0's slot of dst (slot size = dst size / group
    size), at the slot's start, or at row 3's displacement when `has_rdispls`.
Counts are elements in row-major order; the metadata is a (2..4, group size) uint32 tensor
(docs: nki.collectives.all_to_all_v / all_gather_v, v2.33).

A prepare (`*_prepare`) reads only the metadata and keeps the chunk it describes in the returned
`CollectiveHandle`; the paired trigger (`*_trigger`) reads src and writes dst (docs: all_to_all_v_prepare,
all_to_all_v_trigger, all_gather_v_prepare, all_gather_v_trigger, v2.33).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opennki.errors import DtypeError, KernelError, OutOfBoundsError, ShapeError, expect
from opennki.events import MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, check_on_chip, instruction, operand


class CollectiveHandle:
    """What a prepare returns (`NkiInstruction` in NKI): the operands of the split collective and, once the
    prepare ran, the chunk (count, source and destination displacements) it read from the metadata.

    Attributes:
        kind: "all_to_all_v" or "all_gather_v".
        src / dst / metadata: the collective's tensors.
        has_rdispls: whether metadata row 3 holds receive displacements.
        chunk: (count, send displacement, receive displacement), None until the prepare ran (and in shape-only
            runs).
        triggered: the paired trigger was issued.
    """

    def __init__(self, kind, src, dst, metadata, has_rdispls, location):
        self.kind, self.src, self.dst, self.metadata = kind, src, dst, metadata
        self.has_rdispls = has_rdispls
        self.location = location
        self.chunk = None
        self.triggered = False

    @property
    def nki_name(self) -> str:
        return f"{self.kind}_prepare@{self.location}"

    def __repr__(self) -> str:
        return f"<{self.nki_name}>"


def check_metadata(metadata, has_rdispls: bool, recv_counts_known: bool) -> None:
    check_on_chip(metadata, "metadata_tensor", (MemoryKind.HBM, MemoryKind.SBUF))
    expect(metadata.dtype.name == "uint32", "metadata_tensor is a uint32 tensor", got=metadata.dtype,
           error=DtypeError)
    rows = 4 if has_rdispls else (3 if recv_counts_known else 2)
    expect(metadata.ndim == 2 and rows <= metadata.shape[0] <= 4, "metadata_tensor has shape (rows, group size): "
           "send counts, send displacements, then recv counts and recv displacements when given",
           expected=f"({rows}..4, group size)", got=metadata.shape, error=ShapeError)


def read_chunk(kind: str, meta: np.ndarray, src, dst, has_rdispls: bool):
    """(count, send displacement, receive displacement) of rank 0, bounds-checked against src and dst."""
    meta = np.asarray(meta).reshape(meta.shape[0], -1).astype(np.int64)
    count, send = int(meta[0, 0]), int(meta[1, 0])
    recv = int(meta[3, 0]) if has_rdispls else 0
    limit = dst.size // meta.shape[1] if kind == "all_gather_v" else dst.size
    if send + count > src.size or recv + count > limit:
        raise OutOfBoundsError(f"{kind}: the metadata's chunk lies outside its tensors",
                               expected=f"send {send}+{count} <= {src.size}, recv {recv}+{count} <= {limit}",
                               got=meta[:, 0].tolist())
    return count, send, recv


def move_chunk(m, src, dst, chunk) -> None:
    count, send, recv = chunk
    if count == 0:
        return
    values = np.zeros(dst.size, dtype=dst.storage.array.dtype)
    values[recv:recv + count] = np.asarray(m.read(src)).reshape(-1)[send:send + count]
    written = np.zeros(dst.size, dtype=bool)
    written[recv:recv + count] = True          # the rest of dst is left as it is
    m.write(dst, values.reshape(dst.shape), mask=written.reshape(dst.shape), raw=True)


@dataclass(frozen=True, kw_only=True, eq=False)
class _VariableCollective(Instruction):
    src: object = operand(READ)
    dst: object = operand(WRITE)
    metadata: object = operand(READ)
    has_rdispls: bool = False
    recv_counts_known: bool = False

    def check(self, ctx) -> None:
        for role, t in (("srcs", self.src), ("dsts", self.dst)):
            check_on_chip(t, role, (MemoryKind.HBM,))
        expect(self.src.dtype is self.dst.dtype, f"{self.opcode} moves elements unchanged: srcs and dsts share a "
               "dtype", expected=self.src.dtype, got=self.dst.dtype, error=DtypeError)
        check_metadata(self.metadata, self.has_rdispls, self.recv_counts_known)

    def run(self, m) -> None:
        chunk = read_chunk(self.opcode, m.read(self.metadata), self.src, self.dst, self.has_rdispls)
        move_chunk(m, self.src, self.dst, chunk)


@instruction
class AllToAllV(_VariableCollective):
    """all_to_all_v among one rank (module docstring)."""

    opcode = "all_to_all_v"


@instruction
class AllGatherV(_VariableCollective):
    """all_gather_v among one rank (module docstring)."""

    opcode = "all_gather_v"


@dataclass(frozen=True, kw_only=True, eq=False)
class _Prepare(Instruction):
    """The metadata setup of a split collective: reads metadata_tensor only."""

    metadata: object = operand(READ)
    handle: object = None

    def check(self, ctx) -> None:
        h = self.handle
        check_metadata(self.metadata, h.has_rdispls, False)

    def run(self, m) -> None:
        h = self.handle
        h.chunk = read_chunk(h.kind, m.read(self.metadata), h.src, h.dst, h.has_rdispls)


@dataclass(frozen=True, kw_only=True, eq=False)
class _Trigger(Instruction):
    """The execution of a split collective: reads src, writes dst, with its prepare's chunk."""

    src: object = operand(READ)
    dst: object = operand(WRITE)
    handle: object = None

    def check(self, ctx) -> None:
        expect(isinstance(self.handle, CollectiveHandle), f"{self.opcode} takes the instruction its prepare returned",
               got=type(self.handle).__name__, error=KernelError)

    def run(self, m) -> None:
        move_chunk(m, self.src, self.dst, self.handle.chunk)


@instruction
class AllToAllVPrepare(_Prepare):
    opcode = "all_to_all_v_prepare"


@instruction
class AllToAllVTrigger(_Trigger):
    opcode = "all_to_all_v_trigger"


@instruction
class AllGatherVPrepare(_Prepare):
    opcode = "all_gather_v_prepare"


@instruction
class AllGatherVTrigger(_Trigger):
    opcode = "all_gather_v_trigger"


__all__ = ["CollectiveHandle", "AllToAllV", "AllGatherV", "AllToAllVPrepare", "AllToAllVTrigger",
           "AllGatherVPrepare", "AllGatherVTrigger"]
