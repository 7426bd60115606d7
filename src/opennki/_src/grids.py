"""Language layer (new generation, NKI 0.7): tile and block grids, `nl.tiles` / `nl.blocks` views and the
`nl.alloc_tiles` / `nl.alloc_blocks` layouts (docs: nki.language.tiles, blocks, alloc_tiles, alloc_blocks,
NkiGrid, NkiTileGrid, NkiBlockGrid, v2.33; "Tile-grid fundamentals", "Block-grid fundamentals").

Imports errors, machine and language core. A grid is a view: it navigates a backing tensor in tile (or block)
coordinates, allocates nothing and issues nothing; `.data` is the plain NkiTensor view of its selection,
which instructions take.

  * `tile_shape` applies to the trailing dimensions; leading untiled dimensions (HBM only) are indexed one
    element slab at a time. A grid's `shape` counts cells (tiles, or blocks of `block_shape` tiles) along the
    dimensions not yet consumed by integer indexing; final cells are kept and clamped to the exact extent.
  * `nl.tiles(x)` / `nl.blocks(x)` over a tensor: element (i, j) is the tensor's (i, j).
  * `nl.alloc_tiles` / `nl.alloc_blocks` in HBM: one compact tensor of the logical extent. In SBUF / PSUM
    (2-D tiles): the dense rank-two layout, one tile's partitions by every tile side by side along the
    free dimension, tiles in row-major grid order (storage `[tile_p, n_tiles, tile_f]`): tile (r, c) lives at
    free byte offset `(r * n_cols + c) * tile_f * itemsize`, so tiles that would need more than 128
    partitions as one tensor still fit, and the cost model sees each tile at its own address. Blocks group
    tiles without changing that order. [decision: the docs name the layout "dense rank-two capacity layout"
    without a byte map; this is the map that keeps every tile a plain [tile_p, tile_f] view.]
  * `.data` is representable (`is_data_representable`) when the selection is one view of the backing
    storage: always for the plain layout; in the on-chip tile layout, a selection inside one tile row made
    of one tile, or of whole consecutive tiles of that row. Otherwise `.data` is an error naming the grid.
"""

from __future__ import annotations

import math

import numpy as np

from opennki._src import core
from opennki.errors import DtypeError, OutOfBoundsError, ShapeError, UnsupportedError, expect
from opennki.machine.memory import MemoryRegion
from opennki.machine.tensor import TensorView


def _shape_arg(value, role: str, api: str, min_rank: int = 1) -> tuple:
    if not (isinstance(value, tuple) and all(type(v) is int for v in value)):
        raise DtypeError(f"{api}: {role} must be a tuple of Python ints", got=value, instruction=api)
    expect(len(value) >= min_rank, f"{api}: {role} needs at least {min_rank} dimensions", got=value,
           error=ShapeError)
    expect(all(v > 0 for v in value), f"{api}: every entry of {role} must be positive", got=value, error=ShapeError)
    return value


class _Layout:
    """Where a grid's elements live: `tensor` itself (plain) or the on-chip tile layout of alloc_tiles
    (`tiled`: tensor is [tile_p, n_tiles, tile_f] for a logical extent `extent`)."""

    def __init__(self, tensor, extent, tiled_by=None):
        self.tensor = tensor
        self.extent = tuple(extent)
        self.tiled_by = tiled_by         # the 2-D tile shape of the on-chip layout, else None

    def view(self, lo, hi):
        """The tensor view of elements [lo, hi) per dimension, or None if no single view holds them."""
        if self.tiled_by is None:
            return self.tensor[tuple(slice(a, b) for a, b in zip(lo, hi))]
        tp, tf = self.tiled_by
        cols = math.ceil(self.extent[1] / tf)
        row = lo[0] // tp
        if (hi[0] - 1) // tp != row:
            return None                  # rows of two tile rows never share partitions
        p0, p1 = lo[0] - row * tp, hi[0] - row * tp
        c0, c1 = lo[1] // tf, (hi[1] - 1) // tf
        first = row * cols + c0
        if c0 == c1:
            f0 = lo[1] - c0 * tf
            return self.tensor[p0:p1, first, f0:f0 + (hi[1] - lo[1])]
        whole = lo[1] == c0 * tf and hi[1] == (c1 + 1) * tf
        if not whole:
            return None
        return self.tensor[p0:p1, first:first + c1 - c0 + 1, :].reshape((p1 - p0, hi[1] - lo[1]))


