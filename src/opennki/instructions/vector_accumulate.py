"""ISA layer: Vector Engine instructions that carry state along the free dim or across instructions
(spec/isa.md §6.9-6.11, §6.19, §6.20).

Imports the ISA base, the accumulator state machine and the vector helpers. `tensor_tensor_scan` carries an
fp32 state along each partition's elements; `tensor_scalar_reduce`, `tensor_scalar_cumulative`,
`range_select` and `select_reduce` fold their results into the shared DVE accumulators (accumulators.py),
so a reduction can be chained over several instructions and read out (`reduce_res`) by the last one.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, ShapeError, expect
from opennki.machine.dtypes import promote, quiet_into
from opennki.machine.machine import Machine
from opennki.events import Engine
from opennki.instructions import accumulators as acc
from opennki.instructions.base import (READ, WRITE, Instruction, check_column, check_dtype,
                                       require,
                                       check_not_both_psum, check_on_chip, check_same_partitions, column, flat,
                                       instruction, is_tensor, operand, read_operand)
from opennki.instructions.enums import reduce_cmd as cmds
from opennki.instructions.indirection import check_indirection
from opennki.instructions.ops import alu
from opennki.instructions.vector import INTO_FP32, apply, check_arith, check_elementwise, check_v4_ops

FP32_MIN = float(np.finfo(np.float32).min)   # -3.4028235e38, bit pattern 0xff7fffff (`nisa.fp32.min`)
_COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")
_STATE_CMDS = (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce, cmds.load_reduce)


def check_reduce_res(reduce_res, data, role: str = "reduce_res") -> None:
    if reduce_res is not None:
        check_on_chip(reduce_res, role)
        check_same_partitions(reduce_res, data, role, "data")
        expect(reduce_res.free_size == 1, f"{role} must be [P, 1]", got=reduce_res.shape)


def fold_and_read_out(m, instr, values: np.ndarray, op, cmd, *, reset_value: float, init=None,
                      negate: bool = False) -> None:
    """Fold [P, F] fp32 `values` into the DVE accumulators and write `reduce_res` if the instruction has one."""
    P = values.shape[0]
    active = Machine.effective_mask(instr.dst, instr.mask)
    contribution = acc.partial(op, values, active) if cmd in acc.FOLDING else None
    acc.step(m.dve_acc, P, cmd, op, contribution, reset_value=reset_value, init=init, idle_clobbers=True,
             lanes=acc.lanes_of(active))
    res = getattr(instr, "reduce_res", None)
    if res is not None:
        out = m.dve_acc[:P].copy()
        m.write(res, (-out if negate else out).reshape(res.shape), Machine.effective_mask(res, instr.mask))


@instruction
class TensorTensorScan(Instruction):
    """Scan along each partition's flattened free elements with an fp32 state (spec/isa.md §6.9):

        state = initial; for i: state = op1(op0(data0[i], state), data1[i]); dst[i] = state

    `reverse0` / `reverse1` swap a stage's operands (op0(state, data0[i]) / op1(data1[i], t)). With
    op0=multiply, op1=add this is y[i] = a[i] * y[i-1] + b[i]. The carried state is the fp32 value, not the
    rounded output (spec gap, assumed). `initial`: fp32 scalar or [P, 1] tile. Elements the legacy mask
    switches off are skipped (the state passes through them). data0 and data1 cannot both be in PSUM."""

    opcode = "tensor_tensor_scan"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data0: object = operand(READ)
    data1: object = operand(READ)
    initial: object = operand(READ, optional=True)
    op0: object = None
    op1: object = None
    reverse0: bool = False
    reverse1: bool = False

    @classmethod
    def result(cls, *, data0, data1):
        """`data0`'s shape, the promotion of the two dtypes."""
        return tuple(data0.shape), promote(data0.dtype, data1.dtype)

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"data0": self.data0, "data1": self.data1})
        check_not_both_psum(self.data0, self.data1, "data0", "data1")
        check_column(self.initial, "initial", self.dst.shape[0])
        op0, op1 = alu(self.op0), alu(self.op1)
        for role, op in (("op0", op0), ("op1", op1)):
            check_arith(op, role)
            expect(op.arity == 2, f"{role} of tensor_tensor_scan must be binary", got=op.name, error=KernelError)
        check_v4_ops(ctx, (op0, op1))

    def run(self, m) -> None:
        P = self.dst.shape[0]
        op0, op1 = alu(self.op0), alu(self.op1)
        a = read_operand(m, self.data0, self.dst, self.mask)
        b = read_operand(m, self.data1, self.dst, self.mask)
        active = Machine.effective_mask(self.dst, self.mask)
        on = None if active is None else flat(active)
        state = column(m, self.initial, P)[:, 0]
        out = np.empty_like(a)
        for i in range(a.shape[1]):
            t = apply(op0, a[:, i], state, self.reverse0)
            new = apply(op1, t, b[:, i], self.reverse1).astype(np.float32)
            state = new if on is None else np.where(on[:, i], new, state)
            out[:, i] = state
        m.write(self.dst, out.reshape(self.dst.shape), self.mask)


