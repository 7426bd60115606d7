"""`TensorView.plain_subscript` and `affine_subscript` (the fast paths of keys of ints and slices, and of legacy index
expressions and ints) give what the general subscript gives:
the same view (shape, map, constants, coords, no run-time terms, no operand mask), the same geometry and bounds
verdict as the map itself gives, the same values shared with an `all of it` view, and the same errors, on random
keys over random views (identity and other maps, on chip and in HBM, with operand masks and run-time indices)."""

import contextlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opennki.events import MemoryKind
from opennki.instructions.base import view_signature
from opennki.hw import get_target
from opennki.machine.dtypes import bfloat16, float32
from opennki.machine.index import Predicate, arange
from opennki.machine.memory import Allocator, Memory, MemoryRegion
from opennki.machine.tensor import DynamicTerm, TensorView, _identity_map

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REGIONS = (MemoryRegion.sbuf, MemoryRegion.psum, MemoryRegion.shared_hbm)
_MEMORY = Memory(get_target("trn2"), Allocator(MemoryKind.HBM, 1 << 30, 64, "trn2"), precise=True,
                 shape_only=False, program=())


def _root(region, shape, dtype=float32) -> TensorView:
    storage = _MEMORY.new_storage(region, dtype, shape, "t", None)
    storage.array[:] = np.arange(storage.array.size) % 251
    return TensorView.root(storage)


@contextlib.contextmanager
def _general():
    """The general path: every key takes `_basic` / `_advanced`."""
    fast = TensorView.plain_subscript, TensorView.affine_subscript
    TensorView.plain_subscript = TensorView.affine_subscript = lambda self, key: None
    try:
        yield
    finally:
        TensorView.plain_subscript, TensorView.affine_subscript = fast


def _subscript(view, key):
    try:
        return view.subscript(key)
    except Exception as e:      # noqa: BLE001 - the errors are compared, type and message
        return type(e), str(e)


def _index(draw, n: int, kinds: str):
    """A key entry for an axis of size n, of one of `kinds`: i an int, s a slice (in and out of bounds, any bounds
    and steps), a a legacy index expression, x an entry no fast path takes, o all of the axis."""
    kind = draw(st.sampled_from(kinds))
    edge = st.integers(-n - 3, n + 3)
    if kind == "i":
        return draw(edge)
    if kind == "a":         # a legacy index expression: c * arange(m), lifted, plus a constant
        index = draw(st.integers(-2, 2)) * arange(draw(st.integers(0, n + 1))) + draw(edge)
        return index[draw(st.sampled_from([slice(None), (slice(None), None), (None, slice(None)),
                                           (None, slice(None), None), 0]))]
    if kind == "s":
        return slice(draw(st.none() | edge), draw(st.none() | edge),
                     draw(st.sampled_from([None, None, None, 1, 1, 2, 3, 0, -1])))
    if kind == "x":         # not plain: the general path's (ints of other types, bounds of other types, ...)
        return draw(st.sampled_from([np.int64(n // 2), True, Ellipsis, slice(np.int32(0), None),
                                     slice(None, None, np.int64(1)), slice(0, 1.5), arange(max(n, 1))[:, None],
                                     "a"]))
    return slice(None)


def _key(draw, view, kinds="iiisssssxoaaa"):
    entries = [_index(draw, n, kinds) for n in view.shape[:draw(st.integers(0, view.ndim + 1))]]
    if len(entries) > view.ndim:
        entries.append(draw(st.sampled_from([0, slice(None)])))
    if len(entries) == 1 and draw(st.booleans()):
        return entries[0]
    return tuple(entries)


def _base(draw):
    """A view to index: a tensor, a general subscript of one, a view whose map is not a selection of the tensor's
    dims (axes swapped, reversed, broadcast, two axes along one dim), with an operand mask or run-time terms."""
    region = draw(st.sampled_from(REGIONS))
    nd = draw(st.integers(2 if region is not MemoryRegion.shared_hbm else 1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=nd, max_size=nd)))
    root = _root(region, shape, draw(st.sampled_from([float32, bfloat16])))
    how = draw(st.sampled_from(["root", "root", "sliced", "sliced", "mapped", "masked", "dynamic", "shared"]))
    if how == "root":
        return root
    if how == "sliced":
        with _general():
            view = _subscript(root, _key(draw, root))
        return view if isinstance(view, TensorView) else root
    if how == "mapped":
        first = draw(st.integers(0, nd - 1))
        last = draw(st.integers(0, nd - 1))
        amap = [list(row) for row in _identity_map(nd)]
        amap[first], amap[last] = amap[last], amap[first]           # axes swapped
        consts = [0] * nd
        for d in range(nd):
            if draw(st.booleans()):                                 # reversed along dim d
                amap[d] = [-c for c in amap[d]]
                consts[d] = shape[d] - 1
        view_shape = [0] * nd
        for d, row in enumerate(amap):
            for a, c in enumerate(row):
                if c:
                    view_shape[a] = shape[d]
        if draw(st.booleans()):                                     # a broadcast axis in front
            amap = [[0] + row for row in amap]
            view_shape = [draw(st.integers(1, 4))] + view_shape
        if nd >= 2 and draw(st.booleans()):                         # a second axis moving along dim 1
            amap = [row + [draw(st.sampled_from([1, 2])) if d == 1 else 0] for d, row in enumerate(amap)]
            view_shape.append(2)
        return TensorView(root.storage, view_shape, tuple(map(tuple, amap)), tuple(consts))
    if how == "masked":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return root.subscript(Predicate(rng.random(shape) < 0.5))
    if how == "dynamic":
        index = _root(MemoryRegion.sbuf, (shape[0], 1), float32)
        return root._derive(root.shape, root.amap, root.consts, (DynamicTerm(index, 0, (1,) + (0,) * (nd - 1)),))
    view = root.subscript(Ellipsis)         # derived values computed and shared by `all of it` subscripts
    view.extent()
    view_signature(view)
    return view