class NkiGrid:
    """`nl.NkiGrid`: the common interface of NkiTileGrid and NkiBlockGrid (module docstring).

    Attributes:
        tile_shape: source elements per tile (trailing dimensions).
        block_shape: tiles per block (NkiBlockGrid only).
    """

    block_shape = None

    def __init__(self, layout, tile_shape, lo, hi, dims, block_shape=None):
        self._layout = layout
        self.tile_shape = tuple(tile_shape)
        if block_shape is not None:
            self.block_shape = tuple(block_shape)
        self._lo, self._hi, self._dims = tuple(lo), tuple(hi), tuple(dims)

    # -- geometry ------------------------------------------------------------------------------------------
    @property
    def _prefix(self) -> int:
        return len(self._lo) - len(self.tile_shape)

    def _step(self, d: int) -> int:
        if d < self._prefix:
            return 1
        k = d - self._prefix
        return self.tile_shape[k] * (self.block_shape[k] if self.block_shape is not None else 1)

    @property
    def shape(self) -> tuple:
        """Cells along each dimension not consumed by integer indexing."""
        return tuple(math.ceil((self._hi[d] - self._lo[d]) / self._step(d)) for d in self._dims)

    @property
    def element_shape(self) -> tuple:
        """Selected elements along every source dimension (clamped to the exact extent)."""
        return tuple(b - a for a, b in zip(self._lo, self._hi))

    @property
    def index_step_elements(self) -> tuple:
        """Source elements one grid coordinate moves along each remaining dimension."""
        return tuple(self._step(d) for d in self._dims)

    @property
    def is_remainder(self) -> bool:
        """The selection ends in a partial (clamped) tile or block along some tiled dimension."""
        return any((self._hi[d] - self._lo[d]) % self._step(d) for d in range(self._prefix, len(self._lo)))

    @property
    def dtype(self):
        return self._layout.tensor.dtype

    @property
    def buffer(self) -> MemoryRegion:
        return self._layout.tensor.buffer

    @property
    def is_data_representable(self) -> bool:
        return self._layout.view(self._lo, self._hi) is not None

    @property
    def data(self) -> TensorView:
        """The selection as one NkiTensor operand (shape `element_shape`)."""
        view = self._layout.view(self._lo, self._hi)
        if view is None:
            raise UnsupportedError(f"{self!r}: this selection spans tiles of an on-chip tile layout that no single "
                                   "access pattern covers", got=self.element_shape,
                                   hint="index one tile (or whole tiles of one tile row) and use its .data")
        return view

    # -- navigation ----------------------------------------------------------------------------------------
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        expect(len(key) <= len(self._dims), f"{type(self).__name__} has {len(self._dims)} dimensions",
               got=len(key), error=OutOfBoundsError)
        lo, hi, dims = list(self._lo), list(self._hi), []
        for pos, d in enumerate(self._dims):
            k = key[pos] if pos < len(key) else slice(None)
            step = self._step(d)
            n = math.ceil((self._hi[d] - self._lo[d]) / step)
            if isinstance(k, slice):
                start, stop, stride = k.indices(n)
                expect(stride == 1, "grid slices take consecutive cells (step 1)", got=k, error=UnsupportedError)
                stop = max(stop, start)
                expect(stop > start, "a grid slice selects at least one cell", got=k, error=OutOfBoundsError)
                dims.append(d)
            else:
                expect(isinstance(k, (int, np.integer)) and not isinstance(k, bool),
                       "grids are indexed with static Python ints and slices", got=type(k).__name__,
                       error=DtypeError)
                start = int(k) + n if int(k) < 0 else int(k)
                expect(0 <= start < n, f"grid index out of range along dimension {pos}", expected=f"[0, {n})",
                       got=int(k), error=OutOfBoundsError)
                stop = start + 1
            lo[d], hi[d] = self._lo[d] + start * step, min(self._lo[d] + stop * step, self._hi[d])
        return type(self)(self._layout, self.tile_shape, lo, hi, dims, self.block_shape)

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