@instruction
class ScalarTensorTensor(Instruction):
    """dst = op1(op0(data, operand0), operand1): operand0 a scalar or [P, 1] column, operand1 a tile
    shaped like data. Arithmetic ops only, fp32 throughout, one rounding on write. `reverse0` / `reverse1`
    swap the operand order of a stage. data and operand1 cannot both be in PSUM.

    NKI 0.7 (SDK 2.33 signature: `reduce_cmd`, `reduce_op`, `reduce_res`): with a `reduce_op` the result is also
    reduced along the free dims into the DVE accumulators as `tensor_scalar_reduce` does (reduce_cmd
    reset_reduce by default), and `reduce_res` [P, 1] receives them. Without one (`reduce_op=None`) the
    accumulators are untouched."""

    opcode = "scalar_tensor_tensor"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    op0: object = None
    operand0: object = operand(READ, optional=True)
    op1: object = None
    operand1: object = operand(READ)
    reverse0: bool = False
    reverse1: bool = False
    reduce_op: object = None
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = cmds.reset_reduce

    @classmethod
    def result(cls, *, data, operand1):
        """`data`'s shape, the promotion of `data`'s and `operand1`'s dtypes."""
        return tuple(data.shape), promote(data.dtype, operand1.dtype)

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"data": self.data, "operand1": self.operand1})
        expect(is_tensor(self.operand1), "operand1 of scalar_tensor_tensor must be a tile",
               got=type(self.operand1).__name__, error=DtypeError)
        check_not_both_psum(self.data, self.operand1, "data", "operand1")
        op0, op1 = alu(self.op0), alu(self.op1)
        check_arith(op0, "op0")
        check_arith(op1, "op1")
        expect(op1.arity == 2, "op1 of scalar_tensor_tensor must be binary", got=op1.name, error=KernelError)
        if op0.arity == 2:
            check_column(self.operand0, "operand0", self.data.shape[0])
        check_v4_ops(ctx, (op0, op1))
        if self.reduce_op is None:
            expect(self.reduce_res is None, "scalar_tensor_tensor writes reduce_res only with a reduce_op",
                   got="reduce_res without reduce_op", error=KernelError)
            return
        expect(alu(self.reduce_op).name in ("add", "subtract", "multiply", "maximum", "minimum"),
               "reduce_op must be add, subtract, multiply, maximum or minimum", got=alu(self.reduce_op).name,
               error=KernelError)
        acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce), self.opcode,
                             reduce_res=self.reduce_res, idle_reads_undefined=True)
        check_reduce_res(self.reduce_res, self.data)

    def run(self, m) -> None:
        P = self.data.shape[0]
        op0, op1 = alu(self.op0), alu(self.op1)
        x = read_operand(m, self.data, self.dst, self.mask)
        u = read_operand(m, self.operand1, self.dst, self.mask)
        s0 = column(m, self.operand0, P) if op0.arity == 2 else None
        if (self.mask is None and self.reduce_op is None and op0.fn in INTO_FP32 and op1.fn in INTO_FP32
                and tuple.__eq__(x.shape, self.dst.shape) and tuple.__eq__(u.shape, self.dst.shape)):
            out = m.fp32_target(self.dst)
            # the second stage reads operand1 after the first wrote the destination: not where they overlap
            if out is not None and not np.may_share_memory(u, out):
                quiet_into(op0.fn, *((s0, x) if self.reverse0 else (x, s0)), out)
                quiet_into(op1.fn, *((u, out) if self.reverse1 else (out, u)), out)
                return
        t = apply(op0, x, s0, self.reverse0)
        r = np.asarray(apply(op1, t, u, self.reverse1), np.float32)
        if self.reduce_op is not None:
            rop = alu(self.reduce_op)
            cmd = acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce),
                                       self.opcode)
            fold_and_read_out(m, self, r.reshape(P, -1), rop, cmd, reset_value=rop.identity)
        m.write(self.dst, r.reshape(self.dst.shape), self.mask)


