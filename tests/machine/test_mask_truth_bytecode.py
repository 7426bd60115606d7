"""Python `and` / `or` between masks (`Predicate.__bool__`) is told from other truth tests by the bytecode of the
running statement (machine/index.boolean_operator_at). CPython changed that bytecode in 3.12 and again in 3.13;
the listings below are the instruction shapes each version's compiler emits (offsets in bytes, cache entries
skipped as `dis.get_instructions` skips them), so every branch is checked whichever interpreter runs the suite,
and the last tests run the real thing on this interpreter, a jump long enough to need `EXTENDED_ARG` included."""

import dis
import sys

import numpy as np
import pytest

from opennki.errors import KernelError
from opennki.machine.index import Predicate, boolean_operator_at

# (listing, offset of the instruction running the truth test, what it is)
LISTINGS = {
    "3.11 a and b": ([(2, "LOAD_FAST", 0), (4, "JUMP_IF_FALSE_OR_POP", 4), (6, "LOAD_FAST", 1),
                      (8, "STORE_FAST", 2)], 4, "and"),
    "3.11 a or <long>": ([(2, "LOAD_FAST", 0), (4, "EXTENDED_ARG", 1), (6, "JUMP_IF_TRUE_OR_POP", 300),
                          (8, "LOAD_FAST", 1)], 6, "or"),
    "3.11 if a": ([(2, "LOAD_FAST", 0), (4, "POP_JUMP_FORWARD_IF_FALSE", 2), (6, "LOAD_CONST", 0)], 4, None),
    "3.12 a and b": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "POP_JUMP_IF_FALSE", 2), (8, "POP_TOP", None),
                      (10, "LOAD_FAST", 1), (12, "STORE_FAST", 2)], 6, "and"),
    "3.12 a or b": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "POP_JUMP_IF_TRUE", 2), (8, "POP_TOP", None),
                     (10, "LOAD_FAST", 1)], 6, "or"),
    "3.12 a and <long>": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "EXTENDED_ARG", 1),
                           (8, "POP_JUMP_IF_FALSE", 300), (10, "POP_TOP", None), (12, "LOAD_FAST", 1)], 8, "and"),
    "3.12 4 <= i < 20": ([(2, "LOAD_CONST", 1), (4, "LOAD_FAST", 0), (6, "SWAP", 2), (8, "COPY", 2),
                          (10, "COMPARE_OP", 26), (14, "COPY", 1), (16, "POP_JUMP_IF_FALSE", 5),
                          (18, "POP_TOP", None)], 16, "and"),
    "3.12 if a": ([(2, "LOAD_FAST", 0), (4, "POP_JUMP_IF_FALSE", 2), (6, "RETURN_CONST", 0)], 4, None),
    "3.12 not a": ([(2, "LOAD_FAST", 0), (4, "UNARY_NOT", None), (6, "STORE_FAST", 1)], 4, None),
    "3.12 bool(a) after a copy": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "CALL", 1)], 6, None),
    "3.13 a and b": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "TO_BOOL", None), (14, "POP_JUMP_IF_FALSE", 2),
                      (18, "POP_TOP", None), (20, "LOAD_FAST", 1)], 6, "and"),
    "3.13 a or <long>": ([(2, "LOAD_FAST", 0), (4, "COPY", 1), (6, "TO_BOOL", None), (14, "EXTENDED_ARG", 1),
                          (16, "POP_JUMP_IF_TRUE", 300), (20, "POP_TOP", None)], 6, "or"),
    "3.13 if a": ([(2, "LOAD_FAST", 0), (4, "TO_BOOL", None), (12, "POP_JUMP_IF_FALSE", 2)], 4, None),
    "3.13 not a": ([(2, "LOAD_FAST", 0), (4, "TO_BOOL", None), (12, "UNARY_NOT", None)], 4, None),
    "3.13 if i < 8 (COMPARE_OP converts)": ([(2, "LOAD_FAST", 0), (4, "LOAD_CONST", 1), (6, "COMPARE_OP", 18),
                                             (10, "POP_JUMP_IF_FALSE", 2)], 6, None),
    "3.14 a or b": ([(2, "LOAD_FAST_BORROW", 0), (4, "COPY", 1), (6, "TO_BOOL", None),
                     (14, "POP_JUMP_IF_TRUE", 3), (18, "NOT_TAKEN", None), (20, "POP_TOP", None)], 6, "or"),
    "offset not in the code": ([(2, "LOAD_FAST", 0)], 40, None),
}


@pytest.mark.parametrize("case", sorted(LISTINGS))
def test_truth_test_is_read_from_each_pythons_bytecode(case):
    ops, lasti, want = LISTINGS[case]
    assert boolean_operator_at(ops, lasti) == want


def _masks():
    i = np.arange(8)
    return Predicate(i < 5), Predicate(i > 2)


def _compiled(body: str):
    """A function `f(p, q)` whose body is `body`, compiled here (a right-hand side can be made long)."""
    scope = {}
    exec(compile(f"def f(p, q):\n    {body}\n", "<mask-kernel>", "exec"), scope)
    return scope["f"]


LONG = " & ".join(["q"] * 120)      # 120 terms: the jump over them needs EXTENDED_ARG on every CPython


@pytest.mark.parametrize("body,kept,word", [("return p and q", 1, "right-hand"), ("return p or q", 0, "left-hand"),
                                            (f"return p and ({LONG})", 1, "right-hand"),
                                            (f"return p or ({LONG})", 0, "left-hand")])
def test_and_or_between_masks_warn_and_keep_pythons_operand(body, kept, word):
    f = _compiled(body)
    if LONG in body:
        assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(f)), sys.version
    p, q = _masks()
    with pytest.warns(UserWarning, match=f"keeps the {word} mask") as record:
        got = f(p, q)
    assert got is (p, q)[kept] or np.array_equal(got.array, (p, q)[kept].array)
    assert (record[0].filename, record[0].lineno) == ("<mask-kernel>", 2)


@pytest.mark.parametrize("body", ["if p:\n        return 1", "return not p", "return bool(p)",
                                  f"return 1 if p else ({LONG})"])
def test_other_truth_tests_of_a_mask_raise(body):
    p, q = _masks()
    with pytest.raises(KernelError, match="truth value of a mask is ambiguous"):
        _compiled(body)(p, q)
