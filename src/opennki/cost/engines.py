"""Cost layer: the compiler's engine choice for instructions issued with `engine=unknown`. Imports events.

NKI lets the compiler pick the engine of several instructions when the kernel does not name one
(spec/isa.md §3, the `engine` enum: `unknown` = "let compiler choose"; `nl.copy`, `nl.multiply(x, 2.0)` and
friends lower to such instructions). The compiler spreads independent work across engines; the scheduler
models that as a list scheduler would: among the engines that can run the instruction, the one on which it
finishes first (ties go to the default engine). Which engines can run what (spec/isa.md §6):

* `tensor_copy`: Vector, Scalar, and GpSimd when both sides are in SBUF (GpSimd cannot reach PSUM);
* `tensor_scalar`: Vector, and Scalar for the (multiply, add), (multiply), (add) forms on NeuronCore-v3 and
  every arithmetic form on v4 (ACT runs `tensor_scalar` natively there); GpSimd only for rsqrt, not offered;
* `memset`: Vector or GpSimd (SBUF only).

An instruction whose `engine` parameter names an engine keeps it.
"""

from __future__ import annotations

from opennki.events import Engine, InstructionExecuted, MemoryKind

_VECTOR, _SCALAR, _GPSIMD = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
_ACT_TENSOR_SCALAR_V3 = {("multiply", "add"), ("multiply", None), ("add", None)}
_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
           "logical_shift_left", "logical_shift_right", "arith_shift_right"}


def _all_sbuf(ev: InstructionExecuted) -> bool:
    return all(o.kind is MemoryKind.SBUF for o in ev.operands)


def _op(ev: InstructionExecuted, key: str) -> str | None:
    value = ev.params.get(key)
    return None if value is None else str(value).split(".")[-1].lower()


def candidate_engines(ev: InstructionExecuted, capabilities) -> tuple[Engine, ...]:
    """The engines the compiler may put `ev` on, its own engine first; just that one when the kernel chose
    it or when no choice exists (always for instructions not on the Vector Engine: the scheduler relies on
    it)."""
    own = (ev.engine,)
    if ev.params.get("engine") not in (None, "unknown") or ev.mask is not None:
        return own
    opcode = ev.opcode
    if opcode == "tensor_copy" and ev.engine is _VECTOR:
        return (_VECTOR, _SCALAR, _GPSIMD) if _all_sbuf(ev) else (_VECTOR, _SCALAR)
    if opcode == "tensor_scalar" and ev.engine is _VECTOR:
        ops = (_op(ev, "op0"), _op(ev, "op1"))
        if any(o in _BITVEC for o in ops) or any(o.dtype.startswith(("int", "uint")) for o in ev.operands):
            return own
        if ops in _ACT_TENSOR_SCALAR_V3 or (capabilities.scalar_engine_any_tensor_scalar and None not in ops[:1]):
            return (_VECTOR, _SCALAR)
        return own
    if opcode == "memset" and ev.engine is _VECTOR and _all_sbuf(ev):
        return (_VECTOR, _GPSIMD)
    return own
