"""Language layer (new generation, NKI 0.7): tile and block grids, `nl.tiles` / `nl.blocks` views, the
`nl.alloc_tiles` / `nl.alloc_blocks` layouts, shard slices and grid keys (docs: nki.language.tiles, blocks,
alloc_tiles, alloc_blocks, empty_like, contiguous_indices, interleaved_indices, grid_element_offset, NkiGrid,
NkiTileGrid, NkiBlockGrid, v2.33 / latest; tutorials "Tile-grid fundamentals", "Block-grid fundamentals",
"Tile-grid indexing and transformations").

Imports errors, instructions (run-time integers), machine and language core. A grid is a view: it navigates
a backing tensor in tile (or block) coordinates, allocates nothing and issues nothing; `.data` is the plain
NkiTensor view of its selection, which instructions take.

  * `tile_shape` applies to the trailing dimensions; leading untiled dimensions (HBM only) are indexed one
    element slab at a time. A grid's `shape` counts cells (tiles, or blocks of `block_shape` tiles) along the
    dimensions not yet consumed by integer indexing; final cells are kept and clamped to the exact extent.
  * Each source dimension holds a run of `count` cells of `cell` elements, `gap` cells apart (1: adjacent;
    a positive-step slice such as `nl.interleaved_indices` makes a gapped view), clamped at `end`.
    `index_step_elements` is `cell * gap`; `element_shape` counts the selected elements (gaps excluded).
  * `nl.tiles(x)` / `nl.blocks(x)` over a tensor: element (i, j) is the tensor's (i, j).
  * `nl.alloc_tiles` / `nl.alloc_blocks` in HBM: one compact tensor of the logical extent. In SBUF / PSUM
    (2-D tiles): the dense rank-two layout, one tile's partitions by every tile side by side along the
    free dimension, tiles in row-major grid order (storage `[tile_p, n_tiles, tile_f]`): tile (r, c) lives at
    free byte offset `(r * n_cols + c) * tile_f * itemsize`, so tiles that would need more than 128
    partitions as one tensor still fit, and the cost model sees each tile at its own address. Blocks group
    tiles without changing that order. [decision: the docs name the layout "dense rank-two capacity layout"
    without a byte map; this is the map that keeps every tile a plain [tile_p, tile_f] view.]
  * `.data` is representable (`is_data_representable`) when the selection is one view of the backing
    storage: in the plain layout always, except a gapped dimension whose last selected cell is partial; in the
    on-chip tile layout, a selection inside one tile row: any run of its columns (the row's tiles are
    consecutive along the free dimension), or whole tiles `gap` apart. Otherwise `.data` is an error naming the grid. [decision: the docs say `.data`
    "preserves those gaps in the native access pattern" without its shape; a gapped dimension shows as two
    axes, (cells, cell elements), so `.data` has `element_shape`'s element count in its row-major order, which
    is what a DMA into dense storage (`nl.empty_like`) pairs element by element.]
  * Run-time keys (tutorial "Tile-grid indexing"): a `(1, 1)` int32 / uint32 SBUF tensor, an `NkiScalar` or a
    `VirtualRegister` is one tile (or block) coordinate; `nl.grid_element_offset(v)` is the same in source
    elements; a `(K, 1)` SBUF integer tensor on the leading dimension of an HBM grid selects K rows (element
    rows, one per partition: a gather). The key consumes its dimension. A run-time cell has the nominal cell
    extent (`min(cell, extent)`): its bounds are the DMA's to check, as on hardware. [decision: the docs leave
    the clamping of a run-time partial cell to the kernel.] One run-time key per selection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from opennki._src import core
from opennki.errors import DtypeError, OutOfBoundsError, ShapeError, UnsupportedError, expect
from opennki.instructions.registers import RuntimeInt
from opennki.machine.memory import MemoryRegion
from opennki.machine.tensor import TensorView
from opennki.releases import added_in
from opennki.sim.program import active

TRANSPOSE_ORDERS = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}     # dma_transpose's permutations by rank


def _since_0_7(api: str) -> None:
    """The grid APIs came with NKI 0.7 ("tiled/blocked on-chip memory layout APIs", SDK 2.33 release notes):
    under an explicit earlier `api_version` they do not exist."""
    prog = active()
    if prog is not None:
        added_in("0.7", api, prog.options)


def _shape_arg(value, role: str, api: str, min_rank: int = 1) -> tuple:
    if not (isinstance(value, tuple) and all(type(v) is int for v in value)):
        raise DtypeError(f"{api}: {role} must be a tuple of Python ints", got=value, instruction=api)
    expect(len(value) >= min_rank, f"{api}: {role} needs at least {min_rank} dimensions", got=value,
           error=ShapeError)
    expect(all(v > 0 for v in value), f"{api}: every entry of {role} must be positive", got=value, error=ShapeError)
    return value


def _exact_int(value, role: str, api: str) -> int:
    if type(value) is not int:
        raise DtypeError(f"{api}: {role} must be an exact Python int (not a bool or an int subclass)",
                         got=type(value).__name__, instruction=api)
    return value


def _shard_args(extent, shard_id, num_shards, api: str) -> tuple:
    _since_0_7(api)
    extent, shard_id, num_shards = (_exact_int(v, r, api) for v, r in
                                    ((extent, "extent"), (shard_id, "shard_id"), (num_shards, "num_shards")))
    expect(extent > 0, f"{api}: extent must be positive", got=extent, error=ShapeError)
    expect(0 < num_shards <= extent, f"{api}: num_shards must be in [1, extent] (no shard is empty)",
           expected=f"[1, {extent}]", got=num_shards, error=ShapeError)
    expect(0 <= shard_id < num_shards, f"{api}: shard_id must be in [0, num_shards)", expected=f"[0, {num_shards})",
           got=shard_id, error=ShapeError)
    return extent, shard_id, num_shards


def contiguous_indices(extent, *, shard_id, num_shards) -> slice:
    """`nl.contiguous_indices`: shard `shard_id`'s run of [0, extent) cut into `num_shards` adjacent nonempty
    slices whose sizes differ by at most one, the lower shards one longer (10 by 3: 0:4, 4:7, 7:10).

    Raises:
        DtypeError (a TypeError): an argument is not an exact int (a bool, an int subclass, a float).
        ShapeError (a ValueError): extent < 1, num_shards outside [1, extent], shard_id outside [0, num_shards).
    """
    extent, shard_id, num_shards = _shard_args(extent, shard_id, num_shards, "nl.contiguous_indices")
    size, extra = divmod(extent, num_shards)
    start = shard_id * size + min(shard_id, extra)
    return slice(start, start + size + (shard_id < extra))


def interleaved_indices(extent, *, shard_id, num_shards) -> slice:
    """`nl.interleaved_indices`: shard `shard_id`'s round-robin coordinates of [0, extent),
    `slice(shard_id, extent, num_shards)` (on a grid, a gapped view). Raises as `contiguous_indices`."""
    extent, shard_id, num_shards = _shard_args(extent, shard_id, num_shards, "nl.interleaved_indices")
    return slice(shard_id, extent, num_shards)


class GridElementOffset:
    """`nl.grid_element_offset(offset)`'s marker: a grid key in source elements (not scaled by the step)."""

    __slots__ = ("offset",)

    def __init__(self, offset):
        self.offset = offset

    def __repr__(self) -> str:
        return f"grid_element_offset({self.offset!r})"


