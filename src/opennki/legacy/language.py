"""Front door (legacy generation): `neuronxcc.nki.language`, the functional tile API of NKI 0.1.

Every function here is a signature adapter over `opennki.language.core`: legacy defaults (comparisons give
`bool` tiles, creation defaults to SBUF, `mask=` everywhere) are applied, then the shared composition runs.
Dtype constants are NumPy / ml_dtypes objects, as the legacy generation has them.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from opennki.errors import KernelError, UnsupportedError
from opennki.language import core
from opennki.language.constants import tile_size
from opennki.language.control import (affine_range, num_programs, program_id, program_ndim, sequential_range,
                                      static_range)
from opennki.language.tokens import NlOp
from opennki.machine import dtypes as _dt
from opennki.machine.index import arange, ds, mgrid
from opennki.machine.memory import MemoryRegion

# ------------------------------------------------------------------------------------------------ dtypes
bool_ = np.bool_
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
float16, float32 = np.float16, np.float32
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
tfloat32 = _dt.tfloat32.public

# ----------------------------------------------------------------------------------------------- buffers
sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
hbm = MemoryRegion.private_hbm
private_hbm = MemoryRegion.private_hbm
shared_hbm = MemoryRegion.shared_hbm


class par_dim(int):
    """`nl.par_dim(n)`: marks the partition dim in a shape tuple (the leftmost dim is the default)."""

    def __repr__(self):
        return f"par_dim({int(self)})"


def _check_shape(shape, buffer) -> tuple[int, ...]:
    raw = shape if isinstance(shape, (tuple, list)) else (shape,)
    marks = [i for i, s in enumerate(raw) if isinstance(s, par_dim)]
    if marks and marks[0] != 0 and core.region_of(buffer).kind.is_on_chip:
        raise UnsupportedError("block dimensions before nl.par_dim are deprecated and not supported; make the "
                               "partition dim the leading dim (use a list of tiles or fold blocks into free "
                               "dims)", got=tuple(raw), code="err_leading_dimension_of_tensor_must_be_partition")
    return core.normalize_shape(shape)


# --------------------------------------------------------------------------------------------- creation

def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new uninitialised tensor (NaN / 4 in fresh memory) of `shape` and `dtype` in `buffer` (SBUF)."""
    return core.alloc(_check_shape(shape, buffer), dtype, buffer, name or None)


def _filled(shape, dtype, fill, buffer, name, api):
    region = core.region_of(buffer)
    if not region.kind.is_on_chip:
        raise KernelError(f"{api}: HBM tensors cannot be created with an initial value", instruction=api,
                          code="err_hbm_tensor_with_init_value_not_supported",
                          hint="create it with nl.ndarray and nl.store a value into it")
    from opennki.instructions.vector import Memset
    t = core.alloc(_check_shape(shape, buffer), dtype, buffer, name or None)
    core.current(api).issue(Memset(dst=t, value=fill), api)
    return t


