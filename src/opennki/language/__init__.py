"""Front door (new generation): `nki.language`, NKI 0.2 and later.

Creation APIs take `buffer=nl.sbuf` (the `MemoryRegion` enum), dtypes are strings, and the functional math
ops of NKI 0.3+ return new tensors without `mask=`; comparisons keep the input dtype (1 / 0 values). All of
them are signature adapters over `opennki._src.core`, the compositions the legacy generation uses too.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from opennki.errors import DtypeError, KernelError, ShapeError, UnsupportedError
from opennki.instructions.dma import DmaCopy
from opennki.instructions.ops import ACTIVATIONS, ALU_OPS
from opennki._src import composites, core, debug, movement, rng
from opennki._src.blocks import declared as _declared
from opennki._src.constants import tile_size  # noqa: F401
from opennki._src.control import (affine_range, dynamic_range, fori_loop, no_reorder,  # noqa: F401
                                  num_programs, program_ndim, sequential_range, static_range, while_loop)
from opennki._src.control import program_id as _program_id
from opennki._src.control import unrolled_range as range  # noqa: A004, F401
from opennki._src.grids import (NkiBlockGrid, NkiGrid, NkiTileGrid, alloc_blocks, alloc_tiles,  # noqa: F401
                                blocks, contiguous_indices, empty_like_grid, grid_element_offset,
                                interleaved_indices, tiles, transposed_shape)
from opennki._src.tensor import NkiTensor  # noqa: F401
from opennki._src.tokens import NlOp
from opennki.machine import arguments as _args
from opennki.machine.index import ds  # noqa: F401
from opennki.machine.memory import MemoryRegion
from opennki.releases import Change
from opennki.sim.program import active

DType = str

# dtypes are strings in the new generation
bool_ = "bool"
int8, int16, int32 = "int8", "int16", "int32"
int64 = "int64"     # NKI 0.7: scalar_load / scalar_store widths
uint8, uint16, uint32 = "uint8", "uint16", "uint32"
float16, float32, bfloat16, tfloat32 = "float16", "float32", "bfloat16", "tfloat32"
float8_e4m3, float8_e5m2, float8_e4m3fn, float8_e8m0fnu = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn",
                                                           "float8_e8m0fnu")
float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4 = "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4"

sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
private_hbm = MemoryRegion.private_hbm
hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm


STRING_BUFFER = Change("a buffer named by a string (buffer='sbuf')", "the nl memory regions (nl.sbuf, nl.psum, "
                       "nl.hbm, nl.private_hbm, nl.shared_hbm)", removed_in="0.3",
                       source="Migrating from NKI 0.2.0 to NKI 0.3.0: String buffer names no longer supported")
_BUFFER_NAMES = {"sbuf": MemoryRegion.sbuf, "psum": MemoryRegion.psum, "hbm": MemoryRegion.private_hbm,
                 "private_hbm": MemoryRegion.private_hbm, "shared_hbm": MemoryRegion.shared_hbm}


def _region(buffer):
    if isinstance(buffer, str):
        if buffer not in _BUFFER_NAMES:
            raise KernelError(f"buffer must be an nl memory region (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm), not "
                              f"the string {buffer!r}", got=buffer)
        prog = active()
        STRING_BUFFER.apply(prog.options if prog is not None else None)
        buffer = _BUFFER_NAMES[buffer]
    return core.region_of(buffer)


def is_hbm(buffer) -> bool:
    return core.region_of(buffer).kind.name == "HBM"


def is_on_chip(buffer) -> bool:
    return core.region_of(buffer).kind.is_on_chip


def is_psum(buffer) -> bool:
    return core.region_of(buffer) is MemoryRegion.psum


def is_sbuf(buffer) -> bool:
    return core.region_of(buffer) is MemoryRegion.sbuf


class NKIObject:
    """Base class for user data classes used inside kernels (a plain Python base in the simulator).

    NKI's compiler synthesizes the constructor of an NKIObject class: every class attribute is a field, annotated
    or not, so `@dataclass class P(nl.NKIObject): tile = None` accepts `P(tile=4)`; and no field is required
    (NKI Library kernels construct dataclasses leaving out fields they never read). A plain `@dataclass` would
    only see annotated attributes and require those without a default, so before the decorator runs,
    subclasses get their unannotated data attributes annotated (as `Any`, keeping their values as defaults) and
    their annotated fields without a default given the default None (where the spec is silent, an omitted
    field reads as None). Without `@dataclass`, keyword arguments are set as attributes.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        annotations = cls.__dict__.get("__annotations__", {})
        fields = {name: Any for name, value in cls.__dict__.items()
                  if name not in annotations and not name.startswith("__") and _is_data_attribute(value)}
        if fields:
            cls.__annotations__ = {**annotations, **fields}
        for name, annotation in annotations.items():
            if name not in cls.__dict__ and "ClassVar" not in str(annotation):
                setattr(cls, name, None)

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)