def grid_element_offset(offset) -> GridElementOffset:
    """`nl.grid_element_offset(offset)`: the grid key `offset` in source-element units, relative to the view.
    A static offset must be a nonnegative int, aligned to the view's step and inside it (checked when used);
    a run-time one an int32 / uint32 `(1, 1)` SBUF tensor, an `NkiScalar` or a `VirtualRegister`.

    Raises:
        DtypeError (a TypeError): a bool, or a value of another kind.
        ShapeError (a ValueError): a negative static offset, or a run-time tensor that is not (1, 1).
    """
    api = "nl.grid_element_offset"
    _since_0_7(api)
    if isinstance(offset, (bool, np.bool_)):
        raise DtypeError(f"{api}: an offset cannot be a bool", got=offset, instruction=api)
    if isinstance(offset, (int, np.integer)):
        expect(int(offset) >= 0, f"{api}: a static offset must be nonnegative", got=int(offset), error=ShapeError)
        return GridElementOffset(int(offset))
    if isinstance(offset, RuntimeInt):
        return GridElementOffset(offset)
    if isinstance(offset, TensorView):
        expect(offset.size == 1, f"{api}: a run-time offset tensor must be scalar-shaped (1, 1)", got=offset.shape,
               error=ShapeError)
        _runtime_tensor(offset, api)
        return GridElementOffset(offset)
    raise DtypeError(f"{api}: offset must be an int, an SBUF integer tensor, an NkiScalar or a VirtualRegister",
                     got=type(offset).__name__, instruction=api)


