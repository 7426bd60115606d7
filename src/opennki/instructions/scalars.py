"""ISA layer: NKI 0.7 scalar values (`nisa.NkiScalar`, `scalar_load` / `scalar_store` / `scalar_alu`).

Imports the ISA base, ops and registers. An `NkiScalar` is one integer computed on device
(docs: nki.isa.NkiScalar, nki.isa.scalar_load / scalar_store / scalar_alu, "NKI Scalar Values", v2.33):
  * it comes from `scalar_load` (a 1x1 nl.int32 / nl.int64 tile in SBUF or HBM; unsigned dtypes refused), or
    is a `fori_loop` variable;
  * arithmetic on it is traced, not evaluated: every operator issues a `scalar_alu` instruction whose result
    is a new scalar (so the cost model and the tracer see it). Its value lives where register values live,
    `Machine.registers` (a scalar is the documented successor of `VirtualRegister`; both work everywhere a
    run-time integer is taken: `.ap(scalar_offset=)`, `fori_loop` bounds, `register_store`);
  * the width is fixed at creation and never widens: results wrap (int32: 100000 * 100000 = 1410065408);
    at 64 bits only add / subtract / multiply exist; comparisons give an int32 0/1 scalar usable in
    arithmetic, stores, loop bounds and offsets but never as a Python `if` / `while` condition;
  * `//` and `%` are not operators of NkiScalar (the docs list +, -, *, unary - and comparisons): they
    are errors that name `scalar_alu(op=nl.divide / nl.fmod)`, whose rounding (toward zero) differs from
    Python's floor division [decision].
In a shape-only run no instruction runs, so scalar values are unknown (like registers): loops they bound
trace their body once and offsets they give use 0.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, ShapeError, UnsupportedError, expect
from opennki.events import MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, check_on_chip, instruction, operand
from opennki.instructions.ops import alu
from opennki.instructions.registers import RuntimeInt
from opennki.machine.dtypes import dtype_of

_ARITHMETIC = ("add", "subtract", "multiply", "divide", "fmod", "maximum", "minimum")
_COMPARISONS = ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")
_WIDE_OPS = ("add", "subtract", "multiply")              # all nl.int64 supports
_LOADABLE = ("int32", "int64")
_MEMORIES = (MemoryKind.HBM, MemoryKind.SBUF)


def wrap(value: int, dtype) -> int:
    """`value` kept within the width of `dtype` (two's complement wrap-around for signed types)."""
    bits = dtype.itemsize * 8
    value = int(value) % (1 << bits)
    if dtype.kind == "int" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def evaluate(op: str, a: int, b: int):
    """`a op b` on integers as the scalar ALU computes it (division and remainder round toward zero)."""
    if op == "add":
        return a + b
    if op == "subtract":
        return a - b
    if op == "multiply":
        return a * b
    if op in ("divide", "fmod"):
        if b == 0:
            raise KernelError(f"scalar_alu {op} by zero", got=(a, b))
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return q if op == "divide" else a - q * b
    if op == "maximum":
        return max(a, b)
    if op == "minimum":
        return min(a, b)
    return int({"less": a < b, "less_equal": a <= b, "greater": a > b, "greater_equal": a >= b,
                "equal": a == b, "not_equal": a != b}[op])


class NkiScalar(RuntimeInt):
    """`nisa.NkiScalar`: one device integer (module docstring).

    Attributes (besides RuntimeInt's machine and number):
        dtype: nl.int32, nl.uint32 or nl.int64 (fixed at creation).
        is_comparison: the result of a comparison (an int32 0 or 1).
        issue: `issue(instruction, api)` of the program that made it (operators issue `scalar_alu`).
    """

    __slots__ = ("dtype", "is_comparison", "issue")
    prefix = "s"

    def __init__(self, machine, dtype, issue, is_comparison: bool = False):
        super().__init__(machine)
        self.dtype = dtype_of(dtype)
        self.is_comparison = is_comparison
        self.issue = issue

    # -- traced arithmetic: each operator is one scalar_alu instruction ------------------------------------
    def _alu(self, other, op: str, reverse: bool = False):
        a, b = (other, self) if reverse else (self, other)
        return scalar_alu(a, b, op, issue=self.issue, machine=self.machine)

    def __add__(self, other):
        return self._alu(other, "add")

    def __radd__(self, other):
        return self._alu(other, "add", reverse=True)

    def __sub__(self, other):
        return self._alu(other, "subtract")

    def __rsub__(self, other):
        return self._alu(other, "subtract", reverse=True)

    def __mul__(self, other):
        return self._alu(other, "multiply")

    def __rmul__(self, other):
        return self._alu(other, "multiply", reverse=True)

    def __neg__(self):
        return self._alu(0, "subtract", reverse=True)

    def __pos__(self):
        return self

    def __lt__(self, other):
        return self._alu(other, "less")

    def __le__(self, other):
        return self._alu(other, "less_equal")

    def __gt__(self, other):
        return self._alu(other, "greater")

    def __ge__(self, other):
        return self._alu(other, "greater_equal")

    def __eq__(self, other):
        return self._alu(other, "equal")

    def __ne__(self, other):
        return self._alu(other, "not_equal")

    __hash__ = object.__hash__

    def _not_an_operator(self, symbol: str, op: str):
        raise UnsupportedError(f"NkiScalar has no {symbol} operator", got=symbol,
                               hint=f"nisa.scalar_alu(a, b, op=nl.{op}) (it rounds toward zero)")

    def __floordiv__(self, other):
        self._not_an_operator("//", "divide")

    __rfloordiv__ = __truediv__ = __rtruediv__ = __floordiv__

    def __mod__(self, other):
        self._not_an_operator("%", "fmod")

    __rmod__ = __mod__

    def __bool__(self):
        what = "a comparison of NkiScalars" if self.is_comparison else "an NkiScalar"
        raise KernelError(f"{what} cannot be a Python if / while condition: its value exists only on device",
                          got=self.nki_name, hint="use it in scalar arithmetic, a store, a loop bound or an offset; "
                                                  "branch on device with nl.while_loop")

    def __index__(self):
        raise KernelError("an NkiScalar is not a Python int: its value exists only on device", got=self.nki_name,
                          hint="pass it where NKI takes a run-time integer (.ap(scalar_offset=), fori_loop bounds)")

    __int__ = __index__

    def __repr__(self) -> str:
        return f"NkiScalar({self.nki_name}, {self.dtype.name})"


def _operand_dtype(x):
    return x.dtype if isinstance(x, NkiScalar) else None


def scalar_alu(data1, data2, op, *, issue=None, machine=None, name=None):
    """`data1 op data2` (module docstring): two Python ints give a Python int (bool for a comparison) at
    compile time; otherwise one `scalar_alu` instruction and its new NkiScalar."""
    opname = alu(op).name
    expect(opname in _ARITHMETIC + _COMPARISONS, "scalar_alu takes an integer arithmetic or comparison operator",
           expected=_ARITHMETIC + _COMPARISONS, got=opname, error=KernelError)
    scalars = [x for x in (data1, data2) if isinstance(x, NkiScalar)]
    for x in (data1, data2):
        expect(isinstance(x, NkiScalar) or (isinstance(x, (int, np.integer)) and not isinstance(x, bool)),
               "scalar_alu operands are NkiScalars or Python ints", got=type(x).__name__, error=DtypeError)
    if not scalars:
        result = evaluate(opname, int(data1), int(data2))
        return bool(result) if opname in _COMPARISONS else result
    first = scalars[0]
    issue = issue or first.issue
    machine = machine or first.machine
    result_dtype = dtype_of("int32") if opname in _COMPARISONS else first.dtype
    result = NkiScalar(machine, result_dtype, issue, is_comparison=opname in _COMPARISONS)
    issue(ScalarAlu(result=result, data1=data1, data2=data2, op=opname, name=name), "nisa.scalar_alu")
    return result


@instruction
class ScalarAlu(Instruction):
    """result = data1 op data2 on the engine sequencer's scalar ALU (fixed width, wrap-around)."""

    opcode = "scalar_alu"

    result: object = None
    data1: object = None
    data2: object = None
    op: str = "add"

    def check(self, ctx) -> None:
        widths = {x.dtype for x in (self.data1, self.data2) if isinstance(x, NkiScalar)}
        expect(len(widths) == 1, "scalar_alu operands must have the same width and signedness",
               got=sorted(d.name for d in widths), error=DtypeError)
        (dtype,) = widths
        if dtype.itemsize == 8:
            expect(self.op in _WIDE_OPS, "nl.int64 scalars support only add, subtract and multiply",
                   expected=_WIDE_OPS, got=self.op, error=DtypeError)
        for x in (self.data1, self.data2):
            if not isinstance(x, NkiScalar):
                expect(wrap(x, dtype) == int(x), f"a Python int operand must fit the scalar's {dtype.name}",
                       got=int(x), error=DtypeError)

    def run(self, m) -> None:
        a, b = (x.value("scalar_alu") if isinstance(x, NkiScalar) else int(x) for x in (self.data1, self.data2))
        m.registers[self.result.number] = wrap(evaluate(self.op, a, b), self.result.dtype)


def _check_tile(t, role: str) -> None:
    check_on_chip(t, role, _MEMORIES)
    expect(t.size == 1, f"{role} is a 1x1 tensor", got=t.shape, error=ShapeError)
    expect(t.dtype.name in _LOADABLE, f"{role} must be nl.int32 or nl.int64 (unsigned dtypes: use the signed "
           "dtype of the same width)", expected=_LOADABLE, got=t.dtype, error=DtypeError)


@instruction
class ScalarLoad(Instruction):
    """result = the one element of src (a 1x1 nl.int32 / nl.int64 tensor in SBUF or HBM), not truncated."""

    opcode = "scalar_load"

    src: object = operand(READ)
    result: object = None

    def check(self, ctx) -> None:
        _check_tile(self.src, "src")

    def run(self, m) -> None:
        m.registers[self.result.number] = int(np.asarray(m.read(self.src)).reshape(-1)[0])


@instruction
class ScalarStore(Instruction):
    """dst (a 1x1 tensor of value's width) = value."""

    opcode = "scalar_store"

    dst: object = operand(WRITE)
    value: object = None

    def check(self, ctx) -> None:
        expect(isinstance(self.value, NkiScalar), "scalar_store stores an NkiScalar; write a compile-time "
               "constant with nisa.memset", got=type(self.value).__name__, error=DtypeError)
        _check_tile(self.dst, "dst")
        expect(self.dst.dtype.itemsize == self.value.dtype.itemsize, "dst must have the width of the scalar "
               "(store at its own width and convert in memory)", expected=self.value.dtype, got=self.dst.dtype,
               error=DtypeError)

    def run(self, m) -> None:
        m.write(self.dst, np.full(self.dst.shape, self.value.value("scalar_store"), np.int64))


__all__ = ["NkiScalar", "ScalarAlu", "ScalarLoad", "ScalarStore", "scalar_alu", "wrap", "evaluate"]
