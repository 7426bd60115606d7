"""The arrays of dead on-chip tiles are made again for new tiles (machine/memory.py `TILE_ARRAYS`, an ArrayStore):
kernels give the outputs, errors (with their kernel line) and events of the plain path, where every tile gets a
new array; an array anything still refers to is never taken again (it stays for a later tile), and a recycled
tile holds poison as a new one does."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.machine import memory
from opennki.sim import SimOptions
from tests.sim.array_stores import Counting, kept_arrays
from tests.sim.outcomes import assert_same_outcome, fast_and_plain


@pytest.fixture
def kept(monkeypatch):
    """A fresh store of tile arrays for the test (the process's one may hold other tests' arrays), with its
    policies."""
    fresh = Counting(8 << 20, per_kind=memory.TILE_ARRAYS.per_kind, keep_held=memory.TILE_ARRAYS.keep_held)
    monkeypatch.setattr(memory, "TILE_ARRAYS", fresh)
    return fresh


def _matmul_and_partial_tiles(lhsT, rhs):
    """The tiled matmul's loop ([128, 512] fp32 loads, 256 KiB, and [128, 128] ones, 64 KiB, made and dropped
    per iteration), then tiles written in part, whose other elements must hold poison, not a dead tile's values."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    partial = nl.ndarray((2 * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // 512):
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(K // 128):
            a = nl.load(lhsT[k * 128:(k + 1) * 128, 0:128])
            b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
            acc += nisa.nc_matmul(a, b)
        nl.store(result[0:128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=result.dtype))
    for i in nl.affine_range(2):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[:, 0:256] = nl.load(rhs[i * 128:(i + 1) * 128, 0:256])
        nl.store(partial[i * 128:(i + 1) * 128, :], value=t)
    return result, partial


def _fails_after_tiles(lhsT, rhs):
    """Tiles made and dropped, then an instruction whose operand shapes do not match."""
    for k in nl.affine_range(4):
        b = nl.load(rhs[k * 128:(k + 1) * 128, 0:512])
        nl.store(rhs[k * 128:(k + 1) * 128, 0:512], value=nl.multiply(b, 2.0))
    a = nl.load(lhsT[0:128, 0:128])
    b = nl.load(rhs[0:128, 0:512])
    return nl.add(a, b[:, 0:100])


def test_recycled_tiles_give_the_plain_path_values_and_events(rng, kept):
    lhsT = rng.standard_normal((512, 128), dtype=np.float32)
    rhs = rng.standard_normal((512, 1024), dtype=np.float32)
    outcomes, events = fast_and_plain(_matmul_and_partial_tiles, (lhsT, rhs), memory, "RECYCLE_TILE_ARRAYS")
    assert kept.taken >= 8, "later tiles were made in the arrays of dead ones"
    assert_same_outcome(*outcomes)
    assert events[0] == events[1]
    result, partial = outcomes[0]
    np.testing.assert_allclose(result, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(partial[:, :256], rhs[:256, :256])
    assert np.isnan(partial[:, 256:]).all()     # the unwritten half is poison, as in a new tile


def test_an_error_after_recycled_tiles_is_the_plain_paths_at_its_kernel_line(rng, kept):
    lhsT = rng.standard_normal((128, 128), dtype=np.float32)
    rhs = rng.standard_normal((512, 512), dtype=np.float32)
    outcomes, events = fast_and_plain(_fails_after_tiles, (lhsT, rhs), memory, "RECYCLE_TILE_ARRAYS")
    assert kept.taken >= 2
    assert isinstance(outcomes[1], Exception)
    assert "nl.add(a, b[:, 0:100])" in outcomes[1].location.source
    assert_same_outcome(*outcomes)
    assert events[0] == events[1]


def _filled_tiles(a):
    """Filled tiles ([128, 512]: 256 KiB in fp32, 128 KiB in bf16; the only tiles of 64 KiB or more) made and
    dropped per iteration, written in part: their other elements must hold the fill, not a dead tile's values."""
    zeros = nl.ndarray((4 * 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    full = nl.ndarray((4 * 128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    for i in nl.affine_range(4):
        z = nl.zeros((128, 512), nl.float32, buffer=nl.sbuf)
        z[:, 0:32] = nl.load(a[i * 128:(i + 1) * 128, 0:32])
        nl.store(zeros[i * 128:(i + 1) * 128, :], value=z)
        f = nl.full((128, 512), 2.5, nl.bfloat16, buffer=nl.sbuf)
        f[:, 32:64] = nl.copy(nl.load(a[i * 128:(i + 1) * 128, 32:64]), dtype=nl.bfloat16)
        nl.store(full[i * 128:(i + 1) * 128, :], value=f)
    return zeros, full


@pytest.mark.parametrize("uninitialized", ["nan", "zero"])
def test_filled_tiles_give_their_arrays_back_as_on_the_plain_path(rng, kept, uninitialized):
    """`nl.zeros` / `nl.full` fill by a memset (which covers the tile, as a write does); with
    `uninitialized="zero"` every tile is made filled (`Memory.new_storage`'s `fill`)."""
    a = rng.standard_normal((4 * 128, 64), dtype=np.float32)
    outcomes, events = fast_and_plain(_filled_tiles, (a,), memory, "RECYCLE_TILE_ARRAYS",
                                      options=SimOptions(uninitialized=uninitialized))
    assert kept.taken >= 4, "later filled tiles were made in the arrays of dead ones"
    assert_same_outcome(*outcomes)
    assert events[0] == events[1]
    zeros, full = outcomes[0]
    np.testing.assert_array_equal(zeros[:, :32], a[:, :32])
    assert (zeros[:, 32:] == 0).all()            # the fill, not a dead tile's values
    np.testing.assert_array_equal(full[:, 32:64], a[:, 32:64].astype(full.dtype))
    assert (full[:, :32] == 2.5).all() and (full[:, 64:] == 2.5).all()


def test_an_array_still_referred_to_is_not_taken_again(kept):
    dead = np.zeros(1 << 16, np.float32)
    address = dead.ctypes.data
    view = dead[10:20]                           # a deferred step's view of a dead tile, say
    kept.keep(dead)
    del dead
    other = memory.empty_array(np.dtype(np.float32), 1 << 16)
    assert other.ctypes.data != address and kept.taken == 0
    assert len(kept_arrays(kept)) == 1           # kept for a later tile
    del view                                     # now only the store refers to it
    again = memory.empty_array(np.dtype(np.float32), 1 << 16)
    assert again.ctypes.data == address and kept.taken == 1
    assert not kept_arrays(kept) and kept.nbytes == 0


def test_kept_arrays_stay_within_their_limits():
    store = memory.ArrayStore(limit_bytes=3 * 4096, per_kind=8)
    first = [np.empty(1024, np.float32) for _ in range(3)]
    for arr in first:
        store.keep(arr)
    store.keep(np.empty(4096, np.float32))        # larger than the limit: not kept
    assert kept_arrays(store) == first and store.nbytes == 3 * 4096
    newer = np.empty(2048, np.float32)
    store.keep(newer)                              # the two oldest, of another kind, make room for it
    assert kept_arrays(store) == [first[2], newer] and store.nbytes == 3 * 4096
    store = memory.ArrayStore(limit_bytes=1 << 20, per_kind=8)
    given = [np.empty(16, np.float32) for _ in range(10)]
    for arr in given:                              # the oldest of a kind make room for the newest
        store.keep(arr)
    assert kept_arrays(store) == given[2:] and store.nbytes == 8 * 64
