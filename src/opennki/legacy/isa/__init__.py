"""Front door (legacy generation): `neuronxcc.nki.isa`, the functional instruction API of NKI 0.1.

Imports language.core, sim and the instruction classes. Each function allocates its result tile (SBUF, or
PSUM for Tensor Engine results; dtype from `dtype=` or the documented default) and issues the one
instruction class that defines the semantics (`opennki.instructions`). Results are deferred like `nl`
results, so `buf[...] = nisa.activation(...)` writes `buf` directly. Instructions that write into
operands the kernel passes (`dma_copy`, `select_reduce`, `tensor_copy_predicated`,
`tensor_copy_dynamic_dst`, `nc_stream_shuffle`) issue at once and return None. Extra keyword arguments
are accepted and ignored, as NKI 0.1 does. The enums are `IntEnum`s with the legacy numbering, defined in
the submodule `constants` (`neuronxcc.nki.isa.constants`) and exported here as the same objects.

Decisions: `get_nc_version()` on trn3 reports gen3, the newest generation the legacy enum has, so kernels
take their newest code path while instructions check the real target. `builtin_custom_op` (a prebuilt
GpSimd library call whose semantics are undocumented) raises UnsupportedError; the 2.20-only
`attention_kernel` / `attention_kernel_cache` (undocumented layouts) are not provided.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from opennki.errors import KernelError, ShapeError, UnsupportedError
from opennki.events import Engine, MemoryKind
from opennki.instructions import dma as _dma
from opennki.instructions import gpsimd as _pool
from opennki.instructions import rng as _rng
from opennki.instructions import scalar as _act
from opennki.instructions import tensor_engine as _pe
from opennki.instructions import vector as _dve
from opennki.instructions import vector_accumulate as _acc
from opennki.instructions import vector_move as _move
from opennki.instructions import vector_stats as _stats
from opennki.instructions.base import check_operator_args, takes_operands, view_signature
from opennki.instructions.enums import engine_of
from opennki.instructions.ops import check_activation_op
from opennki.legacy.isa import constants
from opennki.legacy.isa.constants import dge_mode, engine, nc_version, oob_mode, reduce_cmd
from opennki._src import core
from opennki._src.constants import fp32, target_nc_version  # noqa: F401
from opennki.machine import arguments as _args
from opennki.machine.dtypes import dtype_of
from opennki.machine.index import Index, Predicate
from opennki.machine.tensor import TensorView
from opennki.sim.frames import as_kernel_frame, user_frame
from opennki.sim.program import active, current


tensor_engine = engine.tensor
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
dma_engine = engine.unknown   # the legacy module alias is unused (spec/isa.md §3)
unknown_engine = engine.unknown
_PSUM = MemoryKind.PSUM       # an enum member looked up on its class is slow in hot paths (Python 3.11)


def get_nc_version() -> nc_version:
    """The NeuronCore generation of the current target: gen2 on trn1/inf2, gen3 on trn2 and on trn3 (the
    newest generation the legacy API knows)."""
    return target_nc_version(nc_version)




def _out(shape, dtype, buffer=core.SBUF, frame=None, prog=None):
    return core.alloc(tuple(shape), dtype, buffer, frame=frame, prog=prog)


def _result(cls, dtype=None, buffer=core.SBUF, frame=None, prog=None, **inputs):
    """A new tile for the result of instruction class `cls` on `inputs` (named as its fields), by the
    instruction's own rule (`cls.result`); of `dtype` when one is given. `frame`: the kernel frame, if the
    caller found it already (user_frame); `prog`: the running program, likewise."""
    shape, default = cls.result(**inputs)
    return _out(shape, dtype_of(dtype) if dtype is not None else default, buffer, frame, prog)


def _defer(instr, result, frame=None):
    """Defer `instr`, whose result tile is `result`; `frame`: the kernel frame, if the front door found it already
    (user_frame: it finds it once for the result tile and the deferral)."""
    api = instr.api_name()
    prog = current(api)
    check_operator_args(instr, prog.options.hardware_strict, names=True)
    return prog.defer(instr, result, api, frame)


def _issue(instr) -> None:
    core.issue(instr, instr.api_name(), operator_names=True)


# The usual element-wise front door (`tensor_scalar`, `tensor_tensor`, `activation`) on the lean path, without
# `mask=` or the hardware-strict rules: what the plain path (`_result`, then `_defer`) decides of its arguments
# is a function of its class, the dtype asked for, its tensor operands' view signatures and its other arguments
# (each by type and value; the operator check of `_defer` finds nothing to reject without the hardware-strict
# rules), so each such key is decided once: (key) -> (result shape, result dtype, api, the key
# `core.defer_planned` makes, recipe), and the instruction is deferred as planned (checked once clean). False:
# the plain path.
ELEMENTWISE_PLANS = True
_ELEMENTWISE_PLANS: dict = {}


def _defer_new(cls, dtype, frame, inputs: dict, fields: dict, buffer=core.SBUF):
    """`_defer(cls(dst=out, **fields), out, frame)` with `out = _result(cls, dtype, buffer, frame, **inputs)`
    (the plain path), or its plan (`ELEMENTWISE_PLANS`) when the program runs the lean path without the
    hardware-strict rules and `fields` (its operand fields, then its parameters, in the order of every call) has
    no mask and values `core.planned_fields` keys (a view with a signature or a plain immediate in each operand
    field; in each parameter a value equal only to itself, or to values it stands for: None, a bool, int or str,
    a tuple of ints, an operator or enum member); `buffer`, the result's region, must be a function of these too.
    Planned, the operand fields hold the call's own values (a scalar equal to the key's, `-0.0` for `0.0`, is
    this call's), the parameters the plan's (its recipe's); only the decisions come from the plan."""
    prog = active()
    if ELEMENTWISE_PLANS and prog is not None and prog.lean and not prog.options.hardware_strict \
            and fields.get("mask") is None:
        parts = [cls, type(dtype), dtype]
        found = core.planned_fields(cls, fields.keys(), fields.values(), parts)
        if found is not None:
            names, operands = found
            key = tuple(parts)
            try:
                plan = _ELEMENTWISE_PLANS.get(key)
            except TypeError:               # an unhashable argument: the plain path
                plan = key = None
            if plan is not None:
                shape, result_dtype, api, planned, recipe = plan
                out = core.planned_result(prog, shape, result_dtype, frame, buffer)    # (`alloc`: usually the spare)
                return core.defer_planned_as(prog, planned, recipe, (out, *operands), out, api, frame)
            if key is not None:
                out = _result(cls, dtype, buffer, frame, prog, **inputs)
                api = cls.api_name()
                views = tuple(value for value in operands if isinstance(value, TensorView))
                recipe = (cls, ("dst", *names), {name: v for name, v in fields.items() if name not in names})
                if len(_ELEMENTWISE_PLANS) >= 4096:
                    _ELEMENTWISE_PLANS.clear()
                _ELEMENTWISE_PLANS[key] = (out.storage.shape, out.storage.dtype, api,
                                           (cls, api, tuple(view._sig for view in views), key), recipe)
                return core.defer_planned(prog, recipe, (out, *operands), out, api, frame, views, key)
    out = _result(cls, dtype, buffer, frame, **inputs)
    return _defer(cls(dst=out, **fields), out, frame)


# ------------------------------------------------------------------------------------------------- DMA

def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             **kwargs):
    """dst = src by DMA (HBM and/or SBUF), optionally accumulating (`dst_rmw_op=np.add`). Returns None.
    `mode=` is accepted for `oob_mode=` (the legacy docstring names it so, spec/isa.md §12.1 C29)."""
    oob_mode = kwargs.get("mode", oob_mode)
    _issue(_dma.DmaCopy(dst=dst, src=src, mask=mask, dst_rmw_op=dst_rmw_op, oob_mode=oob_mode,
                        dge_mode=dge_mode))