def _runtime_tensor(t: TensorView, api: str) -> None:
    expect(t.buffer is MemoryRegion.sbuf and t.dtype.name in ("int32", "uint32"), f"{api}: a run-time index "
           "tensor is an int32 or uint32 SBUF tensor", got=(t.buffer.name, t.dtype.name), error=DtypeError)


@dataclass(frozen=True)
class _Axis:
    """One source dimension of a selection: `count` cells of `cell` elements starting at element `lo`, `gap`
    cells apart, clamped at element `end`."""

    lo: int
    count: int
    cell: int
    end: int
    gap: int = 1

    def extent(self, k: int) -> int:
        """Elements of the k-th selected cell."""
        return min(self.cell, self.end - (self.lo + k * self.gap * self.cell))

    @property
    def elements(self) -> int:
        if self.gap == 1:
            return min(self.lo + self.count * self.cell, self.end) - self.lo
        return sum(self.extent(k) for k in range(self.count))

    @property
    def hi(self) -> int:
        """One past the last selected element."""
        return self.lo + (self.count - 1) * self.gap * self.cell + self.extent(self.count - 1)

    @property
    def step(self) -> int:
        return self.cell * self.gap

    @property
    def is_gapped(self) -> bool:
        return self.gap > 1 and self.count > 1

    def take(self, start: int, count: int, stride: int = 1) -> "_Axis":
        return replace(self, lo=self.lo + start * self.step, count=count, gap=self.gap * stride if count > 1 else 1)


@dataclass(frozen=True)
class _RuntimeKey:
    """A run-time key on source dimension `dim`: `value` (a (1, 1) tensor or a RuntimeInt) times `unit`
    elements, or (`rows`) a (K, 1) tensor of element rows."""

    dim: int
    value: object
    unit: int
    rows: bool = False


class _Layout:
    """Where a grid's elements live: `tensor` itself (plain) or the on-chip tile layout of alloc_tiles
    (`tiled_by`: tensor is [tile_p, n_tiles, tile_f] for a logical extent `extent`)."""

    def __init__(self, tensor, extent, tiled_by=None):
        self.tensor = tensor
        self.extent = tuple(extent)
        self.tiled_by = tiled_by         # the 2-D tile shape of the on-chip layout, else None

    def view(self, axes):
        """The tensor view of the selection `axes` (one _Axis per dimension), or None if no single view holds
        it. A gapped dimension gives two axes (cells, cell elements)."""
        if any(a.is_gapped and a.extent(a.count - 1) != a.cell for a in axes):
            return None                  # cells of two sizes: no one stride pattern
        if self.tiled_by is None:
            return self._plain(axes)
        rows, cols = axes
        tp, tf = self.tiled_by
        n_cols = math.ceil(self.extent[1] / tf)
        row = rows.lo // tp
        if (rows.hi - 1) // tp != row or rows.is_gapped:
            return None                  # rows of two tile rows never share partitions
        p0, p1 = rows.lo - row * tp, rows.hi - row * tp
        c0, c1 = cols.lo // tf, (cols.hi - 1) // tf
        first = row * n_cols + c0
        f0 = cols.lo - c0 * tf
        if c0 == c1:
            return self.tensor[p0:p1, first, f0:f0 + (cols.hi - cols.lo)]
        if cols.is_gapped:
            if cols.cell != tf or f0:
                return None              # gapped blocks of several tiles: no one stride between tiles
            return self.tensor[p0:p1, first:first + (cols.count - 1) * cols.gap + 1:cols.gap, :]
        # the tiles of one tile row are consecutive along the free dimension: any run of columns is one view
        run = self.tensor[p0:p1, first:first + c1 - c0 + 1, :].reshape((p1 - p0, (c1 - c0 + 1) * tf))
        return run[:, f0:f0 + (cols.hi - cols.lo)]

    def _plain(self, axes):
        view = self.tensor[tuple(slice(a.lo, a.hi) for a in axes)]
        at = 0
        for a in axes:
            if a.is_gapped and a.cell == 1:
                view = view[(slice(None),) * at + (slice(None, None, a.gap),)]
            elif a.is_gapped:
                if view.is_on_chip and at == 0:
                    return None          # the partition dim cannot be split
                span = (a.count - 1) * a.gap + 1
                view = view.reshape_dim(at, (span, a.cell))[(slice(None),) * at + (slice(None, None, a.gap),)]
                at += 1
            at += 1
        return view


