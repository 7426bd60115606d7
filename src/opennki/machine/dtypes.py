"""Machine layer: NKI data types, engine-side conversion (round on write) and type promotion.

Imports numpy, ml_dtypes and errors. Every dtype a kernel can name (legacy NumPy / ml_dtypes objects, new
generation strings) normalises to one `DataType`. Engines compute in fp32; `convert` is the write-back:
floats round to nearest even (ml_dtypes casts; overflow gives inf, or NaN for formats without inf);
fp32 -> integer rounds to nearest even and saturates (NKI 0.6 simulator, spec/isa.md §10.2); NaN -> integer
gives 0 (the spec leaves it open; 0 is what a saturating converter without a NaN code produces on most
hardware and is easy to spot next to the poison value 4).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from threading import get_ident

import ml_dtypes
import numpy as np

from opennki.errors import DtypeError

FLOAT, INT, UINT, BOOL, PACKED = "float", "int", "uint", "bool", "packed"


try:        # NumPy >= 2: np.errstate is a context variable holding a precomputed "extobj"
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_STATE, _make_extobj
    _FP_IGNORE = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):        # NumPy 1.x: no such variable
    _FP_STATE = _FP_IGNORE = None


class quiet_fp:
    """`with quiet_fp():` is `with np.errstate(all="ignore"):` (engines give inf / NaN silently, as the
    hardware does), at a fraction of its cost: `np.errstate` builds its floating-point state on every entry,
    which costs more than the operation on a [128, 512] tile, and the element-wise instructions enter it for
    each instruction. Here the "ignore everything" state is built once and only set and reset. On NumPy
    versions without that state variable it is `np.errstate` itself."""

    __slots__ = ("_token", "_plain")

    def __enter__(self):
        if _FP_STATE is None:
            self._plain = np.errstate(all="ignore")
            self._plain.__enter__()
        else:
            self._token = _FP_STATE.set(_FP_IGNORE)
        return self

    def __exit__(self, *exc):
        if _FP_STATE is None:
            self._plain.__exit__(*exc)
        else:
            _FP_STATE.reset(self._token)
        return False

def quiet_call(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` inside `quiet_fp()`, without the calls of a context manager (element-wise
    instructions make one such call per run)."""
    if _FP_STATE is None:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    token = _FP_STATE.set(_FP_IGNORE)
    try:
        return fn(*args, **kwargs)
    finally:
        _FP_STATE.reset(token)


# `quiet_into` runs its call in a context of its own (per thread: a context is entered by one thread at a time),
# whose only variable is the "ignore everything" floating-point state: entering it is cheaper than setting and
# resetting that state in the caller's context, after which NumPy's ufunc call itself took longer (a [128, 64]
# fp32 add: some 1.15 us bare, 1.6-1.8 with the set and reset, 1.2-1.3 in such a context). The ufunc reads the
# same state either way. False: set and reset (the plain path).
QUIET_CONTEXTS = True
_QUIET_CONTEXTS: dict = {}      # thread id -> its context


def _quiet_context():
    """This thread's context for `quiet_into`, made on its first call."""
    if len(_QUIET_CONTEXTS) >= 256:     # thread ids of finished threads
        _QUIET_CONTEXTS.clear()
    context = _QUIET_CONTEXTS[get_ident()] = contextvars.Context()
    context.run(_FP_STATE.set, _FP_IGNORE)
    return context


def quiet_into(fn, a, b, out):
    """`quiet_call(fn, a, b, out=out)` with its arguments passed as they are (no packing and unpacking of
    `*args` and `**kwargs`): the two-operand ufunc call of every element-wise instruction computing into its
    destination. `fn` is a NumPy ufunc or a function of `instructions/ops.py`, which reads no context variable
    but the floating-point state (the `QUIET_CONTEXTS` context holds no other)."""
    if _FP_STATE is None:
        with np.errstate(all="ignore"):
            return fn(a, b, out=out)
    if QUIET_CONTEXTS:
        context = _QUIET_CONTEXTS.get(get_ident())
        return (context or _quiet_context()).run(fn, a, b, out=out)
    token = _FP_STATE.set(_FP_IGNORE)
    try:
        return fn(a, b, out=out)
    finally:
        _FP_STATE.reset(token)