def _is_data_attribute(value) -> bool:
    """A class attribute that holds data (a field), not a method, property or nested class."""
    return not (callable(value) or isinstance(value, (staticmethod, classmethod, property)))


# ---------------------------------------------------------------------------------------------- creation

def ndarray(shape, dtype, buffer=sbuf, name="", address=None):
    """A new uninitialised tensor (NaN / 4 in fresh memory); `address=(partition, byte)` pins it."""
    return _declared(core.alloc(shape, dtype, _region(buffer), name or None, address=address))


def _filled(shape, dtype, value, buffer, name, api):
    return core.fill(_declared(core.alloc(shape, dtype, _region(buffer), name or None)), value, api)


def zeros(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, 0, buffer, name, "nl.zeros")


def ones(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, 1, buffer, name, "nl.ones")


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, fill_value, buffer, name, "nl.full")


def zeros_like(x, dtype=None, buffer=None, name=""):
    core.require_tensor(x, "x", "nl.zeros_like")
    return zeros(x.shape, dtype if dtype is not None else x.dtype, buffer if buffer is not None else sbuf, name)


def empty_like(x, dtype=None, buffer=None, name="", *, transpose_axes=None, address=None):
    """Uninitialised, same shape; the buffer defaults to the input's (new-generation rule). A tile or block
    grid (NKI 0.7) gives new storage with its geometry. `transpose_axes` (NKI 0.7: (1, 0), (2, 1, 0) or
    (3, 1, 2, 0) by rank) permutes the shape for a later `nisa.dma_transpose`; `address` pins the storage as
    `nl.ndarray(address=...)` does."""
    if isinstance(x, NkiGrid):
        return empty_like_grid(x, dtype, buffer, name, transpose_axes=transpose_axes, address=address)
    core.require_tensor(x, "x", "nl.empty_like")
    shape = x.shape if transpose_axes is None else transposed_shape(x.shape, transpose_axes, "nl.empty_like")
    return ndarray(shape, dtype if dtype is not None else x.dtype, buffer if buffer is not None else x.buffer,
                   name, address=address)


def shared_constant(constant):
    """A `shared_hbm` tensor holding `constant`: a NumPy array, or the path of a `.npy` file (new-generation
    form, spec/language.md §5.1); created once per launch and seen by every core."""
    from opennki._src import movement
    if isinstance(constant, (str, os.PathLike)):
        try:
            constant = np.load(constant)
        except (OSError, ValueError) as e:
            raise KernelError(f"nl.shared_constant cannot read the .npy file {str(constant)!r}: {e}",
                              expected="a NumPy array or the path of a .npy file", got=repr(constant)) from None
    return movement.shared_constant(constant, api="nl.shared_constant")


def shared_identity_matrix(n, dtype=uint8, dst=None):
    """The n x n identity in SBUF (new-generation rule: usable directly as an operand), DMA-copied from the
    shared constant identity of `dtype`; with `dst=` it is written there (and `dst` returned)."""
    from opennki._src import movement
    ident = movement.shared_identity_matrix(n, dtype, api="nl.shared_identity_matrix")
    if dst is None:
        dst = core.alloc(ident.shape, ident.dtype, sbuf)
    core.current("nl.shared_identity_matrix").issue(DmaCopy(dst=dst, src=ident), "nl.shared_identity_matrix")
    return dst


# ---------------------------------------------------------------------------------- movement and math

