"""Front door (new generation): `nki.isa`, the `dst=` instruction API of NKI 0.2 and later.

Each function builds the one instruction class that defines its semantics (`opennki.instructions`) with the
caller's destination and issues it. Unknown keyword arguments are errors, as in NKI >= 0.2; the only
tolerated extra is `dtype=` when it names the destination's own dtype (official samples pass it to
`tensor_copy`).
"""

from __future__ import annotations

from opennki.errors import DtypeError, KernelError
from opennki.instructions import dma as _dma
from opennki.instructions import gpsimd as _pool
from opennki.instructions import scalar as _act
from opennki.instructions import tensor_engine as _pe
from opennki.instructions import vector as _dve
from opennki.instructions.enums import (dge_mode, engine, matmul_perf_mode, nc_version, oob_mode,  # noqa: F401
                                        reduce_cmd)
from opennki.instructions.ops import activation_fn
from opennki.machine.dtypes import dtype_of
from opennki.sim.program import current

tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class dma_engine:
    """`nisa.dma_engine`: which DMA hardware moves data (`dma`: the shared DMA rings; `gpsimd_dma`: the
    GpSimd-integrated DMA)."""

    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the current target (`NEURON_PLATFORM_TARGET_OVERRIDE`)."""
    from opennki.language.constants import _hw
    return nc_version(_hw().nc_version)


def _issue(instr, api: str) -> None:
    current(api).issue(instr, api)


def _check_dtype_kw(dst, dtype, api: str) -> None:
    if dtype is not None and dtype_of(dtype) is not dst.dtype:
        raise DtypeError(f"{api} writes dst.dtype; a different dtype= is not accepted", expected=dst.dtype,
                         got=dtype_of(dtype), instruction=api)


def dma_copy(dst, src, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=engine.unknown, name=None,
             priority=None):
    """dst = src by DMA (HBM <-> SBUF), converting through fp32 when dtypes differ."""
    _issue(_dma.DmaCopy(dst=dst, src=src, oob_mode=oob_mode, dge_mode=dge_mode, engine=engine, priority=priority,
                       name=name), "nisa.dma_copy")


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    """dst = op(data1, data2), element-wise."""
    _issue(_dve.TensorTensor(dst=dst, data1=data1, data2=data2, op=op, engine=engine, name=name),
           "nisa.tensor_tensor")


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    """dst = op1(op0(data, operand0), operand1); operands are scalars or [P, 1] columns."""
    _issue(_dve.TensorScalar(dst=dst, data=data, op0=op0, operand0=operand0, reverse0=reverse0, op1=op1,
                               operand1=operand1, reverse1=reverse1, engine=engine, name=name),
           "nisa.tensor_scalar")


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    """dst = reduce(op, data, axis) over trailing free axes."""
    _issue(_dve.TensorReduce(dst=dst, op=op, data=data, axis=axis, negate=negate, keepdims=keepdims,
                               name=name), "nisa.tensor_reduce")


def tensor_copy(dst, src, engine=engine.unknown, name=None, dtype=None):
    """dst = src (bit-exact for equal dtypes)."""
    _check_dtype_kw(dst, dtype, "nisa.tensor_copy")
    _issue(_dve.TensorCopy(dst=dst, src=src, engine=engine, name=name), "nisa.tensor_copy")


def memset(dst, value, engine=engine.unknown, name=None):
    """dst = value everywhere."""
    _issue(_dve.Memset(dst=dst, value=value, engine=engine, name=name), "nisa.memset")


def bn_stats(dst, data, name=None):
    """dst[P, 6] = batch-norm statistics of data's free elements."""
    _issue(_dve.BnStats(dst=dst, data=data, name=name), "nisa.bn_stats")


def bn_aggr(dst, data, name=None):
    """dst[P, 2] = (mean, variance) aggregated from bn_stats outputs."""
    _issue(_dve.BnAggr(dst=dst, data=data, name=name), "nisa.bn_aggr")


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None):
    """dst = op(data * scale + bias) on the Scalar Engine."""
    fn = activation_fn(op)
    if not fn.is_token:
        raise KernelError(f"'{fn.name}' is not an activation function of the Scalar Engine", got=fn.name,
                          instruction="nisa.activation")
    _issue(_act.Activation(dst=dst, op=op, data=data, bias=bias, scale=scale, reduce_op=reduce_op,
                             reduce_res=reduce_res, reduce_cmd=reduce_cmd, name=name), "nisa.activation")


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None):
    """dst (+)= stationary.T @ moving on the Tensor Engine (fp32 accumulation in PSUM)."""
    _issue(_pe.NcMatmul(dst=dst, stationary=stationary, moving=moving,
                                  is_stationary_onezero=is_stationary_onezero, is_moving_onezero=is_moving_onezero,
                                  is_transpose=is_transpose, accumulate=accumulate,
                                  tile_position=tuple(tile_position or ()), tile_size=tuple(tile_size or ()),
                                  perf_mode=perf_mode, name=name), "nisa.nc_matmul")


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    """dst = data.T on the Tensor Engine (to PSUM) or Vector Engine (<= 32 x 32)."""
    _issue(_pe.NcTranspose(dst=dst, data=data, engine=engine, name=name), "nisa.nc_transpose")


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    """dst[p, f] = offset + channel_multiplier * p + pattern value at f (integer arithmetic)."""
    _issue(_pool.Iota(dst=dst, pattern=tuple(tuple(p) for p in pattern), offset=offset,
                       channel_multiplier=channel_multiplier, name=name), "nisa.iota")
