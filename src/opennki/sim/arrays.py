"""Simulator layer: the HBM arrays of finished launches, kept for the next launches' HBM tensors.

Imports the machine's dtypes and memory (whose `ArrayStore` keeps them). A launch copies every array argument
that the kernel may write (the kernel sees the values of the call; an argument it cannot write is the caller's
array itself, in a view, which is never kept here: simulator.UNWRITABLE_ARGUMENTS) and poisons every HBM tensor
the kernel makes; a fresh multi-megabyte array costs its page faults each time, because glibc hands freed memory
of that size back to the system when the launch frees it (for the [128, 8192] fp32 vector add of
benchmarks/triton_side_by_side.py, the faults of its three 4 MiB HBM arrays cost about as much as its sixteen
instructions). So the simulator gives those arrays back here at the end of a launch (`give`), and a later
argument copy (`copy`) or poisoned HBM tensor (`poisoned`) of the same storage dtype and size is made in one of
them, overwritten whole (by the copy, or with the poison `new_array` gives). Of its arrays, the caller keeps the
outputs and may keep anything else of a launch (a storage, a view, a framework tensor): an array `take` finds
still referred to is dropped, left to whoever holds it, and the store caps only its total bytes (64 MiB, the
most recently given kept).
"""

from __future__ import annotations

import numpy as np

from opennki.machine.dtypes import poison_value
from opennki.machine.memory import COUNTS_AS_EXPECTED, ArrayStore

# False: every argument copy and HBM tensor gets a new array (the plain path, which tests compare against).
RECYCLE_HBM_ARRAYS = COUNTS_AS_EXPECTED


class HbmArrays(ArrayStore):
    """HBM arrays kept from finished launches (module docstring)."""

    def __init__(self, limit_bytes: int):
        super().__init__(limit_bytes, per_kind=None, keep_held=False)

    def copy(self, array):
        """A copy of the flat contiguous `array` (the plain path's `array.copy()`), in a kept array if one
        of its dtype and size is free."""
        kept = self.take(array.dtype, array.size) if RECYCLE_HBM_ARRAYS else None
        if kept is None:
            return array.copy()
        np.copyto(kept, array)
        return kept

    def poisoned(self, dtype, size: int, precise: bool):
        """A kept flat array of `size` elements of the storage dtype of `dtype` (a DataType), holding the
        poison of fresh memory as `machine.memory.new_array` makes it; None if none is free."""
        kept = self.take(dtype.storage_dtype(precise), size) if RECYCLE_HBM_ARRAYS else None
        if kept is not None:
            kept.fill(poison_value(dtype))
        return kept

    def give(self, arrays) -> None:
        """Keep the arrays (the HBM arrays of a finished launch) for later launches, within the limit."""
        if RECYCLE_HBM_ARRAYS:
            for array in arrays:
                # a view (a reinterpreting tensor's, a reshaped conversion's) is not kept: its base is memory
                # that another array may reach, which the view's own reference count cannot tell
                if array.base is None:
                    self.keep(array)


HBM_ARRAYS = HbmArrays(limit_bytes=64 << 20)