def load(src, dtype=None):
    return core.load(src, dtype=dtype, api="nl.load")


def store(dst, value):
    core.store(dst, value, api="nl.store")


def copy(x, dtype=None):
    return core.copy(x, dtype=dtype, api="nl.copy")


def _unary(name):
    api = f"nl.{name}"

    def impl(x, dtype=None):
        return core.unary(name, x, dtype=dtype, api=api)
    return NlOp(name, impl)


def _binary(name, compare=False):
    api = f"nl.{name}"

    def impl(x, y, dtype=None):
        default = None
        if compare:
            t = x if core.is_tensor(x) else y
            default = t.dtype
        return core.binary(name, x, y, dtype=dtype, api=api, default_dtype=default)
    return NlOp(name, impl)


# the operators come from the instruction tables: every two-operand ALU operator, and every Scalar Engine
# function but `copy` (nl.copy above) and `prelu` (a parameter only activate2 passes)
for _n, _op in ALU_OPS.items():
    if _op.arity == 2:
        globals()[_n] = _binary(_n, compare=_op.predicate)
for _n in ACTIVATIONS:
    if _n not in ("copy", "prelu"):
        globals()[_n] = _unary(_n)
del _n, _op

prelu = NlOp("prelu")
bypass = NlOp("bypass")
average = NlOp("average")


def _reduction(name, op):
    def impl(x, axis, dtype=None, keepdims=False):
        return core.reduce(op, x, axis, dtype=dtype, keepdims=keepdims, api=f"nl.{name}")
    return NlOp(op if name in ("max", "min") else name, impl)


sum = _reduction("sum", "add")  # noqa: A001
prod = _reduction("prod", "multiply")
max = _reduction("max", "maximum")  # noqa: A001
min = _reduction("min", "minimum")  # noqa: A001


def mean(x, axis, dtype=None, keepdims=False):
    return core.mean(x, axis, dtype=dtype, keepdims=keepdims, api="nl.mean")


def var(x, axis, dtype=None, keepdims=False):
    """Population variance over free `axis`; `keepdims` is accepted and ignored: the result always keeps the
    reduced dims (new-generation rule, spec/language.md §6.4)."""
    return composites.var(x, axis, dtype=dtype, keepdims=True, api="nl.var")


def all(x, axis, dtype=None):  # noqa: A001 - NKI name
    """1 where every element along free `axis` is nonzero, else 0 (a logical-and reduction). The result
    dtype is `dtype`, else x's: new-generation logical results keep the input dtype (1 / 0 values)."""
    return core.reduce("logical_and", x, axis, dtype=dtype, api="nl.all")


def _logical_not(x, dtype=None):
    """NOT x as 1 / 0 in `dtype`, else x's dtype (XOR with 1 on the Vector Engine: right for 0/1 inputs)."""
    return core.unary_alu("logical_not", x, dtype=dtype, api="nl.logical_not")


def _invert(x, dtype=None):
    """Bitwise NOT (XOR with all ones) of an integer tile."""
    return core.unary_alu("invert", x, dtype=dtype, api="nl.invert")


logical_not = NlOp("logical_not", _logical_not)
invert = NlOp("invert", _invert)


def softmax(x, axis=-1, dtype=None):
    """exp(x - max(x)) / sum(exp(x - max(x))) over free `axis` (default the last), same shape as x."""
    return composites.softmax(x, axis, dtype=dtype, api="nl.softmax")


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None):
    """x * rsqrt(sum(x^2, axis) / n + epsilon) * w."""
    return composites.rms_norm(x, w, axis, n, epsilon, dtype=dtype, compute_dtype=compute_dtype, api="nl.rms_norm")


def where(condition, x, y, dtype=None):
    """x where `condition` is nonzero (the new generation passes a float tile of 1.0 / 0.0), else y."""
    return composites.where(condition, x, y, dtype=dtype, api="nl.where")


def dropout(x, rate, dtype=None):
    """x with each element replaced by 0 with probability `rate` (a scalar or a [P, 1] tile of per-partition
    rates); survivors are not rescaled. Vector Engine `dropout`."""
    return rng.dropout(x, rate, dtype=dtype, api="nl.dropout")


