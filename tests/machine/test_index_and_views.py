"""Legacy index expressions and the view algebra behind every subscript."""

import itertools
import operator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opennki.errors import KernelError, OutOfBoundsError
from opennki.events import MemoryKind
from opennki.hw import get_target
from opennki.machine.dtypes import float32
from opennki.machine.index import Index, Predicate, arange, ds, mask_array, mgrid
from opennki.machine.memory import Allocator, Memory, MemoryRegion
from opennki.machine.tensor import TensorView
from tests.raises import raises_at


def _view(region, shape):
    hw = get_target("trn2")
    mem = Memory(hw, Allocator(MemoryKind.HBM, 1 << 30, 64, hw.name), precise=True, shape_only=False, program=())
    st = mem.new_storage(region, float32, shape, "t", None)
    st.array[:] = np.arange(st.array.size, dtype=np.float32)
    return TensorView.root(st), st.array.reshape(shape)


def test_arange_lifting_and_affine_arithmetic():
    i_p = arange(128)[:, None]
    i_f = arange(8, 72)[None, :]
    e = 3 * i_p + 2 * i_f - 5
    assert e.shape == (128, 64)
    np.testing.assert_array_equal(e.values(), 3 * np.arange(128)[:, None] + 2 * np.arange(8, 72)[None, :] - 5)
    assert e.value_range() == (11, 3 * 127 + 2 * 71 - 5)


def test_mgrid_matches_numpy_and_exposes_axes():
    grid = mgrid[0:4, 2:10:2, 0:3]
    ref = np.mgrid[0:4, 2:10:2, 0:3]
    for ours, theirs in zip(grid, ref):
        np.testing.assert_array_equal(ours.values(), theirs)
    np.testing.assert_array_equal(grid.x.values(), ref[1])


def test_comparisons_build_predicates_and_refuse_truth_values():
    i_p = arange(10)[:, None]
    pred = (i_p < 7) & (i_p >= 2)
    np.testing.assert_array_equal(pred.array[:, 0], (np.arange(10) < 7) & (np.arange(10) >= 2))
    with raises_at(KernelError, match="err_ambiguous_tensor_truth_value"):
        bool(pred)
    with raises_at(KernelError, match="err_control_flow_condition_depending_on_arange"):
        bool(i_p)


def _pointwise(index: Index) -> np.ndarray:
    """The definition: const + sum(coeffs[a] * i_a) at every grid position, one Python sum per position."""
    out = np.empty(index.shape, dtype=np.int64)
    for pos in itertools.product(*map(range, index.shape)):
        out[pos] = index.const + sum(c * i for c, i in zip(index.coeffs, pos))
    return out


@st.composite
def _indices(draw, shape=None):
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    coeffs = tuple(draw(st.lists(st.integers(-4, 4), min_size=len(shape), max_size=len(shape))))
    return Index(draw(st.integers(-20, 20)), coeffs, shape)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_index_values_and_comparisons_match_the_pointwise_definition(data):
    """values() and the comparisons of an Index with an Index (shapes that broadcast) or an int build their
    grids by broadcasting, never a fill and an addition per axis: against the value at every position."""
    a = data.draw(_indices())
    values = a.values()
    assert values.shape == a.shape and values.dtype == np.int64 and values.flags.writeable
    np.testing.assert_array_equal(values, _pointwise(a))
    # the other side: an int, or an Index whose shape broadcasts with a's (some axes of size 1, fewer dims)
    if data.draw(st.booleans()):
        b = data.draw(st.integers(-30, 30))
        b_values = b
    else:
        shape = tuple(n if data.draw(st.booleans()) else 1 for n in a.shape)[data.draw(st.integers(0, a.ndim)):]
        b = data.draw(_indices(shape))
        b_values = _pointwise(b)
    for op in (operator.add, operator.sub):     # broadcasting repeats a size-1 axis's one value
        np.testing.assert_array_equal(op(a, b).values(), op(_pointwise(a), b_values))
    # results made without __init__ (`Index._of`) hold what it would make of them: Python ints
    for made in (a + b, a - b, b - a, -a, a * 3, np.int64(2) * a, a + np.int32(5)):
        assert type(made) is Index and type(made.const) is int
        rebuilt = Index(made.const, made.coeffs, made.shape)
        assert (made.const, made.coeffs, made.shape) == (rebuilt.const, rebuilt.coeffs, rebuilt.shape)
        assert all(type(v) is int for v in made.coeffs + made.shape)
    for op in (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne):
        pred = op(a, b)
        assert isinstance(pred, Predicate) and pred.affine
        expected = op(_pointwise(a), b_values)
        assert pred.array.shape == np.shape(expected) and pred.array.dtype == bool
        np.testing.assert_array_equal(pred.array, expected)
    reflected = operator.lt(b, a)           # b's own __lt__, or for an int the reflected Index.__gt__
    np.testing.assert_array_equal(reflected.array, np.less(b_values, _pointwise(a)))