def zeros(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with 0 (memset)."""
    return _filled(shape, dtype, 0, buffer, name, "nl.zeros")


def ones(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with 1 (memset)."""
    return _filled(shape, dtype, 1, buffer, name, "nl.ones")


def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with `fill_value` (memset)."""
    return _filled(shape, dtype, fill_value, buffer, name, "nl.full")


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer, name=name)


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    return ndarray(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer, name=name)


# -------------------------------------------------------------------------------------- data movement

def load(src, *, mask=None, dtype=None, **kwargs):
    """HBM -> a new SBUF tile (DMA); result shape = the index expression's shape, partition first."""
    return core.load(src, dtype=dtype, mask=mask, api="nl.load")


def store(dst, value, *, mask=None, **kwargs):
    """SBUF (or PSUM, or a scalar) -> HBM (DMA)."""
    core.store(dst, value, mask=mask, api="nl.store")


def copy(src, *, mask=None, dtype=None, **kwargs):
    """A new SBUF tile with the contents of an on-chip tile (cast to `dtype` if given)."""
    return core.copy(src, dtype=dtype, mask=mask, api="nl.copy")


# ----------------------------------------------------------------------------------------------- math

def _unary(name: str, doc: str) -> NlOp:
    def impl(x, *, dtype=None, mask=None, **kwargs):
        return core.unary(name, x, dtype=dtype, mask=mask, api=f"nl.{name}")
    impl.__doc__ = doc
    return NlOp(name, impl)


def _binary(name: str, doc: str, *, compare: bool = False) -> NlOp:
    def impl(x, y, *, dtype=None, mask=None, **kwargs):
        return core.binary(name, x, y, dtype=dtype, mask=mask, api=f"nl.{name}",
                           default_dtype=_dt.bool_ if compare else None)
    impl.__doc__ = doc
    return NlOp(name, impl)


add = _binary("add", "x + y, element-wise with broadcasting.")
subtract = _binary("subtract", "x - y, element-wise with broadcasting.")
multiply = _binary("multiply", "x * y, element-wise with broadcasting.")
divide = _binary("divide", "x / y, element-wise with broadcasting.")
maximum = _binary("maximum", "max(x, y), element-wise.")
minimum = _binary("minimum", "min(x, y), element-wise.")
power = _binary("power", "x ** y, element-wise.")
equal = _binary("equal", "x == y as a bool tile.", compare=True)
not_equal = _binary("not_equal", "x != y as a bool tile.", compare=True)
greater = _binary("greater", "x > y as a bool tile.", compare=True)
greater_equal = _binary("greater_equal", "x >= y as a bool tile.", compare=True)
less = _binary("less", "x < y as a bool tile.", compare=True)
less_equal = _binary("less_equal", "x <= y as a bool tile.", compare=True)
logical_and = _binary("logical_and", "x AND y (inputs 0/1) as a bool tile.", compare=True)
logical_or = _binary("logical_or", "x OR y (inputs 0/1) as a bool tile.", compare=True)
logical_xor = _binary("logical_xor", "x XOR y (inputs 0/1) as a bool tile.", compare=True)
bitwise_and = _binary("bitwise_and", "x & y on integer bits.")
bitwise_or = _binary("bitwise_or", "x | y on integer bits.")
bitwise_xor = _binary("bitwise_xor", "x ^ y on integer bits.")
left_shift = _binary("left_shift", "x << y on integer bits.")
right_shift = _binary("right_shift", "x >> y, a logical (zero-filling) shift on integer bits.")

exp = _unary("exp", "e ** x (Scalar Engine).")
log = _unary("log", "Natural logarithm (Scalar Engine; valid for x in [2^-64, 2^64]).")
tanh = _unary("tanh", "Hyperbolic tangent (Scalar Engine).")
sigmoid = _unary("sigmoid", "1 / (1 + e ** -x) (Scalar Engine).")
relu = _unary("relu", "max(x, 0) (Scalar Engine).")
gelu = _unary("gelu", "x * Phi(x), the erf form (Scalar Engine).")
gelu_dx = _unary("gelu_dx", "Derivative of gelu (Scalar Engine).")
gelu_apprx_tanh = _unary("gelu_apprx_tanh", "0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (Scalar Engine).")
gelu_apprx_sigmoid = _unary("gelu_apprx_sigmoid", "x * sigmoid(1.702 x) (Scalar Engine).")
silu = _unary("silu", "x * sigmoid(x) (Scalar Engine).")
silu_dx = _unary("silu_dx", "Derivative of silu (Scalar Engine).")
softplus = _unary("softplus", "log(1 + e ** x) (Scalar Engine).")
mish = _unary("mish", "x * tanh(softplus(x)) (Scalar Engine).")
erf = _unary("erf", "Error function (Scalar Engine).")
erf_dx = _unary("erf_dx", "2/sqrt(pi) * e ** -x^2 (Scalar Engine).")
square = _unary("square", "x * x (Scalar Engine).")
sqrt = _unary("sqrt", "Square root (Scalar Engine; valid for x in [2^-116, 2^118]).")
rsqrt = _unary("rsqrt", "1 / sqrt(x) (Scalar Engine; valid for x in [2^-87, 2^97]).")
reciprocal = _unary("reciprocal", "1 / x (Scalar Engine; valid for |x| in [2^-42, 2^42]).")
abs = _unary("abs", "|x|.")  # noqa: A001 - NKI name
sign = _unary("sign", "-1, 0 or +1.")
sin = _unary("sin", "Sine.")
cos = _unary("cos", "Cosine.")
tan = _unary("tan", "Tangent.")
arctan = _unary("arctan", "Arc tangent.")
negative = _unary("negative", "-x.")
ceil = _unary("ceil", "Round up to an integer value (dtype kept).")
floor = _unary("floor", "Round down to an integer value (dtype kept).")
trunc = _unary("trunc", "Round toward zero (dtype kept).")


def _logical_not(x, *, dtype=None, mask=None, **kwargs):
    """NOT x (XOR with 1: correct for 0/1 inputs) as a bool tile."""
    return core.unary_alu("logical_not", x, dtype=dtype if dtype is not None else _dt.bool_, mask=mask,
                          api="nl.logical_not")


def _invert(x, *, dtype=None, mask=None, **kwargs):
    """Bitwise NOT (XOR with all ones) of an integer tile."""
    return core.unary_alu("invert", x, dtype=dtype, mask=mask, api="nl.invert")


logical_not = NlOp("logical_not", _logical_not)
invert = NlOp("invert", _invert)


# ------------------------------------------------------------------------------------------ reductions

def _reduction(name: str, op: str, doc: str) -> NlOp:
    def impl(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        return core.reduce(op, x, axis, dtype=dtype, mask=mask, keepdims=keepdims, api=f"nl.{name}")
    impl.__doc__ = doc
    # nl.max / nl.min double as the maximum / minimum operator tokens; nl.sum / nl.prod are only callables
    return NlOp(op if name in ("max", "min") else name, impl)


sum = _reduction("sum", "add", "Sum over free `axis` (int or list); [P, F] -> [P, 1].")  # noqa: A001
prod = _reduction("prod", "multiply", "Product over free `axis`.")
max = _reduction("max", "maximum", "Maximum over free `axis`.")  # noqa: A001
min = _reduction("min", "minimum", "Minimum over free `axis`.")  # noqa: A001


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """Arithmetic mean over free `axis`, computed in fp32."""
    return core.mean(x, axis, dtype=dtype, mask=mask, keepdims=keepdims, api="nl.mean")


# --------------------------------------------------------------------------------------- matmul & co.

def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """x @ y (or x.T @ y with transpose_x=True) into a new fp32 PSUM tile.

    Accumulate with `acc = nl.zeros(..., buffer=nl.psum)` then `acc += nl.matmul(...)`.
    """
    return core.matmul(x, y, transpose_x=transpose_x, mask=mask, api="nl.matmul")


def transpose(x, *, dtype=None, mask=None, **kwargs):
    """[P, F] -> [F, P] (Tensor Engine; the result lives in PSUM)."""
    return core.transpose(x, dtype=dtype, mask=mask, api="nl.transpose")


# ---------------------------------------------------------------------------------------- host helpers

def static_cast(input_data, dtype):
    """Host-side cast of a scalar or NumPy array to an NKI dtype (round to nearest even, ints saturate)."""
    dt = _dt.dtype_of(dtype)
    arr = np.asarray(input_data)
    out = _dt.to_public(_dt.convert(arr.astype(np.float32) if arr.dtype.kind != "f" or arr.dtype.itemsize > 4
                                    else arr, dt), dt)
    return out if arr.ndim else out[()]


class fp32:
    """`nl.fp32.min`: the most negative finite fp32 (bit pattern 0xff7fffff)."""

    min = float(np.array([0xFF7FFFFF], np.uint32).view(np.float32)[0])


class bfp16:
    """`nl.bfp16.min`: bit pattern 0xff80, which is -inf in bfloat16 (spec/language.md §9 item 8)."""

    min = float(np.array([0xFF80], np.uint16).view(ml_dtypes.bfloat16)[0])


def finfo(dtype):
    """NumPy-style float limits of an NKI dtype (`nl.finfo(nl.bfloat16).min`)."""
    return ml_dtypes.finfo(_dt.dtype_of(dtype).np_dtype)


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "np", "ml_dtypes", "core",
                                                                   "NlOp", "KernelError", "UnsupportedError",
                                                                   "MemoryRegion")]