class NkiGrid:
    """`nl.NkiGrid`: the common interface of NkiTileGrid and NkiBlockGrid (module docstring).

    Attributes:
        tile_shape: source elements per tile (trailing dimensions).
        block_shape: tiles per block (NkiBlockGrid only).
    """

    block_shape = None

    def __init__(self, layout, tile_shape, axes, dims, block_shape=None, runtime=None):
        self._layout = layout
        self.tile_shape = tuple(tile_shape)
        if block_shape is not None:
            self.block_shape = tuple(block_shape)
        self._axes, self._dims, self._runtime = tuple(axes), tuple(dims), runtime

    # -- geometry ------------------------------------------------------------------------------------------
    @property
    def _prefix(self) -> int:
        return len(self._axes) - len(self.tile_shape)

    @property
    def shape(self) -> tuple:
        """Cells along each dimension not consumed by integer indexing."""
        return tuple(self._axes[d].count for d in self._dims)

    @property
    def element_shape(self) -> tuple:
        """Selected elements along every source dimension (clamped to the exact extent, gaps excluded)."""
        shape = [a.elements for a in self._axes]
        if self._runtime is not None:
            key = self._runtime
            shape[key.dim] = key.value.shape[0] if key.rows else min(self._axes[key.dim].cell,
                                                                     self._layout.extent[key.dim])
        return tuple(shape)

    @property
    def index_step_elements(self) -> tuple:
        """Source elements one grid coordinate moves along each remaining dimension (the gap included)."""
        return tuple(self._axes[d].step for d in self._dims)

    @property
    def is_remainder(self) -> bool:
        """The selection ends in a partial (clamped) tile or block along some tiled dimension."""
        return any(a.extent(a.count - 1) != a.cell for a in self._axes[self._prefix:])

    @property
    def dtype(self):
        return self._layout.tensor.dtype

    @property
    def buffer(self) -> MemoryRegion:
        return self._layout.tensor.buffer

    @property
    def is_data_representable(self) -> bool:
        return self._view() is not None

    @property
    def data(self) -> TensorView:
        """The selection as one NkiTensor operand (`element_shape`'s elements; a gapped dimension as two axes)."""
        view = self._view()
        if view is None:
            raise UnsupportedError(f"{self!r}: no single access pattern covers this selection (tiles of two rows "
                                   "of an on-chip tile layout, a part of a tile, or gapped cells of two sizes)",
                                   got=self.element_shape,
                                   hint="index one tile (or whole tiles of one tile row) and use its .data")
        return view

    def _view(self):
        key = self._runtime
        if key is None:
            return self._layout.view(self._axes)
        axes = list(self._axes)
        if key.rows:
            axes[key.dim] = _Axis(0, 1, self._layout.extent[key.dim], self._layout.extent[key.dim])
            view = self._layout.view(axes)
            return None if view is None else view.vector_select(key.dim, key.value)
        a = axes[key.dim]
        axes[key.dim] = replace(a, count=1, gap=1, end=a.lo + min(a.cell, self._layout.extent[key.dim]))
        view = self._layout.view(axes)
        if view is None:
            return None
        if isinstance(key.value, RuntimeInt):
            value = 0 if key.value.is_unknown else key.value.index("grid key")
            return view._shifted(key.dim, value * key.unit)
        return view._shifted(key.dim, key.unit, by=key.value)

    def _check_runtime(self, d: int, k) -> None:
        """Where a run-time key can move a selection: any dimension of a plain HBM grid; on chip the free
        dimensions of a plain layout, or the tile columns of an alloc_tiles layout (tiles of one tile row sit
        side by side); an NkiScalar on chip is int32 (docs: nki.language.grid_element_offset)."""
        layout = self._layout
        if layout.tensor.is_on_chip:
            expect(d > 0, "a run-time key cannot move an on-chip selection across partitions", got=d,
                   error=UnsupportedError)
            if isinstance(k, RuntimeInt) and hasattr(k, "dtype"):
                expect(k.dtype.itemsize == 4, "an NkiScalar key of an SBUF grid is int32", got=k.dtype,
                       error=DtypeError)

    # -- navigation ----------------------------------------------------------------------------------------
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        expect(len(key) <= len(self._dims), f"{type(self).__name__} has {len(self._dims)} dimensions",
               got=len(key), error=OutOfBoundsError)
        axes, dims, runtime = list(self._axes), [], self._runtime
        for pos, d in enumerate(self._dims):
            k = key[pos] if pos < len(key) else slice(None)
            a = axes[d]
            if isinstance(k, slice):
                start, stop, stride = k.indices(a.count)
                expect(stride > 0, "grid slices take a positive step", got=k, error=UnsupportedError)
                count = len(range(start, stop, stride))
                expect(count > 0, "a grid slice selects at least one cell", got=k, error=OutOfBoundsError)
                axes[d] = a.take(start, count, stride)
                dims.append(d)
                continue
            unit = a.step
            if isinstance(k, GridElementOffset):
                k, unit = k.offset, 1
                if isinstance(k, int):
                    expect(k % a.step == 0 and k // a.step < a.count, "a static grid_element_offset must be "
                           "aligned to the view's step and inside it", expected=f"multiples of {a.step} below "
                           f"{a.count * a.step}", got=k, error=OutOfBoundsError)
                    k = k // a.step
            if isinstance(k, (RuntimeInt, TensorView)):
                expect(runtime is None, "a grid selection takes one run-time key", got=k, error=UnsupportedError)
                runtime = self._runtime_key(d, k, unit)
                axes[d] = a.take(0, 1)
                continue
            expect(isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)),
                   "grids are indexed with ints, slices, nl.grid_element_offset(...) and run-time index tensors",
                   got=type(k).__name__, error=DtypeError)
            start = int(k) + a.count if int(k) < 0 else int(k)
            expect(0 <= start < a.count, f"grid index out of range along dimension {pos}", expected=f"[0, {a.count})",
                   got=int(k), error=OutOfBoundsError)
            axes[d] = a.take(start, 1)
        return type(self)(self._layout, self.tile_shape, axes, dims, self.block_shape, runtime)

    def _runtime_key(self, d: int, k, unit: int) -> _RuntimeKey:
        api = f"{type(self).__name__}[...]"
        self._check_runtime(d, k)
        if isinstance(k, RuntimeInt):
            return _RuntimeKey(d, k, unit)
        _runtime_tensor(k, api)
        if k.size == 1:
            return _RuntimeKey(d, k, unit)
        expect(k.size == k.shape[0], f"{api}: a vector key holds one row index per partition (K, 1)",
               got=k.shape, error=ShapeError)
        expect(d == 0 and not self._layout.tensor.is_on_chip and unit != 1, f"{api}: a vector key selects rows of "
               "the leading dimension of an HBM grid", got=(d, self.buffer.name), error=UnsupportedError)
        return _RuntimeKey(d, k, 1, rows=True)

    def __iter__(self):
        for i in range(self.shape[0]):
            yield self[i]

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        blocks = f", block_shape={self.block_shape}" if self.block_shape is not None else ""
        return (f"{type(self).__name__}(shape={self.shape}, tile_shape={self.tile_shape}{blocks}, "
                f"element_shape={self.element_shape})")


