"""Constant masks (`mask=True` / `mask=False`, as legacy kernels compute them from loop indices) are read-only
broadcasts of one boolean made once per value and shape (`index.constant_mask`); the plain path
(`index.CONSTANT_MASK_VIEWS = False`) fills an array for each. Both give the same outputs and, with a listener,
the same events field by field (the events' masks included) and the same errors."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import OpenNKIError
from opennki.events import MemoryKind
from opennki.hw import get_target
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from opennki.machine import index
from opennki.machine.dtypes import float32
from opennki.machine.index import arange, mask_array
from opennki.machine.machine import Machine
from opennki.machine.memory import Allocator, Memory, MemoryRegion
from opennki.machine.tensor import TensorView
from tests.isa.helpers import rand
from tests.sim.outcomes import assert_same_outcome, by_first_appearance, event_fields


def _masked_steps(a, b, c):
    """Instructions of several engines under constant masks computed from loop indices, true and false."""
    out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((4, 128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    col = nl.load(c)
    i_p, i_f = nl.mgrid[0:128, 0:512]
    for q in nl.affine_range(4):
        mask = q * 128 >= 1 * 256                                # False for q < 2
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        s = nl.load(a[q * 128:(q + 1) * 128, :])
        m = nl.load(b[q * 128:(q + 1) * 128, :])
        acc += nisa.nc_matmul(s, m, mask=mask)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        t[...] = nl.add(acc, 1.0)
        t[...] = nisa.affine_select(pred=(q * 128 + i_p >= i_f), on_true_tile=t, on_false_value=-9984.0,
                                    mask=mask)
        e = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        e[...] = nisa.activation(np.exp, data=t, bias=col, scale=0.01, mask=mask)
        r = nisa.tensor_reduce(np.add, e, axis=(1,), mask=mask, keepdims=True)
        e[...] = nisa.tensor_scalar(e, np.multiply, 0.5, op1=np.add, operand1=col, mask=mask)
        e[...] = nisa.scalar_tensor_tensor(data=e, op0=np.subtract, operand0=col, op1=np.multiply, operand1=t,
                                           mask=mask)
        nl.store(out[q], value=e, mask=mask)
        nl.store(sums[q], value=r)
    return out, sums


def _loads(a, last):
    """Loads under `mask=q < last`: a masked-off load reading past the end of its tensor is no error, the same
    load under a true mask is (at its kernel line)."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    for q in nl.affine_range(3):
        t[...] = nl.add(t, nl.load(a[q * 64:q * 64 + 128, :], mask=q < last), mask=q < last)
    nl.store(out, value=t)
    return out



def _both_ways(monkeypatch, kernel, args):
    outcomes, events = [], []
    for views in (True, False):
        monkeypatch.setattr(index, "CONSTANT_MASK_VIEWS", views)
        rec = Recorder()
        try:
            outcomes.append(run_kernel(kernel, args, listeners=[rec]))
        except OpenNKIError as e:
            outcomes.append(e)
        sid = by_first_appearance()
        events.append([event_fields(e, sid) for e in rec.events])
    return outcomes, events


def _reference(a, b, c):
    """`_masked_steps` in NumPy: the tiles q = 2, 3 (mask true) and their row sums."""
    f = np.float32
    i_p, i_f = np.mgrid[0:128, 0:512]
    out, sums = [], []
    for q in (2, 3):
        t = (a[q * 128:(q + 1) * 128].T @ b[q * 128:(q + 1) * 128]).astype(f) + f(1.0)
        t = np.where(q * 128 + i_p >= i_f, t, f(-9984.0))
        e = np.exp((t * f(0.01) + c).astype(np.float64)).astype(f)
        sums.append(e.sum(axis=1, keepdims=True, dtype=np.float64))
        e = e * f(0.5) + c
        out.append((e - c) * t)
    return np.stack(out), np.stack(sums)


@pytest.mark.parametrize("case", ["masked_steps", "loads_masked_off", "load_out_of_bounds"])
def test_constant_masks_give_the_plain_path_outputs_events_and_errors(rng, monkeypatch, case):
    if case == "masked_steps":
        kernel, args = _masked_steps, (rand(rng, 512, 128), rand(rng, 512, 512), rand(rng, 128, 1))
    else:
        kernel, args = _loads, (rand(rng, 192, 64), 2 if case == "loads_masked_off" else 3)
    (fast, plain), (fast_events, plain_events) = _both_ways(monkeypatch, kernel, args)
    assert_same_outcome(fast, plain)
    assert len(fast_events) > 8 and fast_events == plain_events
    masks = [np.asarray(e.mask) for e in _events(kernel, args) if e.mask is not None]
    assert any(m.all() for m in masks)
    assert any(not m.any() for m in masks) or case == "load_out_of_bounds"     # mask=False too
    if case == "masked_steps":
        out, sums = fast
        want_out, want_sums = _reference(*args)
        assert np.isnan(out[:2]).all()                  # the stores under mask=False wrote nothing
        np.testing.assert_allclose(out[2:], want_out, rtol=1e-4, atol=1e-2)
        np.testing.assert_allclose(sums[2:], want_sums, rtol=1e-4)
    elif case == "loads_masked_off":
        a = args[0]
        np.testing.assert_array_equal(fast, a[0:128] + a[64:192])
    else:
        assert isinstance(fast, OpenNKIError) and "load" in str(fast.location.source)


def _events(kernel, args):
    rec = Recorder()
    try:
        run_kernel(kernel, args, listeners=[rec])
    except OpenNKIError:
        pass
    return [e for e in rec.events if hasattr(e, "mask")]


def _view(shape, own_mask=None):
    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    view = TensorView.root(mem.new_storage(MemoryRegion.sbuf, float32, shape, "t", None))
    return view if own_mask is None else view._derive(view.shape, view.amap, view.consts, mask=own_mask)


@pytest.mark.parametrize("value", [True, False, np.True_, np.False_])
def test_a_constant_mask_is_a_read_only_array_of_its_value(value):
    own = (arange(128)[:, None] < 100).array
    for shape in ((128, 512), (128, 1), (64, 4, 8)):
        for view in (_view(shape), _view(shape, own[:shape[0]].reshape((shape[0],) + (1,) * (len(shape) - 1)))):
            got = Machine.effective_mask(view, value)
            want = np.full(shape, bool(value)) & (np.broadcast_to(view.mask, shape) if view.mask is not None
                                                  else True)
            assert got.shape == shape and got.dtype == np.bool_ and not got.flags.writeable
            np.testing.assert_array_equal(got, want)
        m = mask_array(value, shape)
        assert m.shape == shape and not m.flags.writeable and m.all() == bool(value) and m.any() == bool(value)
