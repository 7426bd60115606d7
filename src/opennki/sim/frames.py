"""Simulator layer: reading the user's running kernel frame (which statement is executing, what it assigns).

Imports errors only. Used where eager execution must know what a compiler would see in the source: the
variable a statement is about to rebind (so its old tensor's memory can be reused, as liveness analysis
would), the local variables that are never read again (likewise), and the target of
`b = nl.loop_reduce(...)` / `t[key] = f(...)`. Bytecode is read with `dis` and
cached per code object.
"""

from __future__ import annotations

import bisect
import dis
import functools
import sys

from opennki.errors import INTERNAL_FILES, CodeOffsetMemo, is_internal

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


def frame_locals(frame) -> dict:
    """A copy of a running frame's local variables (see `peek_variable` about the snapshot it clears)."""
    snapshot = frame.f_locals
    try:
        return dict(snapshot)
    finally:
        if sys.version_info < (3, 13) and isinstance(snapshot, dict) and snapshot is not frame.f_globals:
            snapshot.clear()


_UNCONDITIONAL = frozenset(("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE",
                            "JUMP", "JUMP_NO_INTERRUPT"))
_TERMINAL = frozenset(("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"))
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


@functools.lru_cache(maxsize=256)
def _control_flow(code):
    """(instructions, successor indices of each): the code's control-flow graph, exception handlers
    included as successors of every instruction they cover."""
    instructions = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    at = {ins.offset: k for k, ins in enumerate(instructions)}
    successors = []
    for k, ins in enumerate(instructions):
        nxt = []
        if ins.opname not in _UNCONDITIONAL and ins.opname not in _TERMINAL and k + 1 < len(instructions):
            nxt.append(k + 1)
        if ins.opcode in _JUMPS and isinstance(ins.argval, int) and ins.argval in at:
            nxt.append(at[ins.argval])
        successors.append(nxt)
    for entry in dis.Bytecode(code).exception_entries:
        for offset, k in at.items():
            if entry.start <= offset < entry.end and entry.target in at:
                successors[k].append(at[entry.target])
    return instructions, successors


@functools.lru_cache(maxsize=8192)
def _read_later(code, lasti: int, name: str) -> bool:
    if name in code.co_cellvars or name in code.co_freevars:
        return True                     # closures may read it at any time
    instructions, successors = _control_flow(code)
    current = max((k for k, ins in enumerate(instructions) if ins.offset <= lasti), default=0)
    todo, seen = list(successors[current]), set()
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        effect = local_effect(instructions[k].opname, instructions[k].argval, name)
        if effect == "read":
            return True
        if effect == "dies":
            continue                    # the current value dies here on this path
        todo.extend(successors[k])
    return False


def local_effect(opname: str, argval, name: str) -> str | None:
    """What one instruction does to the local variable `name`: "read" (it loads the current value), "dies"
    (it stores or deletes it first), or None. Covers each CPython's forms: LOAD_FAST and its variants
    (LOAD_FAST_CHECK, LOAD_FAST_AND_CLEAR, 3.14's LOAD_FAST_BORROW), and the 3.13+ superinstructions whose
    argval is a pair of names, LOAD_FAST_LOAD_FAST (two loads), STORE_FAST_LOAD_FAST (a store, then a load)
    and STORE_FAST_STORE_FAST (two stores)."""
    names = argval if isinstance(argval, tuple) else (argval,)
    if name not in names:
        return None
    if opname == "STORE_FAST_LOAD_FAST":
        return "dies" if names[0] == name else "read"
    if opname.startswith("LOAD_FAST"):
        return "read"
    if opname in ("STORE_FAST", "DELETE_FAST", "STORE_FAST_STORE_FAST"):
        return "dies"
    return None


def read_later(frame, name: str) -> bool:
    """True if the local variable `name` of the running `frame` may still be read (a compiler's liveness on
    the bytecode: some path from the current instruction loads it before storing it again)."""
    return _read_later(frame.f_code, frame.f_lasti, name)


# A front door called from the kernel itself (its caller's file known not to be opennki's, `errors.INTERNAL_FILES`)
# hands that frame on (`as_kernel_frame`: the legacy `nl` binary front doors, `nl.zeros`, `acc[...] += x`), so the
# instruction's kernel line is not found by walking the stack (`user_frame`, whose answer it is). False: every
# one walks the stack (the plain path).
KERNEL_FRAME_HINTS = True


def as_kernel_frame(caller):
    """`caller` (a front door's caller's frame) when KERNEL_FRAME_HINTS and its file is known not to be opennki's:
    then it is the frame `user_frame` would find from the front door. Else None (the stack is walked)."""
    return caller if KERNEL_FRAME_HINTS and INTERNAL_FILES.get(caller.f_code.co_filename) is False else None


def user_frame():
    """The innermost frame outside the opennki package (`errors.is_internal`, tested inline: this runs for
    every instruction). Only opennki's own functions call it, so the search starts at their caller."""
    try:
        frame = sys._getframe(2)
    except ValueError:                  # called from the outermost frame (which is opennki's)
        return None
    internal = INTERNAL_FILES
    while frame is not None:
        filename = frame.f_code.co_filename
        inside = internal.get(filename)
        if not (inside if inside is not None else is_internal(filename)):
            return frame
        frame = frame.f_back
    return None


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