class NkiTileGrid(NkiGrid):
    """`nl.NkiTileGrid`: a tensor view navigated in tile coordinates."""


class NkiBlockGrid(NkiGrid):
    """`nl.NkiBlockGrid`: a tensor view navigated in block coordinates (`block_shape` tiles per block)."""


def _axes_of(extent, tile_shape, block_shape) -> list:
    """The whole-extent selection of a grid with these cells."""
    prefix = len(extent) - len(tile_shape)
    cells = [1] * prefix + [t * (block_shape[k] if block_shape is not None else 1) for k, t in enumerate(tile_shape)]
    return [_Axis(0, math.ceil(n / c), c, n) for n, c in zip(extent, cells)]


def _grid(cls, source, tile_shape, block_shape, api: str):
    _since_0_7(api)
    if block_shape is not None:
        block_shape = _shape_arg(block_shape, "block_shape", api)
    if isinstance(source, NkiGrid):
        tile_shape = source.tile_shape if tile_shape is None else _shape_arg(tile_shape, "tile_shape", api, 2)
        if source._layout.tiled_by is not None and tile_shape != source.tile_shape:
            raise UnsupportedError(f"{api}: an on-chip tile layout keeps the tile shape it was allocated with",
                                   expected=source.tile_shape, got=tile_shape)
        expect(len(tile_shape) == len(source.tile_shape), f"{api}: tile_shape keeps the grid's tiled dimensions",
               expected=len(source.tile_shape), got=tile_shape, error=ShapeError)
        expect(source._runtime is None and not any(a.is_gapped for a in source._axes), f"{api}: regrouping a "
               "selection with a run-time key or gapped cells", got=source, error=UnsupportedError)
        layout, bounds = source._layout, [(a.lo, a.hi) for a in source._axes]
    else:
        expect(isinstance(source, TensorView), f"{api} takes an NkiTensor or a grid", got=type(source).__name__,
               error=DtypeError)
        expect(tile_shape is not None, f"{api} over a tensor needs tile_shape", error=ShapeError)
        tile_shape = _shape_arg(tile_shape, "tile_shape", api, 2)
        expect(len(tile_shape) <= source.ndim, f"{api}: tile_shape has more dimensions than the tensor",
               expected=f"<= {source.ndim}", got=tile_shape, error=ShapeError)
        expect(len(tile_shape) == source.ndim or not source.is_on_chip, f"{api}: only HBM tensors have untiled "
               "leading dimensions; tile every dimension of an on-chip tensor", got=tile_shape, error=ShapeError)
        layout, bounds = _Layout(source, source.shape), [(0, n) for n in source.shape]
    if block_shape is not None:
        expect(len(block_shape) == len(tile_shape), f"{api}: block_shape has one entry per tiled dimension",
               expected=len(tile_shape), got=block_shape, error=ShapeError)
    axes = [replace(a, lo=a.lo + lo, end=a.end + lo) for a, (lo, hi) in
            zip(_axes_of([hi - lo for lo, hi in bounds], tile_shape, block_shape), bounds)]
    return cls(layout, tile_shape, axes, range(len(axes)), block_shape)


