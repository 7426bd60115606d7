"""The bytecode liveness behind deferred results and memory reuse (sim/frames.py `read_later`) reads every
CPython's forms of local loads and stores: 3.13 fuses pairs into superinstructions whose argval is a pair of
names, which the analysis once compared with a single name, so a later `b2[...] = e` (LOAD_FAST_LOAD_FAST)
did not count as a read of `e`. Run on any Python: the forms are given by name."""

import dis

import pytest

from opennki.sim.frames import local_effect, read_later


@pytest.mark.parametrize("opname, argval, name, effect", [
    ("LOAD_FAST", "e", "e", "read"),
    ("LOAD_FAST_CHECK", "e", "e", "read"),
    ("LOAD_FAST_AND_CLEAR", "e", "e", "read"),
    ("LOAD_FAST_BORROW", "e", "e", "read"),
    ("LOAD_FAST_LOAD_FAST", ("e", "b2"), "e", "read"),
    ("LOAD_FAST_LOAD_FAST", ("b2", "e"), "e", "read"),
    ("LOAD_FAST_BORROW_LOAD_FAST_BORROW", ("b2", "e"), "e", "read"),
    ("STORE_FAST_LOAD_FAST", ("e", "x"), "e", "dies"),
    ("STORE_FAST_LOAD_FAST", ("x", "e"), "e", "read"),
    ("STORE_FAST_LOAD_FAST", ("e", "e"), "e", "dies"),      # the load reads the new value
    ("STORE_FAST_STORE_FAST", ("x", "e"), "e", "dies"),
    ("STORE_FAST", "e", "e", "dies"),
    ("DELETE_FAST", "e", "e", "dies"),
    ("LOAD_FAST_LOAD_FAST", ("a", "b"), "e", None),
    ("STORE_FAST", "x", "e", None),
    ("LOAD_GLOBAL", "e", "e", None),
])
def test_each_form_of_a_local_load_or_store(opname, argval, name, effect):
    assert local_effect(opname, argval, name) == effect


def _reads_e_twice():
    e = 1.0
    b1 = [e]
    b2 = [e]
    return b1, b2


def _reads_e_once():
    e = 1.0
    b1 = [e]
    e = 2.0
    return b1


class _Frame:
    def __init__(self, code, lasti):
        self.f_code, self.f_lasti = code, lasti


@pytest.mark.parametrize("fn, expected", [(_reads_e_twice, True), (_reads_e_once, False)])
def test_read_later_on_this_interpreters_bytecode(fn, expected):
    """After the first read of `e` (the instruction building `b1`), `e` is read again or not."""
    code = fn.__code__
    first_build = next(i for i in dis.get_instructions(code) if i.opname == "BUILD_LIST")
    assert read_later(_Frame(code, first_build.offset), "e") is expected
