"""Generated kernels for the fuzzer: legal ones with an independent NumPy model, illegal ones with the line
that must raise.

A `Case` is a kernel of either generation: load a [P, F] tile (and a second input `b`), apply a chain of
element-wise steps (some over `b`), optionally end with a free-axis sum, and store the result, inside an
`affine_range` over chunks of the free dim and, in the legacy generation, over an SPMD grid of row blocks.
Every value is computed in fp32 and rounded to the tile dtype where the kernel rounds (each instruction's
write), which is what `model` does with NumPy alone.

An illegal case carries one `Fault`: the kind of mistake (one per class of bad input the error rules
cover), the bad value, and where the kernel must fail (`mark`: a step, the allocation, the loop, the store,
or the launch). `run_case` runs a case and returns its outcome class:
  ok               legal and matching the model, or illegal and rejected with an OpenNKIError whose
                   location and last traceback frame are the marked line; the caller's inputs unchanged
  internal         an exception that is not an OpenNKIError
  accepted-illegal an illegal kernel that ran (a "mixed" call, which may be legal, may run)
  wrong            a legal kernel whose result differs from the model, that was rejected, or that changed
                   its inputs; an illegal one rejected at another line
  hang             did not finish within the time limit (`run_case(..., timeout_s=)`, main thread only)
Cases are drawn through a `Chooser` (a hypothesis `draw` in the tests, `random.Random` in the tools script),
so the same generator serves shrinking and bulk runs.
"""

from __future__ import annotations

import inspect
import signal
import traceback
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
import opennki.legacy as lnki
import opennki.legacy.isa as lnisa
import opennki.legacy.language as lnl
from opennki.errors import OpenNKIError
from opennki.releases import Generation

DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
OUTCOMES = ("ok", "internal", "accepted-illegal", "wrong", "hang")


class Chooser:
    """Draws the decisions of a case; `pick`, `integer`, `real` over a hypothesis `draw` or a Random."""

    def __init__(self, draw=None, rng=None):
        self.draw, self.rng = draw, rng

    def pick(self, options):
        options = list(options)
        if self.draw is not None:
            from hypothesis import strategies as st
            return options[self.draw(st.integers(0, len(options) - 1))]
        return options[self.rng.randrange(len(options))]

    def integer(self, lo: int, hi: int) -> int:
        if self.draw is not None:
            from hypothesis import strategies as st
            return self.draw(st.integers(lo, hi))
        return self.rng.randint(lo, hi)

    def real(self, lo: float, hi: float) -> float:
        if self.draw is not None:
            from hypothesis import strategies as st
            return self.draw(st.floats(lo, hi, allow_nan=False, width=32))
        return float(np.float32(self.rng.uniform(lo, hi)))


@dataclass
class Step:
    op: str                 # a key of OPS
    scalar: float = 1.0     # the immediate of scalar steps
    scalar2: float = 0.0


@dataclass
class Fault:
    kind: str               # a key of FAULTS
    value: object           # the bad value
    mark: str               # "step", "alloc", "loop", "store", "launch"
    step: int = 0           # the step it applies to (mark "step" / "alloc")


@dataclass
class Case:
    generation: Generation
    P: int
    F: int
    chunks: int             # affine_range trips over the free dim (F % chunks == 0)
    grid: int               # legacy SPMD programs, each one block of P rows
    dtype: np.dtype
    steps: list = field(default_factory=list)
    reduce: bool = False    # end with a sum over the free axis (one column per chunk)
    seed: int = 0
    fault: Fault | None = None

    @property
    def chunk(self) -> int:
        return self.F // self.chunks

    def __repr__(self) -> str:
        steps = ", ".join(f"{s.op}({s.scalar:g},{s.scalar2:g})" for s in self.steps)
        return (f"Case({_tag(self)} P={self.P} F={self.F} chunks={self.chunks} grid={self.grid} "
                f"{self.dtype} [{steps}] reduce={self.reduce} fault={self.fault})")


# -- the NumPy model --------------------------------------------------------------------------------------

