"""Machine layer: legacy index expressions (`nl.arange`, `nl.mgrid`), masks and dynamic slices.

Imports errors only. An `Index` is an affine function over the axes of an index grid: its value at grid
position (i_0, ..., i_{r-1}) is `const + sum(coeffs[a] * i_a)`. `nl.arange(128)[:, None]` is the Index with
shape (128, 1) and coeffs (1, 0). Adding, subtracting and multiplying by integers keeps it affine (loop
variables and `program_id` are plain ints, so `k * 128 + i_p` is affine too); NumPy broadcasting rules apply
between indices of different shapes. Because every legacy subscript with such indices is affine, it is a
strided view of the tensor: no gather is needed.

Comparisons build a `Predicate`: a boolean array over the grid, used as `mask=`. `%` and `//` give a
`NonAffineIndex`, whose comparisons are not valid masks (`err_unsupported_expression_in_mask`), as in NKI.

The truth value of a mask (decision, docs/compatibility.md "Python `and` / `or` between masks"): NKI joins
masks with `&` / `|` and documents `and` / `or` / `not` / `if` on them as errors, yet AWS's own published
examples pass `mask=(ix < n and iy < m)` to its simulator. In Python, `a and b` is `b` whenever `a` is true
(`a or b` is `a`), so such a mask can only ever be one of its operands. opennki follows Python there: a mask
tested by an `and` / `or` (or a chained comparison, `0 <= i < n`) whose value is kept is true, and a
`UserWarning` at the kernel line says which mask was dropped; every other truth test (`if`, `while`, `not`,
`bool()`) stays `err_ambiguous_tensor_truth_value`. The compiler-rule lint reports the `and` / `or` as that
error too.
"""

from __future__ import annotations

import dis
import math
import operator
import sys
import warnings

import numpy as np

from opennki.errors import KernelError, ShapeError
from opennki.machine.arguments import as_int


def _broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if a == b:                  # the usual case (`i * 128 + iq >= k * 512 + ik`): NumPy's rules give `a`
        return a
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise ShapeError("index expressions have incompatible shapes", got=(a, b)) from None


def _broadcast_coeffs(index: "Index", shape: tuple[int, ...]) -> tuple[int, ...]:
    """`index`'s coefficients over the broadcast grid `shape`: leading axes it lacks get 0, and so does an axis
    where it has size 1 and the grid more (NumPy repeats its one value there: `arange(1)[:, None]` added to
    `arange(128)[:, None]` is not `2 * i`)."""
    if index.shape == shape:
        return index.coeffs
    lead = len(shape) - len(index.shape)
    return (0,) * lead + tuple(c if n != 1 or m == 1 else 0
                               for c, n, m in zip(index.coeffs, index.shape, shape[lead:]))


