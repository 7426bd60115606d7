"""Language layer: legacy on-chip tensors with block dimensions, `nl.ndarray((4, nl.par_dim(128), 512))`.

Imports sim (program), machine and errors. Dims before `nl.par_dim` are block dims: the tensor is a logical
array of independent `(P, F...)` tiles (spec/language.md §3.2). Block dims were deprecated in SDK 2.23 but
still work in the legacy generation, and the official samples (attention, pooling, every direct-allocation
kernel) rely on them, so opennki supports them.

With hardware-strict mode they raise `err_leading_dimension_of_tensor_must_be_partition`, the error the
compilers that removed them give.

A `BlockTensor` is not a tile: it must be indexed with an integer per block dim (`a[i]`, `a[i, i_p, i_f]`)
before a compute API can use it (`err_failed_to_infer_tile_from_local_tensor` otherwise); integers for only
the leading block dims (`a[h]` of a `(H, T, par_dim(P), F)` tensor) give the block tensor of the remaining
block dims, whose blocks are `a`'s blocks (as the legacy compiler allows).

Each logical block maps to a physical tile. With automatic allocation every block gets its own tile: in SBUF
one storage of shape `(P, n_blocks, F...)` holds them (block b at free position b), in PSUM every block is a
storage of its own. With direct allocation (`nki.compiler`) the allocator object places every block when the
tensor is declared, and blocks it places at the same (partition, address) share one physical tile (modulo
allocation: `num_free_tiles=(2,)` makes blocks 0, 2, 4... one tile).
"""

from __future__ import annotations

import math
import operator

from opennki.errors import KernelError, ShapeError
from opennki.events import MemoryKind
from opennki.instructions.vector import Memset
from opennki._src import core, dependencies
from opennki.machine.arguments import as_shape
from opennki.machine.memory import MemoryRegion
from opennki.sim import frames
from opennki.sim.frames import user_frame
from opennki.sim.program import active


def linearize(shape, index) -> int:
    """Row-major position of `index` in `shape`."""
    pos = 0
    for n, i in zip(shape, index):
        pos = pos * n + i
    return pos


