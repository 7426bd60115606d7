"""nisa.sequence_bounds (spec/isa.md §6.28): [start, end) of the run of equal segment ids of each element."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, ShapeError
from tests.isa.helpers import rejecting, run, to_hbm, to_sbuf


def _bounds_ref(ids):
    n = len(ids)
    lo, hi = np.empty(n), np.empty(n)
    for i in range(n):
        lo[i] = n if ids[i] == 0 else (lo[i - 1] if i and ids[i] == ids[i - 1] else i)
    for i in reversed(range(n)):
        hi[i] = -1 if ids[i] == 0 else (hi[i + 1] if i < n - 1 and ids[i] == ids[i + 1] else i + 1)
    return np.stack([lo, hi])[None]


def test_documented_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], np.int32)

    def kernel(ids):
        out = nl.ndarray((1, 2, 9), dtype=nl.int32, buffer=nl.shared_hbm)
        nl.store(out, nisa.sequence_bounds(segment_ids=nl.load(ids)))
        return out

    np.testing.assert_array_equal(run(kernel, ids), [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]])


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_random_sorted_segments(rng, dtype):
    ids = np.sort(rng.integers(0, 40, size=(1, 300))).astype(dtype)
    ids[0, 100:104] = 0

    def kernel(ids):
        out = nl.ndarray((1, 2, 300), dtype=ids.dtype, buffer=nl.shared_hbm)
        ix, iy, iz = nl.mgrid[0:1, 0:2, 0:300]
        t = nl.ndarray((1, 2, 300), dtype=ids.dtype)
        t[ix, iy, iz] = nisa.sequence_bounds(segment_ids=nl.load(ids))
        nl.store(out, t)
        return out

    np.testing.assert_array_equal(run(kernel, ids), _bounds_ref(ids[0]).astype(dtype))


def test_new_generation_sequence_bounds(rng):
    ids = rng.integers(0, 3, size=(1, 50)).astype(np.float32)

    def kernel(ids):
        s = to_sbuf(ids, nl2.float32)
        d = nl2.ndarray((1, 2, 50), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.sequence_bounds(dst=d, segment_ids=s)
        return to_hbm(d)

    np.testing.assert_array_equal(run(kernel, ids), _bounds_ref(ids[0]))


def _partitions():
    nisa.sequence_bounds(segment_ids=nl.zeros((2, 8), dtype=nl.int32))


def _dtype():
    nisa.sequence_bounds(segment_ids=nl.zeros((1, 8), dtype=nl.int16))


REJECTS = [
    ("two_partitions", _partitions, ShapeError, "one partition"),
    ("int16_ids", _dtype, DtypeError, "float32/int32"),
]


test_sequence_bounds_rejects = rejecting(REJECTS, inputs=(), api="nisa.sequence_bounds")