@instruction
class TensorScalarReduce(Instruction):
    """dst = op0(data, operand0); the result is reduced along the free dims with `reduce_op` into the DVE
    accumulators, and reduce_res[P, 1] (optional in NKI >= 0.6) receives them (negated with
    `reduce_res_negate`).

    Args:
        op0: an arithmetic operator (unary ones ignore operand0); `reverse0` is documented as unsupported by
            the hardware and rejected.
        reduce_op: add, subtract, multiply, maximum or minimum (subtract: acc - x0 - x1 - ...).
        reduce_cmd: reset_reduce (legacy behaviour, the default), reduce (continue the accumulation of a
            previous instruction), load_reduce (start from `reduce_init`, an fp32 scalar or [P, 1]), reset,
            idle (accumulators left undefined).
    """

    opcode = "tensor_scalar_reduce"
    result_like = "data"
    indirect_fields = ("dst", "data")
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    op0: object = None
    operand0: object = operand(READ, optional=True)
    reduce_op: object = None
    reduce_res: object = operand(WRITE, optional=True)
    reverse0: bool = False
    reduce_cmd: object = cmds.reset_reduce
    reduce_init: object = operand(READ, optional=True)
    reduce_res_negate: bool = False

    def check(self, ctx) -> None:
        check_indirection(self, ctx)
        check_elementwise(ctx, self.dst, {"data": self.data})
        op0, rop = alu(self.op0), alu(self.reduce_op)
        check_arith(op0, "op0")
        check_v4_ops(ctx, (op0,))
        expect(rop.name in ("add", "subtract", "multiply", "maximum", "minimum"),
               "reduce_op must be add, subtract, multiply, maximum or minimum", got=rop.name, error=KernelError)
        expect(not self.reverse0, "tensor_scalar_reduce does not support reverse0", got=True, error=KernelError)
        if op0.arity == 2:
            check_column(self.operand0, "operand0", self.data.shape[0])
        cmd = acc.check_reduce_cmd(self.reduce_cmd, _STATE_CMDS, self.opcode, reduce_res=self.reduce_res,
                                   idle_reads_undefined=True)
        expect((self.reduce_init is not None) == (cmd is cmds.load_reduce),
               "reduce_init is given exactly when reduce_cmd=load_reduce", got=(cmd.name, self.reduce_init),
               error=KernelError)
        if cmd is cmds.load_reduce:
            check_column(self.reduce_init, "reduce_init", self.data.shape[0])
        check_reduce_res(self.reduce_res, self.data)

    def run(self, m) -> None:
        P = self.data.shape[0]
        op0, rop = alu(self.op0), alu(self.reduce_op)
        x = read_operand(m, self.data, self.dst, self.mask)
        r = np.asarray(apply(op0, x, column(m, self.operand0, P) if op0.arity == 2 else None, False), np.float32)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, _STATE_CMDS, self.opcode)
        init = column(m, self.reduce_init, P)[:, 0] if cmd is cmds.load_reduce else None
        fold_and_read_out(m, self, r, rop, cmd, reset_value=rop.identity, init=init,
                          negate=self.reduce_res_negate)
        m.write(self.dst, r.reshape(self.dst.shape), self.mask)


