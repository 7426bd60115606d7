"""Front door (legacy generation): `neuronxcc.nki.language`, the functional tile API of NKI 0.1.

Imports the language layer. Every function here is a signature adapter over the shared compositions
(`opennki._src.core` and its sibling modules): the legacy defaults are applied (comparisons give `bool`
tiles, creation defaults to SBUF, `mask=` everywhere, NumPy broadcasting including the partition dim) and
the composition runs. Dtype constants are NumPy / ml_dtypes objects, as the legacy generation has them.
All 125 public names of the SDK 2.26 stub are here (spec/language.md §1).
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from opennki._src import collectives, composites, core, debug, movement, rng
from opennki._src.blocks import create, par_dim
from opennki._src.constants import fp32, tile_size  # noqa: F401
from opennki._src.control import LoopRange, loop_reduce, num_programs, program_id, program_ndim
from opennki._src.spmd import nc, spmd_dim
from opennki._src.tokens import NlOp
from opennki.errors import INTERNAL_FILES as _INTERNAL_FILES
from opennki.instructions import ops as _ops
from opennki.legacy import typing as _typing  # noqa: F401  (registers the parameter rules)
from opennki.machine import dtypes as _dt
from opennki.machine.index import arange, ds, mgrid
from opennki.machine.memory import MemoryRegion
from opennki.releases import Generation, added_in
from opennki.sim import frames as _frames

LIMITS = core.Limits.LEGACY   # hardware-strict rules of this generation (core.hardware_limits)

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


# ---------------------------------------------------------------------------------------------- loops

def affine_range(*args, **kwargs) -> LoopRange:
    """Parallel loop: iterations must be independent, except associative accumulation into a tensor created
    before the loop (`acc += ...`, PSUM matmul accumulation, `nl.loop_reduce`); two iterations writing the
    same location raise err_unexpected_output_dependencies. Tensors created in the body are local to it."""
    return LoopRange("affine_range", *args, legacy=True, kernel_frame=_frames.as_kernel_frame(sys._getframe(1)),
                     **kwargs)


def sequential_range(*args, **kwargs) -> LoopRange:
    """Sequential loop: loop-carried dependencies are allowed and respected. Tensors created in the body
    are local to it."""
    return LoopRange("sequential_range", *args, legacy=True, **kwargs)


def static_range(*args, **kwargs) -> LoopRange:
    """Fully unrolled loop (NKI unrolls it while tracing; the loop variable is a Python int)."""
    return LoopRange("static_range", *args, legacy=True, **kwargs)


# --------------------------------------------------------------------------------------------- creation

def ndarray(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new uninitialised tensor (NaN / 4 in fresh memory) of `shape` and `dtype` in `buffer` (SBUF).
    Dims before an `nl.par_dim` are block dims (a BlockTensor of independent tiles); `buffer` may be a
    direct-allocation object from `nki.compiler`."""
    return create(shape, dtype, buffer, name or None, api="nl.ndarray",
                  kernel_frame=_frames.as_kernel_frame(sys._getframe(1)))


def zeros(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with 0 (memset); on-chip only (err_hbm_tensor_with_init_value_not_supported)."""
    return create(shape, dtype, buffer, name or None, fill=0, api="nl.zeros",
                  kernel_frame=_frames.as_kernel_frame(sys._getframe(1)))


def ones(shape, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with 1 (memset); on-chip only."""
    return create(shape, dtype, buffer, name or None, fill=1, api="nl.ones")


def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs):
    """A new tensor filled with `fill_value` cast to `dtype` (memset); on-chip only."""
    return create(shape, dtype, buffer, name or None, fill=fill_value, api="nl.full")


def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    """zeros of `a`'s shape; dtype defaults to a's, buffer to SBUF."""
    core.require_tensor(a, "a", "nl.zeros_like")
    return zeros(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer, name=name)


def _since(version: str, api: str) -> None:
    """`api` first shipped in Neuron SDK `version` (spec/language.md §1, column L): under an explicit earlier
    legacy api_version it does not exist."""
    added_in(version, api, core.current(api).options, Generation.LEGACY)