INT_POISON = 4  # what NKI's simulator writes into fresh integer memory (spec/language.md §5.1)


@dataclass(frozen=True, eq=False)
class DataType:
    """One NKI element type.

    Fields:
        name: the NKI spelling (`'bfloat16'`), also the new generation's public value.
        kind: float / int / uint / bool / packed (MX x4 words).
        itemsize: bytes per element in SBUF/PSUM/HBM (what the allocator and DMA count).
        np_dtype: NumPy dtype used to store elements in precise mode.
        exp_bits / mant_bits: float format, for promotion and tf32 rounding (0 for non-floats).
        public: the legacy generation's public object (`np.float32`, `ml_dtypes.bfloat16`, ...).
    """

    name: str
    kind: str
    itemsize: int
    np_dtype: np.dtype
    exp_bits: int = 0
    mant_bits: int = 0
    public: object = field(default=None, repr=False)

    @property
    def is_float(self) -> bool:
        return self.kind == FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind in (INT, UINT, BOOL)

    @property
    def bits(self) -> int:
        return 8 * self.itemsize

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype users see; lets `np.dtype(t.dtype)` and `np.zeros(s, t.dtype)` work."""
        return self.public if isinstance(self.public, np.dtype) else self.np_dtype

    def storage_dtype(self, precise: bool) -> np.dtype:
        """NumPy dtype of the backing array: the real format, or fp32 for floats when precise mode is off."""
        if self.kind == FLOAT and not precise:
            return np.dtype(np.float32)
        return self.np_dtype

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        if isinstance(other, DataType):
            return self is other
        found = _lookup(other)
        return found is self if found is not None else NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)


def _float(name, np_type, exp, mant):
    dt = np.dtype(np_type)
    return DataType(name, FLOAT, dt.itemsize, dt, exp, mant, public=dt)


def _int(name, np_type, kind):
    dt = np.dtype(np_type)
    return DataType(name, kind, dt.itemsize, dt, public=dt)


float32 = _float("float32", np.float32, 8, 23)
float16 = _float("float16", np.float16, 5, 10)
bfloat16 = _float("bfloat16", ml_dtypes.bfloat16, 8, 7)
float8_e4m3 = _float("float8_e4m3", ml_dtypes.float8_e4m3, 4, 3)
float8_e5m2 = _float("float8_e5m2", ml_dtypes.float8_e5m2, 5, 2)
float8_e4m3fn = _float("float8_e4m3fn", ml_dtypes.float8_e4m3fn, 4, 3)
float8_e8m0fnu = _float("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, 8, 0)
# tf32 lives in a 32-bit container; the legacy generation exposes it as an opaque 4-byte void dtype.
tfloat32 = DataType("tfloat32", FLOAT, 4, np.dtype(np.float32), 8, 10, public=np.dtype("V4"))
int8 = _int("int8", np.int8, INT)
int16 = _int("int16", np.int16, INT)
int32 = _int("int32", np.int32, INT)
uint8 = _int("uint8", np.uint8, UINT)
uint16 = _int("uint16", np.uint16, UINT)
uint32 = _int("uint32", np.uint32, UINT)
# NKI 0.7: 64-bit integer tensors hold what nisa.scalar_load / scalar_store move (64-bit scalars, offsets beyond a
# 32-bit byte offset's 4 GB); the compute engines have no 64-bit integer arithmetic.
int64 = _int("int64", np.int64, INT)
# Booleans are bytes holding 0/1 on the hardware; stored as uint8 so fresh memory can hold the poison value.
bool_ = DataType("bool", BOOL, 1, np.dtype(np.uint8), public=np.dtype(np.bool_))
# MX packed words: four fp8 values in 32 bits, or four fp4 values in 16 bits (NeuronCore-v4 only).
float8_e5m2_x4 = DataType("float8_e5m2_x4", PACKED, 4, np.dtype(np.uint32), public="float8_e5m2_x4")
float8_e4m3fn_x4 = DataType("float8_e4m3fn_x4", PACKED, 4, np.dtype(np.uint32), public="float8_e4m3fn_x4")
float4_e2m1fn_x4 = DataType("float4_e2m1fn_x4", PACKED, 2, np.dtype(np.uint16), public="float4_e2m1fn_x4")

ALL = (float32, float16, bfloat16, float8_e4m3, float8_e5m2, float8_e4m3fn, float8_e8m0fnu, tfloat32,
       int8, int16, int32, int64, uint8, uint16, uint32, bool_, float8_e5m2_x4, float8_e4m3fn_x4, float4_e2m1fn_x4)

_BY_NAME: dict[str, DataType] = {dt.name: dt for dt in ALL}
_BY_NAME.update({"bool_": bool_, "fp32": float32, "bf16": bfloat16, "fp16": float16, "tf32": tfloat32,
                 "float8_e4m3fn_x4": float8_e4m3fn_x4})
_BY_NP: dict[np.dtype, DataType] = {dt.np_dtype: dt for dt in ALL
                                    if dt.kind not in (PACKED, BOOL) and dt is not tfloat32}
_BY_NP[np.dtype(np.bool_)] = bool_
_BY_NP[np.dtype("V4")] = tfloat32


def _lookup(x) -> DataType | None:
    """The DataType `x` names, or None (see dtype_of)."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, str):
        return _BY_NAME.get(x)
    if isinstance(x, (bool, int, float, complex)) or x is None:
        return None          # np.dtype(None) is float64 and np.dtype(3) fails: neither names a dtype
    try:
        npdt = np.dtype(x)
    except (TypeError, ValueError):
        inner = getattr(x, "dtype", None)
        if inner is not None and inner is not x and not callable(inner):
            return _lookup(inner)
        return None
    return _BY_NP.get(npdt)


