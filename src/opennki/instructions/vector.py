"""ISA layer: Vector Engine (DVE) element-wise, reduction and copy instructions, some also runnable on
GpSimd or Scalar (spec/isa.md §6.4-6.7, §6.14-6.16).

Imports the ISA base and tables. Arithmetic is fp32 on up-cast inputs with one rounding on write;
bit-vector ops work on raw integers. Element-wise operands need the same partition count and the same
number of elements per partition; their free dims are matched in flattened row-major order (the ranks may
differ). Statistics (`bn_stats`, `max8`, ...) live in vector_stats.py, accumulator users in
vector_accumulate.py, copies with a run-time element in vector_move.py.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, HardwareUnsupportedError, KernelError, MemoryKindError, expect
from opennki.machine.machine import Machine
from opennki.events import Engine, MemoryKind
from opennki.hw import first_with
from opennki.instructions.base import (READ, WRITE, Instruction, check_column, check_not_both_psum,
                                       check_on_chip, check_partitions, check_same_free, check_same_partitions,
                                       first_column, flat, instruction, is_tensor, operand, operand_f32,
                                       read_operand, read_whole, require)
from opennki.instructions.enums import engine_of
from opennki.instructions.indirection import check_indirection
from opennki.instructions.ops import ARITH, BITVEC, alu
from opennki.machine.arguments import as_axes
from opennki.machine.dtypes import PACKED, SCALAR_TYPES, promote, quiet_call, quiet_fp, quiet_into, to_float32
from opennki.machine.tensor import TensorView

_INT32 = ("int32", "uint32")
_PSUM = MemoryKind.PSUM
# binary ALU functions that give an fp32 result for fp32 operands (arrays or fp32 scalars): an instruction
# computing one for an fp32 destination computes straight into it (Machine.fp32_target). NumPy's ufuncs give
# the values they would give into a new array, overlapping operands included.
INTO_FP32 = frozenset((np.add, np.subtract, np.multiply, np.maximum, np.minimum))
# tensor_scalar's one stage with an immediate and no mask (`nl.add(t, 1.0)`) takes the general path's steps for it
# without its other tests (`TensorScalar.run`); False: the general path (which tests compare against)
ONE_STAGE_IMMEDIATES = True
# immediates a run cell may be keyed on by identity (`TensorScalar.run`): values nothing can change in place
_IMMUTABLE_IMMEDIATES = frozenset((float, int, np.float32))
# A run cell's ufunc call takes its fp32 immediate as a read-only 0-d fp32 array, not the NumPy scalar the first run
# used: a ufunc converts a scalar argument to such an array on every call (a [128, 64] fp32 add, timeit: 1.34 us
# with the scalar, 1.23 us with the array); both are float32 operands of the same loop, so the values are the same.
# False: the cell keeps the scalar (tests/sim/test_run_cells.py compares them).
ARRAY_IMMEDIATES = True
# Scalar Engine tensor_scalar before NeuronCore-v4 (spec/isa.md §6.5)
_ACT_PAIRS = {("multiply", "add"), ("multiply", None), ("add", None)}


def check_elementwise(ctx, dst, inputs: dict) -> None:
    """The rules every element-wise instruction shares: on-chip tiles, <= pmax partitions, same P and F."""
    check_on_chip(dst, "dst")
    check_partitions(dst, "dst", ctx.hw)
    for role, t in inputs.items():
        if is_tensor(t):
            check_on_chip(t, role)
            check_partitions(t, role, ctx.hw)
            check_same_partitions(dst, t, "dst", role)
            check_same_free(dst, t, "dst", role)


def check_engine(executor: Engine, allowed: tuple[Engine, ...], opcode: str) -> None:
    if executor not in allowed:     # tested first: the message is only built for the error
        raise KernelError(f"{opcode} cannot run on the {executor.name.lower()} engine",
                          expected="/".join(e.name.lower() for e in allowed), got=executor.name.lower())


def check_gpsimd_buffers(executor: Engine, tensors: dict) -> None:
    if executor is Engine.GPSIMD:
        for role, t in tensors.items():
            if is_tensor(t):
                expect(t.kind is MemoryKind.SBUF, f"GpSimd cannot access PSUM ('{role}')", expected="SBUF",
                       got=t.kind.name, code="err_unsupported_memory", error=MemoryKindError)


def check_arith(op, role: str) -> None:
    if op.category != ARITH:
        raise KernelError(f"'{role}' must be an arithmetic operator", got=op.name)


def check_v4_ops(ctx, ops) -> None:
    """abs_max / abs_min exist on the NeuronCore-v4 Vector Engine only (spec/isa.md §8)."""
    for op in ops:
        if op is not None and op.name in ("abs_max", "abs_min"):
            require(ctx, "vector_abs_max", f"'{op.name}'")


def _wrap_int(values: np.ndarray, dtype_name: str) -> np.ndarray:
    """Two's-complement wrap of int64 results into a 32-bit integer type (GpSimd native integer math)."""
    target = np.int32 if dtype_name == "int32" else np.uint32
    return values.astype(np.int64).astype(target)