class BlockTensor:
    """An on-chip tensor with block dims in front of its partition dim (module docstring).

    Args:
        blocks: the block dims.
        tile_shape: the shape of one tile, partition dim first.
        tile_of: function block index (tuple) -> the tile (an NkiTensor view) holding that block, or None with
            `root`.
        name: the tensor's name.
        root: None, or the root view of the one SBUF storage holding the blocks, block b (row-major position
            `first + linearize(blocks, b)`) at free position b: its tile is `root[:, b]`, and `blk[b, rest]` is
            made in one subscript of the storage (`_view`) where it can be (a tile's view in two subscripts was
            the slowest part of a blocked kernel's operands).
        first: with `root`, the storage position of block 0 (a sub-tensor's, `_sub`).
    """

    is_block_tensor = True

    def __init__(self, blocks: tuple[int, ...], tile_shape: tuple[int, ...], tile_of, dtype, buffer, name,
                 root=None, first=0):
        self.blocks = blocks
        self.tile_shape = tile_shape
        self._tile_of = tile_of
        self._root = root
        self._first = first
        # with `root`: block indices of exact ints (the key's leading entries) -> their storage position, filled by
        # `_split` once it checked them, so `blk[i, ...]` made again skips the checks and the position's sum
        self._positions = {}
        self._subs = {}         # leading block indices -> the sub-tensor of the remaining block dims (`_sub`)
        self.dtype = dtype
        self.buffer = buffer
        self.name = name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.blocks + self.tile_shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        return self.blocks[0]

    def _block_index(self, key) -> tuple[int, ...]:
        """The leading integers of `key` as (wrapped) block indices; at most one per block dim."""
        index = []
        for k, n in zip(key, self.blocks):
            try:
                i = operator.index(k)
            except TypeError:
                break
            if not -n <= i < n:
                raise ShapeError(f"block index {i} out of range for block dim of size {n} of {self.name!r}",
                                 expected=f"[0, {n - 1}]", got=i, code="err_tensor_access_out_of_bound")
            index.append(i % n)
        return tuple(index)

    def _split(self, key):
        """(the block index, the rest of the key)."""
        if not isinstance(key, tuple):
            key = (key,)
        nb = len(self.blocks)
        index = self._block_index(key)
        if len(index) < nb:
            raise KernelError(f"index the block dimensions of {self.name!r} with integers (loop variables, "
                              f"constants) before the tile dims (shape {self.shape}, {nb} block dims)", got=key,
                              code="err_failed_to_infer_tile_from_local_tensor")
        if self._root is not None and _INTS.issuperset(map(type, key[:nb])):
            self._positions[key[:nb]] = self._first + linearize(self.blocks, index)
        return index, key[nb:]

    def _position(self, key):
        """The storage position of the block `key` (a tuple) starts with, if `_split` found it before; else None."""
        lead = key[:len(self.blocks)]
        if _INTS.issuperset(map(type, lead)):       # hashable, and exactly what `_split` remembered
            return self._positions.get(lead)
        return None

    def _tile(self, index):
        root = self._root
        if root is None:
            return self._tile_of(index)
        return root[(slice(None), self._first + linearize(self.blocks, index))]

    def _view(self, position: int, rest):
        """`root[:, position][rest]` in one subscript, or None where it cannot be."""
        # root[:, b][rest] is root[rest[0], b, rest[1:]] for a rest of ints and slices no longer than the tile's
        # dims (plain_subscript: None for any other rest); the partition dim stays dim 0 either way
        if len(rest) <= len(self.tile_shape):
            return self._root.plain_subscript((rest[0], position) + rest[1:])
        return None

    def _memo_key(self, key: tuple):
        """The key of `blk[key]`'s layout in `_VIEWS` (with the root's layout, block dims and first position), for
        a block tensor with a root and a key of exact ints and of slices with exact int or None bounds and step;
        else None. `blk[key]` is a function of these alone (its storage aside: the root's), so the general path's
        view for such a key, once made, gives the layout of every later one: kernels make the same subscripts
        of their block tensors in every iteration (`blk[b, :, j * 128:(j + 1) * 128]`, an operand), and of new
        block tensors declared in a loop (`blk[b, :, :]`), and a subscript took four calls (`_position`, `_view`,
        `plain_subscript`'s reading of a key made anew for the storage, the view)."""
        root = self._root
        if root is None or root._layout is None:
            return None
        parts = [root._layout, self.blocks, self._first]
        for k in key:
            if type(k) is int:
                parts.append(k)
            elif type(k) is slice:
                start, stop, step = k.start, k.stop, k.step
                if ((start is None or type(start) is int) and (stop is None or type(stop) is int)
                        and (step is None or type(step) is int)):
                    parts.append((start, stop, step))
                else:
                    return None
            else:
                return None
        return tuple(parts)

    def __getitem__(self, key):
        """`a[i, j, ...]`: with an integer for every block dim, the tile (then indexed by the rest of the key);
        with integers for only the leading block dims (`a[i]` on a tensor of shape (H, T, P, F)), the block
        tensor of the remaining blocks, sharing `a`'s tiles (the samples pass such sub-tensors to helpers)."""
        if not isinstance(key, tuple):
            key = (key,)
        if not MEMO_VIEWS:
            return self._subscript(key)
        memo = self._memo_key(key)
        if memo is None:
            return self._subscript(key)
        layout = _VIEWS.get(memo)
        if layout is not None:
            root = self._root
            return layout.view(root.storage, type(root))
        view = self._subscript(key)
        if type(view) is not BlockTensor and view._layout is not None:
            _remember(memo, view._layout)
        return view

    def _subscript(self, key: tuple):
        """`self[key]`, the general path."""
        if self._root is not None:
            position = self._position(key)      # block indices this tensor met before (`_split`)
            if position is not None:
                rest = key[len(self.blocks):]
                if not rest:
                    return self._root.plain_subscript((_ALL, position))     # what `_tile` gives
                view = self._view(position, rest)
                if view is not None:
                    return view
        if len(key) < len(self.blocks):
            index = self._block_index(key)
            if index and len(index) == len(key):
                return self._sub(index)
        index, rest = self._split(key)
        if not rest:
            return self._tile(index)
        if self._root is not None:
            view = self._view(self._first + linearize(self.blocks, index), rest)
            if view is not None:
                return view
        return self._tile(index)[rest]

    def _sub(self, lead: tuple[int, ...]) -> BlockTensor:
        """The block tensor of the blocks `lead` leads (made once per lead: a helper called in a loop gets the
        same sub-tensor, and its remembered positions and views, every time)."""
        sub = self._subs.get(lead)
        if sub is not None and MEMO_VIEWS:
            return sub
        blocks = self.blocks[len(lead):]
        name = f"{self.name}{list(lead)}"
        if self._root is not None:
            first = self._first + linearize(self.blocks, lead + (0,) * len(blocks))
            sub = BlockTensor(blocks, self.tile_shape, None, self.dtype, self.buffer, name, self._root, first)
        else:
            def tile_of(index, outer=self._tile_of):
                return outer(lead + index)
            sub = BlockTensor(blocks, self.tile_shape, tile_of, self.dtype, self.buffer, name)
        self._subs[lead] = sub
        return sub

    def __setitem__(self, key, value):
        if not isinstance(key, tuple):
            key = (key,)
        memo = self._memo_key(key) if MEMO_VIEWS else None
        if memo is not None:
            layout = _VIEWS.get(memo)
            if layout is not None:          # `blk[key]`'s view (`__getitem__`), which the general path assigns
                root = self._root
                core.assign(layout.view(root.storage, type(root)), value)
                return
        position = None if self._root is None else self._position(key)
        if position is not None:
            tile = self._root.plain_subscript((_ALL, position))             # what `_tile` gives
            rest = key[len(self.blocks):]
        else:
            index, rest = self._split(key)
            tile = self._tile(index)
        if memo is None:
            tile[rest if rest else ...] = value
            return
        dst = tile.assigned_view(rest if rest else ...)     # what `tile[rest] = value` assigns into, remembered
        if dst._layout is not None:
            _remember(memo, dst._layout)
        core.assign(dst, value)

    def tiles(self):
        """Every distinct physical tile (for whole-tensor fills)."""
        seen, out = set(), []
        for flat in range(math.prod(self.blocks)):
            tile = self._tile(_unflatten(self.blocks, flat))
            key = (id(tile.storage), tile.offset)
            if key not in seen:
                seen.add(key)
                out.append(tile)
        return out

    def __repr__(self) -> str:
        return f"BlockTensor({self.name}, shape={self.shape}, dtype={self.dtype}, {self.buffer!r})"