@instruction
class TensorScalarCumulative(Instruction):
    """Running accumulation along each partition's free elements, through the DVE accumulator:

        for i: acc = op1(op0(src[i], imm0), acc); dst[i] = acc

    `reduce_cmd`: reset_reduce starts from op1's identity, load_reduce from `imm1` (fp32 scalar or [P, 1]),
    reduce continues the previous instruction's accumulation. op1 is add, subtract, multiply, maximum or
    minimum (subtract gives x_i - acc, the documented operand order). New generation (NKI >= 0.2) only."""

    opcode = "tensor_scalar_cumulative"
    indirect_fields = ("dst", "src")
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ)
    op0: object = None
    op1: object = None
    imm0: object = operand(READ, optional=True)
    imm1: object = operand(READ, optional=True)
    reduce_cmd: object = cmds.reset_reduce

    _dtypes = ("bfloat16", "float16", "float32", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "uint8",
               "uint16", "int8", "int16")

    def check(self, ctx) -> None:
        check_indirection(self, ctx)
        check_elementwise(ctx, self.dst, {"src": self.src})
        op0, op1 = alu(self.op0), alu(self.op1)
        check_arith(op0, "op0")
        expect(op1.name in ("add", "subtract", "multiply", "maximum", "minimum"),
               "op1 must be add, subtract, multiply, maximum or minimum", got=op1.name, error=KernelError)
        if op0.arity == 2:
            check_column(self.imm0, "imm0", self.src.shape[0])
        cmd = acc.check_reduce_cmd(self.reduce_cmd, (cmds.reset_reduce, cmds.reduce, cmds.load_reduce),
                                   self.opcode)
        if cmd is cmds.load_reduce:
            check_column(self.imm1, "imm1", self.src.shape[0])
        for role, t in (("src", self.src), ("dst", self.dst)):
            check_dtype(t, role, self._dtypes, "a float, 8/16-bit integer dtype (not int32/uint32)")

    def run(self, m) -> None:
        P = self.src.shape[0]
        op0, op1 = alu(self.op0), alu(self.op1)
        x = read_operand(m, self.src, self.dst, self.mask)
        v = np.asarray(apply(op0, x, column(m, self.imm0, P) if op0.arity == 2 else None, False), np.float32)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, (cmds.reset_reduce, cmds.reduce, cmds.load_reduce),
                                   self.opcode)
        if cmd is cmds.reset_reduce:
            state = np.full(P, op1.identity, np.float32)
        elif cmd is cmds.load_reduce:
            state = column(m, self.imm1, P)[:, 0].copy()
        else:
            state = m.dve_acc[:P].copy()
        out = np.empty_like(v)
        for i in range(v.shape[1]):
            state = np.asarray(apply(op1, v[:, i], state, False), np.float32)
            out[:, i] = state
        m.dve_acc[:P] = state
        m.write(self.dst, out.reshape(self.dst.shape), self.mask)


