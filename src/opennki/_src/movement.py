"""Language layer: legacy data movement beyond load/store: DMA transposes, gathers, atomic scatter-adds,
broadcasts and the constant HBM tensors (spec/language.md §5.1, §5.3, §5.4).

Imports language.core, instructions, machine and sim. Each op issues the instruction NKI lowers it to
(§8.12): `load_transpose2d` a DMA transpose, `gather_flattened` the GpSimd gather, `atomic_rmw` a DMA
read-modify-write, a partition `broadcast_to` a DMA.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import KernelError, MemoryKindError, ShapeError
from opennki.events import MemoryKind
from opennki.instructions.dma import DmaCopy, DmaTranspose
from opennki.instructions.gpsimd import NcNGather
from opennki.instructions.ops import alu
from opennki.instructions.vector import Memset, TensorCopy
from opennki._src import core
from opennki.machine.arguments import as_int
from opennki.machine.dtypes import convert, dtype_of
from opennki.machine.memory import MemoryRegion


def load_transpose2d(src, *, dtype=None, mask=None, api: str = "nl.load_transpose2d"):
    """A 2-D HBM tensor [F, P] -> a new SBUF tile [P, F] (P <= 128) by DMA transpose; no run-time indices."""
    prog = core.current(api)
    if not core.is_tensor(src) or src.kind is not MemoryKind.HBM:
        raise MemoryKindError(f"Expected operand 'src' of '{api}' to be in address space 'hbm'", instruction=api,
                              code="err_unsupported_memory", got=getattr(src, "kind", type(src).__name__))
    if src.dynamic:
        raise KernelError(f"{api} does not take indirect (run-time) indices", instruction=api,
                          code="err_indirect_indices_are_not_supported_with_nki_api",
                          hint="gather with nl.load(data[idx_tile, i_f]) and transpose on chip")
    if src.ndim != 2:
        raise ShapeError(f"{api} takes a 2-D source", got=src.shape, instruction=api,
                         code="err_exceed_max_supported_dimension")
    result = core.alloc((src.shape[1], src.shape[0]), dtype if dtype is not None else src.dtype)
    return prog.defer(DmaTranspose(dst=result, src=src, mask=mask), result, api)


def gather_flattened(data, indices, *, dtype=None, mask=None, api: str = "nl.gather_flattened"):
    """out[p, k] = data[p, indices[p, k]] over each partition's flattened free elements; the result has
    indices' shape and data's dtype (GpSimd gather; operands move to SBUF first). Unlike the hardware, an
    index out of range raises instead of producing garbage."""
    prog = core.current(api)
    core.require_tensor(data, "data", api)
    core.require_tile(indices, "indices", api)
    data, indices = core.to_sbuf(data, api), core.to_sbuf(indices, api)
    result = core.alloc(indices.shape, data.dtype)
    prog.issue(NcNGather(dst=result, data=data, indices=indices, mask=mask), api)
    if dtype is not None and dtype_of(dtype) is not data.dtype:
        return core.copy(result, dtype=dtype, mask=mask, api=api)
    return result


def atomic_rmw(dst, value, op, *, mask=None, api: str = "nl.atomic_rmw"):
    """dst = op(dst, value) atomically in HBM; `dst` is usually indexed with run-time row indices
    (`rmw[idx_tile, i_f]`) and duplicate indices all accumulate. `op` must be add (the only documented one);
    `value` a tile or a scalar. Lowered to a DMA read-modify-write."""
    prog = core.current(api)
    if not core.is_tensor(dst) or dst.kind is not MemoryKind.HBM:
        raise MemoryKindError(f"Expected operand 'dst' of '{api}' to be in address space 'hbm'", instruction=api,
                              code="err_unsupported_memory", got=getattr(dst, "kind", type(dst).__name__))
    if alu(op).name != "add":
        raise KernelError(f"{api} supports op=np.add only", got=alu(op).name, instruction=api)
    if core.is_scalar(value):
        tile = core.alloc(dst.shape if len(dst.shape) >= 2 else (1, dst.size), dst.dtype)
        prog.issue(Memset(dst=tile, value=value), api)
        value = tile
    core.require_tile(value, "value", api)
    value = core.to_sbuf(value, api)
    if value.shape != dst.shape:
        core.expect_broadcastable(value.shape, dst.shape, api)
        value = core.materialize_broadcast(value, dst.shape, api)
    prog.issue(DmaCopy(dst=dst, src=value, dst_rmw_op="add", mask=mask), api)


def broadcast_to(src, shape, *, api: str = "nl.broadcast_to"):
    """src broadcast (NumPy rules) to `shape` as a new SBUF tile; src itself if the shape already matches.
    A partition broadcast ([1, F] -> [P, F]) is a DMA, a free-dim broadcast a Vector Engine copy."""
    prog = core.current(api)
    core.require_tile(src, "src", api)
    shape = core.normalize_shape(shape)
    if src.shape == shape:
        return src
    core.expect_broadcastable(src.shape, shape, api)
    view = core.materialize_broadcast(src, shape, api)
    if view.storage is not src.storage:
        return view                      # the partition broadcast already made a new tile
    result = core.alloc(shape, src.dtype)
    return prog.defer(TensorCopy(dst=result, src=view), result, api)


def expand_dims(data, axis, *, api: str = "nl.expand_dims"):
    """A view of `data` with new size-1 axes at `axis` (int or list); the legacy generation only allows new
    axes after the last existing one (never at the partition position)."""
    core.require_tile(data, "data", api)
    axes = [as_int(a, "expand_dims axis") for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
    rank = data.ndim + len(axes)
    norm = sorted(int(a) + rank if int(a) < 0 else int(a) for a in axes)
    if not core.is_tensor(data) or any(a < data.ndim or a >= rank for a in norm):
        raise ShapeError(f"{api}: new axes must come after the last existing axis", got=axis,
                         expected=f"axes in [{data.ndim}, {rank - 1}]", instruction=api)
    return data.expand_dims(norm)


def shared_constant(constant, dtype=None, *, api: str = "nl.shared_constant"):
    """An HBM tensor holding the host array `constant` (converted to `dtype`), shared by all programs and
    created once per launch; kernels `nl.load` it before use."""
    prog = core.current(api)
    array = np.asarray(constant)
    dt = dtype_of(dtype if dtype is not None else array.dtype)
    cache = prog.launch.shared_state.setdefault("shared_constants", {})
    key = (array.shape, str(array.dtype), array.tobytes(), dt.name)
    view = cache.get(key)
    if view is None:
        src = array.astype(np.float32) if (array.dtype.kind in "iub" and dt.is_float) else array
        data = np.ascontiguousarray(convert(src, dt, prog.options.precise_fp)).reshape(-1)
        shape = array.shape or (1,)
        storage = prog.memory.new_storage(MemoryRegion.shared_hbm, dt, shape, f"shared_constant_{len(cache)}",
                                          None, array=None if prog.options.shape_only else data.copy())
        view = cache[key] = prog.launch.tensor_type.root(storage)
    return view


def shared_identity_matrix(n, dtype=np.uint8, *, api: str = "nl.shared_identity_matrix"):
    """An n x n identity matrix as a shared constant HBM tensor (identities of one dtype are shared)."""
    return shared_constant(np.identity(as_int(n, "shared_identity_matrix n", minimum=1), dtype=np.float32),
                           dtype=dtype, api=api)


__all__ = ["load_transpose2d", "gather_flattened", "atomic_rmw", "broadcast_to", "expand_dims",
           "shared_constant", "shared_identity_matrix"]