_ALL = slice(None)
_INTS = frozenset((int,))
# False: every `blk[key]` is subscripted afresh and `blk[h]` makes a new sub-tensor (the plain path)
MEMO_VIEWS = True
_VIEWS: dict = {}       # `BlockTensor._memo_key` -> the layout of that subscript's view


def _remember(memo: tuple, layout) -> None:
    if len(_VIEWS) >= 1 << 15:
        _VIEWS.clear()
    _VIEWS[memo] = layout


class par_dim(int):
    """`nl.par_dim(n)`: marks the partition dim in a shape tuple; dims before it are block dims."""

    def __repr__(self):
        return f"par_dim({int(self)})"


STATE = "opennki._src.blocks"   # key of this module's per-program state (Program.state)


def split_shape(shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(block dims, tile shape) of a legacy shape; the tile starts at `nl.par_dim` (or at dim 0)."""
    raw = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    marks = [i for i, s in enumerate(raw) if isinstance(s, par_dim)]
    if len(marks) > 1:
        raise ShapeError("a shape has at most one nl.par_dim", got=raw)
    k = marks[0] if marks else 0
    dims = as_shape(raw)
    return dims[:k], dims[k:]


def create(shape, dtype, buffer, name, *, fill=None, api: str, kernel_frame=None):
    """A new legacy tensor: a plain tensor, or a BlockTensor when the shape has block dims. `buffer` is a
    memory region or a direct-allocation object (`nki.compiler.sbuf.mod_alloc(...)`); `fill` initialises it
    (zeros / ones / full).

    What an on-chip tensor's arguments decide (its block dims, tile shape, dtype and region) is remembered per
    (shape, its element types, dtype, region) (`_SHAPES`; `MEMO_SHAPES = False` is the plain path): a kernel's
    loop declares the same tensors again and again, and reading a shape took a fifth of an `nl.zeros`. What
    depends on the program (the hardware-strict rule, the allocation mode) is checked on every call.
    `kernel_frame`: the kernel frame `user_frame()` would find, when the caller knows it (`frames.as_kernel_frame`)."""
    prog = active() or core.current(api)
    key = plan = None
    if MEMO_SHAPES and type(shape) is tuple and (buffer is None or type(buffer) is MemoryRegion):
        key = (shape, tuple(map(type, shape)), dtype, buffer)
        try:
            plan = _SHAPES.get(key)
        except TypeError:               # an unhashable dtype: the plain path says what is wrong with it
            key = None
    if plan is not None:
        blocks, tile_shape, dt, region, labels = plan
        _check_strict(prog, blocks, tile_shape, api)
        _check_allocation_mode(prog, False, api)
        return _on_chip(prog, blocks, tile_shape, dt, region, labels, name, fill, api, kernel_frame)
    region = core.region_of(buffer)
    blocks, tile_shape = split_shape(shape)
    if not region.kind.is_on_chip:
        if fill is not None:
            raise KernelError(f"{api}: HBM tensors cannot be created with an initial value", instruction=api,
                              code="err_hbm_tensor_with_init_value_not_supported",
                              hint="create it with nl.ndarray and nl.store a value into it")
        if region.name == "shared_hbm" and any(frame.legacy for frame in prog.loops):
            raise KernelError(f"{api}: shared_hbm tensors can only be created at the top level of the kernel, "
                              "not inside a loop", instruction=api, code="err_shared_hbm_must_in_kernel_level",
                              hint="create the output before the loop and write slices of it inside")
        return core.alloc(blocks + tile_shape, dtype, region, name)
    _check_strict(prog, blocks, tile_shape, api)
    direct = buffer if hasattr(buffer, "placement") and not _forced_auto(prog) else None
    _check_allocation_mode(prog, direct is not None, api)
    if direct is not None and fill is not None:
        raise KernelError(f"{api}: tensors placed by direct allocation cannot have an initial value",
                          instruction=api, code="err_tensor_creation_on_scratchpad_with_init_value_not_supported",
                          hint="declare it with nl.ndarray and assign the value: t[...] = 0")
    if len(tile_shape) < 2:
        raise ShapeError(f"{api}: an on-chip tile needs a partition dim and at least one free dim; Insufficient "
                         "rank", got=blocks + tile_shape, instruction=api, hint="use a [P, 1] tile")
    dt = core.dtype_of(dtype)
    if direct is not None:
        tile_of = _direct_tiles(prog, direct, blocks, tile_shape, dt, name, api)
        if not blocks:
            return tile_of(())
        tensor = BlockTensor(blocks, tile_shape, tile_of, dt, region,
                             name or f"{region.name}_{blocks + tile_shape}")
        for tile in tensor.tiles():
            core.fill(tile, fill, api)
        return tensor
    labels = (f"{region.name}_blocks", f"{region.name}_{blocks + tile_shape}")
    if key is not None:
        if len(_SHAPES) >= 1024:
            _SHAPES.clear()
        _SHAPES[key] = (blocks, tile_shape, dt, region, labels)
    return _on_chip(prog, blocks, tile_shape, dt, region, labels, name, fill, api, kernel_frame)


MEMO_SHAPES = True      # False: every legacy tensor declaration reads its arguments again (the plain path)
_SHAPES: dict = {}      # (shape, its element types, dtype, buffer) -> what `create` decided of them


def _check_strict(prog, blocks, tile_shape, api: str) -> None:
    if blocks and prog.options.hardware_strict:
        raise KernelError(f"{api}: The leading dimension of SBUF/PSUM tensors must be the partition dimension "
                          f"(block dimensions are deprecated; later compilers reject them). The tensor has shape "
                          f"{blocks + tile_shape}", instruction=api,
                          code="err_leading_dimension_of_tensor_must_be_partition",
                          hint="use a list of tiles, or fold the block dims into the free dims")


def _on_chip(prog, blocks, tile_shape, dt, region, labels, name, fill, api: str, kernel_frame=None):
    """An on-chip tensor the compiler places (`create`); `labels`: the default names of a block tensor's
    storage and of the tensor. Every tile is made and filled (`fill`: None for none) where the kernel line
    is found once (`user_frame`, unless the caller knows it: `kernel_frame`), and its fills are issued there
    (with `frames.KERNEL_FRAME_HINTS` off, `Program.issue` walks the stack for each)."""
    frame = kernel_frame or user_frame()
    at = frame if frames.KERNEL_FRAME_HINTS else None
    if not blocks:
        t = declared(core.alloc(tile_shape, dt, region, name, frame=frame, prog=prog, normal=True))
        if fill is not None:
            prog.issue(Memset(dst=t, value=fill), api, False, at)
        return t
    if region.kind is MemoryKind.PSUM:
        # one storage per block: each bank-sized tile is placed (and spilled, Memory.place) on its own, so a
        # block tensor may be larger than PSUM, as the official attention tutorials' `qk` tensors are
        label = name or labels[0]
        per_block = [declared(core.alloc(tile_shape, dt, region, label, frame=frame, prog=prog, normal=True))
                     for _ in range(math.prod(blocks))]

        def tile_of(index, per_block=per_block):
            return per_block[linearize(blocks, index)]
        tensor = BlockTensor(blocks, tile_shape, tile_of, dt, region, name or labels[1])
        tiles = per_block
    else:
        n = math.prod(blocks)
        root = declared(core.alloc((tile_shape[0], n) + tile_shape[1:], dt, region, name or labels[0],
                                   frame=frame, prog=prog, normal=True))
        tensor = BlockTensor(blocks, tile_shape, None, dt, region, name or labels[1], root)
        tiles = None if fill is None else [root.plain_subscript((_ALL, b)) for b in range(n)]   # `_tile`'s views
    if fill is not None:
        for tile in tiles:
            prog.issue(Memset(dst=tile, value=fill), api, False, at)
    return tensor


def declared(t):
    """Mark a declared on-chip tensor (Storage.declared): the legacy compiler never moves those."""
    t.storage.declared = True
    return t


def _forced_auto(prog) -> bool:
    """`@nki.compiler.force_auto_alloc` kernels ignore their direct allocations."""
    flags = getattr(core.kernel_function(prog), "__opennki_compiler__", {})
    return bool(flags.get("force_auto_alloc"))


def _check_allocation_mode(prog, direct: bool, api: str) -> None:
    """On-chip tensors of one kernel are either all placed by the compiler or all placed directly."""
    state = prog.state.setdefault(STATE, {})
    mode = "direct" if direct else "auto"
    first = state.setdefault("mode", mode)
    if first != mode:
        from opennki.errors import AllocationError
        raise AllocationError(f"{api}: a kernel cannot mix automatic (nl.sbuf / nl.psum) and direct "
                              "(nki.compiler.*alloc) allocation of on-chip tensors", instruction=api,
                              expected=f"{first} allocation like the kernel's first on-chip tensor", got=mode,
                              hint="allocate every SBUF/PSUM tensor with nki.compiler, or none")


def _direct_tiles(prog, allocator, blocks, tile_shape, dt, name, api):
    """tile_of for a directly allocated tensor: one storage per distinct physical placement."""
    allocator.install(prog)
    P = tile_shape[0]
    fbytes = math.prod(tile_shape[1:]) * dt.itemsize
    region = allocator.region
    label = name or f"{region.name}_direct"
    placed: dict[tuple[int, int], object] = {}
    tiles: dict[tuple[int, ...], object] = {}
    n_blocks = math.prod(blocks)
    spots = _traced_placements(prog, n_blocks)
    if not spots:
        # every logical block is placed now, where the tensor is declared (as the compiler does)
        spots[:] = [allocator.placement(_unflatten(blocks, flat), P, fbytes, prog.hw, api)
                    for flat in range(n_blocks)]
    shared = False
    for flat in range(n_blocks):
        index = _unflatten(blocks, flat)
        where = spots[flat]
        tile = placed.get(where)
        if tile is None:
            tile = placed[where] = declared(core.alloc(tile_shape, dt, region, label, address=where))
        else:
            # several logical blocks share this physical tile: dependencies are about logical blocks
            dependencies.exempt(prog, tile.storage)
            shared = True
        tiles[index] = tile
    if not (shared and region.kind is MemoryKind.PSUM):
        return tiles.__getitem__
    tenant: dict[int, tuple[int, ...]] = {}      # storage id -> the logical block that used it last

    def tile_of(index):
        # a PSUM tile shared by several logical blocks: when the next block moves in, nothing of it is
        # written yet, so its first `+=` matmul starts a new accumulation group (core.accumulate)
        tile = tiles[index]
        if tenant.setdefault(tile.storage.id, index) != index:
            tenant[tile.storage.id] = index
            tile.storage.unwritten = None
        return tile
    return tile_of


def _traced_placements(prog, n_blocks: int) -> list:
    """The placements of the declaration running now, as NKI's trace decides them: the list to reuse (filled
    by the first execution of the same declaration in the traced program), or an empty list to fill.

    NKI traces the body of an `affine_range` / `sequential_range` loop once, so a tensor declared in the body
    has one placement for all iterations, computed from the kernel's Python state at trace time. Kernels
    rely on this: the official allocated attention advances a Python address counter (`cur_addr += ...`)
    after each declaration inside its loop, which an eager run would keep advancing past the end of SBUF.
    So a declaration is identified by its place in the traced program: the kernel's call path to it, the
    iterations of the enclosing `static_range` loops (which NKI unrolls), and how many times the same path was
    already declared in the current iteration of the traced-once loops (Python loops inside a body are
    unrolled too). Its first execution computes the placement; later iterations reuse it."""
    if not any(frame.is_scope for frame in prog.loops):
        return []
    kernel_code = getattr(core.kernel_function(prog), "__code__", None)
    path = []
    frame = user_frame()
    while frame is not None:
        path.append((frame.f_code, frame.f_lineno))
        if frame.f_code is kernel_code:
            break
        frame = frame.f_back
    unrolled = tuple((f.location, f.iteration) for f in prog.loops if not f.is_scope)
    instance = tuple((f.loop_id, f.iteration) for f in prog.loops)
    site = (tuple(path), unrolled)
    state = prog.state.setdefault(STATE, {})
    running = state.setdefault("declarations", {})     # loop instance -> {site: declarations so far}
    for done in [key for key in running if key != instance[:len(key)]]:
        del running[done]                              # iterations that are over
    counts = running.setdefault(instance, {})
    occurrence = counts[site] = counts.get(site, -1) + 1
    return state.setdefault("placements", {}).setdefault((site, occurrence, n_blocks), [])


def _unflatten(shape, flat: int) -> tuple[int, ...]:
    index = []
    for n in reversed(shape):
        index.append(flat % n)
        flat //= n
    return tuple(reversed(index))
