"""Listeners layer: the Tracer records every load and store (DMA between HBM and on-chip memory) with its
mask, the way interpreter clients (visualisers, coverage tools) want them.

Each record names the HBM tensor, the direction, the element offsets touched (computed on demand from the
access pattern, or the actual offsets of an indirect access), the mask, the program and the kernel line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opennki.errors import SourceLocation
from opennki.events import Event, InstructionExecuted, MemoryKind, Operand


@dataclass(frozen=True, eq=False)
class MemoryTransfer:
    """One load (HBM -> on chip) or store (on chip -> HBM).

    Fields:
        kind: "load" or "store".
        tensor: the HBM tensor's name (the kernel argument name for inputs).
        hbm: the HBM operand (shape, strides, offset, region).
        on_chip: the on-chip operand.
        mask: boolean mask over the access (None: every element).
        program: SPMD program ids.
        location: kernel line.
        opcode: the instruction (`dma_copy`, `dma_transpose`, ...).
    """

    kind: str
    tensor: str
    hbm: Operand
    on_chip: Operand
    mask: np.ndarray | None
    program: tuple[int, ...]
    location: SourceLocation | None
    opcode: str

    def offsets(self) -> np.ndarray:
        """Flat element offsets into the HBM tensor, in access order (masked-off elements included)."""
        return self.hbm.element_offsets()

    def active_offsets(self) -> np.ndarray:
        """Offsets of the elements actually moved."""
        offs = self.hbm.element_offsets()
        if self.mask is None or self.hbm.offsets is not None:
            return offs.reshape(-1)
        return offs[np.broadcast_to(self.mask, offs.shape)] if self.mask.shape else offs.reshape(-1)


class Tracer:
    """Listener: `transfers` lists every load and store in issue order."""

    def __init__(self):
        self.transfers: list[MemoryTransfer] = []

    def on_event(self, event: Event) -> None:
        if not isinstance(event, InstructionExecuted):
            return
        hbm_ops = [o for o in event.operands if o.kind is MemoryKind.HBM and not o.role.startswith("index:")]
        chip_ops = [o for o in event.operands if o.kind is not MemoryKind.HBM and not o.role.startswith("index:")]
        if not hbm_ops or not chip_ops:
            return
        for hbm in hbm_ops:
            kind = "store" if hbm in event.writes else "load"
            chip = next((o for o in chip_ops if (o in event.writes) != (kind == "store")), chip_ops[0])
            self.transfers.append(MemoryTransfer(kind, hbm.tensor_name, hbm, chip, event.mask, event.program,
                                                 event.location, event.opcode))

    @property
    def loads(self) -> list[MemoryTransfer]:
        return [t for t in self.transfers if t.kind == "load"]

    @property
    def stores(self) -> list[MemoryTransfer]:
        return [t for t in self.transfers if t.kind == "store"]

    def report(self) -> list[MemoryTransfer]:
        return list(self.transfers)