@takes_operands(_dma.DmaTranspose)
def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    """A new SBUF tile holding src (HBM or SBUF, 2-4-D) with its axes permuted by DMA."""
    api = _dma.DmaTranspose.api_name()
    if core.is_tensor(src) and src.dynamic:
        raise KernelError(f"{api} does not accept indirect (run-time) indices", instruction=api,
                          code="err_indirect_indices_are_not_supported_with_nki_api")
    frame = user_frame()
    out = _result(_dma.DmaTranspose, dtype, src=src, axes=axes, frame=frame)
    return _defer(_dma.DmaTranspose(dst=out, src=src, axes=axes, mask=mask), out, frame)


# ------------------------------------------------------------------------------------ Vector: element-wise

@takes_operands(_dve.TensorTensor)
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    """op(data1, data2) element-wise into a new tile (dtype: promotion of the inputs). Operands of
    broadcastable shapes broadcast (a [P, 1] operand is read with a zero-stride access pattern), as the
    official double-row matmul multiplies [P, N] results by [P, 1] scales."""
    if core.is_tensor(data1) and core.is_tensor(data2) and data1.shape != data2.shape:
        try:
            shape = tuple(np.broadcast_shapes(data1.shape, data2.shape))
        except ValueError:
            shape = None        # the instruction's own check reports the mismatch
        if shape is not None:
            data1 = core.materialize_broadcast(data1, shape, _dve.TensorTensor.api_name())
            data2 = core.materialize_broadcast(data2, shape, _dve.TensorTensor.api_name())
    # called by its `takes_operands` facade: the facade's caller, if a kernel file's, is the kernel frame
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()
    return _defer_new(_dve.TensorTensor, dtype, frame, {"data1": data1, "data2": data2},
                      {"data1": data1, "data2": data2, "op": op, "engine": engine, "mask": mask})