def dtype_of(x, role: str = "dtype") -> DataType:
    """Normalise anything a kernel may pass as a dtype (DataType, NumPy dtype or type, ml_dtypes type,
    NKI string, or an object with a `.dtype`) to a DataType. Anything else, including the 64-bit and complex
    types NeuronCores lack, raises DtypeError (a TypeError) naming `role`, the argument that gave it."""
    dt = _lookup(x)
    if dt is None:
        try:
            npdt = np.dtype(x) if not isinstance(x, (str, bool, int, float, complex)) and x is not None else None
        except (TypeError, ValueError):
            npdt = None
        rule = (f"{role}: {npdt} is not a NeuronCore dtype (no 64-bit or complex types)" if npdt is not None
                else f"{role}: {x!r} is not an NKI dtype")
        raise DtypeError(rule, expected="one of " + ", ".join(sorted(_BY_NAME)), got=repr(x))
    return dt


# ---------------------------------------------------------------------------------------------- conversion

def _round_tf32(v: np.ndarray) -> np.ndarray:
    """Round fp32 values to a 10-bit mantissa (tf32), nearest-even, keeping them in an fp32 container."""
    bits = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)
    finite = np.isfinite(v)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded.view(np.float32), v).astype(np.float32)


def convert(values, dt: DataType, precise: bool = True) -> np.ndarray:
    """Engine write-back: convert computed values (fp32, or raw integers for bit-exact paths) into the
    storage representation of `dt` (spec/isa.md §10.2)."""
    v = np.asarray(values)
    target = dt.storage_dtype(precise)
    if v.dtype == target and dt is not tfloat32:
        return v
    if dt.kind == FLOAT:
        if dt is tfloat32 and precise:
            return _round_tf32(v.astype(np.float32))
        if v.dtype.kind in "iub":
            v = v.astype(np.float32)
        with quiet_fp():            # overflow and NaN casts are silent (a cast raises no divide error)
            return v.astype(target)
    if dt.kind == BOOL:
        return (v != 0).astype(np.uint8)
    if dt.kind == PACKED:
        return v.astype(target)
    # integer destination
    if v.dtype.kind in "iu":
        info = np.iinfo(target)
        if np.iinfo(v.dtype).min >= info.min and np.iinfo(v.dtype).max <= info.max:
            return v.astype(target)
        return np.clip(v, info.min, info.max).astype(target)
    if v.dtype.kind == "b":
        return v.astype(target)
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):
        r = np.rint(v.astype(np.float64))
        r = np.where(np.isnan(r), 0.0, r)
        return np.clip(r, info.min, info.max).astype(target)