def apply(op, x, operand, reverse: bool):
    """One ALU stage: op(x, operand), or op(operand, x) when reversed; unary ops ignore the operand."""
    if op.arity == 1:
        return quiet_call(op.fn, x)
    return quiet_call(op.fn, operand, x) if reverse else quiet_call(op.fn, x, operand)


@instruction
class TensorTensor(Instruction):
    """dst = op(data1, data2), element-wise.

    Args:
        dst, data1, data2: on-chip tiles with the same partition count and elements per partition; on the
            Vector Engine data1 and data2 cannot both be in PSUM; on GpSimd all operands are in SBUF.
        op: an ALU operator (arithmetic in fp32, or bit-vector on raw integers).
        engine: vector or gpsimd. Unknown picks GpSimd for `power` and, as NKI >= 0.3 does, for operands
            that are all int32/uint32 in SBUF; GpSimd add/subtract/multiply on int32 is native integer
            math with two's-complement wrap (spec gap: wrap assumed).
    """

    opcode = "tensor_tensor"
    indirect_fields = ("dst", "data1")
    writes_on_chip_only = True              # check_elementwise
    default_engine = Engine.VECTOR
    usual_cells = ("dst", "data1", "data2")        # `run`: an fp32 operation into an fp32 destination

    dst: object = operand(WRITE)
    data1: object = operand(READ)
    data2: object = operand(READ)
    op: object = None
    engine: object = None

    @classmethod
    def result(cls, *, data1, data2):
        """`data1`'s shape, the promotion of the two dtypes."""
        return tuple(data1.shape), promote(data1.dtype, data2.dtype)

    @property
    def executor(self) -> Engine:
        chosen = engine_of(self.engine)
        if chosen is not Engine.UNKNOWN:
            return chosen
        if alu(self.op).name == "power":
            return Engine.GPSIMD
        views = (self.dst, self.data1, self.data2)
        if all(v.dtype.name in _INT32 for v in views) and all(v.kind is MemoryKind.SBUF for v in views):
            return Engine.GPSIMD
        return Engine.VECTOR

    def check(self, ctx) -> None:
        check_indirection(self, ctx, (Engine.VECTOR, Engine.GPSIMD))
        op = alu(self.op)
        if op.arity != 2:
            raise KernelError(f"tensor_tensor needs a binary operator, got unary '{op.name}'", got=op.name)
        check_elementwise(ctx, self.dst, {"data1": self.data1, "data2": self.data2})
        ex = self.executor
        check_engine(ex, (Engine.VECTOR, Engine.GPSIMD), self.opcode)
        check_gpsimd_buffers(ex, {"dst": self.dst, "data1": self.data1, "data2": self.data2})
        if ex is Engine.VECTOR:
            check_not_both_psum(self.data1, self.data2, "data1", "data2")
        check_v4_ops(ctx, (op,))
        if op.category == BITVEC:
            for role, t in (("data1", self.data1), ("data2", self.data2), ("dst", self.dst)):
                expect(t.dtype.is_int, f"bit-vector operator '{op.name}' needs integer operands ('{role}')",
                       got=t.dtype, error=DtypeError)

    def run(self, m) -> None:
        cell = self._usual
        if cell is not None and cell[0] is not None:
            x1, x2, out, psum, fn, a, b = cell[0]
            data1, data2, dst = self.data1, self.data2, self.dst
            if (data1._np is x1 and data2._np is x2 and dst._np is out and data1.mask is None
                    and data2.mask is None and dst.mask is None):
                # the same arrays as the usual run below that filled the cell: its ufunc call (design notes,
                # "run cells")
                if psum:
                    dst.storage.unwritten = False
                quiet_into(fn, a, b, out)
                return
        op = alu(self.op)
        if op.category == BITVEC:
            a, b = (read_operand(m, v, self.dst, self.mask, raw=True) for v in (self.data1, self.data2))
            result = op.fn(a, b.astype(a.dtype))
        elif (self.executor is Engine.GPSIMD and op.name in ("add", "subtract", "multiply")
              and all(v.dtype.name in _INT32 for v in (self.dst, self.data1, self.data2))):
            a, b = (read_operand(m, v, self.dst, self.mask, raw=True).astype(np.int64)
                    for v in (self.data1, self.data2))
            m.write(self.dst, _wrap_int(op.fn(a, b), self.dst.dtype.name).reshape(self.dst.shape), self.mask,
                    raw=True)
            return
        elif self.mask is None:
            data1, data2, dst = self.data1, self.data2, self.dst
            x1, x2 = m.read_f32(data1), m.read_f32(data2)
            a, b = flat(x1), flat(x2)
            if op.fn in INTO_FP32 and tuple.__eq__(a.shape, b.shape) and tuple.__eq__(a.shape, dst.shape):
                out = m.fp32_target(dst)
                if out is not None:
                    quiet_into(op.fn, a, b, out)
                    # a and b are views of x1 and x2 when these are [P, F] already (a reshape of other shapes
                    # may copy: a cell must not keep values)
                    if (cell is not None and x1.ndim == 2 and x2.ndim == 2 and read_whole(data1, x1)
                            and read_whole(data2, x2)):
                        cell[0] = (x1, x2, out, dst.storage.kind is _PSUM, op.fn, a, b)
                    return
            result = apply(op, a, b, False)
        else:
            a, b = (read_operand(m, v, self.dst, self.mask) for v in (self.data1, self.data2))
            result = apply(op, a, b, False)
        m.write(self.dst, np.asarray(result).reshape(self.dst.shape), self.mask)