def tiles(source, *, tile_shape=None) -> NkiTileGrid:
    """`nl.tiles(source, tile_shape=...)`: `source` (a tensor, or a grid whose tile shape is reused: a block's
    interior tiles) as a grid of tiles."""
    return _grid(NkiTileGrid, source, tile_shape, None, "nl.tiles")


def blocks(source, *, tile_shape=None, block_shape) -> NkiBlockGrid:
    """`nl.blocks(source, tile_shape=..., block_shape=...)`: a grid of blocks of `block_shape` tiles."""
    return _grid(NkiBlockGrid, source, tile_shape, block_shape, "nl.blocks")


def _allocate(cls, tile_shape, element_shape, buffer, dtype, address, name, block_shape, api):
    _since_0_7(api)
    tile_shape = _shape_arg(tile_shape, "tile_shape", api, 2)
    element_shape = _shape_arg(element_shape, "element_shape", api)
    expect(len(tile_shape) <= len(element_shape), f"{api}: tile_shape has more dimensions than element_shape",
           expected=f"<= {len(element_shape)}", got=tile_shape, error=ShapeError)
    if not isinstance(buffer, MemoryRegion):
        raise DtypeError(f"{api}: buffer must be an NKI MemoryRegion (nl.sbuf, nl.psum, nl.shared_hbm, ...)",
                         got=buffer, instruction=api)
    if buffer in (MemoryRegion.sbuf, MemoryRegion.psum):
        expect(len(tile_shape) == len(element_shape), f"{api}: on-chip storage tiles every dimension",
               expected=len(element_shape), got=tile_shape, error=ShapeError)
        pmax = core.current(api).hw.memory.partitions
        expect(tile_shape[0] <= pmax, f"{api}: a tile spans at most {pmax} partitions", got=tile_shape[0],
               error=ShapeError)
    if buffer in (MemoryRegion.sbuf, MemoryRegion.psum) and len(tile_shape) == 2:
        tp, tf = tile_shape
        count = math.ceil(element_shape[0] / tp) * math.ceil(element_shape[1] / tf)
        storage = core.alloc((tp, count, tf), dtype, buffer, name or None, address=address)
        layout = _Layout(storage, element_shape, tiled_by=tile_shape)
    else:
        storage = core.alloc(element_shape, dtype, buffer, name or None, address=address)
        layout = _Layout(storage, element_shape)
    from opennki._src.blocks import declared
    declared(storage)
    return cls(layout, tile_shape, _axes_of(element_shape, tile_shape, block_shape), range(len(element_shape)),
               block_shape)