@takes_operands(_dve.TensorScalar)
def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown, **kwargs):
    """op1(op0(data, operand0), operand1) with scalar / [P, 1] operands, into a new tile."""
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_dve.TensorScalar, dtype, frame, {"data": data},
                      {"data": data, "op0": op0, "operand0": operand0, "reverse0": reverse0, "op1": op1,
                       "operand1": operand1, "reverse1": reverse1, "engine": engine, "mask": mask})


@takes_operands(_acc.ScalarTensorTensor)
def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, **kwargs):
    """op1(op0(data, operand0), operand1) with operand0 a scalar / [P, 1] and operand1 a tile."""
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_acc.ScalarTensorTensor, dtype, frame, {"data": data, "operand1": operand1},
                      {"data": data, "op0": op0, "operand0": operand0, "op1": op1, "operand1": operand1,
                       "reverse0": reverse0, "reverse1": reverse1, "mask": mask})


@takes_operands(_dve.Reciprocal)
def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    """1 / data on the Vector Engine into a new tile."""
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_dve.Reciprocal, dtype, frame, {"data": data}, {"data": data, "mask": mask})


@takes_operands(_dve.TensorCopy)
def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """A copy of src in a new SBUF tile."""
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_dve.TensorCopy, dtype, frame, {"src": src}, {"src": src, "engine": engine, "mask": mask})


@takes_operands(_move.TensorCopyDynamicSrc)
def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """A copy of src, whose free-dim index carries a run-time offset (`t[ix, offs[0, k] + iy]`)."""
    frame = user_frame()
    out = _result(_move.TensorCopyDynamicSrc, dtype, src=src, frame=frame)
    return _defer(_move.TensorCopyDynamicSrc(dst=out, src=src, engine=engine, mask=mask), out, frame)


