"""Machine layer: tensor views over a storage, and the subscript rules of both NKI generations.

Imports errors, events (MemoryKind), memory and index. A `TensorView` is a storage plus an affine map from
view positions to storage positions, kept per storage dimension: element (i_0, ..., i_{n-1}) of the view is
storage element (c_d + sum_a A[d][a] * i_a for each storage dim d). Keeping the map per dimension lets
bounds be checked the way NKI reports them ("index range [0, 4095] exceed dimension size of 4000") and lets
legacy affine index tiles (`t[k*128 + i_p, 2*i_f]`) and new-generation slicing share one mechanism. Both end
in a strided NumPy view, so reading a view costs no gather.

Views are checked lazily: a legacy subscript may point out of bounds where a later `mask=` switches the
elements off, so bounds are checked when an instruction touches the view, with its mask.

Indirect (dynamic) indexing adds `DynamicTerm`s: an on-chip integer tile whose run-time values, times a
coefficient per storage dim, are added to the affine position (`data[idx_tile, i_f]`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from opennki.errors import IndirectIndexError, KernelError, OutOfBoundsError, ShapeError, UnsupportedError
from opennki.machine.arguments import as_int
from opennki.events import Engine, MemoryKind
from opennki.machine.index import DynamicIndex, Index, NonAffineIndex, Predicate, _is_int
from opennki.machine.memory import Storage

_HBM = MemoryKind.HBM   # looking an enum member up on its class is slow in hot paths (Python 3.11)
VIEW_ARRAYS = True      # a storage keeps the NumPy array of each layout of a part of it (`TensorView.np_view`)
_ALL = slice(None)


@functools.lru_cache(maxsize=4096)
def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


class Shape(tuple):
    """A view's shape: a tuple that also equals the list of the same sizes.

    NKI's documentation compares shapes with lists (`assert x[1].shape == [2, 2]`, the new generation's
    indexing overview) and kernels written from it do the same; a plain tuple would make such an assert
    fail. Everything else is the tuple's: hashing, indexing, slicing (which gives plain tuples), repr. Made of
    ints only (`TensorView.__init__`), and immutable, so views of one shape may share one."""

    __slots__ = ()

    def __eq__(self, other):
        return tuple.__eq__(self, tuple(other) if type(other) is list else other)

    def __ne__(self, other):
        return tuple.__ne__(self, tuple(other) if type(other) is list else other)

    __hash__ = tuple.__hash__


@functools.lru_cache(maxsize=16)
def _identity_map(n: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(1 if a == d else 0 for a in range(n)) for d in range(n))


@functools.lru_cache(maxsize=1024)
def _root_geometry(shape: tuple[int, ...]) -> tuple:
    """TensorView._geometry() of a whole tensor of `shape`."""
    return tuple((min(0, n - 1), max(0, n - 1)) for n in shape), row_major_strides(shape), 0


@functools.lru_cache(maxsize=4096)
def _byte_strides(strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Element strides in bytes (TensorView.np_view)."""
    return tuple([s * itemsize for s in strides])


@functools.lru_cache(maxsize=1024)
def _root_in_bounds(shape: tuple[int, ...]) -> bool:
    """TensorView.in_bounds() of a whole tensor of `shape` (False only with an empty dim)."""
    return all(n > 0 for n in shape)


@functools.lru_cache(maxsize=4096)
def _extent_of(shape: tuple[int, ...], on_chip: bool, itemsize: int, ranges: tuple, run_time_dims: tuple) -> tuple:
    """TensorView.extent() of a view of a storage of `shape`, from the [lo, hi] positions of its affine part per
    storage dim and the dims indexed at run time (which may touch the whole dim). A pure function of these, so
    cached: the tiles of a loop have the same shapes every iteration."""
    if on_chip:
        first = 1
        strides = (0,) + row_major_strides(shape[1:])
        p0, pc = (0, shape[0]) if 0 in run_time_dims else (ranges[0][0], ranges[0][1] - ranges[0][0] + 1)
    else:
        first = 0
        strides = row_major_strides(shape)
        p0, pc = 0, 1
    lo = hi = 0
    for d in range(first, len(shape)):
        if d in run_time_dims:
            hi += (shape[d] - 1) * strides[d]
            continue
        dlo, dhi = ranges[d]
        lo += max(dlo, 0) * strides[d]
        hi += min(dhi, shape[d] - 1) * strides[d]
    return p0, pc, lo * itemsize, (hi + 1) * itemsize


_PLANS: dict = {}


