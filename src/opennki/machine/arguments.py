"""Machine layer: the checks of plain arguments a kernel passes (shapes, dims, axes, access patterns).

Imports errors only. Every API that takes a shape, a dimension, reduction axes or an `.ap` pattern reads it
through these functions, so a float, a string, a nested tuple, a negative size or a duplicated axis is a
ShapeError naming the argument (`role`), the rule and what was got, raised at the kernel line, instead of a
TypeError from deep inside NumPy.
"""

from __future__ import annotations

import operator

import numpy as np

from opennki.errors import ShapeError


def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(x) -> bool:
    """A Python or NumPy integer (bool excluded: `True` is no size)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def as_int(x, role: str, *, minimum: int | None = None) -> int:
    """`x` as an int (anything with `__index__` but a bool), at least `minimum` if given."""
    if type(x) is int and (minimum is None or x >= minimum):
        return x                                  # the usual case, without the generic path
    try:
        if isinstance(x, (bool, np.bool_)):
            raise TypeError
        value = operator.index(x)
    except TypeError:
        raise ShapeError(f"{role} must be an integer", expected="an int", got=_describe(x)) from None
    if minimum is not None and value < minimum:
        raise ShapeError(f"{role} must be at least {minimum}", expected=f">= {minimum}", got=value)
    return value


_INTS = frozenset((int,))


def as_shape(shape, role: str = "shape", *, wildcard: bool = False) -> tuple[int, ...]:
    """A shape: an int or a flat tuple/list of positive ints (`-1` once, if `wildcard`, as in reshape)."""
    if isinstance(shape, tuple) and shape and _INTS.issuperset(map(type, shape)) and min(shape) > 0:
        return tuple(shape)                       # the usual case (a view's shape), without the generic path
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not shape or not all(is_int(s) for s in shape):
        raise ShapeError(f"{role} must be a tuple of integers", expected="e.g. (128, 512)", got=_describe(shape))
    dims = tuple(int(s) for s in shape)
    bad = [s for s in dims if s <= 0 and not (wildcard and s == -1)]
    if bad or dims.count(-1) > 1:
        rule = "positive sizes (at most one -1)" if wildcard else "positive sizes"
        raise ShapeError(f"{role} must have {rule}", expected=rule, got=dims)
    return dims


def as_ints(values, role: str) -> tuple[int, ...]:
    """A flat tuple/list of integers (a shuffle mask, a list of core ranks)."""
    if not isinstance(values, (tuple, list)):
        raise ShapeError(f"{role} must be a list of integers", expected="e.g. [0, 1, 2]", got=_describe(values))
    return tuple(as_int(v, role) for v in values)


def as_dim(dim, ndim: int, role: str = "dim") -> int:
    """A dimension index of a rank-`ndim` tensor; negative counts from the end."""
    d = as_int(dim, role)
    if not -ndim <= d < ndim:
        raise ShapeError(f"{role} {d} is out of range for a rank-{ndim} tensor", expected=f"[{-ndim}, {ndim - 1}]",
                         got=d)
    return d + ndim if d < 0 else d


def as_axes(axis, ndim: int, role: str = "axis") -> tuple[int, ...]:
    """Distinct dimension indices (an int or a tuple/list of ints), sorted."""
    axes = (axis,) if is_int(axis) else axis
    if not isinstance(axes, (tuple, list)) or not axes:
        raise ShapeError(f"{role} must be an integer or a tuple of integers", expected="e.g. 1 or (1, 2)",
                         got=_describe(axis))
    out = [as_dim(a, ndim, role) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"{role} names a dimension twice", expected="distinct axes", got=tuple(axes))
    return tuple(sorted(out))


def as_pattern(pattern, role: str = "pattern", *, allow_empty: bool = False) -> list[tuple[int, int]]:
    """An access pattern: a list of [step, count] pairs of integers (non-empty unless `allow_empty`), counts
    positive."""
    ok = isinstance(pattern, (tuple, list)) and (pattern or allow_empty) and all(
        isinstance(p, (tuple, list)) and len(p) == 2 and is_int(p[0]) and is_int(p[1]) for p in pattern)
    if not ok:
        raise ShapeError(f"{role} must be a list of [step, count] pairs of integers",
                         expected="e.g. [[512, 128], [1, 512]]", got=_describe(pattern))
    pairs = [(int(s), int(n)) for s, n in pattern]
    if any(n <= 0 for _, n in pairs):
        raise ShapeError(f"{role} counts must be positive", got=pairs)
    return pairs