def tensor_copy_dynamic_dst(*, dst, src, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """Copy src into dst, whose free-dim index carries a run-time offset. Returns None."""
    _issue(_move.TensorCopyDynamicDst(dst=dst, src=src, engine=engine, mask=mask))


def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = src where predicate is nonzero (dst keeps its other elements). Returns None."""
    _issue(_move.TensorCopyPredicated(dst=dst, src=src, predicate=predicate, reverse_pred=reverse_pred,
                                      mask=mask))


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    """A new SBUF tile of `shape` filled with `value` (the first dim is the partition dim)."""
    frame = user_frame()
    out = _out(core.normalize_shape(shape), dtype, frame=frame)
    return _defer(_dve.Memset(dst=out, value=value, engine=engine, mask=mask), out, frame)


@takes_operands(_rng.Dropout)
def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    """data with each element zeroed with probability prob (scalar or [P, 1] tile); no rescaling."""
    frame = user_frame()
    out = _result(_rng.Dropout, dtype, data=data, frame=frame)
    return _defer(_rng.Dropout(dst=out, data=data, prob=prob, mask=mask), out, frame)


# -------------------------------------------------------------------------------------- Vector: reductions

@takes_operands(_dve.TensorReduce)
def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    """Reduce free `axis` of data with op into a new tile."""
    axes = _dve.normalize_axes(axis, data.ndim)
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_dve.TensorReduce, dtype, frame, {"data": data, "axis": axes, "keepdims": keepdims},
                      {"op": op, "data": data, "axis": axes, "negate": negate, "keepdims": keepdims, "mask": mask})


@takes_operands(_pool.TensorPartitionReduce)
def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    """Reduce data across partitions: [P, F...] -> a new [1, F...] tile (GpSimd)."""
    frame = user_frame()
    out = _result(_pool.TensorPartitionReduce, dtype, data=data, frame=frame)
    return _defer(_pool.TensorPartitionReduce(dst=out, op=op, data=data, mask=mask), out, frame)


@takes_operands(_acc.TensorTensorScan)
def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None,
                       **kwargs):
    """state = op1(op0(data0[i], state), data1[i]) along the free elements, each state written out."""
    frame = user_frame()
    out = _result(_acc.TensorTensorScan, dtype, data0=data0, data1=data1, frame=frame)
    return _defer(_acc.TensorTensorScan(dst=out, data0=data0, data1=data1, initial=initial, op0=op0, op1=op1,
                                        reverse0=reverse0, reverse1=reverse1, mask=mask), out, frame)


@takes_operands(_acc.TensorScalarReduce)
def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         **kwargs):
    """op0(data, operand0) into a new tile; its reduction with reduce_op goes to reduce_res [P, 1]."""
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_acc.TensorScalarReduce, dtype, frame, {"data": data},
                      {"data": data, "op0": op0, "operand0": operand0, "reduce_op": reduce_op,
                       "reduce_res": reduce_res, "reverse0": reverse0, "mask": mask})


@takes_operands(_acc.RangeSelect)
def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle,
                 reduce_res=None, reduce_op=np.amax, range_start=0, on_false_value=fp32.min, mask=None, dtype=None,
                 **kwargs):
    """on_true_tile where bound0/bound1 comparisons of range_start + index hold, else fp32.min, into a
    new tile; its maximum folds into the Vector Engine accumulators (NeuronCore-v3+)."""
    frame = user_frame()
    out = _result(_acc.RangeSelect, dtype, on_true_tile=on_true_tile, frame=frame)
    return _defer(_acc.RangeSelect(dst=out, on_true_tile=on_true_tile, comp_op0=comp_op0, comp_op1=comp_op1,
                                   bound0=bound0, bound1=bound1, reduce_cmd=reduce_cmd, reduce_res=reduce_res,
                                   reduce_op=reduce_op, range_start=range_start, on_false_value=on_false_value,
                                   mask=mask), out, frame)


def tensor_scalar_cumulative(*, src, dst, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, mask=None,
                             **kwargs):
    """dst[i] = acc = op1(op0(src[i], imm0), acc) through the Vector Engine accumulator; writes `dst` and
    returns None. Not in the SDK 2.26 stub: later releases of the legacy namespace have it (the SDK's own
    legacy-namespace tests at 2.32 call it so)."""
    _issue(_acc.TensorScalarCumulative(dst=dst, src=src, op0=op0, op1=op1, imm0=imm0, imm1=imm1,
                                       reduce_cmd=reduce_cmd, mask=mask))


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = where(predicate, on_true, on_false); its maximum folds into the accumulators. Returns None."""
    _issue(_acc.SelectReduce(dst=dst, predicate=predicate, on_true=on_true, on_false=on_false,
                             reduce_res=reduce_res, reduce_cmd=reduce_cmd, reduce_op=reduce_op,
                             reverse_pred=reverse_pred, mask=mask))


@takes_operands(_stats.BnStats)
def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    """[P, 6] batch-norm statistics of the free elements (even / odd halves)."""
    frame = user_frame()
    out = _result(_stats.BnStats, dtype, data=data, frame=frame)
    return _defer(_stats.BnStats(dst=out, data=data, mask=mask), out, frame)


@takes_operands(_stats.BnAggr)
def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    """[P, 2] (mean, variance) from concatenated bn_stats outputs."""
    frame = user_frame()
    out = _result(_stats.BnAggr, dtype, data=data, frame=frame)
    return _defer(_stats.BnAggr(dst=out, data=data, mask=mask), out, frame)


@takes_operands(_stats.Max8)
def max8(*, src, mask=None, dtype=None, **kwargs):
    """[P, 8]: the 8 largest values of each partition, descending."""
    frame = user_frame()
    out = _result(_stats.Max8, dtype, src=src, frame=frame)
    return _defer(_stats.Max8(dst=out, src=src, mask=mask), out, frame)


@takes_operands(_stats.NcFindIndex8)
def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    """[P, 8] (uint32 unless dtype=uint16): index of each of the 8 vals in data."""
    frame = user_frame()
    out = _result(_stats.NcFindIndex8, dtype, data=data, frame=frame)
    return _defer(_stats.NcFindIndex8(dst=out, data=data, vals=vals, mask=mask), out, frame)


@takes_operands(_stats.NcMatchReplace8)
def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    """A new tile: data with the first occurrence of each of the 8 vals replaced by imm."""
    frame = user_frame()
    out = _result(_stats.NcMatchReplace8, dtype, data=data, frame=frame)
    return _defer(_stats.NcMatchReplace8(dst=out, data=data, vals=vals, imm=imm, dst_idx=dst_idx, mask=mask), out,
                  frame)


def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    """dst[q + i] = src[q + shuffle_mask[i]] in every 32-partition quadrant (255 keeps dst). Returns None."""
    _issue(_move.NcStreamShuffle(dst=dst, src=src, shuffle_mask=_args.as_ints(shuffle_mask, "shuffle_mask"), mask=mask))


# ---------------------------------------------------------------------------------------------- Scalar

@takes_operands(_act.Activation)
def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs):
    """op(data * scale + bias) on the Scalar Engine into a new tile."""
    check_activation_op(op, _act.Activation.api_name())
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_act.Activation, dtype, frame, {"data": data},
                      {"op": op, "data": data, "bias": bias, "scale": scale, "reduce_op": reduce_op,
                       "reduce_res": reduce_res, "reduce_cmd": reduce_cmd, "mask": mask})