def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs):
    """An uninitialised tensor of `a`'s shape; dtype defaults to a's, buffer to SBUF (legacy rule; SDK 2.22)."""
    _since("2.22", "nl.empty_like")
    core.require_tensor(a, "a", "nl.empty_like")
    return ndarray(a.shape, dtype if dtype is not None else a.dtype, buffer=buffer, name=name)


def shared_constant(constant, dtype=None, **kwargs):
    """An HBM tensor holding the host array `constant` (cast to `dtype`); `nl.load` it before use."""
    return movement.shared_constant(constant, dtype)


def shared_identity_matrix(n, dtype=np.uint8, **kwargs):
    """An n x n identity matrix in HBM (a shared constant)."""
    return movement.shared_identity_matrix(n, dtype)


def rand(shape, dtype=np.float32, **kwargs):
    """A new SBUF tile of uniform random values in [0, 1)."""
    return rng.rand(shape, dtype)


def random_seed(seed, *, mask=None, **kwargs):
    """Seed the random generator (a 32-bit integer or a one-element integer tile)."""
    rng.random_seed(seed, mask=mask)


# -------------------------------------------------------------------------------------- data movement

def load(src, *, mask=None, dtype=None, **kwargs):
    """HBM -> a new SBUF tile (DMA); result shape = the index expression's shape, partition first.
    The partition index may be a run-time integer tile (`data[idx_tile, i_f]`)."""
    return core.load(src, dtype=dtype, mask=mask, api="nl.load", kernel_frame=_frames.as_kernel_frame(sys._getframe(1)))


def store(dst, value, *, mask=None, **kwargs):
    """SBUF (or PSUM, or a scalar) -> HBM (DMA); `dst` may be indexed with a run-time integer tile."""
    core.store(dst, value, mask=mask, api="nl.store", kernel_frame=_frames.as_kernel_frame(sys._getframe(1)))


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs):
    """A 2-D HBM tensor [F, P] -> a new SBUF tile [P, F] (DMA transpose)."""
    return movement.load_transpose2d(src, dtype=dtype, mask=mask)


def _copy(src, *, mask=None, dtype=None, **kwargs):
    """A new SBUF tile with the contents of an on-chip tile (cast to `dtype` if given); also the identity
    activation token (`nisa.activation(op=nl.copy, ...)`)."""
    return core.copy(src, dtype=dtype, mask=mask, api="nl.copy", kernel_frame=_frames.as_kernel_frame(sys._getframe(1)))


copy = NlOp("copy", _copy)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs):
    """dst = op(dst, value) atomically in HBM (op: np.add); duplicate run-time indices all accumulate."""
    movement.atomic_rmw(dst, value, op, mask=mask)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs):
    """out[p, k] = data[p, indices[p, k]] over the flattened free dims (result: indices' shape; SDK 2.24)."""
    _since("2.24", "nl.gather_flattened")
    return movement.gather_flattened(data, indices, dtype=dtype, mask=mask)


def broadcast_to(src, *, shape, **kwargs):
    """`src` broadcast to `shape` (NumPy rules, incl. [1, F] -> [P, F]) as a new SBUF tile (SDK 2.22)."""
    _since("2.22", "nl.broadcast_to")
    return movement.broadcast_to(src, shape)


def expand_dims(data, axis, **kwargs):
    """A view with new size-1 axes at `axis`, which must come after the last existing axis."""
    return movement.expand_dims(data, axis)


# ----------------------------------------------------------------------------------------------- math

def _unary(name: str) -> NlOp:
    api = f"nl.{name}"

    def impl(x, *, dtype=None, mask=None, **kwargs):
        return core.unary(name, x, dtype=dtype, mask=mask, api=api)
    impl.__doc__ = _ops.ACTIVATIONS[name].doc + "."
    return NlOp(name, impl)


def _unary_alu(name: str) -> NlOp:
    op = _ops.ALU_OPS[name]

    def impl(x, *, dtype=None, mask=None, **kwargs):
        return core.unary_alu(name, x, dtype=dtype if dtype is not None or not op.predicate else _dt.bool_,
                              mask=mask, api=f"nl.{name}", bool_fails=name == "invert")   # a known issue
    impl.__doc__ = op.doc + (" as a bool tile." if op.predicate else ".")
    return NlOp(name, impl)