def _fresh(view) -> TensorView:
    """The view made anew from its map: the geometry and bounds verdict the map gives."""
    return TensorView(view.storage, view.shape, view.amap, view.consts, view.dynamic, coords=view.coords)


@SETTINGS
@given(st.data())
def test_plain_subscripts_are_the_general_subscript(data):
    _compare(_base(data.draw), data.draw)


@SETTINGS
@given(st.data())
def test_affine_subscripts_are_the_general_subscript(data):
    """Keys of index expressions and ints only (`t[i_p, k * 128 + i_f]`), 1-D and non-broadcasting ones too."""
    _compare(_base(data.draw), data.draw, "iaaa")


@SETTINGS
@given(st.data())
def test_subscripts_of_views_of_one_layout_are_the_general_subscript(data):
    """A chain of subscripts (plain and affine) made again on another tensor of the same shape, region and dtype
    takes its views from the layouts the first chain made (`tensor._Layout`: shape, map, geometry, extent,
    signature...), the root's included: each is what the general path gives for the other tensor."""
    region = data.draw(st.sampled_from(REGIONS))
    nd = data.draw(st.integers(2 if region is not MemoryRegion.shared_hbm else 1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=nd, max_size=nd)))
    dtype = data.draw(st.sampled_from([float32, bfloat16]))
    view, keys = _root(region, shape, dtype), []
    for _ in range(data.draw(st.integers(1, 3))):
        view.extent()
        view_signature(view)            # the layouts keep these
        key = Ellipsis if data.draw(st.integers(0, 5)) == 0 else _key(data.draw, view, "iiissssoaa")
        keys.append(key)
        view = _subscript(view, key)
        if not isinstance(view, TensorView):
            break
    other = _root(region, shape, dtype)
    assert (other.shape, other.amap, other.consts, other.coords) == (shape, _identity_map(nd), (0,) * nd, shape)
    assert other._geo == _fresh(other)._geometry() and other.in_bounds() == _fresh(other).in_bounds()
    assert other._sig is None or other._sig == view_signature(_fresh(other))
    for key in keys:
        other = _compare_key(other, key)
        if other is None:
            break


def test_read_only_tensors_have_a_layout_of_their_own():
    """The signature says whether a tensor is a read-only kernel argument, so its views' layouts are not those of
    a writable tensor of the same shape (`TensorView.root` keys a root's layout by the flag)."""
    writable = _root(MemoryRegion.shared_hbm, (8, 4))
    sig = view_signature(writable.subscript((slice(2, 6), slice(1, 3))))
    storage = _MEMORY.new_storage(MemoryRegion.shared_hbm, float32, (8, 4), "t", None)
    storage.read_only = True
    read_only = TensorView.root(storage)
    assert view_signature(read_only.subscript((slice(2, 6), slice(1, 3)))) != sig
    assert view_signature(_root(MemoryRegion.shared_hbm, (8, 4)).subscript((slice(2, 6), slice(1, 3)))) == sig


def _compare(base, draw, kinds="iiisssssxoaaa"):
    _compare_key(base, _key(draw, base, kinds))


