"""Front door (new generation): `nki.language`, NKI 0.2 and later.

Creation APIs take `buffer=nl.sbuf` (the `MemoryRegion` enum), dtypes are strings, and the functional math
ops of NKI 0.3+ return new tensors without `mask=`; comparisons keep the input dtype (1 / 0 values). All of
them are signature adapters over `opennki._src.core`, the compositions the legacy generation uses too.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from opennki.instructions.dma import DmaCopy
from opennki._src import core
from opennki._src.blocks import declared as _declared
from opennki._src.constants import tile_size  # noqa: F401
from opennki._src.control import (affine_range, dynamic_range, fori_loop, no_reorder,  # noqa: F401
                                  num_programs, program_ndim, sequential_range, static_range, while_loop)
from opennki._src.control import program_id as _program_id
from opennki._src.control import unrolled_range as range  # noqa: A004, F401
from opennki._src.tensor import NkiTensor  # noqa: F401
from opennki._src.tokens import NlOp
from opennki.machine.index import ds  # noqa: F401
from opennki.machine.memory import MemoryRegion

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


def _region(buffer):
    if isinstance(buffer, str):
        from opennki.errors import KernelError
        raise KernelError(f"buffer must be an nl memory region (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm), not the "
                          f"string {buffer!r}", got=buffer)
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
    from opennki.instructions.vector import Memset
    t = _declared(core.alloc(shape, dtype, _region(buffer), name or None))
    if t.is_on_chip:
        core.current(api).issue(Memset(dst=t, value=value), api)
    else:
        core.store(t, value, api=api)
    return t


def zeros(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, 0, buffer, name, "nl.zeros")


def ones(shape, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, 1, buffer, name, "nl.ones")


def full(shape, fill_value, dtype, buffer=sbuf, name=""):
    return _filled(shape, dtype, fill_value, buffer, name, "nl.full")


def zeros_like(x, dtype=None, buffer=None, name=""):
    return zeros(x.shape, dtype if dtype is not None else x.dtype, buffer if buffer is not None else sbuf, name)


def empty_like(x, dtype=None, buffer=None, name=""):
    """Uninitialised, same shape; the buffer defaults to the input's (new-generation rule)."""
    return ndarray(x.shape, dtype if dtype is not None else x.dtype, buffer if buffer is not None else x.buffer,
                   name)


def shared_constant(constant):
    """A `shared_hbm` tensor holding `constant`: a NumPy array, or the path of a `.npy` file (new-generation
    form, spec/language.md §5.1); created once per launch and seen by every core."""
    from opennki._src import movement
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
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
    def impl(x, dtype=None):
        return core.unary(name, x, dtype=dtype, api=f"nl.{name}")
    return NlOp(name, impl)


def _binary(name, compare=False):
    def impl(x, y, dtype=None):
        default = None
        if compare:
            t = x if core.is_tensor(x) else y
            default = t.dtype
        return core.binary(name, x, y, dtype=dtype, api=f"nl.{name}", default_dtype=default)
    return NlOp(name, impl)


for _n in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod", "abs_max",
           "abs_min", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"):
    globals()[_n] = _binary(_n)
for _n in ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or",
           "logical_xor"):
    globals()[_n] = _binary(_n, compare=True)
for _n in ("exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
           "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "square", "sqrt",
           "rsqrt", "reciprocal", "abs", "sign", "sin", "cos", "tan", "arctan", "negative", "ceil", "floor",
           "trunc"):
    globals()[_n] = _unary(_n)
del _n

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


def matmul(x, y, transpose_x=False):
    return core.matmul(x, y, transpose_x=transpose_x, api="nl.matmul")


def transpose(x, dtype=None):
    return core.transpose(x, dtype=dtype, api="nl.transpose")


def program_id(axis=0):
    return _program_id(axis)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "core", "NlOp", "os", "np", "Any",
                                                                   "DmaCopy")]