@takes_operands(_act.ActivationReduce)
def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """op(data * scale + bias) into a new tile, and its sum over the free dims into reduce_res [P, 1]."""
    check_activation_op(op, _act.ActivationReduce.api_name())
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_act.ActivationReduce, dtype, frame, {"data": data},
                      {"op": op, "data": data, "bias": bias, "scale": scale, "reduce_op": reduce_op,
                       "reduce_res": reduce_res, "mask": mask})


# ---------------------------------------------------------------------------------------------- Tensor

@takes_operands(_pe.NcMatmul)
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, **kwargs):
    """stationary.T @ moving on the Tensor Engine into a new fp32 PSUM tile; accumulate with
    `psum_tile += nisa.nc_matmul(...)`. `perf_mode='double_row_gen3'` (kwargs) selects fp8 double-row."""
    perf_mode = kwargs.get("perf_mode")
    # called by its `takes_operands` facade: the facade's caller, if a kernel file's, is the kernel frame
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()
    prog = active()                     # None outside a kernel: the tile's allocation raises, as it did
    stationary, moving = _pe_input(stationary, frame, prog), _pe_input(moving, frame, prog)
    if MATMUL_PLANS and perf_mode is None and (mask is None or type(mask) is bool) and not tile_position \
            and not tile_size and type(is_stationary_onezero) is bool and type(is_moving_onezero) is bool \
            and type(is_transpose) is bool and prog is not None and prog.lean and not prog.options.hardware_strict:
        ks, km = stationary._sig or view_signature(stationary), moving._sig or view_signature(moving)
        if ks and km:
            # the usual matmul, planned (below): one memo look-up gives its result tile's shape and dtype, its
            # plan's key and recipe, instead of one for the result and a key built again for the plan
            flags = (is_stationary_onezero, is_moving_onezero, is_transpose)
            mkey = (ks, km, flags, mask)
            if core.STATEMENT_PLANS and frame is not None:
                code = frame.f_code
                site = prog.statements.get((id(code), frame.f_lasti))
                if site is not None and site[0] is code and site[1] == mkey:
                    # this statement's last matmul, of these operand signatures and flags (`core.STATEMENT_PLANS`)
                    _, _, entry, made, shape, dtype, key, stmt, api = site
                    out = core.planned_result(prog, shape, dtype, frame, core.PSUM, key)
                    return prog.defer(None, out, api, frame, True, entry, made, (out, stationary, moving), stmt)
            plan = _MATMUL_PLANS.get(mkey)
            if plan is None:
                out = _result(_pe.NcMatmul, None, core.PSUM, frame, prog, stationary=stationary, moving=moving,
                              is_transpose=is_transpose, perf_mode=None)
                if len(_MATMUL_PLANS) >= 4096:
                    _MATMUL_PLANS.clear()
                api = _pe.NcMatmul.api_name()
                _MATMUL_PLANS[(ks, km, flags, mask)] = (out.storage.shape, out.storage.dtype, api, (
                    _pe.NcMatmul, api, (ks, km), (flags, mask)), _matmul_recipe(flags, mask))
                return core.defer_planned(prog, _matmul_recipe(flags, mask), (out, stationary, moving), out, api,
                                          frame, (stationary, moving), (flags, mask))
            shape, dtype, api, key, recipe = plan
            out = core.planned_result(prog, shape, dtype, frame, core.PSUM)   # (`alloc`: usually the spare tile)
            out = core.defer_planned_as(prog, key, recipe, (out, stationary, moving), out, api, frame)
            if core.STATEMENT_PLANS and frame is not None:
                pending = prog.pending
                if pending is not None and pending.result is out and pending._instr is None and \
                        pending.plan is not None:
                    # deferred unbuilt from its clean plan (`core._defer_planned`): the statement's next one reuses it
                    core.remember_statement(prog, frame, mkey, pending.plan, pending.made, shape, dtype, core.PSUM, api)
            return out
    key = None
    if perf_mode is None and type(is_transpose) is bool and prog is not None and prog.lean:
        # the result's shape and dtype are a function of the operands' signatures and the transpose flag
        ks, km = stationary._sig or view_signature(stationary), moving._sig or view_signature(moving)
        key = (ks, km, is_transpose) if ks and km else None
    result = _MATMUL_RESULTS.get(key) if key is not None else None
    if result is not None:
        out = core.alloc(result[0], result[1], core.PSUM, frame=frame, prog=prog, normal=True)
    else:
        out = _result(_pe.NcMatmul, None, core.PSUM, frame, prog, stationary=stationary, moving=moving,
                      is_transpose=is_transpose, perf_mode=perf_mode)
        if key is not None:
            if len(_MATMUL_RESULTS) >= 4096:
                _MATMUL_RESULTS.clear()
            _MATMUL_RESULTS[key] = (out.storage.shape, out.storage.dtype)
    api = _pe.NcMatmul.api_name()
    flags = (is_stationary_onezero, is_moving_onezero, is_transpose)
    if (mask is not None and type(mask) is not bool) or tile_position or tile_size or perf_mode is not None \
            or not (type(is_stationary_onezero) is bool and type(is_moving_onezero) is bool
                    and type(is_transpose) is bool) or prog.options.hardware_strict:
        instr = _pe.NcMatmul(dst=out, stationary=stationary, moving=moving,
                             is_stationary_onezero=is_stationary_onezero, is_moving_onezero=is_moving_onezero,
                             is_transpose=is_transpose, accumulate=False, tile_position=tuple(tile_position),
                             tile_size=tuple(tile_size), perf_mode=perf_mode, mask=mask)
        return _defer(instr, out, frame)
    # the usual matmul: a function of its operands' signatures and flags (core.defer_planned); the operator
    # check of `_defer` (check_operator_args, operators by name allowed) finds nothing to reject without the
    # hardware-strict rules
    return core.defer_planned(prog, _matmul_recipe(flags, mask), (out, stationary, moving), out, api, frame,
                              (stationary, moving), (flags, mask))


