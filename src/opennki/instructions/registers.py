"""ISA layer: the engine sequencers' 32-bit registers (spec/isa.md §7.5), new generation.

Imports the ISA base. A `VirtualRegister` is a handle on one register of the program that allocated it; the
value lives in that program's `Machine.registers` (keyed by the handle's number), so only instructions
change it: `register_alloc` (an immediate or nothing), `register_move` (an immediate or another register),
`register_load` (one element of a 1-element HBM/SBUF tensor) and `register_store`. Device loops
(`nl.dynamic_range`, `while reg:`) read registers when they decide whether to run their body.

A register holds what it was given: an int (an integer immediate or an integer tensor element, kept within
the 32 bits of its source) or a float (a float tensor element, as an fp32 value). A register nothing has
written yet holds no value; reading it is an error. In shape-only mode no instruction runs, so registers
stay unknown (device loops then trace their body once, see `is_unknown`).
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, ShapeError, UninitializedReadError, expect
from opennki.events import MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, check_on_chip, instruction, operand
from opennki.machine.dtypes import to_float32
from opennki.releases import Change

WHILE_REG = Change("a `while reg:` loop on a VirtualRegister", "nl.while_loop(reg, body) (the body returns the next "
                   "condition register)", deprecated_in="0.6", removed_in="0.7",
                   source="Migrating from NKI 0.5.0 to NKI 0.6.0; NKI 0.7.0 release notes")
_INT32_RANGE = (-(1 << 31), (1 << 32) - 1)     # signed or unsigned 32-bit immediates
_MEMORIES = (MemoryKind.HBM, MemoryKind.SBUF)


class RuntimeInt:
    """An integer known only when the kernel runs, held in `Machine.registers[number]`: a `VirtualRegister`
    or an NKI 0.7 `NkiScalar` (instructions/scalars.py). Loop bounds and `.ap` offsets take either.

    Attributes:
        machine: the program state holding the value.
        number: the value's slot within its program.
    """

    __slots__ = ("machine", "number")
    prefix = "r"

    def __init__(self, machine):
        self.machine = machine
        self.number = len(machine.registers)
        machine.registers[self.number] = None

    @property
    def nki_name(self) -> str:
        return f"{self.prefix}{self.number}"

    @property
    def is_unknown(self) -> bool:
        """No value and none can come: a shape-only run executes no instruction."""
        return self.machine.registers[self.number] is None and self.machine.memory.shape_only

    def value(self, role: str = "a register read"):
        """The current value (an int or a float); reading one nothing wrote is an error."""
        v = self.machine.registers[self.number]
        if v is None:
            raise UninitializedReadError(f"{role} reads register {self.nki_name}, which was never written",
                                         hint="give register_alloc an initial value, or register_load it first")
        return v

    def index(self, role: str) -> int:
        """The current value as a loop bound or offset: it must be an integer."""
        v = self.value(role)
        if not isinstance(v, int):
            raise KernelError(f"{role} needs an integer register", got=f"{self.nki_name} = {v!r}")
        return v


class VirtualRegister(RuntimeInt):
    """`nisa.VirtualRegister`: a 32-bit sequencer register of one program (see the module docstring).

    Attributes (besides RuntimeInt's):
        frozen: a device loop's induction variable, which the kernel may read but not write.
    """

    __slots__ = ("frozen",)

    def __init__(self, machine, frozen: bool = False):
        super().__init__(machine)
        self.frozen = frozen

    def __bool__(self) -> bool:
        """`while reg:`: a device loop running while the register is nonzero (deprecated in NKI 0.6 for
        `nl.while_loop`, removed in 0.7: `WHILE_REG`). A shape-only run cannot know the value: it traces the
        body once. `nl.while_loop` itself tests registers with `is_nonzero`."""
        if self.machine.options is not None:
            WHILE_REG.apply(self.machine.options)
        return self.is_nonzero()

    def is_nonzero(self) -> bool:
        """The device loop condition: the register's value is nonzero (unknown: true once, see `__bool__`)."""
        if self.is_unknown:
            self.machine.registers[self.number] = 0
            return True
        return self.value("while reg:") != 0

    def __repr__(self) -> str:
        return f"VirtualRegister({self.nki_name})"


def _check_writable(reg, api_arg: str) -> None:
    expect(isinstance(reg, VirtualRegister), f"{api_arg} must be a VirtualRegister (from nisa.register_alloc)",
           got=type(reg).__name__, error=KernelError)
    expect(not reg.frozen, f"{api_arg} is the induction variable of a device loop, which is read-only",
           got=reg.nki_name, error=KernelError)


def _check_immediate(value, role: str) -> None:
    expect(isinstance(value, (int, np.integer)) and not isinstance(value, bool),
           f"{role} must be an integer immediate", got=type(value).__name__, error=DtypeError)
    expect(_INT32_RANGE[0] <= int(value) <= _INT32_RANGE[1], f"{role} must fit in a 32-bit register",
           expected=f"[{_INT32_RANGE[0]}, {_INT32_RANGE[1]}]", got=value, error=KernelError)


def _check_element(t, role: str) -> None:
    check_on_chip(t, role, _MEMORIES)
    expect(t.size == 1, f"{role} is a 1-element tensor ([1] or [1, 1])", got=t.shape, error=ShapeError)
    expect(t.dtype.itemsize <= 4 and t.dtype.kind != "bool", f"{role} holds a value of at most 32 bits",
           got=t.dtype, error=DtypeError)


@instruction
class RegisterAlloc(Instruction):
    """A new register `register`, holding `value` (an integer immediate) or nothing (value None)."""

    opcode = "register_alloc"

    register: object = None
    value: object = None

    def check(self, ctx) -> None:
        if self.value is not None:
            _check_immediate(self.value, "the initial value")

    def run(self, m) -> None:
        m.registers[self.register.number] = None if self.value is None else int(self.value)


@instruction
class RegisterMove(Instruction):
    """register = src, an integer immediate or another register (no memory access)."""

    opcode = "register_move"

    register: object = None
    src: object = None

    def check(self, ctx) -> None:
        _check_writable(self.register, "dst")
        if not isinstance(self.src, RuntimeInt):
            _check_immediate(self.src, "src")

    def run(self, m) -> None:
        src = self.src.value("register_move") if isinstance(self.src, RuntimeInt) else int(self.src)
        m.registers[self.register.number] = src


@instruction
class RegisterLoad(Instruction):
    """register = the one element of `src` (HBM or SBUF, at most 32 bits)."""

    opcode = "register_load"

    src: object = operand(READ)
    register: object = None

    def check(self, ctx) -> None:
        _check_writable(self.register, "dst")
        _check_element(self.src, "src")

    def run(self, m) -> None:
        raw = np.asarray(m.read(self.src)).reshape(-1)[:1]
        m.registers[self.register.number] = (float(to_float32(raw, self.src.dtype)[0]) if self.src.dtype.is_float
                                             else int(raw[0]))


@instruction
class RegisterStore(Instruction):
    """dst (a 1-element HBM or SBUF tensor) = register's value, converted to dst's dtype."""

    opcode = "register_store"

    dst: object = operand(WRITE)
    register: object = None

    def check(self, ctx) -> None:
        expect(isinstance(self.register, RuntimeInt), "src must be a VirtualRegister or an NkiScalar",
               got=type(self.register).__name__, error=KernelError)
        _check_element(self.dst, "dst")

    def run(self, m) -> None:
        value = self.register.value("register_store")
        m.write(self.dst, np.full(self.dst.shape, value, np.float64 if isinstance(value, float) else np.int64))


__all__ = ["RuntimeInt", "RegisterAlloc", "RegisterLoad", "RegisterMove", "RegisterStore", "VirtualRegister"]
