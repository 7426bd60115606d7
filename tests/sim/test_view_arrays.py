"""A storage's NumPy array per layout of a part of it (tensor.py `VIEW_ARRAYS`, `TensorView.np_view`): kernels
that take the same slices of HBM and SBUF tensors again and again, and read and write overlapping slices of one
tile in place, give the outputs, errors with their kernel lines and events of one array per view (the plain
path). Random data, results against NumPy."""

import numpy as np
import pytest

import opennki.legacy.language as nl
from examples.blocked_matmul import blocked_matmul
from opennki.machine import tensor
from tests.isa.helpers import rand
from tests.sim.outcomes import same_both_ways
from tests.sim.test_planned_loads_matmuls import tiled


def _both(kernel, args, **launch):
    return same_both_ways(kernel, args, tensor, "VIEW_ARRAYS", 5, **launch)


def test_tiled_and_blocked_matmuls_give_the_plain_path_values(rng):
    lhsT, rhs = rand(rng, 256, 200), rand(rng, 256, 600)         # every slice of lhsT / rhs is taken again
    got = _both(tiled.func, (lhsT, rhs))
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-5, atol=1e-4)
    lhsT, rhs = rand(rng, 1024, 256), rand(rng, 1024, 1024)       # block tiles sliced per matmul
    got = _both(blocked_matmul, (lhsT, rhs))
    np.testing.assert_allclose(got, lhsT.T.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def overlapping(a, bound):
    """The same slices of one tile read and written in place, one element-wise instruction after another (run
    cells keep the arrays they ran on), then a slice past the end of `a` when `bound` is past it."""
    out = nl.ndarray((3, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a[:, 0:128])
    for i in nl.sequential_range(3):
        t[:, 0:64] = nl.add(t[:, 0:64], t[:, 64:128])
        t[:, 32:96] = nl.multiply(t[:, 32:96], t[:, 0:64])
        t[:, 64:128] = nl.add(t[:, 0:64], 1.0)
        nl.store(out[i], value=t[:, 32:96])
    nl.store(out[0], value=nl.load(a[:, 64:bound]))
    return out


def _overlapping_ref(a):
    t = a[:, 0:128].astype(np.float32).copy()
    out = np.empty((3, 128, 64), np.float32)
    for i in range(3):
        t[:, 0:64] = t[:, 0:64] + t[:, 64:128]
        t[:, 32:96] = t[:, 32:96] * t[:, 0:64].copy()
        t[:, 64:128] = t[:, 0:64] + np.float32(1.0)
        out[i] = t[:, 32:96]
    out[0] = a[:, 64:128]
    return out


def test_in_place_writes_of_overlapping_slices_give_the_plain_path_values(rng):
    a = rand(rng, 128, 160)
    got = _both(overlapping, (a, 128))
    np.testing.assert_allclose(got, _overlapping_ref(a), rtol=1e-6)


def test_a_slice_out_of_bounds_gives_the_plain_path_error(rng):
    err = _both(overlapping, (rand(rng, 128, 160), 200))
    assert "Out-of-bound" in str(err) and "a[:, 64:bound]" in err.location.source


@pytest.mark.parametrize("on", [True, False])
def test_views_of_one_slice_share_an_array_only_with_the_switch(rng, monkeypatch, on):
    """Two views of the same slice of one storage: the same NumPy array object with the switch on, two without;
    the elements of the storage either way."""
    from opennki.machine.memory import MemoryRegion, Placement, Storage
    from opennki.machine.dtypes import float32
    monkeypatch.setattr(tensor, "VIEW_ARRAYS", on)
    tensor.forget_layouts()
    values = rand(rng, 64, 48)
    st = Storage(MemoryRegion.private_hbm, float32, (64, 48), values.reshape(-1).copy(), Placement(0, 0), "x", None)
    root = tensor.TensorView.root(st)
    first, second = (root.subscript((slice(8, 24), slice(5, 37, 2))).np_view() for _ in range(2))
    assert (first is second) is on
    np.testing.assert_array_equal(first, values[8:24, 5:37:2])
    np.testing.assert_array_equal(second, values[8:24, 5:37:2])