class Index:
    """An affine index expression over a grid (see the module docstring)."""

    __slots__ = ("const", "coeffs", "shape")
    __array_priority__ = 1000  # so `np.int32(3) * i` defers to Index

    def __init__(self, const: int, coeffs: tuple[int, ...], shape: tuple[int, ...]):
        self.const = int(const)
        self.coeffs = tuple(int(c) for c in coeffs)
        self.shape = tuple(int(s) for s in shape)

    @classmethod
    def _of(cls, const: int, coeffs: tuple[int, ...], shape: tuple[int, ...]) -> "Index":
        """The Index of a Python int and tuples of them (what `__init__` makes of its arguments), without
        converting them again: arithmetic on indices makes its results of such values."""
        index = object.__new__(cls)
        index.const, index.coeffs, index.shape = const, coeffs, shape
        return index

    @property
    def ndim(self) -> int:
        return len(self.shape)

    # -- arithmetic -------------------------------------------------------------------------------------
    def _combine(self, other, sign: int) -> "Index":
        if isinstance(other, Index):
            shape = _broadcast_shapes(self.shape, other.shape)
            a, b = _broadcast_coeffs(self, shape), _broadcast_coeffs(other, shape)
            coeffs = tuple(x + y for x, y in zip(a, b)) if sign == 1 else tuple(x - y for x, y in zip(a, b))
            return Index._of(self.const + sign * other.const, coeffs, shape)
        if isinstance(other, NonAffineIndex):
            return NotImplemented
        if _is_int(other):
            return Index._of(self.const + sign * int(other), self.coeffs, self.shape)
        if sign == 1 and getattr(other, "storage", None) is not None:
            return DynamicIndex(self, other)   # `iy + offsets[0, k]`: plus a run-time value
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return Index._of(-self.const, tuple(-c for c in self.coeffs), self.shape)

    def __pos__(self):
        return self

    def __mul__(self, other):
        if _is_int(other):
            k = int(other)
            return Index._of(self.const * k, tuple(c * k for c in self.coeffs), self.shape)
        if isinstance(other, (Index, NonAffineIndex)):
            return NonAffineIndex(self.values() * _values(other))
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return NonAffineIndex(self.values() // _values(other))

    def __mod__(self, other):
        return NonAffineIndex(self.values() % _values(other))

    def __rfloordiv__(self, other):
        return NonAffineIndex(_values(other) // self.values())

    def __rmod__(self, other):
        return NonAffineIndex(_values(other) % self.values())

    # -- comparisons build masks -----------------------------------------------------------------------
    def _compare(self, other, op) -> "Predicate":
        if isinstance(other, Index) or _is_int(other):
            return Predicate(self._sign_test(other, op))
        return Predicate(op(self.values(), _values(other)), affine=not isinstance(other, NonAffineIndex))

    def _sign_test(self, other, op) -> np.ndarray:
        """`op(self.values(), other.values())` for an Index or int `other`, without either grid of values:
        the difference `d = self - other` is affine, and `op(d, 0)` holds where `op(const + sum over the other
        axes, -(coeff * i) on the last axis)` does, which NumPy broadcasts into the boolean grid in one pass.
        Exact: every term is an integer (what `values` computes in int64, as here)."""
        d = self - other
        shape, coeffs = d.shape, d.coeffs
        if not shape:
            return np.asarray(op(d.const, 0))
        n, c = shape[-1], coeffs[-1] if shape[-1] != 1 else 0
        rest = Index._of(d.const, coeffs[:-1], shape[:-1])
        lo, hi = rest.value_range()
        # the narrowest integer type holding both sides: NumPy compares broadcast int8 / int16 grids several
        # times faster than int64 ones (128 x 512: about 6, 13, 43 and 85 us for 8, 16, 32 and 64 bits)
        dtype = _INT_TYPES[_bits_for(min(lo, -c * (n - 1), 0), max(hi, -c * (n - 1), 0))]
        last = np.arange(0, -c * n, -c, dtype=dtype) if c else np.zeros(1, dtype=dtype)
        out = op(_grid_sum(d.const, coeffs[:-1], shape[:-1], dtype)[..., None], last)
        return out if out.shape == shape else np.broadcast_to(out, shape).copy()

    def __lt__(self, other):
        return self._compare(other, operator.lt)

    def __le__(self, other):
        return self._compare(other, operator.le)

    def __gt__(self, other):
        return self._compare(other, operator.gt)

    def __ge__(self, other):
        return self._compare(other, operator.ge)

    def __eq__(self, other):  # noqa: D105 - NKI semantics: element-wise predicate
        return self._compare(other, operator.eq)

    def __ne__(self, other):
        return self._compare(other, operator.ne)

    __hash__ = object.__hash__

    # -- lifting: arange(n)[:, None] -------------------------------------------------------------------
    def __getitem__(self, key) -> "Index":
        if not isinstance(key, tuple):
            key = (key,)
        coeffs, shape, const = [], [], self.const
        axis = 0
        for k in key:
            if k is None:
                coeffs.append(0)
                shape.append(1)
            elif isinstance(k, slice):
                if axis >= self.ndim:
                    raise ShapeError("too many indices for an index expression", got=key)
                start, stop, step = k.indices(self.shape[axis])
                const += self.coeffs[axis] * start
                coeffs.append(self.coeffs[axis] * step)
                shape.append(max(0, -(-(stop - start) // step)))
                axis += 1
            elif _is_int(k):
                if axis >= self.ndim:
                    raise ShapeError("too many indices for an index expression", got=key)
                const += self.coeffs[axis] * int(k)
                axis += 1
            else:
                raise ShapeError("index expressions can only be lifted with slices and None", got=key)
        for rest in range(axis, self.ndim):
            coeffs.append(self.coeffs[rest])
            shape.append(self.shape[rest])
        return Index(const, tuple(coeffs), tuple(shape))

    def __setitem__(self, key, value):
        raise KernelError("cannot assign into an index expression", code="err_cannot_assign_to_index")

    def __bool__(self):
        raise KernelError("control flow cannot depend on an arange index",
                          code="err_control_flow_condition_depending_on_arange",
                          hint="use mask= to restrict an operation instead of an if statement")

    def __iter__(self):
        raise KernelError("cannot iterate over an index expression",
                          code="err_control_flow_condition_depending_on_arange")

    # -- values -----------------------------------------------------------------------------------------
    def values(self) -> np.ndarray:
        """The integer value at every grid position (shape `self.shape`, int64, a new array)."""
        out = _grid_sum(self.const, self.coeffs, self.shape)
        return out if out.shape == self.shape else np.broadcast_to(out, self.shape).copy()

    def value_range(self) -> tuple[int, int]:
        lo = hi = self.const
        for c, n in zip(self.coeffs, self.shape):
            lo += min(0, c * (n - 1))
            hi += max(0, c * (n - 1))
        return lo, hi

    def __repr__(self) -> str:
        terms = [f"{c}*i{a}" for a, c in enumerate(self.coeffs) if c]
        return f"Index({' + '.join(terms + [str(self.const)])}, shape={self.shape})"


class DynamicIndex:
    """An affine index plus the run-time value of a one-element on-chip integer tile, as legacy kernels
    write a dynamic free-dim offset: `src[ix, offsets[0, k] + iy]` (`tensor_copy_dynamic_src/dst`)."""

    __slots__ = ("index", "tile")

    def __init__(self, index: Index, tile):
        self.index = index
        self.tile = tile

    @property
    def shape(self) -> tuple[int, ...]:
        return _broadcast_shapes(self.index.shape, tuple(self.tile.shape))

    def __add__(self, other):
        if _is_int(other) or isinstance(other, Index):
            return DynamicIndex(self.index + other, self.tile)
        return NotImplemented

    __radd__ = __add__


class NonAffineIndex:
    """An index expression that left the affine form (`i % 4`, `i // 2`, `i * j`): usable only as data."""

    __slots__ = ("array",)
    __array_priority__ = 1000

    def __init__(self, array: np.ndarray):
        self.array = np.asarray(array, dtype=np.int64)

    @property
    def shape(self):
        return self.array.shape

    def values(self) -> np.ndarray:
        return self.array

    def _arith(self, other, op, reflect=False):
        a, b = self.array, _values(other)
        return NonAffineIndex(op(b, a) if reflect else op(a, b))

    def __add__(self, o): return self._arith(o, operator.add)
    def __radd__(self, o): return self._arith(o, operator.add, True)
    def __sub__(self, o): return self._arith(o, operator.sub)
    def __rsub__(self, o): return self._arith(o, operator.sub, True)
    def __mul__(self, o): return self._arith(o, operator.mul)
    def __rmul__(self, o): return self._arith(o, operator.mul, True)
    def __floordiv__(self, o): return self._arith(o, operator.floordiv)
    def __mod__(self, o): return self._arith(o, operator.mod)

    def _compare(self, other, op):
        return Predicate(op(self.array, _values(other)), affine=False)

    def __lt__(self, o): return self._compare(o, operator.lt)
    def __le__(self, o): return self._compare(o, operator.le)
    def __gt__(self, o): return self._compare(o, operator.gt)
    def __ge__(self, o): return self._compare(o, operator.ge)
    def __eq__(self, o): return self._compare(o, operator.eq)
    def __ne__(self, o): return self._compare(o, operator.ne)
    __hash__ = object.__hash__

    def __bool__(self):
        raise KernelError("control flow cannot depend on an arange index",
                          code="err_control_flow_condition_depending_on_arange")


class Predicate:
    """A mask: a boolean array over an index grid. Combine with `&` (and `|`, `~`), never `and`/`or`."""

    __slots__ = ("array", "affine")

    def __init__(self, array: np.ndarray, affine: bool = True):
        self.array = np.asarray(array, dtype=bool)
        self.affine = affine

    @property
    def shape(self):
        return self.array.shape

    def _join(self, other, op):
        if isinstance(other, Predicate):
            return Predicate(op(self.array, other.array), self.affine and other.affine)
        if isinstance(other, (bool, np.bool_)):
            return Predicate(op(self.array, bool(other)), self.affine)
        return NotImplemented

    def __and__(self, o): return self._join(o, operator.and_)
    __rand__ = __and__
    def __or__(self, o): return self._join(o, operator.or_)
    __ror__ = __or__

    def __invert__(self):
        return Predicate(~self.array, self.affine)

    def __bool__(self):
        frame = sys._getframe(1)
        joined = _kept_by_boolean_operator(frame)
        if joined is None:
            raise KernelError("the truth value of a mask is ambiguous; combine masks with & and pass them as "
                              "mask=", code="err_ambiguous_tensor_truth_value")
        kept, join = ("the right-hand", "&") if joined == "and" else ("the left-hand", "|")
        warnings.warn_explicit(f"Python `{joined}` between masks is not a mask operator: it keeps {kept} mask "
                               f"only and drops the other; join masks with {join} to apply both",
                               UserWarning, frame.f_code.co_filename, frame.f_lineno)
        return True

    def __repr__(self):
        return f"Predicate(shape={self.shape}, active={int(self.array.sum())})"


# Truth tests whose tested value stays the expression's result: `a and b`, `a or b` and chained comparisons.
_VALUE_KEEPING_JUMPS = {"JUMP_IF_FALSE_OR_POP": "and", "JUMP_IF_TRUE_OR_POP": "or"}     # Python 3.10, 3.11
_TESTING_JUMPS = {"POP_JUMP_IF_FALSE": "and", "POP_JUMP_IF_TRUE": "or"}                  # Python 3.12+


def _kept_by_boolean_operator(frame) -> str | None:
    """"and" / "or" when the truth test `frame` is running belongs to a Python `and` / `or` (or a chained
    comparison) whose value is the tested object, else None (`if`, `while`, `not`, `bool()`, ...)."""
    ops = [(i.offset, i.opname, i.arg) for i in dis.get_instructions(frame.f_code)]
    return boolean_operator_at(ops, frame.f_lasti)


def boolean_operator_at(ops, lasti: int) -> str | None:
    """`_kept_by_boolean_operator` on a code object's instructions `ops` ((offset, opname, arg), as
    `dis.get_instructions` lists them) with the truth test running at byte offset `lasti`.

    Python 3.10 / 3.11 test the value in place (`JUMP_IF_FALSE_OR_POP`). Python 3.12 keeps a copy and tests it
    (`COPY 1`, `POP_JUMP_IF_FALSE`); 3.13 and 3.14 convert the copy first (`COPY 1`, `TO_BOOL`,
    `POP_JUMP_IF_FALSE`), and the truth test runs in `TO_BOOL`. A jump over more than 255 code units carries an
    `EXTENDED_ARG` prefix, which is not an instruction of its own here."""
    ops = [op for op in ops if op[1] != "EXTENDED_ARG"]
    at = next((k for k, op in enumerate(ops) if op[0] == lasti), None)
    if at is None:
        return None
    name = ops[at][1]
    if name in _VALUE_KEEPING_JUMPS:
        return _VALUE_KEEPING_JUMPS[name]
    jump = ops[at + 1][1] if name == "TO_BOOL" and at + 1 < len(ops) else name
    if jump in _TESTING_JUMPS and at > 0 and ops[at - 1][1:] == ("COPY", 1):
        return _TESTING_JUMPS[jump]
    return None


def _grid_sum(const: int, coeffs: tuple[int, ...], shape: tuple[int, ...], dtype=np.int64) -> np.ndarray:
    """`const + sum(coeffs[a] * i_a)` over a grid of `shape`, broadcast only as far as the axes with a nonzero
    coefficient need (an axis without one has size 1 here): each axis's terms added once, the constant folded
    into the first axis's (a full grid is made by the last addition, not by a fill). `dtype` must hold the
    value range (`Index.value_range`): every partial sum lies in it, as each term's range includes 0."""
    out = None
    rank = len(shape)
    for axis, (c, n) in enumerate(zip(coeffs, shape)):
        if c and n != 1:
            first = const if out is None else 0
            term = np.arange(first, first + c * n, c, dtype=dtype)
            term = term.reshape((1,) * axis + (n,) + (1,) * (rank - axis - 1))
            out = term if out is None else out + term
    if out is None:
        return np.full((1,) * rank, const, dtype=dtype)
    return out


_INT_TYPES = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def _bits_for(lo: int, hi: int) -> int:
    """The fewest bits (8, 16, 32 or 64) of a signed integer type holding every value of [lo, hi]."""
    for bits in (8, 16, 32):
        if -(1 << (bits - 1)) <= lo and hi < (1 << (bits - 1)):
            return bits
    return 64


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _values(x):
    if isinstance(x, (Index, NonAffineIndex)):
        return x.values()
    if isinstance(x, (int, float, np.number)):
        return x
    raise KernelError(f"index expressions only combine with integers and other index expressions, got "
                      f"{type(x).__name__}")


def arange(*args) -> Index:
    """`nl.arange(stop)` / `nl.arange(start, stop)`: the 1-D index start, ..., stop-1."""
    if len(args) == 1:
        start, stop = 0, args[0]
    elif len(args) == 2:
        start, stop = args
    else:
        raise ShapeError("nl.arange takes (stop) or (start, stop)", got=args)
    start, stop = int(start), int(stop)
    return Index(start, (1,), (max(0, stop - start),))


class IndexGrid(tuple):
    """The tuple of indices `nl.mgrid[...]` returns; also reachable as `.p`, `.x`, `.y`, `.z`."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    """`nl.mgrid[0:128, 0:512]`: a dense mesh of affine indices, like `numpy.mgrid` (no complex steps)."""

    def __getitem__(self, key) -> IndexGrid:
        if not isinstance(key, tuple):
            key = (key,)
        rank = len(key)
        shape = []
        starts, steps = [], []
        for k in key:
            if not isinstance(k, slice) or k.stop is None:
                raise ShapeError("nl.mgrid takes slices with explicit stops, e.g. nl.mgrid[0:128, 0:512]",
                                 got=k)
            start = 0 if k.start is None else int(k.start)
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise ShapeError("nl.mgrid steps must be positive", got=step)
            shape.append(max(0, math.ceil((int(k.stop) - start) / step)))
            starts.append(start)
            steps.append(step)
        out = []
        shape = tuple(shape)
        for axis in range(rank):
            coeffs = [0] * rank
            coeffs[axis] = steps[axis]
            out.append(Index._of(starts[axis], tuple(coeffs), shape))
        return IndexGrid(out)


mgrid = _MGrid()


def ds(start, size) -> slice:
    """`nl.ds(start, size)`: the slice start:start+size; `size` a positive int, `start` an int or a run-time
    index (anything `start + size` is defined for; the subscript checks it)."""
    size = as_int(size, "nl.ds size", minimum=1)
    try:
        stop = start + size
    except TypeError:
        raise ShapeError("nl.ds start must be an integer or a run-time index", got=type(start).__name__) from None
    return slice(start, stop)


# Constant masks as read-only broadcasts made once per value and shape (`constant_mask`); False: the plain path,
# a filled array each time (tests/machine/test_constant_masks.py compares them)
CONSTANT_MASK_VIEWS = True
_CONSTANT_MASKS: dict = {}


def constant_mask(value: bool, shape) -> np.ndarray:
    """The mask of a constant `mask=True` / `False` over `shape`: every element `value`, as a read-only
    broadcast of one boolean, made once per value and shape. Legacy kernels pass such masks (a comparison of
    loop indices, `i_q * 128 >= i_k * 512`) with every instruction of a tile, and each asks for it several
    times (the run, the event, the output-dependency record); a filled [128, 512] array each time cost more
    than many of the instructions. Nothing writes a mask (`Machine.effective_mask` gave read-only views
    before), so one array can serve every instruction."""
    if not CONSTANT_MASK_VIEWS:
        return np.full(shape, value)
    key = (value, tuple(shape))
    found = _CONSTANT_MASKS.get(key)
    if found is None:
        if len(_CONSTANT_MASKS) >= 1024:
            _CONSTANT_MASKS.clear()
        found = _CONSTANT_MASKS[key] = np.broadcast_to(np.bool_(value), key[1])
    return found


def mask_array(mask, shape: tuple[int, ...]) -> np.ndarray | None:
    """The boolean mask for an operand of `shape`, from a `mask=` argument (None = everything active).

    The predicate is broadcast to the shape; where the operand is smaller than the predicate (a [P, 1]
    operand under a [P, F] mask) an element is active if any element it feeds is.
    """
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):
        return constant_mask(bool(mask), shape)
    if isinstance(mask, Predicate):
        arr = mask.array
    else:
        arr = np.asarray(mask, dtype=bool)
    if arr.shape == tuple(shape):
        return arr
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        pass
    if arr.ndim == len(shape):
        axes = tuple(a for a, (m, s) in enumerate(zip(arr.shape, shape)) if s == 1 and m != 1)
        reduced = arr.any(axis=axes, keepdims=True) if axes else arr
        try:
            return np.broadcast_to(reduced, shape)
        except ValueError:
            pass
    raise ShapeError("mask shape does not match the operand", expected=tuple(shape), got=arr.shape,
                     code="err_unsupported_expression_in_mask")