@instruction
class RangeSelect(Instruction):
    """dst[p, i] = on_true[p, i] where comp_op0(range_start + i, bound0[p]) and comp_op1(range_start + i,
    bound1[p]), else on_false_value; the result's per-partition maximum is folded into the DVE
    accumulators (reset value -inf) and optionally read out into reduce_res[P, 1]. NeuronCore-v3+.

    The index is compared in fp32 (range_start + free size must stay within 2^24). `on_false_value` must
    be fp32.min (a hardware constraint; in a bf16/fp16/fp8 dst it becomes -inf by rounding). `reduce_op`
    is maximum only. Legacy default reduce_cmd is idle, new-generation default reset_reduce.
    """

    opcode = "range_select"
    result_like = "on_true_tile"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    on_true_tile: object = operand(READ)
    comp_op0: object = None
    comp_op1: object = None
    bound0: object = operand(READ, immediate=True)
    bound1: object = operand(READ, immediate=True)
    reduce_cmd: object = cmds.reset_reduce
    reduce_res: object = operand(WRITE, optional=True)
    reduce_op: object = "maximum"
    range_start: int = 0
    on_false_value: float = FP32_MIN

    def check(self, ctx) -> None:
        require(ctx, "range_select", "range_select")
        check_elementwise(ctx, self.dst, {"on_true_tile": self.on_true_tile})
        expect(self.on_true_tile.dtype.is_float, "on_true_tile must have a float dtype",
               got=self.on_true_tile.dtype, error=DtypeError)
        P = self.dst.shape[0]
        for role, op in (("comp_op0", self.comp_op0), ("comp_op1", self.comp_op1)):
            expect(alu(op).name in _COMPARISONS, f"{role} must be a comparison ({', '.join(_COMPARISONS)})",
                   got=alu(op).name, error=KernelError)
        for role, b in (("bound0", self.bound0), ("bound1", self.bound1)):
            check_column(b, role, P)
            if is_tensor(b):
                check_dtype(b, role, ("float32",), "an fp32 [P, 1] tile")
        expect(alu(self.reduce_op).name == "maximum", "range_select reduces with maximum only",
               got=alu(self.reduce_op).name, error=KernelError)
        # The value reaches the engine as an fp32 immediate, so any literal that rounds to fp32.min is that value
        # (kernels write -3.4028235e38, the spec's default, which is not float(np.finfo(np.float32).min)).
        expect(np.float32(self.on_false_value) == np.float32(FP32_MIN),
               "on_false_value must be fp32.min (hardware constraint)",
               expected=FP32_MIN, got=self.on_false_value, error=KernelError, hint="pass nl.fp32.min")
        start = int(self.range_start)
        expect(0 <= start and start + self.dst.free_size <= 2 ** 24,
               "range_start + index is compared in fp32 and must stay within [0, 2^24]",
               got=(start, self.dst.free_size), error=ShapeError)
        acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce),
                             self.opcode, reduce_res=self.reduce_res, idle_reads_undefined=True)
        check_reduce_res(self.reduce_res, self.on_true_tile)

    def run(self, m) -> None:
        P = self.dst.shape[0]
        x = read_operand(m, self.on_true_tile, self.dst, self.mask)
        idx = (np.float32(int(self.range_start)) + np.arange(x.shape[1], dtype=np.float32))[None, :]
        keep = (alu(self.comp_op0).fn(idx, column(m, self.bound0, P)) != 0) & \
               (alu(self.comp_op1).fn(idx, column(m, self.bound1, P)) != 0)
        r = np.where(keep, x, np.float32(self.on_false_value)).astype(np.float32)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce),
                                   self.opcode)
        fold_and_read_out(m, self, r, alu("maximum"), cmd, reset_value=-np.inf)
        m.write(self.dst, r.reshape(self.dst.shape), self.mask)


