"""ISA layer: the engines' hidden accumulator registers and the `reduce_cmd` state machine (spec/isa.md §2.4).

Imports numpy, errors and the ISA tables. The Scalar Engine has one fp32 reduce register per lane
(`Machine.act_acc`), shared by `activation` and `activation_reduce`; the Vector Engine has one fp32
accumulator per lane (`Machine.dve_acc`), shared by `range_select`, `select_reduce`, `tensor_scalar_reduce`
and `tensor_scalar_cumulative`. Both persist across instructions, so interleaving instructions that use
them changes the result, as on hardware.

Per lane, `reduce_cmd` means:
  * idle: the instruction does not use the registers. The DVE documentation warns the accumulators may
    still be clobbered, so after an idle DVE instruction opennki sets them to NaN ("unknown") and refuses a
    `reduce_res` read-out in the same instruction; ACT registers are left as they are.
  * reset: set to the reset value; this instruction's data is not folded.
  * reduce: fold this instruction's data into the current value.
  * reset_reduce: reset, then fold.
  * load_reduce (new generation): load an initial value, then fold.

Decisions for the spec's gaps: the value folded is the engine's fp32 result before it is rounded into the
destination dtype (spec/isa.md §12.2 item 2); a `subtract` fold subtracts every element in turn
(acc - x0 - x1 - ..., i.e. acc - sum); masked-off elements are not folded, and lanes with no active element
keep their registers.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import KernelError, expect
from opennki.instructions.enums import reduce_cmd, reduce_cmd_of
from opennki.instructions.ops import AluOp
from opennki.machine.dtypes import quiet_fp

FOLDING = (reduce_cmd.reduce, reduce_cmd.reset_reduce, reduce_cmd.load_reduce)


def partial(op: AluOp, values: np.ndarray, active: np.ndarray | None) -> np.ndarray:
    """This instruction's contribution per lane: [P, F] fp32 values reduced along F the way the
    accumulator folds them (masked-off elements count as the identity)."""
    if active is not None:
        values = np.where(active.reshape(values.shape), values, np.float32(op.identity))
    with quiet_fp():
        if op.name == "subtract":
            return values.sum(axis=1, dtype=np.float32)
        return np.asarray(op.reduce(values, 1), dtype=np.float32)


def step(regs: np.ndarray, P: int, cmd: reduce_cmd, op: AluOp, contribution: np.ndarray | None, *,
         reset_value: float, init: np.ndarray | None = None, idle_clobbers: bool,
         lanes: np.ndarray | None = None) -> None:
    """Advance lanes 0..P-1 of an accumulator register file by one instruction (module docstring).
    `lanes` ([P] bool) restricts the update to lanes the instruction's mask leaves active."""
    if cmd is reduce_cmd.idle:
        if idle_clobbers:
            _assign(regs, P, np.full(P, np.nan, np.float32), lanes)
        return
    new = regs[:P].astype(np.float32)
    if cmd in (reduce_cmd.reset, reduce_cmd.reset_reduce):
        new = np.full(P, reset_value, np.float32)
    elif cmd is reduce_cmd.load_reduce:
        new = np.asarray(init, np.float32).reshape(P)
    if cmd in FOLDING:
        with quiet_fp():
            fold = np.subtract if op.name == "subtract" else op.fn
            new = np.asarray(fold(new, contribution), np.float32)
    _assign(regs, P, new, lanes)


def _assign(regs, P, new, lanes) -> None:
    if lanes is None:
        regs[:P] = new
    else:
        regs[:P] = np.where(lanes, new, regs[:P])


def lanes_of(active: np.ndarray | None) -> np.ndarray | None:
    """[P] lanes with at least one active element, from a [P, ...] element mask."""
    if active is None:
        return None
    return active.reshape(active.shape[0], -1).any(axis=1)


def check_reduce_cmd(value, allowed: tuple[reduce_cmd, ...], opcode: str, *, reduce_res=None,
                     idle_reads_undefined: bool = False) -> reduce_cmd:
    """Normalise and validate a `reduce_cmd=` argument."""
    cmd = reduce_cmd_of(value)
    if cmd not in allowed:          # tested first (runs call this): the message is built for the error only
        expect(False, f"{opcode} does not support reduce_cmd={cmd.name}",
               expected="/".join(c.name for c in allowed), got=cmd.name, error=KernelError)
    if idle_reads_undefined and cmd is reduce_cmd.idle:
        expect(reduce_res is None, f"{opcode}: reduce_res with reduce_cmd=idle would read the Vector Engine "
               "accumulators, which are undefined after an idle instruction", got="reduce_cmd=idle",
               error=KernelError, hint="pass reduce_cmd=nisa.reduce_cmd.reset_reduce (or reduce to continue an "
               "accumulation)")
    return cmd