def _view_plan(plan_key: tuple) -> tuple:
    """What `TensorView.plain_subscript` gives that does not depend on the key's starts, for `plan_key` =
    (map, coords, on chip, the key's form, the sizes of the axes it leaves out): (shape, map, the (key axis,
    storage dim, step) of the map's nonzero steps along the key's axes, per storage dim the offsets of the lowest
    and highest positions from the first element's with that dim's stride and size, strides). It follows
    `_basic`: an int drops its axis, but the partition axis on chip, kept at size 1; a view left with too few
    axes (under two on chip, none in HBM) gets a size-1 axis that moves along no dim. Memoised in `_PLANS`: the
    tiles of a loop repeat these."""
    amap, coords, on_chip, form, rest = plan_key
    shape, cols = [], []
    for a, f in enumerate(form + rest):
        step, n = (0, 1) if f is None else (1, f) if type(f) is int else f
        if step or (on_chip and a == 0):
            shape.append(n)
            cols.append(tuple(row[a] * (step or 1) for row in amap))
    if (on_chip and len(shape) < 2) or not shape:
        shape.append(1)
        cols.append((0,) * len(amap))
    terms = tuple((a, d, row[a]) for d, row in enumerate(amap) for a in range(len(form)) if row[a])
    plan = _remember(_PLANS, plan_key, _plan(amap, coords, shape, cols, terms))
    return plan


_AFFINE_PLANS: dict = {}


def _affine_plan(plan_key: tuple) -> tuple | None:
    """`_view_plan` for `TensorView.affine_subscript`, `plan_key` = (map, coords, the key's form, the sizes of
    the axes it leaves out), following `_advanced`: the index expressions' grid (their shapes broadcast) comes
    first, then the axes the key leaves out; an int moves the first element only. None for a key that is not
    the path's (no index expression) or that `_advanced` rejects."""
    amap, coords, form, rest = plan_key
    shapes = [f[1] for f in form if f is not None]
    if not shapes or (any(len(s) == 1 for s in shapes) and len(form) + len(rest) > 1):
        return None
    try:
        grid = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None
    nd, r = len(amap), len(grid)
    cols = [[0] * nd for _ in range(r)] + [[row[a] for row in amap] for a in range(len(form), len(form) + len(rest))]
    terms = []
    for a, f in enumerate(form):
        col = [row[a] for row in amap]
        terms.extend((a, d, c) for d, c in enumerate(col) if c)
        if f is not None:
            coeffs = (0,) * (r - len(f[1])) + f[0]
            for d in range(nd):
                for ax in range(r):
                    cols[ax][d] += col[d] * coeffs[ax]
    return _remember(_AFFINE_PLANS, plan_key, _plan(amap, coords, grid + rest, cols, tuple(terms)))


def _plan(amap: tuple, coords: tuple, shape, cols, terms: tuple) -> tuple:
    """A plan (`TensorView._planned`) of the view of `shape` whose axes move by `cols` (per axis, per storage
    dim), its constants by `terms`: its geometry from position 0 on every dim is the view's of a storage of
    `coords` (a view of no storage: geometry needs the map only), offset by the constants."""
    out_map = tuple(zip(*cols)) if cols else ((),) * len(amap)
    ranges, strides, _ = TensorView(None, shape, out_map, (0,) * len(amap), coords=coords)._geometry()
    spans = tuple((lo, hi, s, n) for (lo, hi), s, n in zip(ranges, row_major_strides(coords), coords))
    return Shape(map(int, shape)), out_map, terms, spans, strides


def _remember(plans: dict, plan_key: tuple, plan, limit: int = 4096):
    if len(plans) >= limit:
        plans.clear()
    plans[plan_key] = plan
    return plan


class _Layout:
    """What every view of one layout holds but its storage: shape, map, constants, coords and the derived values
    (geometry, bounds verdict, extent, free size, covers-all verdict, signature), computed once. A layout is one
    of a root of a storage shape, region, dtype and read-only flag (`_ROOTS`), or of a plain or affine subscript of
    another layout (`_CHILDREN`, keyed by the subscript's form and starts, what the plans and `_planned` take: a
    plain subscript's as one list, an affine one's as two tuples, so the two never share a key), so every
    derived value is the same for all its views: a kernel's loops make the same tiles and subscripts again and
    again, and each was worked out afresh. Relies on a storage's shape, region, dtype and base (and the base's
    read-only flag) not changing once it has a view, which nothing does."""

    __slots__ = ("fields", "record", "last")

    def __init__(self, view: "TensorView"):
        view.extent()
        view.free_size
        view.covers_all()
        self.fields = (view.shape, view.amap, view.consts, view.coords, view._inb, view._geo, view._extent,
                       view._free, view._sig, view._all)
        self.record = None      # what the event records of its views share (sim.program._record_template)
        self.last = None        # the last event record made of a view of it (sim.program.Program._event)
        view._layout = self

    def view(self, storage: Storage, cls) -> "TensorView":
        """A view of this layout of `storage` (which `TensorView.__init__` would make, derived values included)."""
        view = object.__new__(cls)
        view.storage = storage
        (view.shape, view.amap, view.consts, view.coords, view._inb, view._geo, view._extent, view._free, view._sig,
         view._all) = self.fields
        view.dynamic = ()
        view.mask = None
        view._np = None
        view._layout = self
        return view

    def signed(self, sig) -> None:
        """Keep the signature number `instructions.base.view_signature` gave a view of this layout."""
        fields = self.fields
        self.fields = fields[:8] + (sig,) + fields[9:]