def rand(shape, dtype, buffer=sbuf, name=""):
    """A new tensor of i.i.d. uniform values in [0, 1) (trn3: `rand2`; earlier targets: `rng` bits scaled)."""
    from opennki.instructions.vector import TensorCopy
    result = rng.rand(shape, dtype, api="nl.rand")
    region = _region(buffer)
    if region is sbuf:
        return result
    out = core.alloc(result.shape, result.dtype, region, name or None)
    core.current("nl.rand").issue(TensorCopy(dst=out, src=result), "nl.rand")
    return out


def random_seed(seed):
    """Seed the random generator with a [1, 1] on-chip tensor holding a 32-bit value (the new generation
    rejects a Python int, spec/language.md §5.2)."""
    if not core.is_tensor(seed) or not seed.is_on_chip or seed.shape != (1, 1):
        raise DtypeError("nl.random_seed takes a [1, 1] SBUF or PSUM tensor holding the seed",
                         got=getattr(seed, "shape", type(seed).__name__), expected="a [1, 1] on-chip tensor",
                         instruction="nl.random_seed", hint="nl.full((1, 1), seed, nl.int32) makes one")
    rng.random_seed(seed, api="nl.random_seed")


def load_transpose2d(src, dtype=None):
    """A 2-D HBM tensor [F, P] -> a new SBUF tensor [P, F] by DMA transpose."""
    return movement.load_transpose2d(src, dtype=dtype, api="nl.load_transpose2d")


def gather_flattened(data, indices, axis=0, dtype=None):
    """out[p, k] = data[p, indices[p, k]] over each partition's flattened free elements (result: indices'
    shape). NKI documents `axis` only as "the axis along which to gather" with default 0; the one gather it
    describes is this per-partition one, so 0 is the only value accepted (an opennki decision)."""
    if axis != 0:
        raise UnsupportedError("nl.gather_flattened gathers along the flattened free elements of each "
                               "partition (axis=0); other axes are undocumented", got=axis,
                               instruction="nl.gather_flattened")
    return movement.gather_flattened(data, indices, dtype=dtype, api="nl.gather_flattened")


def broadcast_to(x, shape, dtype=None):
    """x broadcast to `shape` (same rank; each dim equal or broadcast from 1) as a new tensor; x itself if the
    shape matches, or a cast copy when `dtype` differs."""
    shape = core.normalize_shape(shape)
    if not core.is_tensor(x) or len(shape) != x.ndim:
        raise ShapeError("nl.broadcast_to: shape must have the rank of x", got=shape,
                         expected=f"rank {getattr(x, 'ndim', '?')}", instruction="nl.broadcast_to")
    result = movement.broadcast_to(x, shape, api="nl.broadcast_to")
    if dtype is not None and result.dtype != dtype:
        return core.copy(result, dtype=dtype, api="nl.broadcast_to")
    return result


def expand_dims(x, axis):
    """A view of x with new size-1 dims at `axis` (an int or a list; positions in the result, negative ones
    from its end); on-chip tensors keep the partition dim first."""
    core.require_tensor(x, "x", "nl.expand_dims")
    axes = [_args.as_int(a, "expand_dims axis") for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
    rank = x.ndim + len(axes)
    return x.expand_dims([a + rank if a < 0 else a for a in axes])


def device_print(print_prefix, tensor):
    """Print `print_prefix` and the values of `tensor` (SBUF or HBM, any rank) to stdout."""
    debug.device_print(print_prefix, tensor, simulation_only=False, api="nl.device_print")


def matmul(x, y, transpose_x=False):
    return core.matmul(x, y, transpose_x=transpose_x, api="nl.matmul")


def transpose(x, dtype=None):
    return core.transpose(x, dtype=dtype, api="nl.transpose")


def program_id(axis=0):
    return _program_id(axis)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "core", "NlOp", "ALU_OPS", "ACTIVATIONS", "os", "np", "Any",
                                                                   "DmaCopy", "composites", "debug", "movement",
                                                                   "rng", "DtypeError", "KernelError", "ShapeError",
                                                                   "UnsupportedError", "empty_like_grid", "transposed_shape", "KernelError", "Change", "active",
                                                                   "STRING_BUFFER")]
