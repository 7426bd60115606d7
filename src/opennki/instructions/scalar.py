"""ISA layer: Scalar Engine (ACT) instructions (spec/isa.md §6.1-6.3).

Imports the ISA base, tables and accumulators. `activation` computes `op(data * scale + bias)` per lane in
fp32 and can fold the result into the engine's reduce registers, which persist across instructions
(`reduce_cmd`, see accumulators.py); `activation_reduce` is the same instruction with the registers reset,
folded and read out in one go; `activate2` (NeuronCore-v4) has two ALU stages, prelu and more reductions.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, expect
from opennki.machine.machine import Machine
from opennki.events import Engine
from opennki.instructions import accumulators as acc
from opennki.instructions.base import (READ, WRITE, Instruction, check_column, require,
                                       check_on_chip, check_same_partitions, column, instruction, is_tensor, operand,
                                       operand_f32, read_operand)
from opennki.instructions.enums import engine_of
from opennki.instructions.enums import reduce_cmd as cmds
from opennki.instructions.indirection import check_indirection
from opennki.instructions.ops import activation_fn, alu, evaluate, evaluate_into
from opennki.instructions.vector import check_elementwise

_BIAS_DTYPES = ("float32", "float16", "bfloat16")


def activation_engine(instr) -> Engine:
    """The engine of an activation: the Scalar Engine, or (NKI 0.7, `engine=nisa.engine.gpsimd`) GpSimd."""
    return Engine.GPSIMD if instr.engine is not None and engine_of(instr.engine) is Engine.GPSIMD else Engine.SCALAR


def check_activation_engine(instr, ctx) -> None:
    """NKI 0.7 (docs: nki.isa.activation / activate2, v2.33): `engine` is scalar, or gpsimd on NeuronCore-v4+,
    where no accumulator exists (no reduce_op, reduce_res or accumulating reduce_cmd)."""
    if instr.engine is None:
        return
    chosen = engine_of(instr.engine)
    expect(chosen in (Engine.UNKNOWN, Engine.SCALAR, Engine.GPSIMD), f"{instr.opcode} runs on the Scalar or "
           "GpSimd Engine", got=chosen.name, error=KernelError)
    if chosen is Engine.GPSIMD:
        require(ctx, "gpsimd_activation", f"{instr.opcode} on the GpSimd Engine")
        expect(instr.reduce_op is None and instr.reduce_res is None and instr.reduce_cmd in (None, cmds.idle),
               f"{instr.opcode}: the accumulator is only available on the Scalar Engine", got="engine=gpsimd",
               error=KernelError)


@instruction
class Activation(Instruction):
    """dst = op(data * scale + bias); optionally reduce the result per partition into the ACT registers.

    Args:
        op: an activation function (spec/isa.md §9), computed exactly in fp32 (ops.py says why).
        scale: fp32 scalar or fp32 [P, 1] vector. bias: [P, 1] fp32/fp16/bf16 vector (a scalar too on
            NeuronCore-v3+). `x * scale` and `+ bias` are separate fp32 operations (spec gap: fused or not).
        reduce_op: `add` only (spec/isa.md §12.1 C22); reduce_cmd: idle / reset / reduce / reset_reduce (register
            state machine); reduce_res: optional [P, 1] output receiving the registers after this
            instruction (the fp32 sum of the activated values, before rounding into dst).
    Raises:
        DtypeError: scale tensor not fp32, bias not fp32/fp16/bf16, scalar bias before NeuronCore-v3.
        KernelError: reduce_op other than add; `reciprocal` with a bias without `activation_reciprocal_bias`.
    """

    opcode = "activation"
    result_like = "data"
    indirect_fields = ("dst", "data")
    default_engine = Engine.SCALAR
    writes_on_chip_only = True              # check_elementwise, and _check_reduction's reduce_res

    dst: object = operand(WRITE)
    op: object = None
    data: object = operand(READ)
    bias: object = operand(READ, optional=True)
    scale: object = operand(READ, optional=True)
    reduce_op: object = None
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = None
    engine: object = None

    allowed_cmds = (cmds.idle, cmds.reset, cmds.reduce, cmds.reset_reduce)

    @property
    def executor(self) -> Engine:
        return activation_engine(self)

    def check(self, ctx) -> None:
        check_indirection(self, ctx, (Engine.SCALAR,))
        check_activation_engine(self, ctx)
        fn = activation_fn(self.op)
        check_elementwise(ctx, self.dst, {"data": self.data})
        P = self.data.shape[0]
        if self.scale is not None:
            if is_tensor(self.scale):
                expect(self.scale.shape[0] == P and self.scale.free_size == 1,
                       "activation scale must be a scalar or a [P, 1] vector", expected=f"[{P}, 1]",
                       got=self.scale.shape, code="err_activation_scale_scalar_or_vector")
            check_column(self.scale, "scale", P)
            if is_tensor(self.scale):
                expect(self.scale.dtype.name == "float32", "activation scale must be fp32",
                       got=self.scale.dtype, code="err_activation_scale_invalid_type", error=DtypeError)
        if self.bias is not None:
            if is_tensor(self.bias):
                check_column(self.bias, "bias", P)
                expect(self.bias.dtype.name in _BIAS_DTYPES, "activation bias must be an fp32/fp16/bf16 vector",
                       got=self.bias.dtype, code="err_activation_bias_invalid_type", error=DtypeError)
            else:
                require(ctx, "scalar_engine_bias_immediate", "a scalar bias", error=DtypeError,
                        code="err_activation_bias_invalid_type", hint="pass a [P, 1] tile")
            if fn.name == "reciprocal":
                require(ctx, "activation_reciprocal_bias", "activation(op=reciprocal) with a bias",
                        hint="add the bias with a tensor_scalar before the activation")
        if self.reduce_op is not None:
            expect(alu(self.reduce_op).name == "add", f"{self.opcode} reduce_op must be add",
                   got=alu(self.reduce_op).name, error=KernelError)
        _check_reduction(self, self.allowed_cmds)

    def run(self, m) -> None:
        P = self.data.shape[0]
        x = read_operand(m, self.data, self.dst, self.mask)
        pre = x
        if self.scale is not None and not (not is_tensor(self.scale) and self.scale == 1.0):
            pre = pre * operand_f32(m, self.scale, P)
        if self.bias is not None:
            pre = pre + operand_f32(m, self.bias, P)
        fn = activation_fn(self.op)
        out = m.fp32_target(self.dst) if self.mask is None and tuple.__eq__(pre.shape, self.dst.shape) else None
        written = out is not None and evaluate_into(fn, pre, out)
        y = out if written else evaluate(fn, pre)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, self.allowed_cmds, self.opcode)
        if cmd is not cmds.idle:        # idle (`nl.exp`): the registers are left as they are (`acc.step`)
            active = Machine.effective_mask(self.dst, self.mask)
            contribution = acc.partial(alu("add"), y, active) if cmd in acc.FOLDING else None
            acc.step(m.act_acc, P, cmd, alu("add"), contribution, reset_value=0.0, idle_clobbers=False,
                     lanes=acc.lanes_of(active))
        # both results are computed before either is written, so reduce_res may alias dst
        if not written:
            m.write(self.dst, y.reshape(self.dst.shape), self.mask)
        if self.reduce_res is not None:
            m.write(self.reduce_res, m.act_acc[:P].reshape(self.reduce_res.shape).copy(),
                    Machine.effective_mask(self.reduce_res, self.mask))


@instruction
class ActivationReduce(Activation):
    """`activation` with reduce_cmd=reset_reduce: dst = op(data * scale + bias) and reduce_res[P, 1] = the
    sum of dst's fp32 values over all free dims. Shares the ACT registers with `activation` (the registers
    hold the sum afterwards). `reduce_res=None` (new generation) keeps the sum in the registers only."""

    opcode = "activation_reduce"
    reduce_cmd: object = cmds.reset_reduce
    allowed_cmds = (cmds.reset_reduce,)

    def check(self, ctx) -> None:
        expect(self.reduce_op is not None, "activation_reduce needs reduce_op (add)", got=None, error=KernelError)
        super().check(ctx)


_ACTIVATE2_STAGES = {("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"), ("add", "bypass"),
                     ("subtract", "bypass"), ("bypass", "bypass")}
_ACTIVATE2_REDUCE = ("add", "maximum", "minimum", "abs_max", "abs_min")


@instruction
class Activate2(Instruction):
    """dst = op(op1(op0(data, imm0), imm1)) on the Scalar Engine (NeuronCore-v4), with an optional reduction
    of the result into the ACT registers.

    Args:
        op: an activation function; `prelu` (x if x > 0 else relu_param * x) only here.
        imm0, imm1, relu_param: fp32 scalars or [P, 1] tiles (two tile immediates share a dtype).
        op0, op1: (multiply, add), (multiply, subtract), (multiply, bypass), (add, bypass),
            (subtract, bypass) or (bypass, bypass); reverse0 / reverse1 swap a stage's operands and need that
            stage. Stages are separate fp32 operations.
        reduce_op: add, maximum, minimum, abs_max or abs_min; reduce_cmd: the ACT register state machine,
            resetting to the op's identity (abs_max 0, abs_min +inf: spec gap); reduce_res: [P, 1] read-out.
    """

    opcode = "activate2"
    indirect_fields = ("dst", "data")
    default_engine = Engine.SCALAR

    dst: object = operand(WRITE)
    op: object = None
    data: object = operand(READ)
    imm0: object = operand(READ, optional=True)
    imm1: object = operand(READ, optional=True)
    op0: object = "bypass"
    op1: object = "bypass"
    relu_param: object = operand(READ, optional=True)
    reverse0: bool = False
    reverse1: bool = False
    reduce_op: object = None
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = None
    engine: object = None

    @property
    def executor(self) -> Engine:
        return activation_engine(self)

    def check(self, ctx) -> None:
        require(ctx, "activate2", "activate2")
        check_indirection(self, ctx, (Engine.SCALAR,))
        check_activation_engine(self, ctx)
        activation_fn(self.op)
        check_elementwise(ctx, self.dst, {"data": self.data})
        P = self.data.shape[0]
        op0, op1 = alu(self.op0).name, alu(self.op1).name
        expect((op0, op1) in _ACTIVATE2_STAGES, "activate2 stages (op0, op1) must be one of the documented pairs",
               expected=sorted(_ACTIVATE2_STAGES), got=(op0, op1), error=KernelError)
        expect(not (self.reverse0 and op0 == "bypass") and not (self.reverse1 and op1 == "bypass"),
               "reverse0 / reverse1 need their stage (op0 / op1)", got=(self.reverse0, self.reverse1),
               error=KernelError)
        for role, imm, used in (("imm0", self.imm0, op0 != "bypass"), ("imm1", self.imm1, op1 != "bypass"),
                                ("relu_param", self.relu_param, False)):
            if used or imm is not None:
                check_column(imm, role, P)
        if is_tensor(self.imm0) and is_tensor(self.imm1):
            expect(self.imm0.dtype is self.imm1.dtype, "tile immediates imm0 and imm1 must share a dtype",
                   got=(self.imm0.dtype, self.imm1.dtype), error=DtypeError)
        if self.reduce_op is not None:
            expect(alu(self.reduce_op).name in _ACTIVATE2_REDUCE, "activate2 reduce_op must be add, maximum, "
                   "minimum, abs_max or abs_min", got=alu(self.reduce_op).name, error=KernelError)
        _check_reduction(self, Activation.allowed_cmds)

    def run(self, m) -> None:
        P = self.data.shape[0]
        v = read_operand(m, self.data, self.dst, self.mask)
        for name, imm, reverse in ((self.op0, self.imm0, self.reverse0), (self.op1, self.imm1, self.reverse1)):
            op = alu(name)
            if op.name != "bypass":
                a = column(m, imm, P)
                v = (op.fn(a, v) if reverse else op.fn(v, a)).astype(np.float32)
        fn = activation_fn(self.op)
        if fn.name == "prelu":
            alpha = column(m, self.relu_param if self.relu_param is not None else 0.0, P).astype(np.float64)
            y = np.asarray(fn.fn(v.astype(np.float64), alpha), np.float32)
        else:
            y = evaluate(fn, v)
        cmd = acc.check_reduce_cmd(self.reduce_cmd, Activation.allowed_cmds, self.opcode)
        rop = alu(self.reduce_op if self.reduce_op is not None else "add")
        active = Machine.effective_mask(self.dst, self.mask)
        contribution = acc.partial(rop, y, active) if cmd in acc.FOLDING else None
        acc.step(m.act_acc, P, cmd, rop, contribution, reset_value=rop.identity, idle_clobbers=False,
                 lanes=acc.lanes_of(active))
        m.write(self.dst, y.reshape(self.dst.shape), self.mask)
        if self.reduce_res is not None:
            m.write(self.reduce_res, m.act_acc[:P].reshape(self.reduce_res.shape).copy(),
                    Machine.effective_mask(self.reduce_res, self.mask))


def _check_reduction(instr, allowed) -> None:
    """The accumulator arguments of activation-family instructions: `reduce_cmd` among `allowed`, and a
    `reduce_res` that is an on-chip [P, 1] tile over the data's partitions."""
    acc.check_reduce_cmd(instr.reduce_cmd, allowed, instr.opcode)
    if instr.reduce_res is not None:
        check_on_chip(instr.reduce_res, "reduce_res")
        check_same_partitions(instr.reduce_res, instr.data, "reduce_res", "data")
        expect(instr.reduce_res.free_size == 1, "reduce_res must be [P, 1]", got=instr.reduce_res.shape)
