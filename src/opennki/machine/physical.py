"""Machine layer: the physical bytes of SBUF and PSUM that directly placed tensors share.

Imports events (MemoryKind) and numpy. A kernel that places its tensors itself (`nki.compiler` direct
allocation) may declare several tensors over the same bytes, in the same or another dtype, and rely on
them aliasing, as they do on hardware. Each such storage keeps its own NumPy array (so every instruction
reads and writes it like any other), and this image keeps them coherent: a new directly placed storage
starts with the bytes its range holds now (what an earlier tensor left there, or the poison pattern 0xFF,
a NaN in every float format, where nothing was written), and after every write to one of them the written
box goes to the image and into every other live storage that overlaps it. Only storages kept in their
hardware format alias (the default; `NKI_PRECISE_FP=0` stores low-precision floats as fp32, and then
directly placed tensors do not alias). Automatically placed tensors never overlap and never come here.
"""

from __future__ import annotations

import weakref

import numpy as np

from opennki.events import MemoryKind

POISON_BYTE = 0xFF


def _rows(storage) -> np.ndarray:
    """The storage's elements as a (partitions, bytes per partition) uint8 view."""
    return storage.array.view(np.uint8).reshape(storage.shape[0], -1)


def can_alias(storage) -> bool:
    """Whether the storage's array holds the hardware bytes (so it can share them)."""
    return storage.array is not None and storage.array.itemsize == storage.dtype.itemsize


class PhysicalImage:
    """The bytes of one on-chip memory (partitions x bytes) and the directly placed storages over them.

    Members are kept with their boxes (partitions and bytes, fixed at placement) in one array, so a write finds
    the members it overlaps in one vectorised test and touches only their arrays: kernels that place all their
    tensors (the NKI Library's SBUF manager) keep hundreds of members alive, and writes are the simulator's hot
    path.
    """

    def __init__(self, kind: MemoryKind, partitions: int):
        self.kind = kind
        self.bytes = np.full((partitions, 0), POISON_BYTE, np.uint8)   # grows to the highest byte placed
        self.members: list[weakref.ref] = []
        self.boxes = np.zeros((0, 4), np.int64)   # per member: first partition, end partition, first, end byte

    def _box(self, storage, p0: int, pc: int, b0: int, b1: int):
        base = storage.placement
        return slice(base.partition + p0, base.partition + p0 + pc), slice(base.address + b0, base.address + b1)

    def join(self, storage) -> None:
        """A new directly placed storage: it starts with the bytes of its range, and aliases from now on."""
        rows = _rows(storage)
        parts, span = self._box(storage, 0, rows.shape[0], 0, rows.shape[1])
        if span.stop > self.bytes.shape[1]:
            grown = np.full((self.bytes.shape[0], span.stop), POISON_BYTE, np.uint8)
            grown[:, :self.bytes.shape[1]] = self.bytes
            self.bytes = grown
        rows[...] = self.bytes[parts, span]
        alive = [i for i, ref in enumerate(self.members) if ref() is not None]
        self.members = [self.members[i] for i in alive] + [weakref.ref(storage)]
        box = np.array([[parts.start, parts.stop, span.start, span.stop]], np.int64)
        self.boxes = np.concatenate([self.boxes[alive], box])

    def written(self, storage, p0: int, pc: int, b0: int, b1: int) -> None:
        """`storage` was written in partitions [p0, p0 + pc) and bytes [b0, b1) of each (relative to it):
        copy that box to the image and to the other members overlapping it."""
        parts, span = self._box(storage, p0, pc, b0, b1)
        self.bytes[parts, span] = _rows(storage)[p0:p0 + pc, b0:b1]
        boxes = self.boxes
        overlapping = np.flatnonzero((boxes[:, 0] < parts.stop) & (boxes[:, 1] > parts.start)
                                     & (boxes[:, 2] < span.stop) & (boxes[:, 3] > span.start))
        for i in overlapping.tolist():
            other = self.members[i]()
            if other is None or other is storage or other.placement is None:
                continue
            q0, q1, a0, a1 = boxes[i].tolist()
            lo_p, hi_p = max(parts.start, q0), min(parts.stop, q1)
            lo_b, hi_b = max(span.start, a0), min(span.stop, a1)
            _rows(other)[lo_p - q0:hi_p - q0, lo_b - a0:hi_b - a0] = self.bytes[lo_p:hi_p, lo_b:hi_b]
