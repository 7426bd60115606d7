"""Language layer: composite `nl` ops (var, softmax, rms_norm, where) built from core's compositions.

Imports language.core and instructions. Each op is a short sequence of Vector / Scalar Engine instructions
(spec/language.md §6.4, §6.6, §8.12); where AWS leaves the internal steps unspecified the choice is stated in
the docstring.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import ShapeError
from opennki.instructions.vector import Memset, TensorCopy, TensorScalar
from opennki.instructions.vector_move import TensorCopyPredicated
from opennki._src import core
from opennki.machine.dtypes import dtype_of, float32, promote, scalar_dtype


def var(x, axis, *, dtype=None, mask=None, keepdims=False, api: str = "nl.var"):
    """Population variance over free `axis`: mean((x - mean(x))^2), computed in fp32 (two passes on the
    Vector Engine, so no catastrophic cancellation); result dtype `dtype`, else x's (fp32 for integers)."""
    core.require_tile(x, "x", api)
    mu = core.mean(x, axis, dtype=float32, mask=mask, keepdims=True, api=api)
    diff = core.binary("subtract", x, mu, dtype=float32, mask=mask, api=api)
    square = core.binary("multiply", diff, diff, dtype=float32, mask=mask, api=api)
    out = dtype_of(dtype) if dtype is not None else (x.dtype if x.dtype.is_float else float32)
    return core.mean(square, axis, dtype=out, mask=mask, keepdims=keepdims, api=api)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, api: str = "nl.softmax"):
    """exp(x - max(x)) / sum(exp(x - max(x))) over free `axis`; same shape as x.

    Steps: reduce-max (Vector), subtract, exp (Scalar), reduce-add, reciprocal, multiply. Every intermediate
    and the result use `compute_dtype` / `dtype` (the legacy docs: they currently behave the same), else
    x's dtype."""
    core.require_tile(x, "x", api)
    dt = dtype_of(compute_dtype if compute_dtype is not None else dtype if dtype is not None else x.dtype)
    top = core.reduce("maximum", x, axis, dtype=dt, mask=mask, keepdims=True, api=api)
    shifted = core.binary("subtract", x, top, dtype=dt, mask=mask, api=api)
    e = core.unary("exp", shifted, dtype=dt, mask=mask, api=api)
    total = core.reduce("add", e, axis, dtype=dt, mask=mask, keepdims=True, api=api)
    inv = core.unary("reciprocal", total, dtype=dt, mask=mask, api=api)
    return core.binary("multiply", e, inv, dtype=dt, mask=mask, api=api)


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None,
             api: str = "nl.rms_norm"):
    """x * rsqrt(sum(x^2, axis) / n + epsilon) * w (epsilon inside the square root, the conventional form).

    `n` is the element count the mean divides by (passed explicitly, as in NKI); `w` broadcasts against x
    (a [P, D] tile, or [1, D] broadcast over partitions). Intermediates use `compute_dtype`, else fp32; the
    result uses `dtype`, else x's dtype."""
    core.require_tile(x, "x", api)
    core.require_tile(w, "w", api)
    ct = dtype_of(compute_dtype) if compute_dtype is not None else float32
    out = dtype_of(dtype) if dtype is not None else x.dtype
    prog = core.current(api)
    square = core.binary("multiply", x, x, dtype=ct, mask=mask, api=api)
    total = core.reduce("add", square, axis, dtype=ct, mask=mask, keepdims=True, api=api)
    mean_eps = core.alloc(total.shape, ct)
    prog.issue(TensorScalar(dst=mean_eps, data=total, op0="multiply", operand0=1.0 / float(n), op1="add",
                            operand1=float(epsilon), mask=mask), api)
    scale = core.unary("rsqrt", mean_eps, dtype=ct, mask=mask, api=api)
    normed = core.binary("multiply", x, scale, dtype=ct, mask=mask, api=api)
    return core.binary("multiply", normed, w, dtype=out, mask=mask, api=api)


def where(condition, x, y, *, dtype=None, mask=None, api: str = "nl.where"):
    """x where condition is true (nonzero), else y; element-wise with broadcasting.

    Lowering: fill the result with y (copy, or memset for a scalar y), then a predicated copy of x
    (Vector Engine `tensor_copy_predicated`), so x is never mixed arithmetically with y (NaN/inf safe).
    Result dtype: `dtype`, else the promotion of x and y."""
    prog = core.current(api)
    core.require_tile(condition, "condition", api)
    for role, t in (("x", x), ("y", y)):
        if not core.is_scalar(t):
            core.require_tile(t, role, api)
    shapes = [condition.shape] + [t.shape for t in (x, y) if not core.is_scalar(t)]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"{api}: operand shapes cannot be broadcast together", got=shapes,
                         instruction=api) from None
    dx = scalar_dtype(x) if core.is_scalar(x) else x.dtype
    dy = scalar_dtype(y) if core.is_scalar(y) else y.dtype
    out = dtype_of(dtype) if dtype is not None else promote(dx, dy)
    result = core.alloc(shape, out)
    if core.is_scalar(y):
        prog.issue(Memset(dst=result, value=y, mask=mask), api)
    else:
        prog.issue(TensorCopy(dst=result, src=core.materialize_broadcast(y, shape, api), mask=mask), api)
    pred = core.materialize_broadcast(condition, shape, api)
    if pred.dtype.is_float:
        pred = core.binary("not_equal", pred, 0.0, dtype="uint8", mask=mask, api=api)
    if not core.is_scalar(x):
        x = core.materialize_broadcast(x, shape, api)
        if x.dtype is not out:
            x = core.copy(x, dtype=out, mask=mask, api=api)
    prog.issue(TensorCopyPredicated(dst=result, src=x, predicate=pred, mask=mask), api)
    return result


__all__ = ["var", "softmax", "rms_norm", "where"]
