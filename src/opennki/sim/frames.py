"""Simulator layer: reading the user's running kernel frame (which statement is executing, what it assigns).

Imports errors only. Used where eager execution must know what a compiler would see in the source: the
variable a statement is about to rebind (so its old tensor's memory can be reused, as liveness analysis
would) and the target of `b = nl.loop_reduce(...)` / `t[key] = f(...)`. Bytecode is read with `dis` and
cached per code object.
"""

from __future__ import annotations

import dis
import functools
import sys

from opennki.errors import is_internal

_STORE_OPS = ("STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL")


@functools.lru_cache(maxsize=1024)
def _store_after_call(code) -> dict[int, str]:
    """For each call in `code`, the variable its result is stored into, if it is stored straight away."""
    out = {}
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for call, nxt in zip(instructions, instructions[1:]):
        if call.opname.startswith("CALL") and nxt.opname in _STORE_OPS:
            for offset in range(call.offset, nxt.offset, 2):   # f_lasti may sit on the call's cache entries
                out[offset] = nxt.argval
    return out


def pending_store_target(frame) -> str | None:
    """The name the statement running in `frame` is about to assign the current call's result to."""
    return _store_after_call(frame.f_code).get(frame.f_lasti)


def peek_variable(frame, name: str):
    """The current value of variable `name` in a running frame. Before Python 3.13, `frame.f_locals` makes a
    snapshot dict that stays attached to the frame and would keep every local's old value alive; it is
    emptied again right away (the frame's real locals are untouched)."""
    snapshot = frame.f_locals
    try:
        return snapshot.get(name, frame.f_globals.get(name))
    finally:
        if sys.version_info < (3, 13) and isinstance(snapshot, dict) and snapshot is not frame.f_globals:
            snapshot.clear()


def user_frame():
    frame = sys._getframe(1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


# `t[key] = f(...)` evaluates f first, then loads t and the key (these ops), then STORE_SUBSCR
_KEY_OPS = ("LOAD_", "BUILD_", "BINARY_", "UNARY_", "COPY", "SWAP", "CALL", "PUSH_NULL", "PRECALL", "KW_NAMES")


def stores_into_subscript(frame) -> bool:
    """True if the call running in `frame` is the right-hand side of `t[key] = f(...)`."""
    return _stores_into_subscript(frame.f_code, frame.f_lasti)


@functools.lru_cache(maxsize=1024)
def _stores_into_subscript(code, lasti: int) -> bool:
    """True if the call at `lasti` is the right-hand side of `t[key] = f(...)` (read from the bytecode)."""
    for ins in dis.get_instructions(code):
        if ins.offset <= lasti or ins.opname in ("CACHE", "NOP", "EXTENDED_ARG"):
            continue
        if ins.opname == "STORE_SUBSCR":
            return True
        if not ins.opname.startswith(_KEY_OPS):
            return False
    return False