_ROOTS: dict = {}         # (storage shape, region, dtype, read-only) -> the layout of its root view
_CHILDREN: dict = {}      # (layout, the key's starts and forms) -> the layout of that subscript of a view of it


def forget_layouts() -> None:
    """Make new layouts from now on (for views made afresh: new signature numbers, `view_signature`)."""
    _ROOTS.clear()
    _CHILDREN.clear()


def holds_view(value) -> bool:
    """True if `value` is a view, or a tuple or list holding one (at any depth)."""
    if isinstance(value, TensorView):
        return True
    return isinstance(value, (tuple, list)) and any(holds_view(v) for v in value)


def indirection_group(engine: Engine) -> int:
    """Partitions per partition group of tensor indirection on `engine`: 32 on the Tensor Engine, else 16."""
    return 32 if engine is Engine.TENSOR else 16


@dataclass(frozen=True)
class TensorIndirection:
    """The offset layout of a tensor-indirection view (`NkiTensor.indirect`, NeuronCore-v4): element (p, i)
    of the (P, num_elem) view is free element `offset(p, i)` of the data view's partition p, where partition
    group g = p // G (G adjacent partitions: 16 for the Vector, Scalar and GpSimd engines, 32 for the Tensor
    Engine, so G is the executing engine's) reads its offsets from its own G rows of the (P, K) index, in
    snake order: offset(p, i) = index[g * G + i % G, i // G]. Every partition of a group uses the same offsets.
    `limit`: the data view's elements per partition (an offset must be below it)."""

    num_elem: int
    limit: int

    def positions(self, rows: int, group: int) -> tuple[np.ndarray, np.ndarray]:
        """The index element (row, column) each element of a `rows`-partition view reads its offset from."""
        p = np.arange(rows, dtype=np.int64)[:, None]
        i = np.arange(self.num_elem, dtype=np.int64)[None, :]
        shape = (rows, self.num_elem)
        return np.broadcast_to((p // group) * group + i % group, shape), np.broadcast_to(i // group, shape)

    def outside(self, index_shape: tuple[int, int], rows: int, group: int) -> tuple[int, int, int, int] | None:
        """The first (p, i, row, column) whose offset position lies outside an index of `index_shape`, or None."""
        r, c = self.positions(rows, group)
        bad = (r >= index_shape[0]) | (c >= index_shape[1])
        if not bad.any():
            return None
        p, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return int(p), int(i), int(r[p, i]), int(c[p, i])


@dataclass(frozen=True)
class DynamicTerm:
    """A run-time index: `values(index) * coeffs[d]` is added to storage dim d. The index tile's axes align
    with view axes `lead .. lead + index.ndim - 1`, unless `columns` gives a tensor-indirection layout: then
    the values are the index elements that layout picks for each view element."""

    index: "TensorView"
    lead: int
    coeffs: tuple[int, ...]
    columns: TensorIndirection | None = None



def strided_offsets(shape, strides, offset: int) -> np.ndarray:
    """Flat storage offsets (int64, of `shape`) of the elements of a direct strided view: `offset` plus each
    index times its dim's stride."""
    out = np.full(shape, offset, dtype=np.int64)
    for a, (n, s) in enumerate(zip(shape, strides)):
        if s:
            sh = [1] * len(shape)
            sh[a] = n
            out = out + (np.arange(n, dtype=np.int64) * s).reshape(sh)
    return out

class TensorView:
    """A view of a storage (see the module docstring).

    Attributes:
        storage: the allocation it views.
        shape: the view's shape; on chip dim 0 is the partition dim.
        amap: amap[d][a] = step along storage dim d per step along view axis a.
        consts: storage position of view element (0, ..., 0), per storage dim.
        dynamic: run-time index terms (indirect indexing), usually empty.
        mask: boolean array broadcastable to `shape` restricting this operand (legacy matmul operand masks).
    """

    # `_geo`, `_extent`, `_free`, `_inb` and `_np` cache values derived from the (immutable) view; see
    # `_geometry`
    __slots__ = ("storage", "shape", "amap", "consts", "dynamic", "mask", "coords", "_np", "_inb", "_geo",
                 "_extent", "_free", "_sig", "_all", "_layout")

    def __init__(self, storage: Storage, shape, amap, consts, dynamic=(), mask=None, coords=None):
        self.storage = storage
        self.shape = shape if type(shape) is Shape else Shape(map(int, shape))     # a Shape holds ints
        self.amap = amap
        self.consts = consts
        self.dynamic = dynamic
        self.mask = mask
        self.coords = storage.shape if coords is None else coords
        self._np = None
        self._inb = None
        self._geo = None
        self._extent = None
        self._free = None
        self._sig = None     # instructions.base.view_signature
        self._all = None     # covers_all()
        self._layout = None  # the _Layout of views made from one

    @classmethod
    def root(cls, storage: Storage):
        key = (storage.shape, storage.region._value_, storage.dtype, (storage.base or storage).read_only)
        layout = _ROOTS.get(key)
        if layout is not None:
            return layout.view(storage, cls)
        n = len(storage.shape)
        view = cls(storage, storage.shape, _identity_map(n), (0,) * n)
        # the same for every tensor of this shape; keyed by the storage's plain tuple, since a `Shape` key would
        # run its Python-level __eq__ in the caches' look-ups
        view._geo = _root_geometry(storage.shape)
        view._inb = view._all = _root_in_bounds(storage.shape)
        _remember(_ROOTS, key, _Layout(view))
        return view

    def _derive(self, shape, amap, consts, dynamic=(), mask=None, coords=None):
        view = object.__new__(type(self))
        TensorView.__init__(view, self.storage, shape, amap, consts, dynamic, mask,
                            self.coords if coords is None else coords)
        return view

    # -- plain properties ---------------------------------------------------------------------------------
    @property
    def dtype(self):
        return self.storage.dtype

    @property
    def buffer(self):
        return self.storage.region

    @property
    def kind(self):
        return self.storage.kind

    @property
    def is_on_chip(self) -> bool:
        return self.storage.kind is not _HBM

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.storage.dtype.itemsize

    @property
    def partitions(self) -> int:
        """Partition count of an on-chip view (dim 0); 1 for HBM."""
        return self.shape[0] if self.is_on_chip else 1

    @property
    def free_size(self) -> int:
        """Elements per partition (product of the free dims); all elements for HBM."""
        if self._free is None:          # cached: checks, events and cost rules ask for it again and again
            self._free = math.prod(self.shape[1:]) if self.is_on_chip else self.size
        return self._free

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of the view into its storage (row-major over the storage's logical shape)."""
        return (self._geo or self._geometry())[1]

    @property
    def offset(self) -> int:
        return (self._geo or self._geometry())[2]

    def _geometry(self) -> tuple:
        """(per storage dim the [lo, hi] positions of the affine part, element strides, element offset),
        computed in one pass over the map. Views are immutable, so this is cached: an instruction's check,
        bounds check, event and cost rule each read these, and walking the map every time was the
        simulator's main per-instruction cost. An axis of n elements with step s along a dim spans s * (n - 1)
        positions (so an empty axis, -s)."""
        coords = self.coords
        ss = row_major_strides(coords)
        shape = self.shape
        strides = [0] * len(shape)
        ranges = []
        offset = 0
        inside = not self.dynamic
        for d, row in enumerate(self.amap):
            lo = hi = c = self.consts[d]
            s = ss[d]
            offset += c * s
            for a, n in enumerate(shape):
                step = row[a]
                if step:
                    strides[a] += step * s
                    span = step * (n - 1)
                    if span < 0:
                        lo += span
                    else:
                        hi += span
            ranges.append((lo, hi))
            if lo < 0 or hi >= coords[d]:
                inside = False
        self._geo = (tuple(ranges), tuple(strides), offset)
        if self._inb is None:
            self._inb = inside          # in_bounds(), from the same ranges
        return self._geo

    @property
    def is_indirect(self) -> bool:
        return bool(self.dynamic)

    @property
    def is_root(self) -> bool:
        return (tuple.__eq__(self.shape, self.storage.shape) and self.coords == self.storage.shape
                and not any(self.consts) and not self.dynamic and self.amap == _identity_map(len(self.coords)))

    def same_view(self, other: "TensorView") -> bool:
        return other is self or (other.storage is self.storage and other.shape == self.shape
                                 and other.amap == self.amap and other.consts == self.consts
                                 and other.dynamic == self.dynamic and other.coords == self.coords)

    # -- subscripts ---------------------------------------------------------------------------------------
    def subscript(self, key) -> "TensorView":
        """`t[key]` for both generations: ints, slices (`nl.ds`), `...`, legacy index expressions, an
        on-chip integer tile (indirect, first axis only) or a predicate (operand mask)."""
        if type(key) is not tuple:
            if isinstance(key, Predicate):
                return self._derive(self.shape, self.amap, self.consts, self.dynamic, key.array)
            if key is Ellipsis:
                if not self.dynamic and (len(self.shape) >= 2 or (self.shape and not self.is_on_chip)):
                    return self._whole()        # `t[...]`, the usual assignment target
                key = (_ALL,) * self.ndim
            elif not isinstance(key, tuple):
                key = (key,)
        if len(key) <= len(self.shape) and not self.dynamic:
            view = self.plain_subscript(key)
            if view is None:
                view = self.affine_subscript(key)
            if view is not None:
                return view
        plain = True                    # the usual `t[a:b, c:d]`: no `...`, no index expressions
        for k in key:
            if type(k) is not slice:
                plain = False
                break
        if not plain and any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * max(fill, 0) + key[i + 1:]
        if len(key) > self.ndim:
            raise ShapeError(f"too many indices for tensor {self.name!r}", expected=f"<= {self.ndim}",
                             got=len(key))
        if self.dynamic:
            raise UnsupportedError("a view with run-time (indirect) indices cannot be indexed again")
        if plain:
            return self._basic(key)
        for k in key:
            if isinstance(k, NonAffineIndex):
                raise KernelError("index expressions must be affine (sums of arange indices, loop variables "
                                  "and integer multiples); % and // are not", got=k.shape)
        if any(isinstance(k, (Index, TensorView, DynamicIndex)) for k in key):
            return self._advanced(key)
        return self._basic(key)

    def _basic(self, key) -> "TensorView":
        nd = len(self.amap)
        on_chip = self.is_on_chip
        consts = list(self.consts)
        cols, shape = [], []
        for a, n in enumerate(self.shape):
            k = key[a] if a < len(key) else _ALL
            col = [row[a] for row in self.amap]
            if type(k) is slice:
                start, length, step = slice_params(k, n)
                if start:
                    for d in range(nd):
                        consts[d] += col[d] * start
                shape.append(length)
                cols.append(col if step == 1 else [c * step for c in col])
                continue
            if not (_is_int(k) or (hasattr(k, "__index__") and not isinstance(k, TensorView))):
                raise ShapeError(f"unsupported index {k!r} for tensor {self.name!r}",
                                 expected="int, slice, nl.ds(...), ... or an index expression",
                                 got=type(k).__name__)
            k = int(k)
            if k < 0:
                k += n
            for d in range(nd):
                consts[d] += col[d] * k
            if on_chip and a == 0:          # an integer partition index keeps the (size 1) partition dim
                shape.append(1)
                cols.append(col)
        if (on_chip and len(shape) < 2) or not shape:
            shape.append(1)
            cols.append([0] * nd)
        view = self._derive(shape, tuple(zip(*cols)), tuple(consts))
        if view.shape == self.shape and view.amap == self.amap and view.consts == self.consts:
            self._share_derived(view)       # all of `self` (`t[:, :]`)
        return view

    def plain_subscript(self, key) -> "TensorView | None":
        """`_basic` of a key of plain ints and slices (int or None bounds, no step or a positive int one) with no
        more entries than the view has axes, for a view without run-time indices, geometry and bounds verdict
        included: `lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128]`, a block tile `blk[:, b]`, or
        `blk[b, :, j * 128:(j + 1) * 128]` in one step (`_src/blocks`). None for any other key (the general path
        takes it, and raises what it raises).

        Everything but the key's starts is a function of the view's map and coords, on chip or not, and the
        key's form (per axis: an int, or a slice's length and step), the same in every iteration of a kernel's
        loop, so it is memoised (`_view_plan`); what is left per subscript is the starts and the sums they are in."""
        # per entry its start and its form: None for an int, a length for a step-1 slice, else (step, length)
        parts = []
        for k in key:
            if type(k) is slice:
                start, stop = k.start, k.stop
                if k.step is None and type(start) is int and type(stop) is int and 0 <= start <= stop:
                    parts += (start, stop - start)      # what slice_params gives such a slice
                elif k == _ALL:
                    parts += (0, self.shape[len(parts) >> 1])
                elif (start is None or type(start) is int) and (stop is None or type(stop) is int) and (
                        k.step is None or (type(k.step) is int and k.step >= 1)):
                    start, length, step = slice_params(k, self.shape[len(parts) >> 1])     # no error for such a slice
                    parts += (start, length if step == 1 else (step, length))
                else:
                    return None
            elif type(k) is int:
                parts += (k if k >= 0 else k + self.shape[len(parts) >> 1], None)
            else:
                return None
        layout = self._layout
        if layout is not None:
            memo_key = (layout, tuple(parts))
            child = _CHILDREN.get(memo_key)
            if child is not None:
                return child.view(self.storage, type(self))
        starts, form = parts[0::2], tuple(parts[1::2])
        plan_key = (self.amap, self.coords, self.storage.kind is not _HBM, form, self.shape[len(key):])
        view = self._planned(_PLANS.get(plan_key) or _view_plan(plan_key), starts)
        same = view.consts == self.consts and tuple.__eq__(view.shape, self.shape) and view.amap == self.amap
        if same:
            self._share_derived(view)       # all of `self` (`t[:, :]`)
        if layout is not None:
            if same:
                view._layout = layout
            _remember(_CHILDREN, memo_key, layout if same else _Layout(view), 1 << 15)
        return view

    def affine_subscript(self, key) -> "TensorView | None":
        """`_advanced` of a key of legacy index expressions and plain ints, at least one index expression, with
        no more entries than the view has axes, for a view without run-time indices, geometry and bounds verdict
        included: `t[i_p, k * 128 + i_f]`, `blk[i_p, 3, i_f]`. None for any other key, and for a key `_advanced`
        rejects (a 1-D arange on a tensor of more dims, shapes that do not broadcast): the general path raises.
        Memoised like `plain_subscript`: per (map, coords, the coefficients and shapes of the expressions, the
        sizes of the axes the key leaves out), the expressions' constants and the ints being the starts."""
        starts, form = [], []       # form: None for an int, (coeffs, shape) for an index expression
        for k in key:
            if type(k) is Index:
                starts.append(k.const)
                form.append((k.coeffs, k.shape))
            elif type(k) is int:
                starts.append(k)
                form.append(None)
            else:
                return None
        form = tuple(form)
        layout = self._layout
        if layout is not None:
            memo_key = (layout, form, tuple(starts))
            child = _CHILDREN.get(memo_key)
            if child is not None:
                return child.view(self.storage, type(self))
        plan_key = (self.amap, self.coords, form, self.shape[len(key):])
        plan = _AFFINE_PLANS.get(plan_key) or _affine_plan(plan_key)
        if plan is None:
            return None
        view = self._planned(plan, starts)
        if layout is not None:
            _remember(_CHILDREN, memo_key, _Layout(view), 1 << 15)
        return view

    def _planned(self, plan: tuple, starts: list) -> "TensorView":
        """The view a plan (`_view_plan`, `_affine_plan`) gives with these starts, its geometry and bounds verdict
        included."""
        shape, out_map, terms, spans, strides = plan
        consts = list(self.consts)
        for a, d, step in terms:
            consts[d] += step * starts[a]
        view = self._derive(shape, out_map, tuple(consts))
        ranges = []
        offset = 0
        inside = True
        for c, (lo, hi, s, n) in zip(consts, spans):
            lo += c
            hi += c
            ranges.append((lo, hi))
            offset += c * s
            if lo < 0 or hi >= n:
                inside = False
        view._geo = (tuple(ranges), strides, offset)
        view._inb = inside
        return view

    def _whole(self) -> "TensorView":
        """`t[...]` of a view without run-time indices and with at least the dims `_basic` keeps: all of its
        elements, without its operand mask (as `_basic` gives it)."""
        layout = self._layout
        if layout is not None:
            view = layout.view(self.storage, type(self))
            view._np = self._np
            return view
        view = self._derive(self.shape, self.amap, self.consts)
        self._share_derived(view)
        return view

    def _share_derived(self, view: "TensorView") -> None:
        """`view` addresses the same elements as `self`, so it has the same derived values (and the same
        signature, unless `self` has an operand mask, which `view` lacks)."""
        view._geo, view._inb, view._extent, view._free = self._geo, self._inb, self._extent, self._free
        view._all = self._all
        view._np = self._np
        if self.mask is None:
            view._sig = self._sig

    def _advanced(self, key) -> "TensorView":
        nd = len(self.amap)
        for a, k in enumerate(key):
            if isinstance(k, slice):
                raise KernelError("basic (slice) and advanced (arange) indices cannot be mixed in one "
                                  "subscript", got=key,
                                  code="err_unsupported_mixing_basic_advanced_tensor_indexing",
                                  hint="index every dimension with nl.arange / nl.mgrid expressions")
            if isinstance(k, Index) and k.ndim == 1 and self.ndim > 1:
                raise KernelError("a 1-D nl.arange cannot index a tensor; lift it, e.g. nl.arange(n)[:, None]",
                                  code="err_1d_arange_not_supported")
            tile = k.tile if isinstance(k, DynamicIndex) else k
            if isinstance(tile, TensorView):
                # a free dim takes one run-time value (a dynamic offset), the first dim a tile of rows;
                # leading integers (block / batch positions, `out[b, idx_tile, i_f]`) do not count
                leading = any(not _is_int(key[j]) for j in range(a))
                if leading and tile.size != 1:
                    raise KernelError("indirect (run-time) indices are only allowed on the first dimension",
                                      code="err_indirect_indices_free_dim")
                if not tile.is_on_chip or not tile.dtype.is_int:
                    raise KernelError("indirect indices must be an integer tile in SBUF",
                                      got=f"{tile.dtype} in {tile.buffer.name}")
        shapes = [k.shape for k in key if isinstance(k, (Index, TensorView, DynamicIndex))]
        try:
            grid = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise ShapeError("index expressions of a subscript have incompatible shapes", got=shapes) from None
        r = len(grid)
        trailing = list(range(len(key), self.ndim))
        consts = list(self.consts)
        cols = [[0] * nd for _ in range(r)] + [[self.amap[d][a] for d in range(nd)] for a in trailing]
        shape = list(grid) + [self.shape[a] for a in trailing]
        dynamic = []
        for a, k in enumerate(key):
            col = [self.amap[d][a] for d in range(nd)]
            if _is_int(k):
                k = int(k)
                for d in range(nd):
                    consts[d] += col[d] * k
            elif isinstance(k, (Index, DynamicIndex)):
                aff = k.index if isinstance(k, DynamicIndex) else k
                coeffs = (0,) * (r - aff.ndim) + aff.coeffs
                for d in range(nd):
                    consts[d] += col[d] * aff.const
                    for ax in range(r):
                        cols[ax][d] += col[d] * coeffs[ax]
                if isinstance(k, DynamicIndex):
                    dynamic.append(DynamicTerm(k.tile, r - k.tile.ndim, tuple(col)))
            elif isinstance(k, TensorView):
                dynamic.append(DynamicTerm(k, r - k.ndim, tuple(col)))
            else:
                raise ShapeError(f"unsupported index {k!r} for tensor {self.name!r}", got=type(k).__name__)
        amap = tuple(tuple(cols[ax][d] for ax in range(len(cols))) for d in range(nd))
        return self._derive(shape, amap, tuple(consts), tuple(dynamic))

    # -- bounds -------------------------------------------------------------------------------------------
    def _dim_range(self, d: int) -> tuple[int, int]:
        """[lo, hi] positions along storage dim d of the affine part of the view."""
        return (self._geo or self._geometry())[0][d]

    def _dim_values(self, d: int) -> np.ndarray:
        out = np.full(self.shape, self.consts[d], dtype=np.int64)
        for a, n in enumerate(self.shape):
            c = self.amap[d][a]
            if c:
                sh = [1] * self.ndim
                sh[a] = n
                out = out + (np.arange(n, dtype=np.int64) * c).reshape(sh)
        return out

    def dim_positions(self, d: int, dynamic_values=None) -> np.ndarray:
        """Every element's position along storage dim d: the affine part plus the run-time index terms
        (`dynamic_values`: one array per DynamicTerm, as `Machine.dynamic_values` gives them)."""
        vals = self._dim_values(d)
        for term, v in zip(self.dynamic, dynamic_values or ()):
            if term.coeffs[d]:
                vals = vals + term.coeffs[d] * v
        return vals

    def in_range(self, dynamic_values=None) -> np.ndarray:
        """Which elements lie inside the tensor on every storage dim (bool, the view's shape)."""
        inside = np.ones(self.shape, bool)
        for d, dim_size in enumerate(self.coords):
            pos = self.dim_positions(d, dynamic_values)
            inside &= (pos >= 0) & (pos < dim_size)
        return inside

    def check_bounds(self, mask: np.ndarray | None = None, dynamic_values=None) -> None:
        """Raise OutOfBoundsError (err_tensor_access_out_of_bound) if an active element is outside the
        tensor. `dynamic_values` are the run-time index values, one array per DynamicTerm."""
        if self.size == 0:
            return
        for d, dim_size in enumerate(self.coords):
            if self.dynamic:
                vals = self.dim_positions(d, dynamic_values)
                if mask is not None:
                    vals = vals[np.broadcast_to(mask, self.shape)]
                if vals.size == 0:
                    continue
                lo, hi = int(vals.min()), int(vals.max())
            else:
                lo, hi = self._dim_range(d)
                if (lo < 0 or hi >= dim_size) and mask is not None:
                    vals = self._dim_values(d)[np.broadcast_to(mask, self.shape)]
                    if vals.size == 0:
                        continue
                    lo, hi = int(vals.min()), int(vals.max())
            if (lo < 0 or hi >= dim_size) and self.dynamic:
                self._raise_indirect_out_of_bounds(d, lo, hi, mask, dynamic_values)
            if lo < 0 or hi >= dim_size:
                raise OutOfBoundsError(
                    f"Out-of-bound access for tensor `{self.name}` on dimension {d}: index range "
                    f"[{lo}, {hi}] exceed dimension size of {dim_size}",
                    expected=f"indices in [0, {dim_size - 1}]", got=f"[{lo}, {hi}]",
                    code="err_tensor_access_out_of_bound",
                    hint="restrict the access with mask= (legacy) or clamp the slice with min() (new)")

    def _raise_indirect_out_of_bounds(self, d, lo, hi, mask, dynamic_values) -> None:
        """A run-time index outside the tensor: IndirectIndexError naming the first such element (view order)
        by its flat position in the tensor, as NumPy's flat indexing in NKI's simulator does."""
        outside = ~self.in_range(dynamic_values)
        if mask is not None:
            outside &= np.broadcast_to(mask, self.shape)
        first = np.unravel_index(int(np.argmax(outside)), self.shape)
        flat = 0
        for dim, dim_size in enumerate(self.coords):
            flat = flat * dim_size + int(self.dim_positions(dim, dynamic_values)[first])
        raise IndirectIndexError(
            f"Out-of-bound access for tensor `{self.name}` on dimension {d}: run-time index range [{lo}, {hi}] "
            f"exceeds dimension size of {self.coords[d]}", flat_index=flat, size=math.prod(self.coords),
            expected=f"indices in [0, {self.coords[d] - 1}]", got=f"[{lo}, {hi}]",
            code="err_tensor_access_out_of_bound",
            hint="keep run-time indices in range, or pass oob_mode=nisa.oob_mode.skip to skip them")

    def in_bounds(self) -> bool:
        """True if every element is inside the tensor (always False for indirect views)."""
        if self._inb is None:
            ranges = (self._geo or self._geometry())[0]
            self._inb = not self.dynamic and all(
                0 <= lo and hi < dim_size for (lo, hi), dim_size in zip(ranges, self.coords))
        return self._inb

    def covers_all(self) -> bool:
        """True if the direct view addresses every element of its storage exactly once, in row-major order
        (cached: a write asks whether it may skip poisoning, PSUM flag updates whether one value does)."""
        if self._all is None:
            self._all = self._covers_all()
        return self._all

    def _covers_all(self) -> bool:
        if self.dynamic or self.offset or self.size != self.storage.size or not self.in_bounds():
            return False
        expect = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    # -- element addressing -------------------------------------------------------------------------------
    def np_view(self) -> np.ndarray:
        """The NumPy view of an in-bounds, direct view (shares memory with the storage). One of a part of the
        storage is made once per layout (`_Layout`) and kept by the storage (`Storage.arrays`), since a kernel's
        loops take the same slices again and again (`rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512]` for every
        m): views of one layout of one storage address the same elements, and the array is only ever indexed
        into, never changed itself. `VIEW_ARRAYS = False`: one array per view (tests/sim/test_view_arrays.py)."""
        if self._np is None:
            st = self.storage
            arr = st._array
            if arr is None:
                arr = st.array                   # made now (poisoned, shape-only: None)
            if self._all:                        # all of the storage in row-major order (covers_all, as known)
                self._np = arr.reshape(self.shape)
            else:
                layout = self._layout
                if layout is None or not VIEW_ARRAYS:
                    self._np = self._strided(arr)
                else:
                    arrays = st.arrays
                    if arrays is None:
                        arrays = st.arrays = {}
                    got = arrays.get(layout)
                    if got is None:
                        if len(arrays) >= 4096:
                            arrays.clear()
                        got = arrays[layout] = self._strided(arr)
                    self._np = got
        return self._np

    def _strided(self, arr: np.ndarray) -> np.ndarray:
        """The NumPy view of this view's elements of its storage's array `arr`."""
        # positional arguments: NumPy parses keywords of its constructor at some three times the cost
        _, strides, offset = self._geo or self._geometry()
        it = arr.itemsize
        return np.ndarray(self.shape, arr.dtype, arr, offset * it, _byte_strides(strides, it))

    def flat_offsets(self, dynamic_values=None) -> np.ndarray:
        """Flat storage offsets of every element (for gathers/scatters and indirect views)."""
        ss = row_major_strides(self.coords)
        out = strided_offsets(self.shape, self.strides, self.offset)
        for term, v in zip(self.dynamic, dynamic_values or ()):
            step = sum(c * s for c, s in zip(term.coeffs, ss))
            out = out + step * v
        return out

    def extent(self) -> tuple[int, int, int, int]:
        """(first partition, partition count, first byte, end byte) the view touches: the partitions on chip
        (0, 1 in HBM), and the [start, end) byte offsets within each partition on chip, or within the tensor
        in HBM. Cached like the geometry, since every event reads it."""
        return self._extent or self._extents()

    def _extents(self) -> tuple[int, int, int, int]:
        ranges = (self._geo or self._geometry())[0]
        dynamic = self.dynamic
        run_time_dims = tuple(d for d in range(len(self.coords)) if any(t.coeffs[d] for t in dynamic)) \
            if dynamic else ()
        self._extent = _extent_of(self.coords, self.is_on_chip, self.storage.dtype.itemsize, ranges, run_time_dims)
        return self._extent

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, shape={self.shape}, dtype={self.dtype}, {self.buffer!r})"


def slice_params(k: slice, n: int) -> tuple[int, int, int]:
    """(start, length, step) of a slice over an axis of size n. Negative start/stop count from the end;
    bounds are not clamped (a slice past the end is an out-of-bounds access, reported when used)."""
    step = 1 if k.step is None else as_int(k.step, "a slice step")
    if step < 1:
        raise ShapeError("slice steps must be positive", got=step)
    start = 0 if k.start is None else as_int(k.start, "a slice start")
    stop = n if k.stop is None else as_int(k.stop, "a slice stop")
    if start < 0:
        start += n
    if stop < 0:
        stop += n
    length = max(0, -(-(stop - start) // step))
    return start, length, step