def _grid(cls, source, tile_shape, block_shape, api: str):
    if isinstance(source, NkiGrid):
        tile_shape = source.tile_shape if tile_shape is None else _shape_arg(tile_shape, "tile_shape", api, 2)
        if source._layout.tiled_by is not None and tile_shape != source.tile_shape:
            raise UnsupportedError(f"{api}: an on-chip tile layout keeps the tile shape it was allocated with",
                                   expected=source.tile_shape, got=tile_shape)
        expect(len(tile_shape) == len(source.tile_shape), f"{api}: tile_shape keeps the grid's tiled dimensions",
               expected=len(source.tile_shape), got=tile_shape, error=ShapeError)
        layout, lo, hi = source._layout, source._lo, source._hi
    else:
        expect(isinstance(source, TensorView), f"{api} takes an NkiTensor or a grid", got=type(source).__name__,
               error=DtypeError)
        expect(tile_shape is not None, f"{api} over a tensor needs tile_shape", error=ShapeError)
        tile_shape = _shape_arg(tile_shape, "tile_shape", api, 2)
        expect(len(tile_shape) <= source.ndim, f"{api}: tile_shape has more dimensions than the tensor",
               expected=f"<= {source.ndim}", got=tile_shape, error=ShapeError)
        expect(len(tile_shape) == source.ndim or not source.is_on_chip, f"{api}: only HBM tensors have untiled "
               "leading dimensions; tile every dimension of an on-chip tensor", got=tile_shape, error=ShapeError)
        layout, lo, hi = _Layout(source, source.shape), (0,) * source.ndim, source.shape
    if block_shape is not None:
        block_shape = _shape_arg(block_shape, "block_shape", api)
        expect(len(block_shape) == len(tile_shape), f"{api}: block_shape has one entry per tiled dimension",
               expected=len(tile_shape), got=block_shape, error=ShapeError)
    return cls(layout, tile_shape, lo, hi, range(len(lo)), block_shape)


def tiles(source, *, tile_shape=None) -> NkiTileGrid:
    """`nl.tiles(source, tile_shape=...)`: `source` (a tensor, or a grid whose tile shape is reused) as a
    grid of tiles."""
    return _grid(NkiTileGrid, source, tile_shape, None, "nl.tiles")


def blocks(source, *, tile_shape=None, block_shape) -> NkiBlockGrid:
    """`nl.blocks(source, tile_shape=..., block_shape=...)`: a grid of blocks of `block_shape` tiles."""
    return _grid(NkiBlockGrid, source, tile_shape, block_shape, "nl.blocks")


def _allocate(cls, tile_shape, element_shape, buffer, dtype, address, name, block_shape, api):
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
    return cls(layout, tile_shape, (0,) * len(element_shape), element_shape, range(len(element_shape)), block_shape)


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


def empty_like_grid(grid: NkiGrid, dtype=None, buffer=None, name=""):
    """`nl.empty_like(grid)`: new storage with the grid's geometry (its tile, block and element shapes)."""
    dtype = grid.dtype if dtype is None else dtype
    buffer = grid.buffer if buffer is None else buffer
    if grid.block_shape is not None:
        return alloc_blocks(tile_shape=grid.tile_shape, block_shape=grid.block_shape,
                            element_shape=grid.element_shape, buffer=buffer, dtype=dtype, name=name)
    return alloc_tiles(tile_shape=grid.tile_shape, element_shape=grid.element_shape, buffer=buffer, dtype=dtype,
                       name=name)


__all__ = ["NkiGrid", "NkiTileGrid", "NkiBlockGrid", "tiles", "blocks", "alloc_tiles", "alloc_blocks",
           "empty_like_grid"]