@instruction
class TensorScalar(Instruction):
    """dst = op1(op0(data, operand0), operand1): each operand a scalar or a [P, 1] per-partition column.

    `reverse0` / `reverse1` swap the operand order of a stage; a unary op ignores its operand; `op1=None`
    skips the second stage. Both ops are arithmetic (fp32, rounded once on write) or both bit-vector
    (integers, Vector Engine only). Engines: vector (default), scalar (before NeuronCore-v4 only the pairs
    (multiply, add), (multiply, -), (add, -)), gpsimd (documented for `rsqrt`; other ops are accepted, and
    rejected in hardware-strict mode, spec/isa.md §12.1 C23).
    """

    opcode = "tensor_scalar"
    result_like = "data"
    indirect_fields = ("dst", "data")
    writes_on_chip_only = True              # check_elementwise
    default_engine = Engine.VECTOR
    chooses_engine = True
    usual_cells = ("dst", "data", "operand0")      # `run`: one stage with an immediate into an fp32 destination

    dst: object = operand(WRITE)
    data: object = operand(READ)
    op0: object = None
    operand0: object = operand(READ, optional=True)
    reverse0: bool = False
    op1: object = None
    operand1: object = operand(READ, optional=True)
    reverse1: bool = False
    engine: object = None


    def check(self, ctx) -> None:
        check_indirection(self, ctx, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD))
        check_elementwise(ctx, self.dst, {"data": self.data})
        ex = self.executor
        check_engine(ex, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), self.opcode)
        check_gpsimd_buffers(ex, {"dst": self.dst, "data": self.data, "operand0": self.operand0,
                                  "operand1": self.operand1})
        P = self.data.shape[0]
        op0 = alu(self.op0)
        op1 = alu(self.op1) if self.op1 is not None else None
        if op0.arity == 2:
            check_column(self.operand0, "operand0", P)
        if op1 is not None:
            expect(op0.category == op1.category, "op0 and op1 must both be arithmetic or both bit-vector",
                   got=(op0.name, op1.name), error=KernelError)
            if op1.arity == 2:
                check_column(self.operand1, "operand1", P)
        check_v4_ops(ctx, (op0, op1))
        if op0.category == BITVEC:
            expect(ex is Engine.VECTOR, "bit-vector tensor_scalar runs on the Vector Engine only",
                   got=ex.name.lower(), error=KernelError)
            expect(self.data.dtype.is_int, "bit-vector operators need integer data", got=self.data.dtype,
                   error=DtypeError)
        if ex is Engine.SCALAR and not ctx.hw.capabilities.scalar_engine_any_tensor_scalar:
            pair = (op0.name, op1.name if op1 is not None else None)
            expect(pair in _ACT_PAIRS, "the Scalar Engine runs tensor_scalar only as (multiply, add), (multiply, -) "
                   f"or (add, -) before {first_with('scalar_engine_any_tensor_scalar')}", got=pair, error=KernelError)
        if ex is Engine.GPSIMD and ctx.options.hardware_strict:
            expect(op0.name == "rsqrt" and op1 is None, "tensor_scalar on GpSimd is documented for rsqrt only",
                   got=pair_names(op0, op1), error=HardwareUnsupportedError)

    def run(self, m) -> None:
        cell = self._usual
        if cell is not None and cell[0] is not None:
            operand0, x, out, psum, fn, a, b = cell[0]
            data, dst, o = self.data, self.dst, self.operand0
            if (data._np is x and dst._np is out and data.mask is None and dst.mask is None and (o is operand0 or (
                    type(operand0) is np.ndarray and isinstance(o, TensorView) and o._np is operand0
                    and o.mask is None))):
                # the same immediate (or column array) and arrays as the usual run below that filled the cell (the
                # other fields are the template's): its ufunc call (a view's array is its storage's, shared only
                # by views of the same elements, so each test below holds again, and the storage is marked
                # written: design notes, "run cells")
                if psum:
                    dst.storage.unwritten = False
                quiet_into(fn, a, b, out)
                return
        op0 = alu(self.op0)
        operand0 = self.operand0
        if (self.op1 is None and self.mask is None and op0.fn in INTO_FP32 and op0.category != BITVEC
                and op0.arity == 2 and not isinstance(operand0, TensorView) and ONE_STAGE_IMMEDIATES):
            # one stage with an immediate, unmasked (`nl.add(t, 1.0)`): the steps the general path below takes
            # for it, without the tests that cannot apply
            data, dst = self.data, self.dst
            x = m.read_f32(data)
            s0 = operand_f32(m, operand0, data.shape[0])
            if tuple.__eq__(x.shape, dst.shape):
                out = m.fp32_target(dst)
                if out is not None:
                    a, b = (s0, x) if self.reverse0 else (x, s0)
                    quiet_into(op0.fn, a, b, out)
                    if cell is not None and type(operand0) in _IMMUTABLE_IMMEDIATES and read_whole(data, x):
                        # (the cell holds no storage: that would keep it from being freed, events show when)
                        if ARRAY_IMMEDIATES:
                            s0 = np.array(s0, np.float32)
                            s0.flags.writeable = False
                            a, b = (s0, x) if self.reverse0 else (x, s0)
                        cell[0] = (operand0, x, out, dst.storage.kind is _PSUM, op0.fn, a, b)
                    return
            t = np.asarray(apply(op0, x, s0, self.reverse0))
            m.write(self.dst, t if tuple.__eq__(t.shape, self.dst.shape) else t.reshape(self.dst.shape), None)
            return
        P = self.data.shape[0]
        op1 = alu(self.op1) if self.op1 is not None else None
        if op0.category == BITVEC:
            x = read_operand(m, self.data, self.dst, self.mask, raw=True)

            def col(v):
                return flat(m.read(v))[:, :1].astype(x.dtype) if is_tensor(v) else x.dtype.type(v)
            t = apply(op0, x, col(self.operand0) if op0.arity == 2 else None, self.reverse0)
            if op1 is not None:
                t = apply(op1, t, col(self.operand1) if op1.arity == 2 else None, self.reverse1)
        else:
            mask = self.mask
            raw = raw0 = None
            if mask is not None:
                x = read_operand(m, self.data, self.dst, mask)
            elif isinstance(self.operand0, TensorView) or isinstance(self.operand1, TensorView):
                raw = m.read_f32(self.data)
                x = flat(raw)                       # [P, F]: a [P, 1] column broadcasts along F
            else:
                x = m.read_f32(self.data)           # immediates broadcast to any shape: element-wise the same
            if op0.arity != 2:
                s0 = None
            elif isinstance(self.operand0, TensorView):
                raw0 = m.read_f32(self.operand0)
                s0 = first_column(raw0, P)
            else:
                s0 = operand_f32(m, self.operand0, P)
            s1 = operand_f32(m, self.operand1, P) if op1 is not None and op1.arity == 2 else None
            # two stages into the destination only with an immediate second operand: a column read as a view
            # of the destination would see the first stage's values
            if (mask is None and op0.fn in INTO_FP32 and tuple.__eq__(x.shape, self.dst.shape)
                    and (op1 is None or (op1.fn in INTO_FP32 and not isinstance(self.operand1, TensorView)))):
                dst = self.dst
                out = m.fp32_target(dst)
                if out is not None:
                    a, b = (s0, x) if self.reverse0 else (x, s0)
                    quiet_into(op0.fn, a, b, out)
                    if op1 is not None:
                        quiet_into(op1.fn, *((s1, out) if self.reverse1 else (out, s1)), out)
                    elif (cell is not None and raw0 is not None and raw.ndim == 2 and raw0.ndim == 2
                          and read_whole(self.data, raw) and read_whole(self.operand0, raw0)):
                        # a [P, 1] column: the cell holds its array, of which s0 is a view (as x is of raw: both
                        # [P, F] already, never a copy holding values)
                        cell[0] = (raw0, raw, out, dst.storage.kind is _PSUM, op0.fn, a, b)
                    return
            t = apply(op0, x, s0, self.reverse0)
            if op1 is not None:
                t = apply(op1, t, s1, self.reverse1)
        t = np.asarray(t)
        m.write(self.dst, t if tuple.__eq__(t.shape, self.dst.shape) else t.reshape(self.dst.shape), self.mask)


