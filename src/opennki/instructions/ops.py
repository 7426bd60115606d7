"""ISA layer: the ALU operator table and the activation-function table (spec/isa.md §8 and §9).

Imports numpy only. Instructions accept operators in every form kernels pass them: the `nl` callables
(`nl.add`, which carry `nki_name`), NumPy functions in the legacy generation (`np.add`, `np.max`,
`np.exp`), or names. `alu(op)` / `activation_fn(op)` normalise all of them to one entry of these tables.

Arithmetic ALU ops compute on fp32 inputs; bit-vector ops on raw integers. Comparisons yield 1.0 / 0.0.

Activation functions are computed exactly (in float64, rounded to fp32). The hardware evaluates fitted
polynomials that are only valid on the documented input ranges and that AWS does not publish, so an exact
reference is the best faithful model; `valid_range` records the documented range so a strict mode or a
sanitizer can flag inputs outside it. `erf` uses a Taylor series below |x| = 0.5 and a Chebyshev fit of
erfc above (relative error < 1.2e-7, i.e. within 2 fp32 ulps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from opennki.errors import KernelError
from opennki.machine.dtypes import quiet_fp

ARITH, BITVEC = "arith", "bitvec"

# Operators `nl` has but hardware lacks ("no division instruction"; spec/language.md §6.1): not in the
# instructions' opcode tables (§6.7), so a kernel passing one to a nisa instruction runs in simulation (NKI's
# simulator computes them: its nl.divide lowers so) and raises under hardware-strict.
SIMULATION_ONLY_OPS = ("divide", "mod", "fmod")


@dataclass(frozen=True)
class AluOp:
    """One ALU operator.

    Fields:
        name: NKI name (`add`, `maximum`, ...).
        category: ARITH (fp32 math) or BITVEC (raw integer bits).
        arity: 1 (unary; a scalar operand is ignored) or 2.
        fn: NumPy implementation.
        reducible: legal as a reduction op (`tensor_reduce`, `reduce_op=`).
        identity: reset value of an accumulator for this op (None if not reducible).
        reduce: NumPy reduction along an axis (for reducible ops).
        predicate: a comparison or logical operator, whose result is a truth value (1 / 0); the new
            generation's `nl` operators keep the input dtype for these, the legacy ones give `bool` tiles.
        doc: what the operator computes, the docstring of the `nl` function named after it (empty for
            operators `nl` has no function of).
    """

    name: str
    category: str
    arity: int
    fn: Callable
    reducible: bool = False
    identity: float | None = None
    reduce: Callable | None = None
    predicate: bool = False
    doc: str = ""

    @property
    def nki_name(self) -> str:
        return self.name


def _cmp(op):
    return lambda a, b: op(a, b).astype(np.float32)


def _logical(op):
    return lambda a, b: op(a != 0, b != 0).astype(np.float32)


def _abs_max(a, b):
    return np.where(np.abs(a) > np.abs(b), a, b)


def _abs_min(a, b):
    return np.where(np.abs(a) < np.abs(b), a, b)


def _abs_reduce(pick):
    """Fold along an axis keeping the signed element of largest (argmax) / smallest (argmin) magnitude;
    used by accumulator reductions (`activate2`), not by `tensor_reduce`."""
    def reduce(x, axis):
        i = np.expand_dims(pick(np.abs(x), axis=axis), axis)
        return np.take_along_axis(x, i, axis).squeeze(axis)
    return reduce


def _right_shift(a, b):
    """Logical right shift: the bit pattern shifted as unsigned of the same width (no arithmetic shift)."""
    a = np.asarray(a)
    if a.dtype.kind == "i":
        unsigned = a.view(np.dtype(f"u{a.dtype.itemsize}"))
        return (unsigned >> np.asarray(b).astype(unsigned.dtype)).view(a.dtype)
    return a >> np.asarray(b).astype(a.dtype)


def _left_shift(a, b):
    a = np.asarray(a)
    return (a << np.asarray(b).astype(a.dtype)).astype(a.dtype)


def _power(a, b):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.power(a, b)


def _divide(a, b):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return np.divide(a, b)


def _reciprocal(a, _=None):
    with np.errstate(divide="ignore", over="ignore"):
        return np.float32(1.0) / a


def _rsqrt(a, _=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1.0 / np.sqrt(a.astype(np.float64))).astype(np.float32)


def _np_reduce(ufunc):
    return lambda x, axis: ufunc.reduce(x, axis=axis)


ALU_OPS: dict[str, AluOp] = {op.name: op for op in [
    AluOp("add", ARITH, 2, np.add, True, 0.0, _np_reduce(np.add), doc="x + y, element-wise with broadcasting"),
    AluOp("subtract", ARITH, 2, np.subtract, True, 0.0, _np_reduce(np.subtract),
          doc="x - y, element-wise with broadcasting"),
    AluOp("multiply", ARITH, 2, np.multiply, True, 1.0, _np_reduce(np.multiply),
          doc="x * y, element-wise with broadcasting"),
    AluOp("divide", ARITH, 2, _divide, doc="x / y, element-wise with broadcasting"),
    AluOp("maximum", ARITH, 2, np.maximum, True, -np.inf, _np_reduce(np.maximum), doc="max(x, y), element-wise"),
    AluOp("minimum", ARITH, 2, np.minimum, True, np.inf, _np_reduce(np.minimum), doc="min(x, y), element-wise"),
    AluOp("power", ARITH, 2, _power, doc="x ** y, element-wise"),
    AluOp("mod", ARITH, 2, lambda a, b: np.mod(a, b),
          doc="Python remainder with the sign of y (np.mod); a scalar x broadcasts to y's shape"),
    AluOp("fmod", ARITH, 2, lambda a, b: np.fmod(a, b),
          doc="C remainder with the sign of x (np.fmod); the docs title it floor-mod but define this "
              "(spec/language.md §9 item 9)"),
    AluOp("abs_max", ARITH, 2, _abs_max, False, 0.0, _abs_reduce(np.argmax)),
    AluOp("abs_min", ARITH, 2, _abs_min, False, np.inf, _abs_reduce(np.argmin)),
    AluOp("equal", ARITH, 2, _cmp(np.equal), predicate=True, doc="x == y"),
    AluOp("not_equal", ARITH, 2, _cmp(np.not_equal), predicate=True, doc="x != y"),
    AluOp("greater", ARITH, 2, _cmp(np.greater), predicate=True, doc="x > y"),
    AluOp("greater_equal", ARITH, 2, _cmp(np.greater_equal), predicate=True, doc="x >= y"),
    AluOp("less", ARITH, 2, _cmp(np.less), predicate=True, doc="x < y"),
    AluOp("less_equal", ARITH, 2, _cmp(np.less_equal), predicate=True, doc="x <= y"),
    AluOp("logical_and", ARITH, 2, _logical(np.logical_and), True, 1.0,
          lambda x, axis: np.logical_and.reduce(x != 0, axis=axis).astype(np.float32), predicate=True,
          doc="x AND y (inputs 0/1)"),
    AluOp("logical_or", ARITH, 2, _logical(np.logical_or), True, 0.0,
          lambda x, axis: np.logical_or.reduce(x != 0, axis=axis).astype(np.float32), predicate=True,
          doc="x OR y (inputs 0/1)"),
    AluOp("logical_xor", ARITH, 2, _logical(np.logical_xor), True, 0.0,
          lambda x, axis: np.logical_xor.reduce(x != 0, axis=axis).astype(np.float32), predicate=True,
          doc="x XOR y (inputs 0/1)"),
    AluOp("logical_not", ARITH, 1, lambda a, _=None: (a == 0).astype(np.float32), predicate=True,
          doc="NOT x (XOR with 1: correct for 0/1 inputs)"),
    AluOp("abs", ARITH, 1, lambda a, _=None: np.abs(a)),
    AluOp("square", ARITH, 1, lambda a, _=None: a * a),
    AluOp("relu", ARITH, 1, lambda a, _=None: np.maximum(a, np.float32(0))),
    AluOp("rsqrt", ARITH, 1, _rsqrt),
    AluOp("reciprocal", ARITH, 1, _reciprocal),
    AluOp("bypass", ARITH, 1, lambda a, _=None: a),
    AluOp("bitwise_and", BITVEC, 2, np.bitwise_and, True, -1, _np_reduce(np.bitwise_and),
          doc="x & y on integer bits"),
    AluOp("bitwise_or", BITVEC, 2, np.bitwise_or, True, 0, _np_reduce(np.bitwise_or), doc="x | y on integer bits"),
    AluOp("bitwise_xor", BITVEC, 2, np.bitwise_xor, True, 0, _np_reduce(np.bitwise_xor),
          doc="x ^ y on integer bits"),
    AluOp("invert", BITVEC, 1, lambda a, _=None: np.invert(a),
          doc="Bitwise NOT (XOR with all ones) of an integer tile"),
    AluOp("left_shift", BITVEC, 2, _left_shift, doc="x << y on integer bits"),
    AluOp("right_shift", BITVEC, 2, _right_shift, doc="x >> y, a logical (zero-filling) shift on integer bits"),
]}

# NumPy callables legacy kernels pass as ops (spec/isa.md §8: "G1 accepts ... the numpy ufunc").
_NUMPY_ALIASES = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.max: "maximum",
    np.amax: "maximum", np.min: "minimum", np.amin: "minimum", np.power: "power", np.mod: "mod",
    np.fmod: "fmod", np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater",
    np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
    np.logical_not: "logical_not", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor", np.invert: "invert", np.left_shift: "left_shift",
    np.right_shift: "right_shift", np.abs: "abs", np.absolute: "abs", np.square: "square",
    np.reciprocal: "reciprocal", np.sum: "add", np.prod: "multiply",
    np.exp: "exp", np.log: "log", np.tanh: "tanh", np.sqrt: "sqrt", np.sin: "sin", np.arctan: "arctan",
    np.sign: "sign", np.copy: "copy", np.cos: "cos", np.tan: "tan", np.negative: "negative",
    np.ceil: "ceil", np.floor: "floor", np.trunc: "trunc",
}


def op_name(op) -> str:
    """The NKI name of an operator given as an `nl` callable, a NumPy function or a string."""
    name = getattr(op, "nki_name", None)
    if name is not None:
        return name
    if isinstance(op, str):
        return op
    try:
        alias = _NUMPY_ALIASES.get(op)
    except TypeError:
        alias = None
    if alias is not None:
        return alias
    # `nl` functions that double as operator tokens (`op=nl.copy`) are named after their NKI op
    fname = getattr(op, "__name__", None)
    if str(getattr(op, "__module__", "")).startswith("opennki.") and (fname in ALU_OPS or fname in ACTIVATIONS):
        return fname
    raise KernelError(f"{op!r} is not an NKI operator", hint="pass an nl operator such as nl.add or nl.exp")


def alu(op) -> AluOp:
    kind = type(op)
    if kind is AluOp or kind is str:        # the usual forms, looked up without op_name's probing
        found = ALU_OPS.get(op.name if kind is AluOp else op)
        if found is not None and (found is op or kind is str):
            return found
    name = op_name(op)
    try:
        return ALU_OPS[name]
    except KeyError:
        raise KernelError(f"'{name}' is not an ALU operator", expected=f"one of {sorted(ALU_OPS)}",
                          got=name) from None


# ------------------------------------------------------------------------------------------ activations

_SQRT2 = math.sqrt(2.0)
_2_SQRTPI = 2.0 / math.sqrt(math.pi)
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    # Taylor series, accurate to double precision for |x| < 0.5
    x2 = x * x
    term = x.copy()
    small = x.copy()
    for n in range(1, 12):
        term = term * (-x2) / n
        small = small + term / (2 * n + 1)
    small = small * _2_SQRTPI
    # Chebyshev fit of erfc for |x| >= 0.5 (fractional error < 1.2e-7)
    t = 1.0 / (1.0 + 0.5 * ax)
    poly = np.zeros_like(ax)
    for c in reversed(_ERFC_COEFFS):
        poly = poly * t + c
    with np.errstate(over="ignore", under="ignore"):
        erfc = t * np.exp(-ax * ax + poly)
    large = np.sign(x) * (1.0 - erfc)
    return np.where(ax < 0.5, small, large)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / _SQRT2))


def _gelu_dx(x):
    return 0.5 * (1.0 + _erf(x / _SQRT2)) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_sigmoid(x):
    return x * _sigmoid(1.702 * x)


def _gelu_sigmoid_dx(x):
    s = _sigmoid(1.702 * x)
    return s * (1.0 + 1.702 * x * (1.0 - s))


def _silu_dx(x):
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def _safe(fn):
    def wrapped(x):
        with quiet_fp():
            return fn(x)
    wrapped.ufunc = fn if isinstance(fn, np.ufunc) else None     # `evaluate` calls a NumPy ufunc directly
    return wrapped


@dataclass(frozen=True)
class ActivationFn:
    """One Scalar Engine function.

    Fields:
        name: NKI name.
        fn: exact reference on float64 input.
        valid_range: documented valid input range (None: all inputs); outside it hardware output is invalid.
        is_token: usable as `op=` of `nisa.activation` (the table of spec/isa.md §9). Functions with False
            exist so `nl.cos`, `nl.floor`, ... have an instruction to lower to, or (`prelu`) only through
            `nisa.activate2`, which passes its parameter.
        doc: what the function computes, the docstring of the `nl` function named after it.
    """

    name: str
    fn: Callable
    valid_range: tuple[float, float] | None = None
    is_token: bool = True
    doc: str = ""

    @property
    def nki_name(self) -> str:
        return self.name


ACTIVATIONS: dict[str, ActivationFn] = {a.name: a for a in [
    ActivationFn("copy", lambda x: x),
    ActivationFn("square", lambda x: x * x, doc="x * x (Scalar Engine)"),
    ActivationFn("sigmoid", _safe(_sigmoid), doc="1 / (1 + e ** -x) (Scalar Engine)"),
    ActivationFn("relu", lambda x: np.maximum(x, 0.0), doc="max(x, 0) (Scalar Engine)"),
    ActivationFn("gelu", _safe(_gelu), doc="x * Phi(x), the erf form (Scalar Engine)"),
    ActivationFn("gelu_dx", _safe(_gelu_dx), doc="Derivative of gelu: Phi(x) + x * phi(x) (Scalar Engine)"),
    ActivationFn("gelu_apprx_tanh", _safe(_gelu_tanh),
          doc="0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (Scalar Engine)"),
    ActivationFn("gelu_apprx_sigmoid", _safe(_gelu_sigmoid), doc="x * sigmoid(1.702 x) (Scalar Engine)"),
    ActivationFn("gelu_apprx_sigmoid_dx", _safe(_gelu_sigmoid_dx)),
    ActivationFn("silu", _safe(lambda x: x * _sigmoid(x)), doc="x * sigmoid(x) (Scalar Engine)"),
    ActivationFn("silu_dx", _safe(_silu_dx),
          doc="sigmoid(x) (1 + x (1 - sigmoid(x))), the derivative of silu (Scalar Engine)"),
    ActivationFn("tanh", np.tanh, doc="Hyperbolic tangent (Scalar Engine)"),
    ActivationFn("softplus", _safe(_softplus), doc="log(1 + e ** x) (Scalar Engine)"),
    ActivationFn("mish", _safe(lambda x: x * np.tanh(_softplus(x))), doc="x * tanh(softplus(x)) (Scalar Engine)"),
    ActivationFn("erf", _erf, doc="Error function (Scalar Engine)"),
    ActivationFn("erf_dx", _safe(lambda x: _2_SQRTPI * np.exp(-x * x)),
          doc="2/sqrt(pi) * e ** -x^2 (Scalar Engine)"),
    ActivationFn("exp", _safe(np.exp), doc="e ** x (Scalar Engine)"),
    ActivationFn("log", _safe(np.log), (2.0 ** -64, 2.0 ** 64),
          doc="Natural logarithm (Scalar Engine; valid for x in [2^-64, 2^64])"),
    ActivationFn("sin", np.sin, (-math.pi, math.pi), doc="Sine (Scalar Engine; valid for x in [-pi, pi])"),
    ActivationFn("arctan", np.arctan, (-math.pi / 2, math.pi / 2),
          doc="Arc tangent (Scalar Engine; valid for x in [-pi/2, pi/2])"),
    ActivationFn("sqrt", _safe(np.sqrt), (2.0 ** -116, 2.0 ** 118),
          doc="Square root (Scalar Engine; valid for x in [2^-116, 2^118])"),
    ActivationFn("rsqrt", _safe(lambda x: 1.0 / np.sqrt(x)), (2.0 ** -87, 2.0 ** 97),
          doc="1 / sqrt(x) (Scalar Engine; valid for x in [2^-87, 2^97])"),
    ActivationFn("reciprocal", _safe(lambda x: 1.0 / x), (2.0 ** -42, 2.0 ** 42),
          doc="1 / x (Scalar Engine; valid for |x| in [2^-42, 2^42])"),
    ActivationFn("sign", np.sign, doc="-1, 0 or +1"),
    ActivationFn("abs", np.abs, doc="|x|"),
    # x if x > 0 else alpha * x: `activate2` passes alpha (relu_param); `activation` cannot take it
    ActivationFn("prelu", lambda x, alpha=0.0: np.where(x > 0, x, alpha * x), None, False),
    # not opcodes of the hardware table; the instructions nl.cos & co. lower to
    ActivationFn("cos", np.cos, None, False, doc="Cosine"),
    ActivationFn("tan", _safe(np.tan), None, False, doc="Tangent"),
    ActivationFn("negative", np.negative, None, False, doc="-x"),
    ActivationFn("ceil", np.ceil, None, False, doc="Round up to an integer value (dtype kept)"),
    ActivationFn("floor", np.floor, None, False, doc="Round down to an integer value (dtype kept)"),
    ActivationFn("trunc", np.trunc, None, False, doc="Round toward zero (dtype kept)"),
]}


def check_activation_op(op, api: str) -> None:
    """`op` is an activation function of the Scalar Engine (the `op=` of `nisa.activation*`), else a
    KernelError naming the facade API."""
    fn = activation_fn(op)
    if not fn.is_token:
        raise KernelError(f"'{fn.name}' is not an activation function of the Scalar Engine", got=fn.name,
                          instruction=api)


def activation_fn(op) -> ActivationFn:
    name = op_name(op)
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise KernelError(f"'{name}' is not an activation function",
                          expected=f"one of {sorted(a for a, f in ACTIVATIONS.items() if f.is_token)}",
                          got=name) from None


def evaluate_into(fn: ActivationFn, x: np.ndarray, out: np.ndarray) -> bool:
    """`evaluate` rounded straight into `out`, an fp32 array of `x`'s shape, where the function is a NumPy
    ufunc: the cast into `out` is the rounding (and the overflow warning) of `evaluate`'s `astype`, without
    its fp32 temporary and the copy into the destination. False (nothing written) otherwise."""
    ufunc = getattr(fn.fn, "ufunc", None)
    if ufunc is None or type(x) is not np.ndarray or x.dtype != np.float32:
        return False
    with quiet_fp():
        y = ufunc(x, dtype=np.float64)
    np.copyto(out, y, casting="same_kind")
    return True


def evaluate(fn: ActivationFn, x: np.ndarray) -> np.ndarray:
    """Apply an activation function to fp32 input, in float64, rounded to fp32.

    A function that is a NumPy ufunc under `quiet_fp` (exp, log, sqrt, tan) is called with `dtype=float64` on
    the fp32 array: the ufunc widens the input chunk by chunk and runs the same float64 loop on the same
    float64 values, so the result is the one of widening the whole tile first, without that float64 copy
    (two [128, 512] float64 temporaries make glibc return and re-map the memory each time: page faults
    that double the cost of an exp on such a tile)."""
    ufunc = getattr(fn.fn, "ufunc", None)
    if ufunc is not None and type(x) is np.ndarray and x.dtype == np.float32:
        with quiet_fp():
            y = ufunc(x, dtype=np.float64)
        return y.astype(np.float32)
    return np.asarray(fn.fn(np.asarray(x, dtype=np.float64)), dtype=np.float64).astype(np.float32)
