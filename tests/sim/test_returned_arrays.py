"""A returned tensor the kernel made is handed out as its HBM array, without the copy the plain path makes
(`simulator.RETURN_STORAGE_ARRAYS`): the same values and dtypes as the plain path, an array of its own per
output (`return out, out` and a returned argument included), and no later launch writes into an array the
caller still holds (the HBM array pool, sim/arrays.py, takes only arrays nothing refers to)."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.sim import arrays, simulator
from opennki.sim.arrays import HbmArrays


@pytest.fixture
def pool(monkeypatch):
    """A fresh pool of kept arrays (the process's one may hold other tests' arrays)."""
    fresh = HbmArrays(limit_bytes=1 << 24)
    monkeypatch.setattr(arrays, "HBM_ARRAYS", fresh)
    return fresh


@nki.jit
def scaled(a, b):
    """Three outputs: a whole new tensor twice (one storage), a bf16 tensor, and the argument `a` itself."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    low = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = nl.ds(i * 128, 128)
        t = nl.multiply(nl.load(a[rows, :]), nl.load(b[rows, :]))
        nl.store(out[rows, :], value=t)
        nl.store(low[rows, :], value=nl.copy(t, dtype=nl.bfloat16))
    return out, out, low, a


def _run(a, b):
    return scaled(a, b)


def test_returned_arrays_are_the_plain_paths(rng, pool, monkeypatch):
    a = rng.standard_normal((256, 64), dtype=np.float32)
    b = rng.standard_normal((256, 64), dtype=np.float32)
    fast = _run(a, b)
    monkeypatch.setattr(simulator, "RETURN_STORAGE_ARRAYS", False)
    plain = _run(a, b)
    for f, p in zip(fast, plain):
        assert f.dtype == p.dtype and f.shape == p.shape
        assert np.array_equal(f.view(np.uint8), p.view(np.uint8))
    np.testing.assert_array_equal(fast[0], a * b)
    np.testing.assert_array_equal(fast[2], (a * b).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(fast[3], a)


def test_each_output_is_an_array_of_its_own(rng, pool):
    a = rng.standard_normal((256, 64), dtype=np.float32)
    b = rng.standard_normal((256, 64), dtype=np.float32)
    out, again, low, returned_a = _run(a, b)
    arrays_ = (out, again, low, returned_a, a, b)
    for i, x in enumerate(arrays_):
        for y in arrays_[i + 1:]:
            assert not np.shares_memory(x, y)
        assert x.flags.writeable and x.flags.c_contiguous
    out[...] = 7                              # the caller's to change: nothing else sees it
    assert np.array_equal(again, a * b) and np.array_equal(returned_a, a)


def test_a_later_launch_never_writes_an_array_the_caller_holds(rng, pool):
    a = rng.standard_normal((256, 64), dtype=np.float32)
    b = rng.standard_normal((256, 64), dtype=np.float32)
    first = _run(a, b)
    expected = [x.copy() for x in first]
    for _ in range(3):                        # launches that give their arrays to the pool and take from it
        c = rng.standard_normal((256, 64), dtype=np.float32)
        later = _run(c, b)
        np.testing.assert_array_equal(later[0], c * b)
    for x, e in zip(first, expected):
        assert np.array_equal(x.view(np.uint8), e.view(np.uint8))
    del first, later                          # once dropped, the pool may take them again
    assert np.array_equal(_run(a, b)[0], a * b)