def pair_names(op0, op1):
    return (op0.name, op1.name if op1 is not None else None)


@instruction
class Reciprocal(Instruction):
    """dst = 1 / data in fp32 on the Vector Engine (more precise than the Scalar Engine's `reciprocal`
    activation, which is only valid on ±[2^-42, 2^42]). 1/0 = inf."""

    opcode = "reciprocal"
    result_like = "data"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"data": self.data})

    def run(self, m) -> None:
        x = read_operand(m, self.data, self.dst, self.mask)
        m.write(self.dst, apply(alu("reciprocal"), x, None, False).reshape(self.dst.shape), self.mask)


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """The reduction axes: an int or a tuple/list of distinct ints in range (machine.arguments.as_axes)."""
    return as_axes(axis, ndim, "reduction axis")


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """Result shape of reducing free `axes` of an on-chip tile; never below 2-D ([P, F] -> [P, 1])."""
    if keepdims:
        return tuple(1 if a in axes else n for a, n in enumerate(shape))
    out = tuple(n for a, n in enumerate(shape) if a not in axes)
    return out if len(out) >= 2 else out + (1,)


def reduce_along(op, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Fold `op` over `axes` (moved last and merged), in fp32 or raw integers."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    merged = moved.reshape(moved.shape[:len(rest)] + (-1,))
    with quiet_fp():
        return op.reduce(merged, -1)


@instruction
class TensorReduce(Instruction):
    """dst = reduce(op, data, axis), optionally negated, over free axes only.

    Args:
        op: a reduction operator (add, subtract, multiply, maximum, minimum, bitwise and/or/xor, logical
            and/or/xor); arithmetic in fp32, bit-vector on raw integers. `subtract` folds as NumPy does
            (x0 - x1 - x2 ...; the fold order is a spec gap).
        axis: int or list of free axes (never 0, the partition axis). The legacy generation reduces any set
            of free axes (NumPy semantics, spec/isa.md §12.1 C15); the trailing-axes rule of NKI >= 0.3 is
            enforced in hardware-strict mode.
        keepdims: keep reduced axes as size 1 (an on-chip result is never below 2-D either way).
        mask (legacy): elements of data it switches off are not folded.
    """

    opcode = "tensor_reduce"
    indirect_fields = ("dst", "data")
    default_engine = Engine.VECTOR
    writes_on_chip_only = True              # check_on_chip(dst)

    dst: object = operand(WRITE)
    op: object = None
    data: object = operand(READ)
    axis: object = None
    negate: bool = False
    keepdims: bool = False

    @classmethod
    def result(cls, *, data, axis, keepdims=False):
        """`data`'s shape with the free axes `axis` removed (kept as 1 with `keepdims`; `reduced_shape`),
        its dtype."""
        return reduced_shape(data.shape, normalize_axes(axis, data.ndim), keepdims), data.dtype

    def check(self, ctx) -> None:
        check_indirection(self, ctx)
        axes = normalize_axes(self.axis, self.data.ndim)
        expect(0 not in axes, "reductions run over free axes only; axis 0 is the partition axis",
               got=axes, hint="use nisa.tensor_partition_reduce or a matmul with a ones vector")
        expect(len(axes) > 0, "at least one axis must be reduced", got=axes)
        check_on_chip(self.data, "data")
        check_on_chip(self.dst, "dst")
        check_partitions(self.data, "data", ctx.hw)
        check_same_partitions(self.dst, self.data, "dst", "data")
        op = alu(self.op)
        if not op.reducible:
            raise KernelError(f"'{op.name}' is not a reduction operator", got=op.name,
                              expected="add, subtract, multiply, maximum, minimum, bitwise/logical and/or/xor")
        if ctx.options.hardware_strict:
            nd = self.data.ndim
            expect(axes == tuple(range(nd - len(axes), nd)),
                   "reduction axes must be the trailing free axes", got=axes, error=HardwareUnsupportedError)
        expected = reduced_shape(self.data.shape, axes, True)
        expect(self.dst.free_size == int(np.prod(expected[1:])),
               "dst must hold the reduced result", expected=expected, got=self.dst.shape)
        if op.category == BITVEC:
            expect(self.data.dtype.is_int and not self.negate,
                   "bit-vector reductions need integer data and no negate", got=self.data.dtype,
                   error=DtypeError)

    def run(self, m) -> None:
        op = alu(self.op)
        axes = normalize_axes(self.axis, self.data.ndim)
        active = Machine.effective_mask(self.data, self.mask)
        x = m.read(self.data, active) if op.category == BITVEC else m.read_f32(self.data, active)
        if active is not None:
            x = np.where(active, x, np.asarray(op.identity).astype(x.dtype))
        r = reduce_along(op, x, axes)
        if self.negate:
            r = -r
        m.write(self.dst, np.asarray(r).reshape(self.dst.shape), self.mask)


@instruction
class TensorCopy(Instruction):
    """dst = src, element-wise; bit-exact when dtypes match (except on the v2 Scalar Engine, which goes
    through fp32), else converted through fp32. Engines: vector (default), scalar, gpsimd (SBUF only)."""

    opcode = "tensor_copy"
    result_like = "src"
    indirect_fields = ("dst", "src")
    default_engine = Engine.VECTOR
    chooses_engine = True
    writes_on_chip_only = True              # check_elementwise

    dst: object = operand(WRITE)
    src: object = operand(READ)
    engine: object = None


    def check(self, ctx) -> None:
        check_indirection(self, ctx, (Engine.VECTOR, Engine.SCALAR))
        check_elementwise(ctx, self.dst, {"src": self.src})
        ex = self.executor
        check_engine(ex, (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD), self.opcode)
        check_gpsimd_buffers(ex, {"dst": self.dst, "src": self.src})

    def run(self, m) -> None:
        values = read_operand(m, self.src, self.dst, self.mask, raw=True)
        lossy_scalar_copy = self.executor is Engine.SCALAR and not m.hw.capabilities.scalar_engine_raw_copy
        if self.src.dtype is self.dst.dtype and not lossy_scalar_copy:
            m.write(self.dst, values.reshape(self.dst.shape), self.mask, raw=True)
        else:
            m.write(self.dst, to_float32(values, self.src.dtype).reshape(self.dst.shape), self.mask)


@instruction
class Memset(Instruction):
    """dst = value everywhere (converted to dst's dtype). Engines: vector (default) or gpsimd (SBUF only).
    Packed MX dtypes accept only 0."""

    opcode = "memset"
    default_engine = Engine.VECTOR
    chooses_engine = True
    writes_on_chip_only = True              # check_on_chip(dst)

    dst: object = operand(WRITE)
    value: object = 0
    engine: object = None


    def check(self, ctx) -> None:
        check_on_chip(self.dst, "dst")
        check_partitions(self.dst, "dst", ctx.hw)
        ex = self.executor
        check_engine(ex, (Engine.VECTOR, Engine.GPSIMD), self.opcode)
        check_gpsimd_buffers(ex, {"dst": self.dst})
        expect(isinstance(self.value, SCALAR_TYPES), "memset value must be a scalar",
               got=type(self.value).__name__, error=DtypeError)
        if self.dst.dtype.kind == PACKED:
            expect(self.value == 0, "packed MX dtypes can only be memset to 0", got=self.value,
                   error=DtypeError)

    def run(self, m) -> None:
        value = np.float32(self.value) if not self.dst.dtype.is_int else np.asarray(self.value)
        m.write(self.dst, value, self.mask)
