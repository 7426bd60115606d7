"""Dispatch layer: a kernel call's arguments as tensor leaves plus a template, and the specialisation key.

Imports the simulator's ShapeSpec and the machine's dtypes only. A call `kernel(a, (b, c), n=4)` is bound to
the kernel's signature and split into its *leaves* (every array-like argument, also inside tuples, named as
the simulator names them: `a`, `x[0]`, ...) and a *template* (everything else, with `Leaf(i)` where a
leaf was). Framework bridges send only the leaves across (as JAX operands, torch custom-op inputs) and
rebuild the call from the template; the specialisation cache keys a call on the template plus each leaf's
shape and dtype, as NKI does (non-tensor arguments are compile-time constants, spec/entrypoints.md §2.2).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from opennki.errors import KernelError
from opennki.machine.dtypes import dtype_of
from opennki.sim.simulator import ShapeSpec


@dataclass(frozen=True)
class Leaf:
    """Where the i-th tensor leaf goes in a call template."""

    index: int


@dataclass(frozen=True)
class LeafInfo:
    """Name, shape and NKI dtype name of one tensor leaf (what the traced program records per input)."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class NotCacheable(Exception):
    """An argument cannot be part of a specialisation key (unhashable and not a tensor)."""


def bind(func, args, kwargs) -> dict:
    """The call's arguments by parameter name, in signature order (defaults not filled in)."""
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError as e:
        raise KernelError(f"kernel {getattr(func, '__name__', 'kernel')} called with mismatching arguments: {e}",
                          hint="pass every tensor the kernel's signature names") from None
    except ValueError:   # no introspectable signature
        named = {f"arg{i}": a for i, a in enumerate(args)}
        named.update(kwargs)
        return named
    return dict(bound.arguments)


def split(func, args, kwargs, is_leaf):
    """(leaves, leaf_names, template) of a call; `template` maps parameter names to values with `Leaf`s."""
    leaves, names = [], []

    def walk(value, name):
        if is_leaf(value):
            leaves.append(value)
            names.append(name)
            return Leaf(len(leaves) - 1)
        if isinstance(value, (tuple, list)):
            return type(value)(walk(v, f"{name}[{i}]") for i, v in enumerate(value))
        return value

    template = {name: walk(value, name) for name, value in bind(func, args, kwargs).items()}
    return leaves, names, template


def fill(template: dict, leaves) -> dict:
    """The call's keyword arguments with the leaves put back (the inverse of `split`)."""
    def walk(value):
        if isinstance(value, Leaf):
            return leaves[value.index]
        if isinstance(value, (tuple, list)):
            return type(value)(walk(v) for v in value)
        return value
    return {name: walk(value) for name, value in template.items()}


def call_args(func, template: dict, leaves):
    """(args, kwargs) to call `func` with: positional for positional parameters, keywords for the rest."""
    named = fill(template, leaves)
    try:
        params = inspect.signature(func).parameters
    except ValueError:
        return tuple(named.values()), {}
    args, kwargs = [], {}
    order = list(params)
    for name, value in named.items():
        kind = params[name].kind if name in params else inspect.Parameter.KEYWORD_ONLY
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif kind is inspect.Parameter.KEYWORD_ONLY or order.index(name) != len(args):
            # after a parameter the call left to its default, positions no longer line up: by name
            kwargs[name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def leaf_info(leaf, name: str) -> LeafInfo:
    return LeafInfo(name, tuple(int(s) for s in leaf.shape), dtype_of(leaf.dtype).name)


def template_key(value):
    """A hashable stand-in for a template value (scalars by type and value, objects by value if hashable)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(template_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, template_key(v)) for k, v in value.items())))
    try:
        hash(value)
    except TypeError:
        raise NotCacheable(type(value).__name__) from None
    return (type(value).__qualname__, value)


def spec_key(template: dict, infos) -> tuple:
    """The specialisation key of a call: its template plus each leaf's shape and dtype."""
    return (template_key(template), tuple((i.shape, i.dtype) for i in infos))


def as_shape_spec(info: LeafInfo) -> ShapeSpec:
    return ShapeSpec(info.shape, info.dtype)
