"""Front door (legacy generation): `neuronxcc.nki.isa`, the functional instruction API of NKI 0.1.

Each function allocates its result tile (SBUF, or PSUM for Tensor Engine instructions; dtype from `dtype=`
or the documented default) and issues the one instruction class that defines the semantics
(`opennki.instructions`). Results are deferred like `nl` results, so `buf[...] = nisa.activation(...)`
writes `buf` directly. The legacy enums are `IntEnum`s with the legacy numbering.
"""

from __future__ import annotations

import enum

from opennki.errors import KernelError, ShapeError
from opennki.events import Engine, MemoryKind
from opennki.instructions.enums import engine_of
from opennki.instructions import dma as _dma
from opennki.instructions import gpsimd as _pool
from opennki.instructions import scalar as _act
from opennki.instructions import tensor_engine as _pe
from opennki.instructions import vector as _dve
from opennki.instructions.ops import activation_fn
from opennki.language import core
from opennki.machine.dtypes import dtype_of, float32, promote
from opennki.machine.index import Index
from opennki.sim.program import current


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


class dge_mode(enum.IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.unknown   # the legacy module alias is unused (spec/isa.md §3)
unknown_engine = engine.unknown


class fp32:
    """`nisa.fp32.min`: the most negative finite fp32 (bit pattern 0xff7fffff)."""

    min = -3.4028234663852886e38


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the current target (gen2 = trn1/inf2, gen3 = trn2)."""
    from opennki.language.constants import _hw
    return nc_version(min(_hw().nc_version, 3))


def _out(shape, dtype, buffer=core.SBUF):
    return core.alloc(tuple(shape), dtype, buffer)


def _defer(instr, result, api):
    return current(api).defer(instr, result, api)


def _tile_dtype(x):
    return x.dtype if core.is_tensor(x) else float32


# ------------------------------------------------------------------------------------------------- DMA

def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             **kwargs):
    """dst = src by DMA (HBM and/or SBUF), optionally accumulating (`dst_rmw_op=np.add`)."""
    current("nisa.dma_copy").issue(_dma.DmaCopy(dst=dst, src=src, mask=mask, dst_rmw_op=dst_rmw_op,
                                               oob_mode=oob_mode, dge_mode=dge_mode), "nisa.dma_copy")


# ------------------------------------------------------------------------------------------ Vector etc.

def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    """op(data1, data2) element-wise into a new tile (dtype: promotion of the inputs)."""
    dt = dtype_of(dtype) if dtype is not None else promote(data1.dtype, data2.dtype)
    out = _out(data1.shape, dt)
    return _defer(_dve.TensorTensor(dst=out, data1=data1, data2=data2, op=op, engine=engine, mask=mask), out,
                  "nisa.tensor_tensor")


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown, **kwargs):
    """op1(op0(data, operand0), operand1) with scalar / [P, 1] operands, into a new tile."""
    out = _out(data.shape, dtype if dtype is not None else data.dtype)
    return _defer(_dve.TensorScalar(dst=out, data=data, op0=op0, operand0=operand0, reverse0=reverse0, op1=op1,
                                      operand1=operand1, reverse1=reverse1, engine=engine, mask=mask), out,
                  "nisa.tensor_scalar")


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    """Reduce free `axis` of data with op into a new tile."""
    axes = _dve.normalize_axes(axis, data.ndim)
    out = _out(_dve.reduced_shape(data.shape, axes, keepdims), dtype if dtype is not None else data.dtype)
    return _defer(_dve.TensorReduce(dst=out, op=op, data=data, axis=axes, negate=negate, keepdims=keepdims,
                                      mask=mask), out, "nisa.tensor_reduce")


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """A copy of src in a new SBUF tile."""
    out = _out(src.shape, dtype if dtype is not None else src.dtype)
    return _defer(_dve.TensorCopy(dst=out, src=src, engine=engine, mask=mask), out, "nisa.tensor_copy")


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    """A new SBUF tile of `shape` filled with `value` (the first dim is the partition dim)."""
    out = _out(core.normalize_shape(shape), dtype)
    return _defer(_dve.Memset(dst=out, value=value, engine=engine, mask=mask), out, "nisa.memset")


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """[P, 6] batch-norm statistics of the free elements (even / odd halves)."""
    out = _out((data.shape[0], 6), dtype if dtype is not None else data.dtype)
    return _defer(_dve.BnStats(dst=out, data=data, mask=mask), out, "nisa.bn_stats")


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """[P, 2] (mean, variance) from concatenated bn_stats outputs."""
    out = _out((data.shape[0], 2), dtype if dtype is not None else data.dtype)
    return _defer(_dve.BnAggr(dst=out, data=data, mask=mask), out, "nisa.bn_aggr")


# ---------------------------------------------------------------------------------------------- Scalar

def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs):
    """op(data * scale + bias) on the Scalar Engine into a new tile."""
    fn = activation_fn(op)
    if not fn.is_token:
        raise KernelError(f"'{fn.name}' is not an activation function of the Scalar Engine", got=fn.name)
    out = _out(data.shape, dtype if dtype is not None else data.dtype)
    return _defer(_act.Activation(dst=out, op=op, data=data, bias=bias, scale=scale, reduce_op=reduce_op,
                                    reduce_res=reduce_res, reduce_cmd=reduce_cmd, mask=mask), out,
                  "nisa.activation")


# ---------------------------------------------------------------------------------------------- Tensor

def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, **kwargs):
    """stationary.T @ moving on the Tensor Engine into a new fp32 PSUM tile; accumulate with
    `psum_tile += nisa.nc_matmul(...)`."""
    perf_mode = kwargs.get("perf_mode")
    double = perf_mode is not None and str(perf_mode).startswith("double_row")
    M = stationary.free_size // (2 if double else 1)
    N = moving.free_size // (2 if double else 1)
    out = _out((M, N) if not is_transpose else (M, stationary.shape[0]),
               float32 if not is_transpose else stationary.dtype, core.PSUM)
    return _defer(_pe.NcMatmul(dst=out, stationary=stationary, moving=moving,
                                         is_stationary_onezero=is_stationary_onezero,
                                         is_moving_onezero=is_moving_onezero, is_transpose=is_transpose,
                                         accumulate=False, tile_position=tuple(tile_position),
                                         tile_size=tuple(tile_size), perf_mode=perf_mode, mask=mask),
                  out, "nisa.nc_matmul")


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """[P, F] -> [F, P]: Tensor Engine (into PSUM) or Vector Engine (<= 32 x 32, into SBUF)."""
    chosen = engine_of(engine)
    if chosen is Engine.UNKNOWN:
        # the Tensor Engine reads SBUF only; a small tile already in PSUM goes to the Vector Engine
        chosen = Engine.VECTOR if data.kind is MemoryKind.PSUM else Engine.TENSOR
    buffer = core.PSUM if chosen is Engine.TENSOR else core.SBUF
    out = _out((data.free_size, data.shape[0]), dtype if dtype is not None else data.dtype, buffer)
    return _defer(_pe.NcTranspose(dst=out, data=data, engine=chosen, mask=mask), out,
                  "nisa.nc_transpose")


# --------------------------------------------------------------------------------------------- GpSimd

def iota(expr, dtype, *, mask=None, **kwargs):
    """The values of an affine index expression (e.g. `nl.arange(128)[:, None] * 2 + nl.arange(64)[None, :]`)
    as a new SBUF tile of `dtype`; dim 0 of the expression is the partition dim."""
    if isinstance(expr, int):
        expr = Index(expr, (0, 0), (1, 1))
    if not isinstance(expr, Index):
        raise ShapeError("nisa.iota takes an affine index expression built from nl.arange", got=type(expr).__name__)
    shape = expr.shape if expr.ndim >= 2 else expr.shape + (1,)
    coeffs = expr.coeffs if expr.ndim >= 2 else expr.coeffs + (0,)
    pattern = tuple((c, n) for c, n in zip(coeffs[1:], shape[1:]))
    out = _out(shape, dtype)
    return _defer(_pool.Iota(dst=out, pattern=pattern, offset=expr.const, channel_multiplier=coeffs[0],
                              mask=mask), out, "nisa.iota")
