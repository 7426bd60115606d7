"""Argument copies and poisoned HBM tensors are made in the HBM arrays of earlier launches (sim/arrays.py, an
ArrayStore): kernels give the values, write-backs and errors of the plain path, where every copy and tensor gets
a new array; an array anything still refers to is never taken again."""

import sys

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.machine import memory
from opennki.sim import arrays
from opennki.sim.arrays import HbmArrays
from opennki.errors import KernelError
from tests.raises import raises_at
from tests.sim import array_stores
from tests.sim.array_stores import kept_arrays


class Counting(array_stores.Counting, HbmArrays):
    """Counts the argument copies, the arrays taken again (holding none of them), and those taken for poisoned
    HBM tensors."""

    taken_poisoned = 0
    copied = 0

    def copy(self, array):
        self.copied += 1
        return super().copy(array)

    def poisoned(self, dtype, size, precise):
        kept = super().poisoned(dtype, size, precise)
        self.taken_poisoned += kept is not None
        return kept


@pytest.fixture
def copies(monkeypatch):
    """A fresh store of kept arrays for the test (the process's one may hold other tests' arrays)."""
    fresh = Counting(limit_bytes=1 << 20)
    monkeypatch.setattr(arrays, "HBM_ARRAYS", fresh)
    return fresh


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _outcome(call):
    """The output's bits (copied: an output is its HBM array, which a later launch may take only once nothing
    refers to it), or the error's class and text."""
    try:
        return _bits(call()).copy()
    except Exception as e:                       # noqa: BLE001  (compared between the paths)
        return type(e), str(e)


def _on_both_paths(monkeypatch, seed, calls):
    """`calls(rng)` (a list of outcomes) with kept arrays, then on the plain path, on the same random data:
    the outcomes are compared (bit for bit, errors by class and text) and those of the first run returned."""
    runs = []
    for recycle in (True, False):
        monkeypatch.setattr(arrays, "RECYCLE_HBM_ARRAYS", recycle)
        runs.append(calls(np.random.default_rng(seed)))
    for fast, plain in zip(*runs):
        if isinstance(fast, tuple) or isinstance(plain, tuple):
            assert fast == plain
        else:
            np.testing.assert_array_equal(fast, plain)
    return runs[0]


@nki.jit
def add_and_bump(a, b, res, out):
    for j in nl.affine_range(2):          # returns nothing: its outputs are arguments, copied back
        cols = nl.ds(j * 32, 32)
        x = nl.load(a[:, cols])
        nl.store(res[:, cols], value=nl.add(x, nl.load(b[:, cols])))
        nl.store(out[:, cols], value=nl.multiply(x, 2.0))


@nki.jit
def returns_its_argument(a):
    return a


def _calls(rng, n=4):
    results = []
    for _ in range(n):
        a, b = (rng.standard_normal((128, 64), dtype=np.float32) for _ in range(2))
        res, out = np.zeros_like(a), np.zeros_like(a)
        assert add_and_bump(a, b, res, out) is None
        same = returns_its_argument(b)
        assert not np.shares_memory(same, b)
        np.testing.assert_array_equal(same, b)
        results += [_bits(x) for x in (a, b, res, out, same)]
    return results


def test_recycled_copies_give_the_plain_path_values(rng, copies, monkeypatch):
    fast = _on_both_paths(monkeypatch, rng.integers(1 << 30), _calls)
    assert copies.taken >= 12, "later launches made their copies in kept arrays"
    for i in range(0, len(fast), 5):            # every result is its own array, unchanged by later calls
        a, b, res, out, same = (x.view(np.float32) for x in fast[i:i + 5])
        np.testing.assert_array_equal(res, a + b)
        np.testing.assert_array_equal(out, a * 2)
        np.testing.assert_array_equal(same, b)


def test_a_kept_array_is_taken_again_and_overwritten_whole(copies):
    first = copies.copy(np.arange(8, dtype=np.float32))
    address = first.ctypes.data
    copies.give([first])
    del first                                    # nothing but the store refers to it now
    again = copies.copy(np.full(8, 3.0, np.float32))
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, np.full(8, 3.0, np.float32))
    copies.give([again])
    other = copies.copy(np.arange(8, dtype=np.int32))            # another dtype: a new array
    assert other.ctypes.data != address and other.dtype == np.int32