# -- where a deferred result goes ---------------------------------------------------------------------------
# Stack effects of the instructions a subscript key is made of (`t[i, j:k] = value`): (pops, pushes).
_KEY_POPS = {"BUILD_SLICE": None, "BUILD_TUPLE": None, "BUILD_LIST": None,   # pops oparg
             "BINARY_OP": 2, "BINARY_SUBSCR": 2, "BINARY_SLICE": 3, "UNARY_NEGATIVE": 1, "UNARY_INVERT": 1,
             "UNARY_NOT": 1, "UNARY_POSITIVE": 1, "COPY": 0, "COMPARE_OP": 2}
_ATTR_LOADS = ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR")
# calls in the rest of the statement (an index computed after the value, as in `t[i, c + nl.arange(6)] =
# value`): each pops its arguments and this many more values (callable, self or NULL, keyword names), and
# pushes the call's result; the value computed before stays on the stack below them
_CALL_POPS = {"CALL": 2, "CALL_METHOD": 2, "CALL_FUNCTION": 1, "CALL_FUNCTION_KW": 2, "CALL_KW": 3}
_STACK_NEUTRAL = ("PRECALL", "KW_NAMES")      # 3.11: the call's arguments are popped by CALL


def result_use(frame) -> tuple[str, object, str | None]:
    """What the running statement of the user's `frame` does with the value the expression being evaluated
    now (a call or an operator) produces, read from the bytecode: `("temporary", frame, None)` when the value
    only lives on the evaluation stack until it is the value of `t[key] = value` or the right operand of
    `x op= value`; `("local", frame, name)` when it is bound straight to the local variable `name`; otherwise
    `("held", frame, None)` (passed on, put in a container, a global...). A value a helper function returns
    is followed into the user frame that called the helper."""
    while True:
        code = frame.f_code
        use = _USES.get(code, frame.f_lasti)
        if use is None:
            use = _result_use(code, frame.f_lasti)
            _USES.put(code, frame.f_lasti, use)
        kind, name = use
        caller = frame.f_back
        if kind != "return" or caller is None or is_internal(caller.f_code.co_filename):
            return ("held" if kind == "return" else kind), frame, name
        frame = caller


_USES = CodeOffsetMemo(8192)        # (code object, offset) -> _result_use of them


@functools.lru_cache(maxsize=64)
def _call_instructions(code) -> tuple[list, list]:
    """(the instructions of `code` but CACHE and EXTENDED_ARG entries, their offsets): decoded once per code
    object, since a kernel's every deferring call site asks (`_result_use`), and a flash-attention kernel's
    body is some two thousand instructions."""
    instructions = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
    return instructions, [i.offset for i in instructions]


def _result_use(code, lasti: int) -> tuple[str, str | None]:
    instructions, offsets = _call_instructions(code)
    at = bisect.bisect_right(offsets, lasti) - 1        # the last instruction at or before `lasti`
    if at < 0:
        return "held", None
    depth = 0                           # values pushed above the result
    for ins in instructions[at + 1:]:
        op = ins.opname
        if op == "NOP" or op in _STACK_NEUTRAL:
            continue
        if depth == 0:
            if op in ("STORE_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"):
                name = ins.argval[0] if isinstance(ins.argval, tuple) else ins.argval
                return "local", name
            if op == "RETURN_VALUE":
                return "return", None
            if (op == "BINARY_OP" and ins.argrepr.endswith("=")) or op.startswith("INPLACE_"):
                return "temporary", None            # `x op= value`: the result is the right operand
        if op == "STORE_SUBSCR":
            return ("temporary" if depth == 2 else "held"), None
        if op == "STORE_SLICE":
            return ("temporary" if depth == 3 else "held"), None
        if op.startswith("LOAD_") and op not in _ATTR_LOADS:
            pops, pushes = 0, dis.stack_effect(ins.opcode, ins.arg) if ins.opcode >= dis.HAVE_ARGUMENT \
                else dis.stack_effect(ins.opcode)
        elif op in _ATTR_LOADS:
            pops = 1
            pushes = 1 + dis.stack_effect(ins.opcode, ins.arg)
        elif op in _KEY_POPS:
            pops = ins.arg if _KEY_POPS[op] is None else _KEY_POPS[op]
            pushes = 1
        elif op in _CALL_POPS:
            pops, pushes = ins.arg + _CALL_POPS[op], 1
        elif op == "PUSH_NULL":
            pops, pushes = 0, 1
        else:
            return "held", None
        if pops > depth:
            return "held", None     # the result itself is consumed by something else
        depth += pushes - pops
    return "held", None


@functools.lru_cache(maxsize=256)
def return_lines(code) -> tuple[int, ...]:
    """The lines of `code`'s `return <value>` statements (not the implicit `return None`), in order: where
    an error about a kernel's returned tensors points, the kernel frame being gone by then."""
    lines, line, previous = [], code.co_firstlineno, None
    for ins in dis.get_instructions(code):
        positions = getattr(ins, "positions", None)
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        elif ins.starts_line is not None:
            line = ins.starts_line
        if ins.opname == "RETURN_VALUE" and not (previous is not None and previous.opname == "LOAD_CONST"
                                                 and previous.argval is None):
            lines.append(line)
        if ins.opname not in ("CACHE", "EXTENDED_ARG"):
            previous = ins
    return tuple(dict.fromkeys(lines))