def _compare_key(base, key):
    """Compare `base[key]` on the fast paths with the general path's; the fast view, or None for an error."""
    fast = _subscript(base, key)
    with _general():
        slow = _subscript(base, key)
    if not isinstance(slow, TensorView):
        assert fast == slow                 # the same error and message
        return None
    assert type(fast) is type(slow) and fast.storage is slow.storage
    assert (tuple(fast.shape), fast.amap, fast.consts, fast.coords, fast.dynamic) == \
           (tuple(slow.shape), slow.amap, slow.consts, slow.coords, slow.dynamic)
    assert type(fast.shape) is type(slow.shape)
    assert (fast.mask is None) == (slow.mask is None)
    if fast.mask is not None:
        assert fast.mask is slow.mask
    expect = _fresh(slow)
    assert (fast._geo or fast._geometry()) == expect._geometry()
    assert fast.in_bounds() == expect.in_bounds() == slow.in_bounds()
    # the derived values the fast view holds already (shared with an `all of it` view, or its layout's) are the
    # general view's
    if fast._extent is not None:
        assert fast._extent == slow.extent()
    if fast._free is not None:
        assert fast._free == slow.free_size
    if fast._all is not None:
        assert fast._all == slow.covers_all()
    if fast._sig is not None:
        assert fast._sig == view_signature(slow)
    if fast._np is not None:
        np.testing.assert_array_equal(fast._np, slow.np_view())
        assert np.shares_memory(fast._np, slow.np_view()) or fast._np.size == 0
    if fast._geo is not None and slow._geo is not None:
        assert fast._geo == slow._geo
    if slow._inb is not None:
        assert fast._inb == slow._inb
    assert fast.extent() == slow.extent()
    if fast.in_bounds() and not fast.dynamic:
        np.testing.assert_array_equal(fast.np_view(), slow.np_view())
        np.testing.assert_array_equal(fast.flat_offsets(), slow.flat_offsets())
    return fast


@SETTINGS
@given(st.data())
def test_plain_subscripts_of_a_tensor_address_numpys_elements(data):
    """A tensor's subscript of ints and non-empty slices inside it reads the elements NumPy's basic indexing
    gives (an int on the partition dim on chip keeps a size-1 dim, as NKI does, hence the flat comparison)."""
    region = data.draw(st.sampled_from(REGIONS))
    nd = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=nd, max_size=nd)))
    root = _root(region, shape)
    key = []
    for n in shape[:data.draw(st.integers(1, nd))]:
        if data.draw(st.booleans()):
            key.append(data.draw(st.integers(-n, n - 1)))
        else:
            start = data.draw(st.integers(-n, n - 1))
            stop = data.draw(st.integers(start % n + 1, n)) if data.draw(st.booleans()) else None
            key.append(slice(start, stop, data.draw(st.sampled_from([None, 1, 2, 3]))))
    key = tuple(key)
    view = root.plain_subscript(key)
    assert view is not None and view.in_bounds()
    expect = root.storage.array.reshape(shape)[key]
    np.testing.assert_array_equal(view.np_view().reshape(-1), expect.reshape(-1))
    assert view.size == expect.size


@SETTINGS
@given(st.data())
def test_a_views_geometry_is_where_its_elements_are(data):
    """`_geometry`, which plain subscripts take their geometry from (`_view_plan`), against the elements' own
    positions: the [lo, hi] range per storage dim is the lowest and highest position of its affine part (an empty
    axis of step s spans -s, which puts an empty view out of bounds unless it starts at position s or later);
    strides and offset give each element's flat position; in bounds means every element is inside (never with
    run-time terms)."""
    base = _base(data.draw)
    view = _subscript(base, _key(data.draw, base))
    if not isinstance(view, TensorView):
        view = base
    if data.draw(st.booleans()) and not view.dynamic and view.ndim >= 2:
        i_p, i_f = arange(view.shape[0])[:, None], arange(view.shape[1])[None, :]     # an arange subscript
        view = view.subscript((i_p, data.draw(st.integers(-2, 2)) * i_f + data.draw(st.integers(0, 3)))
                              + (0,) * (view.ndim - 2))
    for checked in (view, _fresh(view)):        # as made, and its geometry recomputed from the map
        ranges, strides, offset = checked._geo or checked._geometry()
        assert (checked.strides, checked.offset) == (strides, offset)
        coords_strides = np.cumprod((1,) + checked.coords[:0:-1])[::-1]
        if checked.size:
            for d, (lo, hi) in enumerate(ranges):
                pos = checked.dim_positions(d)
                assert (lo, hi) == (pos.min(), pos.max())
            flat = sum(checked.dim_positions(d) * int(s) for d, s in enumerate(coords_strides))
            np.testing.assert_array_equal(checked.flat_offsets(), flat)
            assert checked.in_bounds() == (not checked.dynamic and bool(checked.in_range().all()))
        else:
            for d, (lo, hi) in enumerate(ranges):
                spans = [c * (n - 1) for c, n in zip(checked.amap[d], checked.shape)]
                assert (lo, hi) == (checked.consts[d] + sum(min(s, 0) for s in spans),
                                    checked.consts[d] + sum(max(s, 0) for s in spans))
            assert checked.in_bounds() == (not checked.dynamic and all(
                0 <= lo and hi < n for (lo, hi), n in zip(ranges, checked.coords)))