def _binary(name: str) -> NlOp:
    op = _ops.ALU_OPS[name]
    api, default_dtype = f"nl.{name}", _dt.bool_ if op.predicate else None

    def impl(x, y, *, dtype=None, mask=None, **kwargs):
        frame = sys._getframe(1)
        return core.binary(name, x, y, api, dtype, mask, default_dtype, LIMITS,       # (positional: hot calls)
                           frame if _frames.KERNEL_FRAME_HINTS             # (`frames.as_kernel_frame`, inline)
                           and _INTERNAL_FILES.get(frame.f_code.co_filename) is False else None)
    impl.__doc__ = op.doc + (" as a bool tile." if op.predicate else ".")
    return NlOp(name, impl)


def _remainder(name: str) -> NlOp:
    def impl(x, y, dtype=None, mask=None, **kwargs):   # no `*`: the legacy signature
        return core.binary(name, x, y, dtype=dtype, mask=mask, api=f"nl.{name}", limits=LIMITS)
    impl.__doc__ = _ops.ALU_OPS[name].doc + "."
    return NlOp(name, impl)


# The operators come from the instruction tables (the names of the SDK 2.26 stub):
#   * every two-operand ALU operator but abs_max / abs_min (new-generation operators only); mod and fmod
#     have the legacy signature without `*`;
#   * the one-operand ALU operators that are no Scalar Engine function (logical_not, invert; not bypass);
#   * every Scalar Engine function but copy (nl.copy above), prelu (a parameter only activate2 passes) and
#     gelu_apprx_sigmoid_dx (not in the legacy stub).
_NOT_LEGACY = ("abs_max", "abs_min", "bypass", "copy", "prelu", "gelu_apprx_sigmoid_dx")
for _name, _op in _ops.ALU_OPS.items():
    if _name in _NOT_LEGACY or (_op.arity == 1 and _name in _ops.ACTIVATIONS):
        continue
    globals()[_name] = (_remainder if _name in ("mod", "fmod") else _binary if _op.arity == 2
                        else _unary_alu)(_name)
for _name in _ops.ACTIVATIONS:
    if _name not in _NOT_LEGACY:
        globals()[_name] = _unary(_name)
del _name, _op


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
    """Arithmetic mean over free `axis`, computed in fp32 (fp32 result for integer inputs)."""
    return core.mean(x, axis, dtype=dtype, mask=mask, keepdims=keepdims, api="nl.mean")


def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """Population variance over free `axis` (reduced axes removed; on-chip results stay >= 2-D)."""
    return composites.var(x, axis, dtype=dtype, mask=mask)


def all(x, axis, *, dtype=np.bool_, mask=None, **kwargs):  # noqa: A001 - NKI name
    """True where every element along free `axis` is nonzero (a logical-and reduction), as `dtype` (bool)."""
    return core.reduce("logical_and", x, axis, dtype=dtype, mask=mask, api="nl.all")


# --------------------------------------------------------------------------------------- matmul & co.

def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """x @ y (or x.T @ y with transpose_x=True) into a new fp32 PSUM tile.

    Accumulate with `acc = nl.zeros(..., buffer=nl.psum)` then `acc += nl.matmul(...)`.
    """
    return core.matmul(x, y, transpose_x=transpose_x, mask=mask, api="nl.matmul", limits=LIMITS)


def transpose(x, *, dtype=None, mask=None, **kwargs):
    """[P, F] -> [F, P] (Tensor Engine; the result lives in PSUM)."""
    return core.transpose(x, dtype=dtype, mask=mask, api="nl.transpose")


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """exp(x - max) / sum(exp(x - max)) over free `axis`."""
    return composites.softmax(x, axis, dtype=dtype, compute_dtype=compute_dtype, mask=mask)