# (stationary's view signature, moving's, is_transpose) -> (shape, dtype) of nc_matmul's result tile (`_result`:
# NcMatmul.result, the shape normalised), for the usual matmul (no perf mode)
_MATMUL_RESULTS: dict = {}
# The usual matmul on the lean path (no perf mode, tiling or hardware-strict rules, bool flags, no `mask=` or a
# bool one): (stationary's view signature, moving's, the three flags, mask) -> (shape, dtype of its result tile,
# api, the key `core.defer_planned` makes of its operands and params, its recipe), all functions of that key, so
# each statement looks up one memo. False: `_MATMUL_RESULTS` and `core.defer_planned` (the plain path).
MATMUL_PLANS = True
_MATMUL_PLANS: dict = {}


@functools.lru_cache(maxsize=16)
def _matmul_recipe(flags: tuple, mask=None) -> tuple:
    """`nc_matmul`'s instruction without tiling or a perf mode (`core._built`), of (dst, stationary, moving), with
    `mask` None or a constant `mask=True` / `False` (causal kernels compare loop indices: `i * 128 >= j * 512`),
    which the lean path checks as it checks an unmasked instruction (`Program._check`)."""
    onezero_s, onezero_m, transpose = flags
    return _pe.NcMatmul, ("dst", "stationary", "moving"), {
        "is_stationary_onezero": onezero_s, "is_moving_onezero": onezero_m, "is_transpose": transpose,
        "accumulate": False, "tile_position": (), "tile_size": (), "perf_mode": None, "mask": mask}


