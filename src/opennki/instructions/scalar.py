"""ISA layer: Scalar Engine (ACT) instructions (spec/isa.md §6.1).

`activation` computes `op(data * scale + bias)` per lane in fp32 and can fold the result into the engine's
reduce registers, which persist across instructions (`reduce_cmd`).
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, expect
from opennki.events import Engine
from opennki.instructions.base import (READ, WRITE, Instruction, check_column, check_on_chip,
                                       check_same_partitions, column, flat, instruction, is_tensor, operand)
from opennki.instructions.enums import reduce_cmd, reduce_cmd_of
from opennki.instructions.ops import activation_fn, alu, evaluate
from opennki.instructions.vector import check_elementwise


@instruction
class Activation(Instruction):
    """dst = op(data * scale + bias); optionally reduce the result per partition into the ACT registers.

    Args:
        op: an activation function (spec/isa.md §9).
        scale: fp32 scalar or [P, 1] vector. bias: [P, 1] vector (a scalar too on NeuronCore-v3+).
        reduce_op: `add` only; reduce_cmd: idle / reset / reduce / reset_reduce (register state machine);
            reduce_res: optional [P, 1] output receiving the registers after this instruction.
    """

    opcode = "activation"
    default_engine = Engine.SCALAR

    dst: object = operand(WRITE)
    op: object = None
    data: object = operand(READ)
    bias: object = operand(READ, optional=True)
    scale: object = operand(READ, optional=True)
    reduce_op: object = None
    reduce_res: object = operand(WRITE, optional=True)
    reduce_cmd: object = None

    def check(self, ctx) -> None:
        activation_fn(self.op)
        check_elementwise(ctx, self.dst, {"data": self.data})
        P = self.data.shape[0]
        if self.scale is not None:
            check_column(self.scale, "scale", P)
            if is_tensor(self.scale):
                expect(self.scale.dtype.name == "float32", "activation scale must be fp32",
                       got=self.scale.dtype, code="err_activation_scale_invalid_type", error=DtypeError)
        if self.bias is not None:
            if is_tensor(self.bias):
                check_column(self.bias, "bias", P)
                expect(self.bias.dtype.name in ("float32", "float16", "bfloat16"),
                       "activation bias must be an fp32/fp16/bf16 vector", got=self.bias.dtype,
                       code="err_activation_bias_invalid_type", error=DtypeError)
            else:
                expect(ctx.hw.nc_version >= 3, "a scalar bias needs NeuronCore-v3 or newer; pass a [P, 1] "
                       "tile", got=self.bias, code="err_activation_bias_invalid_type", error=DtypeError)
        if self.reduce_op is not None:
            expect(alu(self.reduce_op).name == "add", "activation reduce_op must be add",
                   got=alu(self.reduce_op).name, error=KernelError)
        reduce_cmd_of(self.reduce_cmd)
        if self.reduce_res is not None:
            check_on_chip(self.reduce_res, "reduce_res")
            check_same_partitions(self.reduce_res, self.data, "reduce_res", "data")
            expect(self.reduce_res.free_size == 1, "reduce_res must be [P, 1]", got=self.reduce_res.shape)

    def run(self, m) -> None:
        P = self.data.shape[0]
        x = flat(m.read_f32(self.data, self.mask))
        pre = x
        if self.scale is not None and not (not is_tensor(self.scale) and self.scale == 1.0):
            pre = pre * column(m, self.scale, P)
        if self.bias is not None:
            pre = pre + column(m, self.bias, P)
        y = evaluate(activation_fn(self.op), pre)
        m.write(self.dst, y.reshape(self.dst.shape), self.mask)
        cmd = reduce_cmd_of(self.reduce_cmd)
        if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce):
            m.act_acc[:P] = 0.0
        if cmd in (reduce_cmd.reduce, reduce_cmd.reset_reduce):
            m.act_acc[:P] += y.sum(axis=1, dtype=np.float32)
        if self.reduce_res is not None:
            m.write(self.reduce_res, m.act_acc[:P].reshape(self.reduce_res.shape).copy())
