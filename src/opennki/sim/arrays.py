"""Simulator layer: the HBM arrays of finished launches, kept for the next launches' HBM tensors.

Imports the machine's dtypes only. A launch copies every array argument that the kernel may write (the kernel
sees the values of the call; an argument it cannot write is the caller's array itself, in a view, which is
never kept here: simulator.UNWRITABLE_ARGUMENTS) and poisons every HBM tensor the kernel makes; a fresh
multi-megabyte array costs its page faults each time, because glibc hands freed memory of that size back to
the system when the launch frees it (for the [128, 8192] fp32 vector add of benchmarks/triton_side_by_side.py,
the faults of its three 4 MiB HBM arrays cost about as much as its sixteen instructions). So the simulator
gives those arrays back here at the end of a launch (`give`), and a later argument copy (`copy`) or poisoned
HBM tensor (`poisoned`) of the same storage dtype and size is made in one of them. An array is only taken
again when CPython's reference count says nothing else refers to it (no storage, view or framework tensor of
an earlier launch is alive), and it is overwritten whole (by the copy, or with the poison `new_array` gives),
so no launch can see another's values. At most `limit_bytes` are kept, the most recently given first.
"""

from __future__ import annotations

import collections
import sys
import threading

import numpy as np

from opennki.machine.dtypes import poison_value

def _count_of_a_local() -> int:
    probe = object()                    # held by this variable alone
    return sys.getrefcount(probe)


def _count_of(value) -> int:
    return sys.getrefcount(value)


def _count_of_an_argument() -> int:
    probe = object()                    # held by this variable and the callee's parameter
    return _count_of(probe)


# The fast paths that ask whether anything else refers to an object compare sys.getrefcount with what this
# interpreter counts for an object that a variable alone holds (2 on CPython 3.10-3.13: the variable and
# getrefcount's argument) and for one a variable passes to a function (3 on 3.11-3.13, 4 on 3.10). Python 3.14
# documents that some loads of locals no longer count, and a lower count would hide a holder; so the counts
# are measured here, in the same code shapes, and where they are not the expected ones the fast path is off:
# the plain path is always right.
CPYTHON = sys.implementation.name == "cpython"
COUNT_OF_A_LOCAL = _count_of_a_local()
COUNT_OF_AN_ARGUMENT = _count_of_an_argument()

# False: every argument copy and HBM tensor gets a new array (the plain path, which tests compare against).
RECYCLE_HBM_ARRAYS = CPYTHON and COUNT_OF_A_LOCAL == 2          # HbmArrays._take


class HbmArrays:
    """HBM arrays kept from finished launches (module docstring)."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._kept: collections.deque = collections.deque()     # (dtype, size, array), oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A copy of the flat contiguous `array` (the plain path's `array.copy()`), in a kept array if one
        of its dtype and size is free."""
        kept = self._take(array.dtype, array.size)
        if kept is None:
            return array.copy()
        np.copyto(kept, array)
        return kept

    def poisoned(self, dtype, size: int, precise: bool) -> np.ndarray | None:
        """A kept flat array of `size` elements of the storage dtype of `dtype` (a DataType), holding the
        poison of fresh memory as `machine.memory.new_array` makes it; None if none is free."""
        kept = self._take(dtype.storage_dtype(precise), size)
        if kept is not None:
            kept.fill(poison_value(dtype))
        return kept

    def _take(self, dtype, size):
        if not RECYCLE_HBM_ARRAYS:
            return None
        with self._lock:
            for i in range(len(self._kept) - 1, -1, -1):
                if self._kept[i][0] == dtype and self._kept[i][1] == size:
                    kept = self._kept[i][2]
                    del self._kept[i]
                    self._bytes -= kept.nbytes
                    # the deque's entry is gone: `kept` and getrefcount's argument are the only references left
                    # unless something of an earlier launch still holds the array, which then stays its own
                    if sys.getrefcount(kept) == 2:
                        return kept
        return None

    def give(self, arrays) -> None:
        """Keep the arrays (the HBM arrays of a finished launch) for later launches, dropping the oldest kept
        beyond the limit."""
        if not RECYCLE_HBM_ARRAYS:
            return
        with self._lock:
            for array in arrays:
                # a view (a reinterpreting tensor's, a reshaped conversion's) is not kept: its base is memory
                # that another array may reach, which the view's own reference count cannot tell
                if array.base is None and array.nbytes <= self.limit_bytes:
                    self._kept.append((array.dtype, array.size, array))
                    self._bytes += array.nbytes
            while self._bytes > self.limit_bytes:
                self._bytes -= self._kept.popleft()[2].nbytes


HBM_ARRAYS = HbmArrays(limit_bytes=64 << 20)