def test_an_array_still_referred_to_is_not_taken(copies):
    first = copies.copy(np.arange(8, dtype=np.float32))
    copies.give([first])
    view = first[2:4]
    del first                                    # the view still refers to it
    again = copies.copy(np.zeros(8, np.float32))
    assert not np.shares_memory(again, view)
    np.testing.assert_array_equal(view, [2.0, 3.0])
    assert not kept_arrays(copies) and copies.nbytes == 0       # dropped: it belongs to whoever holds it


def test_views_are_not_kept(copies):
    owner = copies.copy(np.arange(8, dtype=np.float32))
    copies.give([owner.view(np.int32), owner.reshape(2, 4)])    # views of an array someone may still use
    del owner
    assert not kept_arrays(copies)


def test_at_most_the_limit_is_kept_the_oldest_dropped(copies):
    big = [copies.copy(np.zeros(copies.limit_bytes // 4 // 2, np.float32)) for _ in range(3)]
    copies.give(big)
    assert kept_arrays(copies) == big[1:]
    copies.give([np.zeros(copies.limit_bytes // 4 + 1, np.float32)])    # larger than the limit: not kept
    assert kept_arrays(copies) == big[1:]
    many = [np.zeros(8, np.float32) for _ in range(3)]          # no cap per kind: only the bytes count
    copies.give(many)
    assert kept_arrays(copies) == big[2:] + many


stashed = []


@nki.jit
def stashes_its_argument(a):
    stashed.append(a)                 # the tensor outlives the launch: its copy must stay its own
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def test_a_copy_an_earlier_tensor_still_holds_is_not_reused(rng, copies):
    a1, a2 = (rng.standard_normal((128, 16), dtype=np.float32) for _ in range(2))
    np.testing.assert_array_equal(stashes_its_argument(a1), a1)
    np.testing.assert_array_equal(stashes_its_argument(a2), a2)
    try:
        first, second = (t.storage.array.reshape(t.shape) for t in stashed)
        np.testing.assert_array_equal(first, a1)
        np.testing.assert_array_equal(second, a2)
    finally:
        stashed.clear()


@nki.jit
def fails_after_a_load(a):
    t = nl.load(a)
    return nl.load(t[0:200, :])


def test_errors_are_the_plain_paths_and_later_calls_are_right(rng, copies, monkeypatch):
    a = rng.standard_normal((128, 16), dtype=np.float32)
    messages = []
    for recycle in (True, False):
        monkeypatch.setattr(arrays, "RECYCLE_HBM_ARRAYS", recycle)
        with raises_at(Exception, line="return nl.load(t[0:200, :])") as caught:
            fails_after_a_load(a)
        messages.append((type(caught.value), str(caught.value)))
        np.testing.assert_array_equal(returns_its_argument(a), a)
    assert messages[0] == messages[1]


def test_torch_tensors_written_in_place_as_on_the_plain_path(rng, copies, monkeypatch):
    torch = pytest.importorskip("torch")

    def calls(data):
        got = []
        for _ in range(3):
            a, b = (torch.from_numpy(data.standard_normal((128, 64), dtype=np.float32)) for _ in range(2))
            res, out = torch.zeros(128, 64), torch.zeros(128, 64)
            add_and_bump(a, b, res, out)
            got += [_bits(t.numpy()) for t in (res, out, returns_its_argument(a))]
        return got
    _on_both_paths(monkeypatch, rng.integers(1 << 30), calls)


@nki.jit
def writes_part(a, dtype):
    out = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)      # half of it is never written: poison
    nl.store(out[:, 0:16], value=nl.load(a[:, 0:16]))
    scratch = nl.ndarray(a.shape, dtype=dtype, buffer=nl.shared_hbm)  # written whole, then read
    nl.store(scratch, value=nl.multiply(nl.load(a), 3.0))
    nl.store(out[:, 16:24], value=nl.load(scratch[:, 0:8]))
    return out


@nki.jit
def per_program(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    mine = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.private_hbm)
    nl.store(mine[:, 0:16], value=nl.add(nl.load(a[i * 128:(i + 1) * 128, 0:16]), 1.0))
    nl.store(out[i * 128:(i + 1) * 128, :], value=nl.load(mine))       # its other half is poison
    return out


@pytest.mark.parametrize("checks,precise", [({}, "1"), ({}, "0"), ({"uninitialized": "zero"}, "1"),
                                            ({"uninitialized": "raise"}, "1")])
def test_poisoned_hbm_tensors_in_kept_arrays_as_on_the_plain_path(rng, copies, monkeypatch, checks, precise):
    monkeypatch.setenv("NKI_PRECISE_FP", precise)
    part, grid = nki.jit(writes_part.func, **checks), nki.jit(per_program.func, **checks)

    def calls(data):
        got = []
        for dtype in (nl.float32, nl.bfloat16, nl.int32, nl.float32):
            a = data.standard_normal((128, 32), dtype=np.float32) * 50
            got.append(_outcome(lambda: part(a, dtype)))
            b = data.standard_normal((384, 32), dtype=np.float32)
            got.append(_outcome(lambda: grid[3](b)))
        return got
    fast = _on_both_paths(monkeypatch, rng.integers(1 << 30), calls)
    if not checks:
        # the kernels' own HBM tensors, as their arguments are the caller's arrays (immutable parameters)
        assert copies.taken_poisoned >= 4, "later launches made poisoned HBM tensors in kept arrays"
        assert np.isnan(fast[0].view(np.float32)[:, 24:]).all()     # the unwritten part is poison


def test_the_reference_count_fast_paths_follow_the_interpreters_counts():
    """The fast paths that read reference counts (HBM arrays, tile arrays, result tiles: each takes its counts on
    a variable of its own) are on exactly when this interpreter counts a variable alone as 2 (CPython 3.10-3.13;
    3.14 documents lower counts for some loads of locals)."""
    from opennki.sim import program

    probe = object()
    local = sys.getrefcount(probe)
    cpython = sys.implementation.name == "cpython"
    assert memory.COUNT_OF_A_LOCAL == local
    for switch in (arrays.RECYCLE_HBM_ARRAYS, memory.RECYCLE_TILE_ARRAYS, program.REUSE_RESULT_TILES):
        assert switch is (cpython and local == 2)


@nki.jit
def reads_only(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), 2.0))
    return out


@nki.jit
def three_tensors(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    second = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(first, value=nl.add(nl.load(a), 1.0))
    nl.store(second, value=nl.add(nl.load(first), 1.0))
    nl.store(out, value=nl.add(nl.load(second), 1.0))
    return out


@nki.jit
def sums_pair(pair):
    out = nl.ndarray(pair[0].shape, dtype=pair[0].dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(pair[0]), nl.load(pair[1])))
    return out


@nki.jit
def old_convention(a, out):                    # no return: its parameters are its outputs, copied
    nl.store(out, value=nl.add(nl.load(a), 2.0))


def test_arguments_no_instruction_may_write_are_the_callers_arrays(rng, copies):
    """Immutable legacy parameters and read-only arrays are not copied (their checks reject every write);
    parameters a kernel may write are, and the caller's arrays never go to later launches."""
    a = rng.standard_normal((128, 32), dtype=np.float32)
    keep = a.copy()
    np.testing.assert_array_equal(reads_only(a), a + np.float32(2.0))
    assert copies.copied == 0
    frozen = a.copy()
    frozen.flags.writeable = False
    out = np.zeros_like(a)
    old_convention(frozen, out)
    np.testing.assert_array_equal(out, a + np.float32(2.0))
    assert copies.copied == 1                   # `out` only: `frozen` is read-only
    pair = (a, rng.standard_normal((128, 32), dtype=np.float32))
    np.testing.assert_array_equal(sums_pair(pair), pair[0] + pair[1])
    assert copies.copied == 1                   # the elements of an immutable tuple parameter are not copied
    b = rng.standard_normal((128, 32), dtype=np.float32)
    for _ in range(3):          # three poisoned HBM tensors of a's size and dtype a launch, in kept arrays
        one = np.float32(1.0)
        np.testing.assert_array_equal(three_tensors(b), b + one + one + one)
    np.testing.assert_array_equal(a, keep)


def test_a_write_to_an_uncopied_argument_fails_before_it_runs(rng, copies):
    a = rng.standard_normal((128, 32), dtype=np.float32)
    keep = a.copy()

    @nki.jit
    def writes_input(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(a, value=nl.add(nl.load(a), 1.0))
        return out
    with raises_at(KernelError, match="err_cannot_update_immutable_parameter",
                   line="nl.store(a, value=nl.add(nl.load(a), 1.0))"):
        writes_input(a)
    frozen = a.copy()
    frozen.flags.writeable = False
    with raises_at(KernelError, match="read-only", line="nl.store(out, value=nl.add(nl.load(a), 2.0))"):
        old_convention(a, frozen)
    assert copies.copied == 1                   # old_convention's `a`
    np.testing.assert_array_equal(a, keep)
