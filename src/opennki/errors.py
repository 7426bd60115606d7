"""Errors layer: the exception hierarchy and user-frame capture. Imports nothing from opennki.

Every error opennki raises for a user mistake is an `OpenNKIError`. Its message says which instruction
or API, which rule was broken, what was expected and what was got, and the kernel line (file:line and
source text) where the offending call was made. Where a legacy NKI error code exists for the rule
(`err_tensor_access_out_of_bound`, ...), the message carries it in brackets so users can search for it.

At the public entry points (kernel calls) `hide_internal_frames` strips opennki's own frames from the
traceback, so the last frame a user sees is their kernel line. Set `OPENNKI_FULL_TRACEBACK=1` to keep them.
"""

from __future__ import annotations

import linecache
import os
import sys
import types
from dataclasses import dataclass

from opennki.environment import setting

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@dataclass(frozen=True)
class SourceLocation:
    """A line of user code: the kernel statement that issued an instruction or raised an error."""

    filename: str
    lineno: int
    function: str

    @property
    def source(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"


def is_internal(filename: str) -> bool:
    """True for frames that belong to the opennki package itself (never shown to users)."""
    inside = INTERNAL_FILES.get(filename)
    return inside if inside is not None else _classified(filename)


# a code object's file name -> whether it is opennki's (`is_internal`): the stack walks finding the kernel line
# run for every instruction, and a look-up by a string's cached hash is cheaper than comparing its prefix
INTERNAL_FILES: dict = {}


def _classified(filename: str) -> bool:
    if len(INTERNAL_FILES) >= 4096:
        INTERNAL_FILES.clear()
    inside = INTERNAL_FILES[filename] = filename.startswith(PACKAGE_DIR)
    return inside


def user_location(depth: int = 1) -> SourceLocation | None:
    """The innermost frame on the stack that is outside the opennki package: the user's kernel line."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        inside = INTERNAL_FILES.get(filename)
        if not (inside if inside is not None else _classified(filename)):
            return location_of(frame)
        frame = frame.f_back
    return None


class CodeOffsetMemo:
    """A bounded memo keyed by a frame's running code object and instruction offset. Keyed by the code's id:
    hashing a code object hashes its contents, which costs more than the look-up. Each entry holds its code
    object, so the id cannot be reused by another code while the entry lives; when full, it starts afresh."""

    __slots__ = ("_entries", "_size")

    def __init__(self, size: int) -> None:
        self._entries: dict = {}
        self._size = size

    def get(self, code, offset: int):
        """The value remembered for (code, offset), or None."""
        entry = self._entries.get((id(code), offset))
        return entry[1] if entry is not None and entry[0] is code else None

    def put(self, code, offset: int, value) -> None:
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[(id(code), offset)] = (code, value)


def location_of(frame) -> SourceLocation:
    """The line `frame` is running, as a SourceLocation. Locations are immutable values, so the one of each
    line is made once and shared (a kernel loop issues from the same lines over and over). Found by the
    frame's instruction offset first: a frame's line number is computed from the line table on every read."""
    code = frame.f_code
    location = _AT_OFFSET.get(code, frame.f_lasti)
    if location is not None:
        return location
    key = (code, frame.f_lineno)
    location = _LOCATIONS.get(key)
    if location is None:
        if len(_LOCATIONS) >= 65536:
            _LOCATIONS.clear()
        location = _LOCATIONS[key] = SourceLocation(code.co_filename, key[1], code.co_name)
    _AT_OFFSET.put(code, frame.f_lasti, location)
    return location


_LOCATIONS: dict = {}       # (code object, line) -> its SourceLocation (location_of)
_AT_OFFSET = CodeOffsetMemo(65536)      # (code object, instruction offset) -> its SourceLocation


class OpenNKIError(Exception):
    """Base of every opennki error.

    Attributes:
        rule: the rule that was broken, in words.
        instruction: the NKI API or instruction being executed (`nisa.nc_matmul`, `nl.load`), if any.
        expected / got: what the rule wanted and what the kernel gave (None when not meaningful).
        code: the NKI error code (`err_...`) for this rule, when NKI documents one.
        hint: a directive suggestion for the likely fix.
        location: the user's kernel line; filled in when the error crosses an instruction boundary.
    """

    def __init__(self, rule: str, *, instruction: str | None = None, expected=None, got=None,
                 code: str | None = None, hint: str | None = None, location: SourceLocation | None = None):
        super().__init__(rule)
        self.rule = rule
        self.instruction = instruction
        self.expected = expected
        self.got = got
        self.code = code
        self.hint = hint
        self.location = location if location is not None else user_location(2)

    def __str__(self) -> str:
        head = f"{self.instruction}: {self.rule}" if self.instruction else self.rule
        if self.code:
            head = f"[{self.code}] {head}"
        parts = [head]
        if self.expected is not None or self.got is not None:
            parts.append(f"  expected {self.expected}, got {self.got}")
        if self.location is not None:
            parts.append(f"  at {self.location.function} ({self.location.filename}:{self.location.lineno})")
            if self.location.source:
                parts.append(f"      {self.location.source}")
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


# The built-in bases are the exception types NKI documents for these faults, so tests written against NKI
# hold on opennki: the legacy docs name ValueError / TypeError, and the new generation's simulator checks
# hardware constraints with `assert` (spec/language.md §8.10), hence AssertionError too.

class NkiValidationError(OpenNKIError, AssertionError):
    """A hardware constraint was violated: `nki.isa.NkiValidationError` (NKI 0.3+, "Raised when hardware
    constraints are violated"), the base of the shape, dtype and memory-kind errors below, so
    `except nisa.NkiValidationError` catches what NKI's checks reject."""


class ShapeError(NkiValidationError, ValueError):
    """A shape, rank, partition-count or tile-size rule was broken."""


class DtypeError(NkiValidationError, TypeError):
    """An operand has a data type the instruction does not accept."""


class MemoryKindError(NkiValidationError, ValueError):
    """An operand lives in a memory (HBM / SBUF / PSUM) the instruction cannot access."""


class MemberError(OpenNKIError, AttributeError):
    """A tensor member NKI does not have (an AttributeError, as Python's own, with the NKI way to say it)."""


class OutOfBoundsError(OpenNKIError, IndexError):
    """An access reaches outside its tensor (and is not masked off)."""


class IndirectIndexError(OutOfBoundsError):
    """A run-time (indirect) index reaches outside its tensor when the instruction runs.

    NKI's simulator raises this fault as a plain `IndexError` with NumPy's text for the first element out of
    range, by its flat position in the tensor ("index 66048 is out of bounds for axis 0 with size 65536"), and
    the SDK's own tests check exactly that type and text. So the front doors give it to the caller in that
    form (`public_error`); inside opennki (listeners, `Simulator.launch`) it is this class.
    """

    def __init__(self, rule: str, *, flat_index: int, size: int, **kwargs):
        kwargs.setdefault("location", user_location(2))
        super().__init__(rule, **kwargs)
        self.flat_index, self.size = flat_index, size

    def builtin(self) -> BaseException:
        return IndexError(f"index {self.flat_index} is out of bounds for axis 0 with size {self.size}")


class UninitializedReadError(OpenNKIError):
    """An instruction read memory that was never written (raised only with `uninitialized='raise'`)."""


class AllocationError(OpenNKIError, MemoryError):
    """SBUF or PSUM capacity is exhausted, or a direct allocation is illegal."""


class RaceError(OpenNKIError):
    """Two accesses that may run in either order touch the same location, one of them a write."""


class KernelError(OpenNKIError):
    """A language rule of NKI was broken (control flow, scoping, parameters, calling convention)."""


class HardwareUnsupportedError(OpenNKIError):
    """The operation runs in simulation but is documented to fail on hardware (hardware-strict mode)."""


class UnsupportedError(OpenNKIError, NotImplementedError):
    """The kernel uses something opennki cannot model; the message says what and why."""


def expect(condition: bool, rule: str, *, expected=None, got=None, code: str | None = None,
           hint: str | None = None, error: type[OpenNKIError] = ShapeError) -> None:
    """Raise `error(rule, ...)` unless `condition` holds. Instruction checks use this for every rule."""
    if not condition:
        raise error(rule, expected=expected, got=got, code=code, hint=hint)


def public_error(exc: OpenNKIError) -> BaseException:
    """The form of `exc` a kernel's caller gets from a front door, with opennki's frames hidden.

    An opennki error is also the built-in exception NKI documents for its fault (ShapeError is a ValueError,
    DtypeError a TypeError, OutOfBoundsError an IndexError...), so `except IndexError` and
    `assertRaises(IndexError)` hold. A fault NKI raises as exactly a built-in (`builtin()`: run-time
    out-of-range indices) comes out as that type, and `type(e) is IndexError` holds too; it keeps opennki's
    fields (`rule`, `code`, `instruction`, `location`, `hint`...), its full text as a note (shown under the
    message in the traceback) and the opennki error itself as `opennki_error`.
    """
    builtin = getattr(exc, "builtin", None)
    if builtin is None:
        return hide_internal_frames(exc)
    plain = builtin()
    plain.__dict__.update({k: v for k, v in vars(exc).items() if not k.startswith("_")})
    plain.opennki_error = exc
    plain.__notes__ = [str(exc)]
    return plain.with_traceback(hide_internal_frames(exc).__traceback__)


def hide_internal_frames(exc: BaseException) -> BaseException:
    """Return `exc` with opennki-internal frames removed from its traceback (see module docstring)."""
    if setting("full_traceback"):
        return exc
    kept = []
    tb = exc.__traceback__
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    new_tb = None
    location = getattr(exc, "location", None)
    if location is not None and not (kept and _at(kept[-1], location)):
        # raised after the kernel line's frame had gone (at launch, at `return`): end at that line anyway
        new_tb = types.TracebackType(None, _frame_at(location), -1, location.lineno)
    for tb in reversed(kept):
        new_tb = types.TracebackType(new_tb, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return exc.with_traceback(new_tb)


def _at(tb, location: SourceLocation) -> bool:
    return tb.tb_lineno == location.lineno and tb.tb_frame.f_code.co_filename == location.filename


def _frame_at(location: SourceLocation):
    """A frame object that reads as `location` in a traceback: the code of an empty statement compiled under
    the user's file name and function name (the source line itself comes from the file, as for any frame).
    Its last instruction (-1) carries no column positions, so no carets point into the line."""
    code = compile("\n" * (location.lineno - 1) + "frame = getframe()", location.filename, "exec")
    namespace = {"getframe": sys._getframe}
    exec(code.replace(co_name=location.function), namespace)
    return namespace["frame"]