def test_non_affine_index_is_not_a_valid_subscript():
    view, _ = _view(MemoryRegion.shared_hbm, (16, 16))
    i_p, i_f = arange(16)[:, None], arange(16)[None, :]
    with raises_at(KernelError, match="affine"):
        view.subscript((i_p % 4, i_f))
    assert not (i_p % 4 < 2).affine


def test_affine_subscript_is_a_strided_view():
    view, data = _view(MemoryRegion.shared_hbm, (64, 100))
    i_p = arange(32)[:, None]
    i_f = arange(20)[None, :]
    v = view.subscript((2 * i_p + 1, 5 * i_f + 3))
    np.testing.assert_array_equal(v.np_view(), data[1::2, 3::5][:32, :20])
    assert v.strides == (200, 5) and v.offset == 103


def test_basic_subscript_rules_on_chip_keep_two_dims():
    view, data = _view(MemoryRegion.sbuf, (128, 4, 8))
    assert view.subscript(5).shape == (1, 4, 8)                  # int on the partition dim keeps it
    assert view.subscript((slice(0, 64), 2)).shape == (64, 8)
    assert view.subscript((slice(0, 64), 2, 3)).shape == (64, 1)  # never below 2-D on chip
    np.testing.assert_array_equal(view.subscript((ds(10, 20), 1, slice(2, 8, 3))).np_view(), data[10:30, 1, 2:8:3])


def test_basic_subscript_rules_in_hbm_drop_dims():
    view, data = _view(MemoryRegion.shared_hbm, (4, 8, 16))
    v = view.subscript((2, slice(None), 5))
    assert v.shape == (8,)
    np.testing.assert_array_equal(v.np_view(), data[2, :, 5])


def test_mixing_slices_and_aranges_is_rejected():
    view, _ = _view(MemoryRegion.shared_hbm, (16, 16))
    with raises_at(KernelError, match="err_unsupported_mixing_basic_advanced_tensor_indexing"):
        view.subscript((arange(16)[:, None], slice(None)))


def test_one_dimensional_arange_rejected():
    view, _ = _view(MemoryRegion.shared_hbm, (16, 16))
    with raises_at(KernelError, match="err_1d_arange_not_supported"):
        view.subscript((arange(16), 0))


def test_out_of_bounds_is_lazy_and_mask_aware():
    view, _ = _view(MemoryRegion.shared_hbm, (100, 8))
    i_p, i_f = arange(128)[:, None], arange(8)[None, :]
    v = view.subscript((i_p, i_f))                  # creating the view is fine
    assert not v.in_bounds()
    with raises_at(OutOfBoundsError, match=r"index range \[0, 127\] exceed dimension size of 100"):
        v.check_bounds()
    v.check_bounds(mask_array(i_p < 100, v.shape))  # masked-off rows are not checked


def test_mask_array_reduces_over_broadcast_axes():
    pred = Predicate(np.arange(12).reshape(3, 4) > 5)
    np.testing.assert_array_equal(mask_array(pred, (3, 1))[:, 0], [False, True, True])