def alloc_tiles(*, tile_shape, element_shape, buffer, dtype, address=None, name="") -> NkiTileGrid:
    """`nl.alloc_tiles`: new uninitialised storage as a grid of tiles (layout in the module docstring)."""
    return _allocate(NkiTileGrid, tile_shape, element_shape, buffer, dtype, address, name, None, "nl.alloc_tiles")


def alloc_blocks(*, tile_shape, block_shape, element_shape, buffer, dtype, address=None, name="") -> NkiBlockGrid:
    """`nl.alloc_blocks`: alloc_tiles' storage navigated in blocks of `block_shape` tiles."""
    block_shape = _shape_arg(block_shape, "block_shape", "nl.alloc_blocks")
    expect(len(block_shape) == len(tile_shape), "nl.alloc_blocks: block_shape has one entry per tiled dimension",
           expected=len(tile_shape), got=block_shape, error=ShapeError)
    return _allocate(NkiBlockGrid, tile_shape, element_shape, buffer, dtype, address, name, block_shape,
                     "nl.alloc_blocks")


def transposed_shape(shape, axes, api: str) -> tuple:
    """`shape` permuted by `transpose_axes` (dma_transpose's orders, by rank)."""
    expect(isinstance(axes, tuple) and TRANSPOSE_ORDERS.get(len(shape)) == axes, f"{api}: transpose_axes must be "
           "dma_transpose's order for the rank: (1, 0), (2, 1, 0) or (3, 1, 2, 0)",
           expected=TRANSPOSE_ORDERS.get(len(shape)), got=axes, error=ShapeError)
    return tuple(shape[a] for a in axes)


def empty_like_grid(grid: NkiGrid, dtype=None, buffer=None, name="", transpose_axes=None, address=None):
    """`nl.empty_like(grid)`: new storage with the grid's geometry: its concrete type, navigation shape, tile
    and block shapes and exact (clamped) extents; gapped cells are packed densely. `transpose_axes` (for a later
    `nisa.dma_transpose`) permutes the tiled dimensions, so a tile of (P, F) becomes (F, P): the new partition
    extent (the source's free extent) must fit the partitions."""
    api = "nl.empty_like"
    dtype = grid.dtype if dtype is None else dtype
    buffer = grid.buffer if buffer is None else buffer
    tile_shape, element_shape, block_shape = grid.tile_shape, grid.element_shape, grid.block_shape
    dims = grid._dims
    if transpose_axes is not None:
        expect(grid._prefix == 0, f"{api}: transpose_axes needs a grid without untiled dimensions",
               got=grid.element_shape, error=ShapeError)
        tile_shape = transposed_shape(tile_shape, transpose_axes, api)
        element_shape = transposed_shape(element_shape, transpose_axes, api)
        block_shape = None if block_shape is None else transposed_shape(block_shape, transpose_axes, api)
        dims = tuple(sorted(transpose_axes.index(d) for d in dims))
        pmax = core.current(api).hw.memory.partitions
        expect(buffer is not MemoryRegion.sbuf or min(tile_shape[0], element_shape[0]) <= pmax,
               f"{api}: the transposed partition extent (the source's free extent) exceeds {pmax}",
               got=tile_shape[0], error=ShapeError)
    if block_shape is not None:
        new = alloc_blocks(tile_shape=tile_shape, block_shape=block_shape, element_shape=element_shape,
                           buffer=buffer, dtype=dtype, address=address, name=name)
    else:
        new = alloc_tiles(tile_shape=tile_shape, element_shape=element_shape, buffer=buffer, dtype=dtype,
                          address=address, name=name)
    new._dims = tuple(dims)
    return new


__all__ = ["NkiGrid", "NkiTileGrid", "NkiBlockGrid", "tiles", "blocks", "alloc_tiles", "alloc_blocks",
           "empty_like_grid", "contiguous_indices", "interleaved_indices", "grid_element_offset",
           "GridElementOffset"]