def _pe_input(t, frame=None, prog=None):
    """A matmul operand that is the PSUM result tile of an earlier API call (a Tensor Engine nc_transpose) is
    copied to SBUF first: the legacy compiler places result tiles and inserts that copy (the official
    flash-attention backward kernel relies on it). A PSUM tensor the kernel declared stays an error."""
    if isinstance(t, TensorView) and t.storage.kind is _PSUM and not t.storage.declared:
        return core.to_sbuf(t, _pe.NcMatmul.api_name(), frame, prog)
    return t


@takes_operands(_pe.NcTranspose)
def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """[P, F] -> [F, P]: Tensor Engine (into PSUM) or Vector Engine (<= 32 x 32, into SBUF)."""
    chosen = engine_of(engine)
    if chosen is Engine.UNKNOWN:
        # the Tensor Engine reads SBUF only; a small tile already in PSUM goes to the Vector Engine
        chosen = Engine.VECTOR if data.kind is MemoryKind.PSUM else Engine.TENSOR
    buffer = core.PSUM if chosen is Engine.TENSOR else core.SBUF     # a function of `chosen` and data's region
    frame = as_kernel_frame(sys._getframe(2)) or user_frame()      # (`tensor_tensor`)
    return _defer_new(_pe.NcTranspose, dtype, frame, {"data": data}, {"data": data, "engine": chosen, "mask": mask},
                      buffer)


# --------------------------------------------------------------------------------------------- GpSimd