def rms_norm(x, w, axis, n, epsilon=1e-06, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """x * rsqrt(sum(x^2, axis) / n + epsilon) * w."""
    return composites.rms_norm(x, w, axis, n, epsilon, dtype=dtype, compute_dtype=compute_dtype, mask=mask)


def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    """Each element of x replaced by 0 with probability `rate` (no rescaling of survivors)."""
    return rng.dropout(x, rate, dtype=dtype, mask=mask)


def where(condition, x, y, *, dtype=None, mask=None, **kwargs):
    """x where condition is true, else y (y a tile or a scalar)."""
    return composites.where(condition, x, y, dtype=dtype, mask=mask)


# -------------------------------------------------------------------------------------------- SPMD, debug

def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False,
               **kwargs):
    """op-reduce tile x across the SPMD programs along `program_axes`; every program gets the result."""
    return collectives.all_reduce(x, op, program_axes, dtype=dtype, mask=mask, parallel_reduce=parallel_reduce,
                                  asynchronous=asynchronous)


def device_print(prefix, x, *, mask=None, **kwargs):
    """Print `prefix` and the values of x to stdout (simulation only)."""
    debug.device_print(prefix, x, mask=mask)


def gemm_grid():
    """The index grid of a matmul result / moving tile, `nl.mgrid[0:pmax, 0:gemm_moving_fmax]` (undocumented
    helper; spec/language.md §4.2 infers this meaning)."""
    return mgrid[0:tile_size.pmax, 0:tile_size.gemm_moving_fmax]


def gemm_stationary_grid():
    """The index grid of a stationary matmul tile, `nl.mgrid[0:pmax, 0:gemm_stationary_fmax]`."""
    return mgrid[0:tile_size.pmax, 0:tile_size.gemm_stationary_fmax]


# ---------------------------------------------------------------------------------------- host helpers

def static_cast(input_data, dtype):
    """Host-side cast of a scalar or NumPy array to an NKI dtype (round to nearest even, ints saturate)."""
    dt = _dt.dtype_of(dtype)
    arr = np.asarray(input_data)
    out = _dt.to_public(_dt.convert(arr.astype(np.float32) if arr.dtype.kind != "f" or arr.dtype.itemsize > 4
                                    else arr, dt), dt)
    return out if arr.ndim else out[()]


class bfp16:
    """`nl.bfp16.min`: bit pattern 0xff80, which is -inf in bfloat16 (spec/language.md §9 item 8)."""

    min = float(np.array([0xFF80], np.uint16).view(ml_dtypes.bfloat16)[0])


def finfo(dtype):
    """NumPy-style float limits of an NKI float dtype (`nl.finfo(nl.bfloat16).min`)."""
    return ml_dtypes.finfo(_dt.dtype_of(dtype).np_dtype)


__all__ = [
    "abs", "add", "affine_range", "all", "all_reduce", "arange", "arctan", "atomic_rmw", "bfloat16", "bfp16",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bool_", "broadcast_to", "ceil", "copy", "cos", "device_print",
    "divide", "dropout", "ds", "empty_like", "equal", "erf", "erf_dx", "exp", "expand_dims", "finfo",
    "float16", "float32", "float8_e4m3", "float8_e5m2", "floor", "fmod", "fp32", "full", "gather_flattened",
    "gelu", "gelu_apprx_sigmoid", "gelu_apprx_tanh", "gelu_dx", "gemm_grid", "gemm_stationary_grid", "greater",
    "greater_equal", "hbm", "int16", "int32", "int8", "invert", "left_shift", "less", "less_equal", "load",
    "load_transpose2d", "log", "logical_and", "logical_not", "logical_or", "logical_xor", "loop_reduce",
    "matmul", "max", "maximum", "mean", "mgrid", "min", "minimum", "mish", "mod", "multiply", "nc", "ndarray",
    "negative", "not_equal", "num_programs", "ones", "par_dim", "power", "private_hbm", "prod", "program_id",
    "program_ndim", "psum", "rand", "random_seed", "reciprocal", "relu", "right_shift", "rms_norm", "rsqrt",
    "sbuf", "sequential_range", "shared_constant", "shared_hbm", "shared_identity_matrix", "sigmoid", "sign",
    "silu", "silu_dx", "sin", "softmax", "softplus", "spmd_dim", "sqrt", "square", "static_cast",
    "static_range", "store", "subtract", "sum", "tan", "tanh", "tfloat32", "tile_size", "transpose", "trunc",
    "uint16", "uint32", "uint8", "var", "where", "zeros", "zeros_like",
]