@instruction
class SelectReduce(Instruction):
    """dst = where(predicate != 0, on_true, on_false) (predicate inverted with `reverse_pred`); the result's
    per-partition maximum is folded into the DVE accumulators (reset value -inf) and optionally read out
    into reduce_res[P, 1].

    Args:
        predicate: int8/uint8/int16/uint16 (or bool) tile shaped like dst; nonzero means true.
        on_true: tile shaped like dst, any dtype but tf32/int32/uint32. on_false: fp32 scalar or [P, 1].
        reduce_op: maximum only. on_true and predicate cannot both be in PSUM.
    """

    opcode = "select_reduce"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    predicate: object = operand(READ)
    on_true: object = operand(READ)
    on_false: object = operand(READ, optional=True)
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = cmds.idle
    reduce_op: object = "maximum"
    reverse_pred: bool = False

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"predicate": self.predicate, "on_true": self.on_true})
        check_not_both_psum(self.on_true, self.predicate, "on_true", "predicate")
        check_dtype(self.predicate, "predicate", ("int8", "uint8", "int16", "uint16", "bool"),
                    "an 8/16-bit integer tile")
        expect(self.on_true.dtype.name not in ("tfloat32", "int32", "uint32"),
               "on_true cannot be tf32, int32 or uint32", got=self.on_true.dtype, error=DtypeError)
        check_column(self.on_false, "on_false", self.dst.shape[0])
        expect(alu(self.reduce_op).name == "maximum", "select_reduce reduces with maximum only",
               got=alu(self.reduce_op).name, error=KernelError)
        acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce),
                             self.opcode, reduce_res=self.reduce_res, idle_reads_undefined=True)
        check_reduce_res(self.reduce_res, self.on_true)

    def run(self, m) -> None:
        P = self.dst.shape[0]
        pred = read_operand(m, self.predicate, self.dst, self.mask, raw=True) != 0
        if self.reverse_pred:
            pred = ~pred
        x = read_operand(m, self.on_true, self.dst, self.mask)
        r = np.where(pred, x, column(m, self.on_false, P)).astype(np.float32)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce),
                                   self.opcode)
        fold_and_read_out(m, self, r, alu("maximum"), cmd, reset_value=-np.inf)
        m.write(self.dst, r.reshape(self.dst.shape), self.mask)


_EXP_SRC = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "int8", "int16", "int32", "uint8",
            "uint16", "uint32")
_EXP_DST = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32", "int8", "int16", "int32",
            "uint8", "uint16")


@instruction
class Exponential(Instruction):
    """dst = exp(src - max_value) on the Vector Engine (NeuronCore-v4), with the sum of the results folded
    into the DVE accumulators: reduce_cmd reset_reduce (from 0), reduce (continue), load_reduce (from
    `reduce_init`, fp32 scalar or [P, 1]) or idle (accumulators left undefined, no read-out);
    reduce_res[P, 1] receives them. `max_value`: fp32 scalar or [P, 1]. The exponential is computed
    exactly in fp32 (the DVE approximation error is not documented)."""

    opcode = "exponential"
    indirect_fields = ("dst", "src")
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ)
    max_value: object = operand(READ, optional=True)
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = cmds.idle
    reduce_init: object = operand(READ, optional=True)

    _cmds = (cmds.idle, cmds.reset_reduce, cmds.reduce, cmds.load_reduce)

    def check(self, ctx) -> None:
        require(ctx, "exponential", "exponential")
        check_indirection(self, ctx)
        check_elementwise(ctx, self.dst, {"src": self.src})
        check_dtype(self.src, "src", _EXP_SRC)
        check_dtype(self.dst, "dst", _EXP_DST)
        P = self.src.shape[0]
        check_column(0.0 if self.max_value is None else self.max_value, "max_value", P)
        acc.check_reduce_cmd(self.reduce_cmd, self._cmds, self.opcode, reduce_res=self.reduce_res,
                             idle_reads_undefined=True)
        if self.reduce_init is not None:
            check_column(self.reduce_init, "reduce_init", P)
        check_reduce_res(self.reduce_res, self.src)
        if self.reduce_res is not None:
            expect(self.reduce_res.dtype.is_float, "reduce_res must be a float tile", got=self.reduce_res.dtype,
                   error=DtypeError)

    def run(self, m) -> None:
        P = self.src.shape[0]
        x = read_operand(m, self.src, self.dst, self.mask)
        with np.errstate(over="ignore"):
            y = np.exp((x - column(m, 0.0 if self.max_value is None else self.max_value, P)).astype(np.float64))
        y = y.astype(np.float32)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, self._cmds, self.opcode)
        init = column(m, 0.0 if self.reduce_init is None else self.reduce_init, P)[:, 0]
        fold_and_read_out(m, self, y, alu("add"), cmd, reset_value=0.0, init=init)
        m.write(self.dst, y.reshape(self.dst.shape), self.mask)