def _round(x, dtype):
    """fp32 values written to a tile of `dtype` (round to nearest even), back in fp32."""
    return np.asarray(x, np.float32).astype(dtype).astype(np.float32)


def _exact(fn, x):
    return np.asarray(fn(np.asarray(x, np.float64)), np.float32)


MODEL = {
    "exp": lambda v, b, s: _exact(np.exp, v),
    "tanh": lambda v, b, s: _exact(np.tanh, v),
    "scale_add": lambda v, b, s: np.float32(v * np.float32(s.scalar)) + np.float32(s.scalar2),
    "add_b": lambda v, b, s: v + b,
    "mul_b": lambda v, b, s: v * b,
    "max_b": lambda v, b, s: np.maximum(v, b),
    "act_scale": lambda v, b, s: _exact(np.tanh, (v * np.float32(s.scalar)).astype(np.float32)),
}


def model(case: Case, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The case's output from its inputs, with NumPy only, and the magnitude each element's rounding errors
    scale with (|value|; for a sum, the sum of the |terms|)."""
    v, w = a.astype(np.float32), b.astype(np.float32)
    for step in case.steps:
        with np.errstate(over="ignore", invalid="ignore"):
            v = _round(np.asarray(MODEL[step.op](v, w, step), np.float32), case.dtype)
    if not case.reduce:
        return v.astype(case.dtype), np.abs(v)
    blocks = v.reshape(v.shape[0], case.chunks, case.chunk).astype(np.float64)
    return blocks.sum(axis=2).astype(np.float32).astype(case.dtype), np.abs(blocks).sum(axis=2)


def tolerance(case: Case, magnitude: np.ndarray) -> np.ndarray:
    """Per-element absolute tolerance: a few units in the last place of the dtype (the model rounds where
    the kernel does, and an exact function may differ by an ulp), plus the fp32 summation order of a sum.
    Errors of earlier steps reach the result only through these roundings, which the model repeats."""
    eps = float(ml_dtypes.finfo(case.dtype).eps)
    tol = 4 * eps * magnitude
    if case.reduce:
        tol = tol + case.chunk * float(np.finfo(np.float32).eps) * magnitude
    return tol + 1e-30


# -- the kernels ------------------------------------------------------------------------------------------
# Every API call a fault can break sits on a line of its own tagged `# MARK:<name>`; `marks()` finds them.

def _bad(case, kind, step_index=None, mark="step"):
    f = case.fault
    if f is None or f.kind != kind or f.mark != mark:
        return None
    if step_index is not None and f.step != step_index:
        return None
    return f


def _v(case, kind, default, step_index=None, mark="step"):
    f = _bad(case, kind, step_index, mark)
    return f.value if f is not None else default


def garbage_call(case, i, t, tb):
    """A "garbage" fault: some public API of the case's generation called with one bad value for every
    required parameter; a "mixed" one: each required parameter the tile, the other input tile, or a bad
    value (such a call may happen to be legal)."""
    f = _bad(case, "garbage", i) or _bad(case, "mixed", i)
    if f is not None:
        fn, names, values = f.value
        args = {name: {"<t>": t, "<b>": tb}.get(v, v) if isinstance(v, str) else v for name, v in zip(names, values)}
        fn(**args)  # MARK:garbage


def legacy_step(case, i, step, t, tb):
    """One step in the legacy generation (functional results)."""
    garbage_call(case, i, t, tb)
    op = step.op
    x = _v(case, "operand", t, i)
    kw = {}
    if _bad(case, "dtype_kw", i):
        kw["dtype"] = case.fault.value
    if _bad(case, "mask", i):
        kw["mask"] = case.fault.value
    if op == "exp":
        return lnl.exp(x, **kw)  # MARK:legacy_exp
    if op == "tanh":
        return lnisa.activation(op=_v(case, "op", lnl.tanh, i), data=x, **kw)  # MARK:legacy_tanh
    if op == "scale_add":
        return lnisa.tensor_scalar(x, np.multiply, step.scalar, op1=_v(case, "op", np.add, i), operand1=step.scalar2, **kw)  # MARK:legacy_scale_add  # noqa: E501
    if op == "add_b":
        return lnl.add(t, _v(case, "operand", tb, i), **kw)  # MARK:legacy_add_b
    if op == "mul_b":
        return lnisa.tensor_tensor(x, tb, op=_v(case, "op", np.multiply, i), **kw)  # MARK:legacy_mul_b
    if op == "max_b":
        return lnl.maximum(_view(case, i, x), tb, **kw)  # MARK:legacy_max_b
    if op == "act_scale":
        return lnisa.activation(op=lnl.tanh, data=x, scale=_v(case, "scale", step.scalar, i), **kw)  # MARK:legacy_act_scale  # noqa: E501
    raise AssertionError(op)


def _view(case, i, t):
    """`t`, or the malformed view of a "view" fault (reshape / slice / broadcast of the tile)."""
    f = _bad(case, "view", i)
    if f is None:
        return t
    return f.value(t)


def legacy_kernel(case: Case):
    dt, P, c = case.dtype, case.P, case.chunk
    out_cols = case.chunks if case.reduce else case.F

    def kernel(a, b):
        out = lnl.ndarray(_v(case, "shape", (case.grid * P, out_cols), mark="alloc"), dtype=_v(case, "dtype", dt, mark="alloc"), buffer=lnl.shared_hbm)  # MARK:legacy_alloc  # noqa: E501
        row = lnl.program_id(0) * P if case.grid > 1 else 0
        for j in lnl.affine_range(*_v(case, "loop", (case.chunks,), mark="loop")):  # MARK:legacy_loop
            t = lnl.load(a[row:row + P, j * c:(j + 1) * c])
            tb = lnl.load(b[row:row + P, j * c:(j + 1) * c])
            for i, step in enumerate(case.steps):
                t = legacy_step(case, i, step, t, tb)
            if case.reduce:
                r = lnl.sum(t, axis=_v(case, "axis", 1, mark="store"), keepdims=True)  # MARK:legacy_reduce
                lnl.store(out[row:row + P, j:j + 1], value=r)
            else:
                dst = a if _bad(case, "readonly", mark="store") else out
                lnl.store(dst[row:row + P, j * c:(j + 1) * c], value=t)  # MARK:legacy_store
        return out
    return kernel


def new_step(case, i, step, t, tb):
    """One step in the new generation (`dst=` instructions)."""
    garbage_call(case, i, t, tb)
    op = step.op
    d = nl.ndarray(_v(case, "shape", t.shape, i, mark="alloc"), dtype=_v(case, "dtype", case.dtype, i, mark="alloc"), buffer=nl.sbuf)  # MARK:new_alloc  # noqa: E501
    x = _v(case, "operand", t, i)
    if op == "exp":
        nisa.activation(dst=d, op=_v(case, "op", nl.exp, i), data=x)  # MARK:new_exp
    elif op == "tanh":
        nisa.activation(dst=d, op=nl.tanh, data=_view(case, i, x))  # MARK:new_tanh
    elif op == "scale_add":
        nisa.tensor_scalar(dst=d, data=x, op0=nl.multiply, operand0=step.scalar, op1=_v(case, "op", nl.add, i), operand1=step.scalar2)  # MARK:new_scale_add  # noqa: E501
    elif op == "add_b":
        nisa.tensor_tensor(dst=d, data1=t, data2=x if _bad(case, "operand", i) else tb, op=_v(case, "op", nl.add, i))  # MARK:new_add_b  # noqa: E501
    elif op == "mul_b":
        nisa.tensor_tensor(dst=_v(case, "operand", d, i), data1=t, data2=tb, op=nl.multiply)  # MARK:new_mul_b
    elif op == "max_b":
        nisa.tensor_tensor(dst=d, data1=_view(case, i, x), data2=tb, op=_v(case, "op", nl.maximum, i))  # MARK:new_max_b  # noqa: E501
    elif op == "act_scale":
        nisa.activation(dst=d, op=nl.tanh, data=x, scale=_v(case, "scale", step.scalar, i))  # MARK:new_act_scale  # noqa: E501
    else:
        raise AssertionError(op)
    return d


def new_kernel(case: Case):
    dt, P, c = case.dtype, case.P, case.chunk
    out_cols = case.chunks if case.reduce else case.F

    def kernel(a, b):
        out = nl.ndarray(_v(case, "shape", (P, out_cols), mark="store"), dtype=_v(case, "dtype", dt, mark="store"), buffer=nl.shared_hbm)  # MARK:new_out  # noqa: E501
        for j in nl.affine_range(*_v(case, "loop", (case.chunks,), mark="loop")):  # MARK:new_loop
            t = nl.ndarray((P, c), dtype=dt, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[0:P, j * c:(j + 1) * c])
            tb = nl.ndarray((P, c), dtype=dt, buffer=nl.sbuf)
            nisa.dma_copy(dst=tb, src=b[0:P, j * c:(j + 1) * c])
            for i, step in enumerate(case.steps):
                t = new_step(case, i, step, t, tb)
            if case.reduce:
                r = nl.ndarray((P, 1), dtype=dt, buffer=nl.sbuf)
                nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=_v(case, "axis", 1, mark="store"), keepdims=True)  # MARK:new_reduce  # noqa: E501
                nisa.dma_copy(dst=out[0:P, j:j + 1], src=r)
            else:
                dst = a if _bad(case, "readonly", mark="store") else out
                nisa.dma_copy(dst=dst[0:P, j * c:(j + 1) * c], src=t)  # MARK:new_store
        return out
    return kernel


def launch(case: Case, a, b):
    """Run the case's kernel (the launch line a launch fault must end at is tagged)."""
    if case.generation is Generation.LEGACY:
        k = lnki.jit(legacy_kernel(case))
        grid = _v(case, "grid", case.grid if case.grid > 1 else None, mark="launch")
        if grid is not None or _bad(case, "grid", mark="launch"):
            k = k[grid]  # MARK:legacy_subscript
        return k(a, b)  # MARK:legacy_launch
    k = nki.jit(new_kernel(case))
    if _bad(case, "grid", mark="launch"):
        k = k[case.fault.value]  # MARK:new_subscript
    return k(a, b)  # MARK:new_launch


def _marks() -> dict[str, tuple[str, int]]:
    out = {}
    for fn in (garbage_call, legacy_step, legacy_kernel, new_step, new_kernel, launch):
        lines, first = inspect.getsourcelines(fn)
        for k, text in enumerate(lines):
            if "# MARK:" in text:
                name = text.split("# MARK:")[1].split()[0]
                out[name] = (inspect.getsourcefile(fn), first + k)
    return out


MARKS = _marks()


def _tag(case) -> str:
    """The case's generation as the marks of this file spell it (`legacy_launch`, `new_out`)."""
    return case.generation.name.lower()


def expected_lines(case: Case) -> list[tuple[str, int]]:
    """Where the case's fault may be reported: the marked line (a bad grid: the subscript or the call)."""
    f = case.fault
    if f.kind == "grid":
        return [MARKS[f"{_tag(case)}_subscript"], MARKS[f"{_tag(case)}_launch"]]
    if f.kind == "view":            # made in the fault's function; bounds are checked by the instruction
        code = f.value.__code__
        return [(code.co_filename, code.co_firstlineno), _expected_line(case)]
    if f.kind in ("garbage", "mixed"):
        return [MARKS["garbage"]]
    return [_expected_line(case)]


def _expected_line(case: Case) -> tuple[str, int]:
    f = case.fault
    gen = _tag(case)
    if f.mark == "launch" or f.kind == "input_dtype":
        return MARKS[f"{gen}_launch"]
    if f.mark == "loop":
        return MARKS[f"{gen}_loop"]
    if f.mark == "alloc":
        return MARKS[f"{gen}_alloc"]
    if f.mark == "store":
        if f.kind == "axis":
            return MARKS[f"{gen}_reduce"]
        if case.generation is Generation.NEW and f.kind in ("shape", "dtype"):
            return MARKS["new_out"]
        return MARKS[f"{gen}_store"]
    return MARKS[f"{gen}_{case.steps[f.step].op}"]


# -- drawing cases ----------------------------------------------------------------------------------------

OPS = tuple(MODEL)
SCALAR_OPS = ("scale_add", "act_scale")


def _non_tiles():
    return (None, [1, 2], (1,), "x", object(), np, {"a": 1})


# fault kind -> (generations, function(chooser, case) -> Fault or None when the case has no place for it)
def _fault_operand(ch, case):
    i = ch.integer(0, len(case.steps) - 1)
    return Fault("operand", ch.pick(_non_tiles()), "step", i)


def _fault_dtype_kw(ch, case):
    i = ch.integer(0, len(case.steps) - 1)
    return Fault("dtype_kw", ch.pick((np.float64, np.complex64, "banana", 3, np.uint64)), "step", i)


def _fault_alloc_dtype(ch, case):
    bad = ch.pick((np.float64, np.complex64, "banana", 3, np.uint64, "float64"))
    if case.generation is Generation.NEW:
        return Fault("dtype", bad, ch.pick(("alloc", "store")), ch.integer(0, len(case.steps) - 1))
    return Fault("dtype", bad, "alloc")


def _fault_shape(ch, case):
    P, F = case.P, case.F
    bad = ch.pick(((P, -F), (P, 2.5), (P, (F,)), "ab", (0, F), (P, None), (), (True, F)))
    if case.generation is Generation.NEW:
        return Fault("shape", bad, ch.pick(("alloc", "store")), ch.integer(0, len(case.steps) - 1))
    return Fault("shape", bad, "alloc")


def _fault_axis(ch, case):
    if not case.reduce:
        return None
    return Fault("axis", ch.pick((1.5, "a", [1, 1], 7, -9, None, (1, 1))), "store")


def _fault_scale(ch, case):
    idx = [i for i, s in enumerate(case.steps) if s.op == "act_scale"]
    if not idx:
        return None
    return Fault("scale", ch.pick(("a", [1.0], object(), (2.0,))), "step", ch.pick(idx))


def _fault_op(ch, case):
    where = {Generation.LEGACY: ("tanh", "scale_add", "mul_b"), Generation.NEW: ("exp", "scale_add", "add_b", "max_b")}
    idx = [i for i, s in enumerate(case.steps) if s.op in where[case.generation]]
    if not idx:
        return None
    bad = [3, (lambda x, y: x), "banana", None if case.generation is Generation.NEW else 2.5]
    if case.generation is Generation.NEW:
        bad.append("add")
    i = ch.pick(idx)
    value = ch.pick(bad)
    if value is None and case.steps[i].op == "scale_add":
        value = 3             # op1=None is legal (one stage)
    if value is None and case.steps[i].op == "exp":
        value = "exp"
    return Fault("op", value, "step", i)


def _fault_mask(ch, case):
    i = ch.integer(0, len(case.steps) - 1)
    shape_mask = lnl.arange(case.P)[:, None, None] < 1     # rank 3 over [P, F] tiles: fits no operand
    return Fault("mask", ch.pick(("x", 3, 1.5, shape_mask, [True])), "step", i)


def _fault_loop(ch, case):
    return Fault("loop", ch.pick(((0, case.chunks, 0), (0.5,), ("a",), (1, 2, 3, 4))), "loop")


def _fault_view(ch, case):
    ops = ("max_b",) if case.generation is Generation.LEGACY else ("tanh", "max_b")
    idx = [i for i, s in enumerate(case.steps) if s.op in ops]
    if not idx:
        return None
    P, c = case.P, case.chunk
    views = [lambda t: t.reshape((P + 1, c)), lambda t: t[:, ::0], lambda t: t.reshape("a"),
             lambda t: t[:, 0:1.5], lambda t: t.reshape((P, c, -1, -1))]
    if case.generation is Generation.NEW:
        views += [lambda t: t.ap("x"), lambda t: t.ap([[c, P], [1, c + 3]]), lambda t: t.ap([[c, P], [1.5, c]]),
                  lambda t: t.squeeze_dim(5), lambda t: t.broadcast(1.5, 2)]
    return Fault("view", ch.pick(views), "step", ch.pick(idx))


def _fault_hbm(ch, case):
    return Fault("shape", (1 << 20, 1 << 21), "alloc" if case.generation is Generation.LEGACY else "store")


def _fault_grid(ch, case):
    if case.generation is Generation.LEGACY:
        # a bare kernel[0] is legal (one program, as kernel[1]: docs/compatibility.md); (0,) and (2, 0) are not
        return Fault("grid", ch.pick((None, (0,), -1, 1.5, "a", lnl.nc(0), lnl.nc(3), (2, 0))), "launch")
    return Fault("grid", ch.pick((None, 0, 3, -1, "a", (1, 2), 1.5)), "launch")


def _fault_input_dtype(ch, case):
    return Fault("input_dtype", ch.pick((np.float64, np.complex64, np.uint64)), "launch")


# APIs that take anything for their required parameters by design: predicates, shapes given as lists
ACCEPTS_ANY = frozenset(("rand", "shared_constant", "is_hbm", "is_on_chip", "is_psum", "is_sbuf"))


def _api_pool(modules) -> list:
    """(function, required parameter names) of every public function of `modules` that has some."""
    pool = []
    for mod in modules:
        names = getattr(mod, "__all__", None)
        for name in sorted(names if names is not None else dir(mod)):
            fn = getattr(mod, name, None)
            if not inspect.isfunction(fn) or name.startswith("_") or name in ACCEPTS_ANY:
                continue
            if names is None and fn.__module__ != mod.__name__:
                continue                      # imported helpers, not the module's API
            params = inspect.signature(fn).parameters.values()
            required = tuple(p.name for p in params if p.default is p.empty
                             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
            if required:
                pool.append((fn, required))
    return pool


API_POOL = {Generation.LEGACY: _api_pool((lnl, lnisa)), Generation.NEW: _api_pool((nl, nisa))}


def _fault_garbage(ch, case):
    fn, names = ch.pick(API_POOL[case.generation])
    value = ch.pick(_non_tiles() + (2.5,))
    return Fault("garbage", (fn, names, (value,) * len(names)), "step", ch.integer(0, len(case.steps) - 1))


def _fault_mixed(ch, case):
    fn, names = ch.pick(API_POOL[case.generation])
    values = tuple(ch.pick(("<t>", "<b>", 1, 0, 2.5, None, [1, 2], "x", (4, 4))) for _ in names)
    return Fault("mixed", (fn, names, values), "step", ch.integer(0, len(case.steps) - 1))


def _fault_readonly(ch, case):
    if case.reduce:
        return None
    return Fault("readonly", "a", "store")


FAULTS = {
    "operand": _fault_operand, "dtype_kw": _fault_dtype_kw, "dtype": _fault_alloc_dtype, "shape": _fault_shape,
    "axis": _fault_axis, "scale": _fault_scale, "op": _fault_op, "mask": _fault_mask, "loop": _fault_loop,
    "view": _fault_view, "hbm": _fault_hbm, "grid": _fault_grid, "input_dtype": _fault_input_dtype,
    "readonly": _fault_readonly, "garbage": _fault_garbage, "mixed": _fault_mixed,
}
LEGACY_ONLY = ("dtype_kw", "mask")


def draw_case(ch: Chooser, *, illegal: bool | None = None) -> Case:
    generation = ch.pick((Generation.LEGACY, Generation.NEW))
    chunks = ch.integer(1, 3)
    case = Case(generation=generation, P=ch.integer(1, 128), F=chunks * ch.integer(1, 24), chunks=chunks,
                grid=ch.integer(1, 2) if generation is Generation.LEGACY else 1, dtype=ch.pick(DTYPES),
                reduce=ch.integer(0, 3) == 0, seed=ch.integer(0, 2 ** 16))
    for _ in range(ch.integer(1, 4)):
        op = ch.pick(OPS)
        case.steps.append(Step(op, ch.real(-1.5, 1.5), ch.real(-1.0, 1.0)))
    if illegal is None:
        illegal = ch.integer(0, 1) == 1
    if illegal:
        kinds = [k for k in FAULTS if generation is Generation.LEGACY or k not in LEGACY_ONLY]
        for _ in range(8):
            fault = FAULTS[ch.pick(kinds)](ch, case)
            if fault is not None:
                case.fault = fault
                break
        else:
            case.fault = _fault_operand(ch, case)
    return case


# -- running ----------------------------------------------------------------------------------------------

class _Timeout(Exception):
    pass


def inputs(case: Case):
    rng = np.random.default_rng(case.seed)
    rows = case.grid * case.P
    a = rng.uniform(-2, 2, (rows, case.F)).astype(np.float32).astype(case.dtype)
    b = rng.uniform(-2, 2, (rows, case.F)).astype(np.float32).astype(case.dtype)
    if case.fault is not None and case.fault.kind == "input_dtype":
        a = a.astype(case.fault.value)
    return a, b


def run_case(case: Case, timeout_s: float | None = None) -> tuple[str, str]:
    """(outcome class, detail) of one case (module docstring)."""
    a, b = inputs(case)
    a0, b0 = a.copy(), b.copy()
    if case.fault is not None and case.fault.kind == "readonly":
        a.flags.writeable = False     # the kernel writes it instead of `out`
    old = None
    if timeout_s:
        def on_alarm(signum, frame):
            raise _Timeout()
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        try:
            got = launch(case, a, b)
            error = None
        except _Timeout:
            return "hang", f"no result within {timeout_s} s"
        except OpenNKIError as e:
            got, error = None, e
        except Exception as e:           # noqa: BLE001 - classifying every escape is the point
            if isinstance(getattr(e, "opennki_error", None), OpenNKIError):   # NKI's plain built-in form
                e.location = e.opennki_error.location
                got, error = None, e
            else:
                frame = traceback.extract_tb(e.__traceback__)[-1]
                return "internal", f"{type(e).__name__}: {e} [{frame.filename}:{frame.lineno}]"
    finally:
        if timeout_s:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    unchanged = _same(a, a0) and _same(b, b0)
    if case.fault is None:
        if error is not None:
            return "wrong", f"legal kernel rejected: {type(error).__name__}: {str(error).splitlines()[0]}"
        if not unchanged:
            return "wrong", "inputs changed"
        expected, magnitude = model(case, a0, b0)
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return "wrong", f"result {got.shape} {got.dtype}, expected {expected.shape} {expected.dtype}"
        g, e = got.astype(np.float32), expected.astype(np.float32)
        close = (np.abs(g - e) <= tolerance(case, magnitude)) | (g == e) | (np.isnan(g) & np.isnan(e))
        if not close.all():
            k = np.argwhere(~close)[0]
            return "wrong", f"result differs at {tuple(k)}: {g[tuple(k)]} vs model {e[tuple(k)]}"
        return "ok", ""
    if error is None:
        if case.fault.kind == "mixed":
            return "ok", ""               # a mixed call may be legal; only its errors are checked
        return "accepted-illegal", "ran"
    if not unchanged:
        return "wrong", "inputs changed by a rejected kernel"
    lines = expected_lines(case)
    loc = error.location
    last = traceback.extract_tb(error.__traceback__)[-1]
    if loc is None or (loc.filename, loc.lineno) not in lines or (last.filename, last.lineno) not in lines:
        where = f"{loc.filename}:{loc.lineno}" if loc is not None else None
        return "wrong", (f"rejected at {where} (last frame {last.filename}:{last.lineno}), expected line "
                         f"{[n for _, n in lines]}: {type(error).__name__}: {str(error).splitlines()[0]}")
    return "ok", ""


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
