"""Which test exercises which legacy `nl` name, verified while the test runs.

A test that checks results against NumPy declares the names it exercises with `@covers("exp", "sum")`. The
decorator records the claim in `COVERED` (read by tests/language/test_legacy_names.py) and, while the test
runs, profiles Python calls: every declared name that is a function (or an object whose methods run when it
is used: `nl.tile_size`, `nl.mgrid`, `nl.nc`...) must actually have run, else the test fails; operator
objects (`nl.exp`, `nl.add`...) are recognised by identity, since one factory makes many of them. Names with no
code of their own (dtypes, buffers, `nl.fp32`...) must appear as `nl.<name>` in the test's source instead.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import sys
import threading

import opennki.language as new_nl
import opennki.legacy.language as nl
from opennki._src.tokens import NlOp



def _impl_key(code, values) -> tuple:
    return (code, tuple(id(v) for v in values))


def _nlop_impls() -> dict:
    """(code, ids of its free variables' values) of each `nl` operator's `_impl` -> ids of the operators: a call
    of an operator runs its `_impl` directly (no frame of NlOp's), and one factory's impls share their code, so
    the frame's free variables tell them apart."""
    impls: dict = {}
    for module in (nl, new_nl):
        for obj in vars(module).values():
            if isinstance(obj, NlOp) and obj.__wrapped__ is not None:
                fn = obj._impl
                cells = fn.__closure__ or ()
                key = _impl_key(fn.__code__, [c.cell_contents for c in cells])
                impls.setdefault(key, set()).add(id(obj))
    return impls


_NLOP_IMPLS = _nlop_impls()
_NLOP_CODES = {key[0] for key in _NLOP_IMPLS}
COVERED: dict[str, set[str]] = {}          # legacy nl name -> tests
COVERED_NEW: dict[str, set[str]] = {}      # new-generation nl name -> tests (`covers(..., new=True)`)


def _codes(obj) -> set:
    """Code objects that run when `obj` is used."""
    if isinstance(obj, (enum.Enum, str)):          # nl.sbuf & co., new-generation dtype strings: plain values
        return set()
    if isinstance(obj, NlOp):                      # ops made by one factory share their code: track the object
        return {id(obj)} if obj.__wrapped__ is not None else set()     # a pure token (nl.bypass) only names
    code = getattr(obj, "__code__", None)
    if code is not None:
        return {code}
    cls = obj if isinstance(obj, type) else type(obj)
    if cls.__module__.startswith(("numpy", "ml_dtypes", "builtins", "enum")):
        return set()
    codes = set()
    for name, attr in vars(cls).items():
        if name in ("__repr__", "__str__", "__reduce__"):
            continue
        fn = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if getattr(fn, "__code__", None) is not None:
            codes.add(fn.__code__)
    return codes


class _CallTracer:
    def __init__(self):
        self.seen: set = set()

    def profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            self.seen.add(code)
            if code in _NLOP_CODES:
                local = frame.f_locals
                self.seen.update(_NLOP_IMPLS.get(_impl_key(code, [local[n] for n in code.co_freevars]), ()))

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)   # all_reduce runs programs on threads
        return self

    def __exit__(self, *exc):
        sys.setprofile(self.previous)
        threading.setprofile(None)
        return False


def covers(*names, via: str | None = None, new: bool = False, as_name: str = "nl"):
    """Mark a NumPy-checked test as exercising the legacy `nl` names `names` (module docstring); with
    `new=True`, names of the new generation's `nki.language`; `as_name`: what the test source calls the module.

    With `via`, the test is parametrized over the names: each run must only exercise the name passed in its
    argument `via` (all of `names` are claimed)."""
    module = new_nl if new else nl
    registry = COVERED_NEW if new else COVERED
    for n in names:
        if not hasattr(module, n):
            raise AttributeError(f"nl.{n} does not exist")

    def decorate(test):
        for n in names:
            registry.setdefault(n, set()).add(f"{test.__module__}::{test.__name__}")
        source = inspect.getsource(test)
        needed = {n: _codes(getattr(module, n)) for n in names}
        for n, codes in needed.items():
            if not codes and not re.search(rf"\b{as_name}\.{n}\b", source):
                raise AssertionError(f"{test.__name__} claims nl.{n} but its source never uses nl.{n}")

        @functools.wraps(test)
        def run(*args, **kwargs):
            with _CallTracer() as tracer:
                result = test(*args, **kwargs)
            required = [kwargs[via]] if via is not None else list(needed)
            unused = sorted(n for n in required if needed[n] and not needed[n] & tracer.seen)
            assert not unused, f"{test.__name__} claims to cover nl.{unused} but never ran them"
            return result
        return run
    return decorate