def iota(expr, dtype, *, mask=None, **kwargs):
    """The values of an affine index expression (e.g. `nl.arange(128)[:, None] * 2 + nl.arange(64)[None, :]`)
    as a new SBUF tile of `dtype`; dim 0 of the expression is the partition dim."""
    if isinstance(expr, (int, np.integer)):
        expr = Index(int(expr), (0, 0), (1, 1))
    if not isinstance(expr, Index):
        raise ShapeError(f"{_pool.Iota.api_name()} takes an affine index expression built from nl.arange",
                         got=type(expr).__name__, instruction=_pool.Iota.api_name())
    shape = expr.shape if expr.ndim >= 2 else expr.shape + (1,)
    coeffs = expr.coeffs if expr.ndim >= 2 else expr.coeffs + (0,)
    pattern = tuple((c, n) for c, n in zip(coeffs[1:], shape[1:]))
    frame = user_frame()
    out = _out(shape, dtype, frame=frame)
    return _defer(_pool.Iota(dst=out, pattern=pattern, offset=expr.const, channel_multiplier=coeffs[0], mask=mask),
                  out, frame)


@takes_operands(_pool.AffineSelect)
def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    """on_true_tile where the affine predicate `pred` (e.g. `iy < ix`) holds, else on_false_value, into a
    new SBUF tile."""
    api = _pool.AffineSelect.api_name()
    if not isinstance(pred, Predicate):
        raise KernelError(f"{api}: pred must be a comparison of nl.arange / nl.mgrid indices",
                          got=type(pred).__name__, instruction=api)
    frame = user_frame()
    out = _result(_pool.AffineSelect, dtype, on_true_tile=on_true_tile, frame=frame)
    return _defer(_pool.AffineSelect(dst=out, on_true_tile=on_true_tile, on_false_value=on_false_value, pred=pred,
                                     mask=mask), out, frame)


@takes_operands(_pool.LocalGather)
def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, **kwargs):
    """A new [P, V, num_elem_per_idx] tile gathered within each GpSimd core (16 partitions) at the core's
    uint16 element offsets."""
    frame = user_frame()
    out = _result(_pool.LocalGather, None, src_buffer=src_buffer, index=index, num_elem_per_idx=num_elem_per_idx,
                  num_valid_indices=num_valid_indices, frame=frame)
    return _defer(_pool.LocalGather(dst=out, src_buffer=src_buffer, index=index, num_elem_per_idx=num_elem_per_idx,
                                    num_valid_indices=num_valid_indices, mask=mask), out, frame)


@takes_operands(_pool.SequenceBounds)
def sequence_bounds(*, segment_ids, dtype=None, **kwargs):
    """A new [1, 2, n] tile: (start, end) of the run of equal ids each element belongs to (n, -1 for 0)."""
    frame = user_frame()
    out = _result(_pool.SequenceBounds, dtype, segment_ids=segment_ids, frame=frame)
    return _defer(_pool.SequenceBounds(dst=out, segment_ids=segment_ids), out, frame)


def builtin_custom_op(function_name, lib_file_name, ulib_to_ucode_version, ulib_to_isa_version, srcs, dsts,
                      **kwargs):
    """Runs a prebuilt GpSimd library kernel on hardware. Its semantics are not documented, so opennki
    cannot simulate it and raises UnsupportedError."""
    raise UnsupportedError(f"nisa.builtin_custom_op({function_name!r}) calls a prebuilt GpSimd library "
                           f"({lib_file_name!r}) whose semantics are not documented; opennki cannot simulate it",
                           instruction="nisa.builtin_custom_op",
                           hint="write the operation with documented nisa instructions")


__all__ = [
    "engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "fp32", "get_nc_version", "constants",
    "tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine", "dma_engine", "unknown_engine",
    "dma_copy", "dma_transpose", "tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "reciprocal",
    "tensor_copy", "tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "tensor_copy_predicated", "memset",
    "dropout", "tensor_reduce", "tensor_partition_reduce", "tensor_tensor_scan", "tensor_scalar_reduce",
    "tensor_scalar_cumulative",
    "range_select", "select_reduce", "bn_stats", "bn_aggr", "max8", "nc_find_index8", "nc_match_replace8",
    "nc_stream_shuffle", "activation", "activation_reduce", "nc_matmul", "nc_transpose", "iota", "affine_select",
    "local_gather", "sequence_bounds", "builtin_custom_op",
]