def to_float32(stored: np.ndarray, dt: DataType) -> np.ndarray:
    """Engine read: the fp32 value of stored elements (exact for every float format; integers above 2^24
    round, as on the engines)."""
    dtype = stored.dtype
    if dtype is not _BF16_STORAGE:          # identity first: comparing dtypes (with a type: converting it) costs
        if dtype is FP32_STORAGE or dtype == np.float32:
            return stored
        if dtype != _BF16_STORAGE:
            return stored.astype(np.float32)
    # a bfloat16 is the upper half of the fp32 with the same value: widening shifts its bits into place (exact
    # for every pattern, NaNs included; NumPy does this faster than the ml_dtypes cast, and a cast to uint32
    # then an in-place shift faster than one shift casting as it goes)
    wide = stored.view(np.uint16).astype(np.uint32, order="C")     # the layout np.empty gave it
    wide <<= 16
    return wide.view(np.float32)


_BF16_STORAGE = np.dtype(ml_dtypes.bfloat16)
FP32_STORAGE = np.dtype(np.float32)


def to_public(stored: np.ndarray, dt: DataType) -> np.ndarray:
    """Stored elements as the caller sees them: booleans back as np.bool_, floats kept in precise-off mode
    converted to their real format."""
    if dt.kind == BOOL:
        return stored != 0
    if dt.kind == FLOAT and stored.dtype != dt.np_dtype:
        with np.errstate(over="ignore", invalid="ignore"):
            return stored.astype(dt.np_dtype)
    return stored


# Python and NumPy numbers plus the scalar types of ml_dtypes (a `bfloat16` or fp8 scalar is an np.generic but
# not an np.number): what a kernel may pass where an instruction takes an immediate, e.g.
# `nl.full(..., fill_value=nl.finfo(nl.bfloat16).min)` in the official pooling kernel.
SCALAR_TYPES = (int, float, np.number, np.bool_) + tuple(
    getattr(ml_dtypes, name) for name in ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
                                          "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
                                          "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4")
    if hasattr(ml_dtypes, name))


def poison_value(dt: DataType, precise: bool = True):
    """What fresh memory holds: NaN for floats, 4 for integers (NKI simulator convention)."""
    if dt.kind == FLOAT:
        return np.nan
    return INT_POISON


# ---------------------------------------------------------------------------------------------- promotion

def _promote_floats(a: DataType, b: DataType) -> DataType:
    if a.itemsize != b.itemsize:
        return a if a.itemsize > b.itemsize else b
    if a.itemsize == 4:
        return float32                      # (fp32, tf32) -> fp32
    if a.itemsize == 2:
        return float32                      # (fp16, bf16) -> fp32
    return bfloat16                         # (fp8_e4m3, fp8_e5m2) -> bf16


_SIGNED = {8: int8, 16: int16, 32: int32}
_UNSIGNED = {8: uint8, 16: uint16, 32: uint32}


def _promote_ints(a: DataType, b: DataType) -> DataType:
    if a.kind == BOOL:
        a = uint8
    if b.kind == BOOL:
        b = uint8
    if a.kind == b.kind:
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if a.kind == INT else (b, a)
    if signed.bits > unsigned.bits:
        return signed
    widened = 2 * unsigned.bits
    return _SIGNED.get(widened, float32)    # (int32, uint32) -> fp32: there is no 64-bit integer


def promote(a: DataType, b: DataType) -> DataType:
    """Result dtype of a binary op on two tensors (spec/language.md §2.2)."""
    if a is b:
        return a
    if a.kind == BOOL and b.kind == BOOL:
        return bool_
    if a.is_float and b.is_float:
        return _promote_floats(a, b)
    if a.is_float:
        return a
    if b.is_float:
        return b
    return _promote_ints(a, b)


def scalar_dtype(x) -> DataType:
    """Dtype of a scalar operand: weakly typed Python scalars take the widest hardware type of their kind
    (bool -> uint8, int -> int32, float -> fp32); NumPy scalars keep their own type."""
    if isinstance(x, (bool, np.bool_)):
        return uint8
    if isinstance(x, np.generic):
        return dtype_of(x.dtype) if x.dtype.itemsize <= 4 else (float32 if x.dtype.kind == "f" else int32)
    if isinstance(x, int):
        return int32
    if isinstance(x, float):
        return float32
    raise TypeError(f"not a scalar: {x!r}")
