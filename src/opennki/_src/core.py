"""Language layer: the compositions both generations' `nl` ops are made of.

Imports sim, instructions and machine. Every function here issues instructions; none computes anything
itself (DESIGN decision 2). The legacy (`opennki.legacy.language`) and new (`opennki.language`) facades are
thin signature adapters over these functions: defaults (result dtype of comparisons, buffers) differ per
generation and are passed in explicitly.

Functional results are *deferred* (see sim/program.py): `buf[...] = nl.exp(x)` makes the activation write
`buf` directly, and `psum_acc += nl.matmul(a, b)` becomes one accumulating matmul.
"""

from __future__ import annotations

import enum
import inspect
import math

import numpy as np

from opennki.errors import (DtypeError, HardwareUnsupportedError, KernelError, MemoryKindError, OpenNKIError,
                            ShapeError, expect)
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import check_operator_args, view_signature
from opennki.instructions.dma import DmaCopy
from opennki.instructions.ops import ACTIVATIONS, SIMULATION_ONLY_OPS, alu
from opennki.instructions.scalar import Activation
from opennki.instructions.tensor_engine import NcMatmul, NcTranspose
from opennki.instructions.vector import (Memset, TensorCopy, TensorReduce, TensorScalar, TensorTensor,
                                         normalize_axes, reduced_shape)
from opennki._src import rules
from opennki.machine.arguments import as_shape
from opennki.machine.dtypes import SCALAR_TYPES, DataType, bool_, dtype_of, float32, promote, scalar_dtype
from opennki.machine.machine import Machine
from opennki.machine.memory import MemoryRegion
from opennki.machine.tensor import Shape, TensorView
from opennki.sim.frames import as_kernel_frame, user_frame
from opennki.sim.program import active, current, known_site

SBUF, PSUM = MemoryRegion.sbuf, MemoryRegion.psum
_HBM, _PSUM = MemoryKind.HBM, MemoryKind.PSUM   # looking an enum member up on its class is slow (Python 3.11)


def is_tensor(x) -> bool:
    return isinstance(x, TensorView)


def is_scalar(x) -> bool:
    return isinstance(x, SCALAR_TYPES)


def region_of(buffer) -> MemoryRegion:
    """Normalise a `buffer=` argument: MemoryRegion members, `nl.hbm` etc., strings (new generation 0.2),
    or direct-allocation objects carrying a `region`."""
    if buffer is None:
        return SBUF
    if isinstance(buffer, MemoryRegion):
        return buffer
    region = getattr(buffer, "region", None)
    if isinstance(region, MemoryRegion):
        return region
    if isinstance(buffer, str):
        key = {"hbm": "private_hbm"}.get(buffer, buffer)
        try:
            return MemoryRegion[key]
        except KeyError:
            pass
    raise KernelError(f"unknown buffer {buffer!r}", expected="nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm",
                      got=buffer)


def kernel_function(prog):
    """The user's kernel function of the running launch (decorator wrappers removed), or None."""
    fn = getattr(prog.launch, "fn", None)
    return inspect.unwrap(fn) if fn is not None else None


def normalize_shape(shape) -> tuple[int, ...]:
    """`as_shape(shape)`, remembered per `Shape` object: a view's shape, shared by every view of its layout, so
    a loop's loads pass the same few objects again and again (and a Shape never changes)."""
    if type(shape) is Shape:
        found = _SHAPES.get(id(shape))
        if found is not None and found[0] is shape:
            return found[1]
        normal = as_shape(shape)
        if len(_SHAPES) >= 1024:
            _SHAPES.clear()
        _SHAPES[id(shape)] = (shape, normal)         # holding the shape: its id is not reused meanwhile
        return normal
    return as_shape(shape)


_SHAPES: dict = {}      # id of a Shape -> (it, as_shape(it)) (normalize_shape)


def alloc(shape, dtype, buffer=None, name: str | None = None, fill=None, address=None, frame=None,
          prog=None, normal: bool = False) -> TensorView:
    """A new tensor in `buffer` (poisoned unless `fill`). `frame`: the kernel frame, if the caller found it
    already (user_frame); `prog`: the running program, likewise; `normal`: `shape` is what `normalize_shape`
    gave (a tuple of positive ints) already."""
    if prog is None:
        prog = current("nl.ndarray")
    region = buffer if type(buffer) is MemoryRegion else region_of(buffer)
    t = prog.new_tensor(region, shape if normal else normalize_shape(shape),
                        dtype if type(dtype) is DataType else dtype_of(dtype), name or None, fill=fill,
                        address=address, frame=frame)
    loops = prog.loops
    if loops or t.storage.site is not None:          # a site: maybe a reused result tile (Program.spare)
        if not loops or t.storage.scope is not loops[-1]:      # else a reused tile local to this loop already
            rules.record_scope(prog, t)
    return t


def require_tensor(x, role: str, api: str) -> None:
    """x must be a tensor (in any memory; a tensor with block dims counts) before `.shape` / `.dtype` are read."""
    if not (is_tensor(x) or getattr(x, "is_block_tensor", False)):
        raise DtypeError(f"operand '{role}' of '{api}' must be a tensor", expected="a tensor",
                         got=type(x).__name__, instruction=api, code="err_invalid_operand_type")


def require_tile(x, role: str, api: str) -> None:
    """x must be an on-chip tile: a tensor with block dims first needs indexing (`a[i]`) before use."""
    if getattr(x, "is_block_tensor", False):
        raise KernelError(f"operand '{role}' of '{api}' is a tensor with block dimensions {x.shape}; a tile is "
                          "needed", instruction=api, code="err_failed_to_infer_tile_from_local_tensor",
                          hint="index the block dimensions away first, e.g. a[i]")
    if not is_tensor(x):
        raise DtypeError(f"operand '{role}' of '{api}' must be a tile", got=type(x).__name__, instruction=api)
    require_on_chip(x, role, api)


def require_on_chip(t: TensorView, role: str, api: str) -> None:
    if t.kind is MemoryKind.HBM:
        raise MemoryKindError(f"Expected operand '{role}' of '{api}' to be in address space 'sbuf' or 'psum', "
                              f"but got a tensor in 'hbm' instead", instruction=api,
                              code="err_unsupported_memory",
                              hint="load HBM tensors into SBUF with nl.load / nisa.dma_copy first")


def to_sbuf(t: TensorView, api: str, frame=None, prog=None) -> TensorView:
    """Tensor Engine operands live in SBUF: copy a PSUM tile there (the copy NKI's compiler inserts). `frame` /
    `prog`: the kernel frame and the running program, if the caller found them already."""
    if t.kind is MemoryKind.PSUM:
        out = alloc(t.shape, t.dtype, SBUF, frame=frame, prog=prog)
        (prog or current(api)).issue(TensorCopy(dst=out, src=t), api)
        return out
    return t


def broadcast_view(t: TensorView, shape: tuple[int, ...]) -> TensorView:
    """A zero-stride view of `t` broadcast to `shape` (NumPy rules)."""
    if t.shape == shape:
        return t
    pad = len(shape) - t.ndim
    expect(pad >= 0, "cannot broadcast to a lower rank", expected=shape, got=t.shape)
    nd = len(t.amap)
    cols, new_shape = [], []
    for a, n in enumerate(shape):
        src = a - pad
        if src < 0:
            cols.append([0] * nd)
        else:
            m = t.shape[src]
            expect(m == n or m == 1, "shapes cannot be broadcast together", expected=shape, got=t.shape)
            cols.append([t.amap[d][src] if m == n else 0 for d in range(nd)])
        new_shape.append(n)
    amap = tuple(tuple(cols[a][d] for a in range(len(cols))) for d in range(nd))
    return t._derive(tuple(new_shape), amap, t.consts)


def materialize_broadcast(t: TensorView, shape: tuple[int, ...], api: str) -> TensorView:
    """Broadcast `t` to `shape`. Free-dim broadcasts are zero-stride views the engines read directly;
    a partition broadcast ([1, F] -> [P, F]) needs data movement, done here by a DMA."""
    if t.shape == shape:
        return t
    view = broadcast_view(t, shape)
    if t.is_on_chip and t.shape[0] == 1 and shape[0] > 1 and len(t.shape) == len(shape):
        out = alloc(shape, t.dtype, SBUF)
        current(api).issue(DmaCopy(dst=out, src=view), api)
        return out
    return view


def _is_column(t: TensorView, shape) -> bool:
    """A [P, 1, ...] operand that broadcasts along all free dims of `shape` (a tensor_scalar operand)."""
    return (t.is_on_chip and t.ndim == len(shape) and t.shape[0] == shape[0] and t.free_size == 1
            and math.prod(shape[1:]) > 1)


# ------------------------------------------------------------------------------------------- element-wise



class Limits(enum.Enum):
    """Whose documented hardware limits an element-wise op or `nl.matmul` is held to in hardware-strict mode
    (`hardware_limits`, `matmul`): what simulates fine but fails to compile or run on hardware."""

    LEGACY = enum.auto()    # NKI 0.1 `nl` functions: NumPy broadcasting, the partition dim included, is
    #                         native; nl.matmul without transpose_x compiles
    NEW = enum.auto()       # NKI 0.3+ `nl` functions: no broadcasting between tiles but a [P, 1] column, no
    #                         divide / mod / fmod instruction, power needs a tile exponent, nl.matmul needs
    #                         transpose_x=True (NKI 0.3-0.6 known issue)
    OPERATOR = enum.auto()  # tile operators (`a + b`): the legacy known issue, no partition broadcast

    @classmethod
    def of(cls, limits: "Limits | None", api: str) -> "Limits":
        """`limits`, or by default NEW for the `nl.*` APIs and OPERATOR for the tile operators."""
        return limits or (cls.NEW if api.startswith("nl.") else cls.OPERATOR)


def hardware_limits(prog, opdef, x, y, shape, api: str, limits: Limits | None) -> None:
    """Hardware-strict mode: raise for binary ops that simulate fine but fail on hardware, by the rules of
    `limits` (`Limits.of`)."""
    if not prog.options.hardware_strict:
        return
    limits = Limits.of(limits, api)
    tx, ty = is_tensor(x), is_tensor(y)
    if limits is Limits.NEW:
        if opdef.name in SIMULATION_ONLY_OPS:
            raise HardwareUnsupportedError(f"{api}: there is no {opdef.name} instruction on hardware (it runs "
                                           "in simulation only)", instruction=api,
                                           hint="multiply by nl.reciprocal(y) instead of dividing")
        if opdef.name == "power" and not ty:
            raise HardwareUnsupportedError(f"{api}: the exponent of nl.power must be a tile on hardware",
                                           got=type(y).__name__, instruction=api)
        if tx and ty and x.shape != y.shape and not (_is_column(x, shape) or _is_column(y, shape)):
            raise HardwareUnsupportedError(f"{api}: broadcasting between tiles is not supported on hardware",
                                           got=(x.shape, y.shape), instruction=api)
    elif limits is Limits.OPERATOR and tx and ty:
        if any(t.shape[0] != shape[0] for t in (x, y)):
            raise HardwareUnsupportedError(f"{api}: tile operators cannot broadcast along the partition dim "
                                           "on hardware (legacy known issue)", got=(x.shape, y.shape),
                                           instruction=api, hint="use the nl function (nl.add, ...) instead")


# The lean path (Program.lean) memoises what `binary` and `unary` decide from their arguments (the instruction,
# its operand order, the result's shape and dtype): a function of the operands' signatures, the operator, the
# dtypes asked for and the API name, so it is decided once per such key. (key) -> plan tuple.
_PLANS: dict = {}
_PLANS_MAX = 4096


def _plan(prog, op, x, y, out, dtype, default_dtype, api: str) -> tuple:
    """(key, plan) of a front-door call without `mask=`: its memo key (the operator; of each operand and of the
    destination what the decisions read, a tensor's signature or a scalar's type, whose value is read again
    each time; the dtypes asked for and the API name) and the plan memoised under it. `y`: `type` for a
    one-operand call; `out`: None for a new result tile. Key None: not memoised (not the lean path,
    hardware-strict, an operand with run-time indices); plan None: none yet (or an unhashable argument,
    never memoised: the plain path says what is wrong with it)."""
    if not prog.lean or prog.options.hardware_strict:
        return None, None
    kx = (x._sig or view_signature(x)) if isinstance(x, TensorView) else type(x)
    ky = (y._sig or view_signature(y)) if isinstance(y, TensorView) else type(y)
    ko = False if out is None else out._sig or view_signature(out)
    if kx is None or ky is None or ko is None:
        return None, None
    key = (op, kx, ky, ko, dtype, default_dtype, api)
    try:
        return key, _PLANS.get(key)
    except TypeError:
        return key, None


def _remember(key, plan) -> None:
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    try:
        _PLANS[key] = plan
    except TypeError:
        pass


_VALUE_KEYED = frozenset((float, int, bool))
# A planned instruction built from its template with its result tile in `dst` is deferred unbuilt
# (`Program.defer`'s `made` and `values`), and the lean retarget of a temporary (`assign`) builds it with its
# destination in `dst`, instead of building it and then moving `dst` (`Instruction.moved_dst`): the same
# instruction, built once. Any other reader builds it as it was (`Deferred.instr`). False: always built at once.
BUILD_WHEN_CLAIMED = True


def _built(recipe: tuple, values: tuple):
    """The instruction a recipe `(class, names, fixed)` makes of `values`: `class(**fixed)` with the fields
    `names` holding `values`."""
    cls, names, fixed = recipe
    return cls(**dict(zip(names, values)), **fixed)


def keep_plan(prog, memo, instr, names: tuple):
    """Remember under `memo` (`Simulator.planned`, cleared past 4,096 entries) the plan of `instr`, just deferred
    or issued, once its signature is clean (`Simulator.clean`): an entry `({}, template)` whose template
    (`Instruction.maker`) builds the next ones from the values of the fields `names`. Returns it, or None (not
    clean: the memo stays empty, so the next one is checked again)."""
    if instr.__dict__.get("_signature") not in prog.sim.clean:
        return None
    planned = prog.sim.planned
    if len(planned) >= 4096:
        planned.clear()
    entry = planned[memo] = ({}, instr.maker(names))
    return entry


# A kernel statement (a call site: `Program.statements`, keyed by the code's id and the call's offset) whose front
# door deferred a planned instruction unbuilt (`load`, legacy `nc_matmul`) keeps what it decided
# (`remember_statement`): the door's memo key (the operands' signatures and the parameters), the memo entry's
# retarget map and template, the result tile's shape, dtype and `Program.result_tile` key, and the statement's
# `_SITES` entry (`Program.defer`, `known_site`). The next call there with the same memo key takes them with one
# look-up, where the door's memo, `Simulator.planned`, the result tile's and the statement's memos took one each,
# keyed by tuples built again (nested ones, hashed part by part). Each is a function of the key (a memo entry
# stays its key's plan once `Simulator.planned` forgets it: `clean` keeps every signature). False: the plain path.
STATEMENT_PLANS = True


def remember_statement(prog, frame, key: tuple, plan, made, shape: tuple, dtype, region: MemoryRegion,
                       api: str | None = None) -> None:
    """Keep what a planned deferral at `frame`'s statement decided (`STATEMENT_PLANS`) in `prog.statements`
    (with the door's API name, if its key does not hold it)."""
    code, lasti = frame.f_code, frame.f_lasti
    statements = prog.statements
    if len(statements) >= 4096:
        statements.clear()
    statements[(id(code), lasti)] = (code, key, plan, made, shape, dtype, (
        id(code), lasti, region._value_, shape, id(dtype)), known_site(frame), api)


def _defer_planned(prog, key, vkey, recipe: tuple, values: tuple, result, api: str, frame):
    """Defer the instruction `recipe` makes of `values` (`_built`), built from a plan. Its signature is a
    function of the plan's key and `vkey` (the immediate's type and value, or True when it has none), so once it
    was clean (`Simulator.clean`) it is deferred as checked, without computing it; `Deferred.plan` then lets
    `assign` retarget it likewise. So is what the instruction holds besides `values` (the other fields, which
    fields hold views: `Instruction.maker`), kept with the memo: later ones are built from its template."""
    if vkey is None:
        return prog.defer(_built(recipe, values), result, api, frame)
    memo = (key, vkey)
    planned = prog.sim.planned
    entry = planned.get(memo)
    if entry is None:
        instr = _built(recipe, values)
        prog.defer(instr, result, api, frame)
        entry = keep_plan(prog, memo, instr, recipe[1])
        if entry is not None:
            prog.pending.plan = entry[0]
        return result
    made = entry[1]
    if made is None:
        return prog.defer(_built(recipe, values), result, api, frame, True, entry[0])
    if BUILD_WHEN_CLAIMED and made[4] is not None and values[0] is result:
        # built when first read (`Deferred.instr`): `assign` builds it with its destination in `dst`
        return prog.defer(None, result, api, frame, True, entry[0], made, values)
    return prog.defer(made[0](made[1], values), result, api, frame,
                      True, entry[0])           # checked, with its plan (positional: every planned instruction)


def defer_planned(prog, recipe: tuple, values: tuple, result, api: str, frame, operands: tuple,
                  params: tuple = ()):
    """Defer the instruction `recipe` makes of `values` (`_built`: no `mask=`), which a front door builds for
    its new result tile `result` from the tensor views `operands` and the hashable `params` alone (its class
    and `api` aside), as a planned instruction (`_defer_planned`): its signature is then a function of the
    operands' signatures and the params, so it is checked only until that signature is clean. Off the lean
    path, under hardware-strict rules and for an operand with run-time indices it is deferred as
    `Program.defer` does."""
    if prog.lean and not prog.options.hardware_strict:
        keys = ()
        for t in operands:              # a loop, not a comprehension: one or two operands, and a call each
            key = t._sig or view_signature(t)
            if key is None:
                return prog.defer(_built(recipe, values), result, api, frame)
            keys += (key,)
        return _defer_planned(prog, (recipe[0], api, keys, params), True, recipe, values, result, api, frame)
    return prog.defer(_built(recipe, values), result, api, frame)


def defer_planned_as(prog, key, recipe: tuple, values: tuple, result, api: str, frame):
    """`defer_planned` with the key it makes known already (on the lean path without hardware-strict rules, of
    operands without run-time indices): `(recipe[0], api, their signatures, params)`, which a front door may
    memoise with what else it decides of the same signatures (legacy `nc_matmul`'s `_MATMUL_PLANS`)."""
    return _defer_planned(prog, key, True, recipe, values, result, api, frame)


# What `planned_fields` keys a field by its type and value: an operand field's immediate (or None) of these types
# (equal values are equal immediates, and comparing them runs no kernel code: a run-time scalar's `==` is traced);
# a parameter of these, or one equal only to itself (an operator, a token), or an enum member (by its name: an
# enum's hash is a Python call), or a tuple of ints.
_KEYED_IMMEDIATES = frozenset((type(None), bool, int, float, np.float32, np.float64, np.int32, np.int64))
_KEYED_PARAMS = frozenset((type(None), bool, int, str))
_PARAM_KEYS: dict = {}      # a parameter's type -> 1: keyed by (type, value), 2: by (type, name), 0: not keyed


def _param_key(kind) -> int:
    """How `planned_fields` keys a parameter of type `kind` (`_PARAM_KEYS`)."""
    if issubclass(kind, enum.Enum):
        return 2
    return 1 if kind in _KEYED_PARAMS or kind.__eq__ is object.__eq__ else 0


def planned_fields(cls, names, values, parts: list):
    """Memo key parts of an instruction of class `cls` whose fields `names` hold `values` (the front door's other
    decisions aside), appended to `parts`: each operand field's view signature, or its immediate's (type, value),
    each parameter's (type, value) (`_KEYED_IMMEDIATES`, `_PARAM_KEYS`). The instruction's signature
    (`Instruction.signature`) is a function of them, so a front door may issue (or defer) the instruction as
    checked once that signature was clean. Returns (the operand fields not holding None, their values): those
    a plan's template (`Instruction.maker`) takes from the call, the others it fixes; None when some value is not
    keyed so (a view with run-time indices, a tuple of views, an unknown object): the plain path."""
    operand_names = cls._operand_names
    held, operands = [], []
    for name, value in zip(names, values):
        kind = type(value)
        if value is None:
            parts.append(None)
        elif name in operand_names:
            if kind in _KEYED_IMMEDIATES:
                parts.append((kind, value))
            elif isinstance(value, TensorView):
                sig = value._sig or view_signature(value)
                if sig is None:
                    return None
                parts.append(sig)
            else:
                return None
            held.append(name)
            operands.append(value)
        elif kind is tuple:
            if not all(type(v) is int for v in value):
                return None
            parts.append((kind, value))
        else:
            how = _PARAM_KEYS.get(kind)
            if how is None:
                how = _PARAM_KEYS[kind] = _param_key(kind)
            if how == 1:
                parts.append((kind, value))
            elif how:
                parts.append((kind, value._name_))
            else:
                return None
    return held, operands


def _binary_recipe(form: str, opdef) -> tuple:
    """The recipe (`_built`) of the instruction `binary` builds in form `form` (tile (+) tile, or a [P, 1]
    column or a scalar on either side) without `mask=`: its values are (result, left, right) as the form puts
    them (`_planned_binary`)."""
    if form == "tensors":
        return TensorTensor, ("dst", "data1", "data2"), {"op": opdef, "mask": None}
    fixed = {"op0": opdef, "mask": None}
    if form in ("column_left", "scalar_left"):
        fixed["reverse0"] = True
    elif form == "scalar_right":
        fixed["reverse0"] = False
    return TensorScalar, ("dst", "data", "operand0"), fixed


def planned_result(prog, shape: tuple, dtype: DataType, frame, region: MemoryRegion = SBUF,
                   key=None) -> TensorView:
    """`alloc(shape, dtype, region, frame=frame, prog=prog)` for a planned front door's new result tile: `shape` a
    tuple of ints (`normalize_shape`'s), `dtype` a DataType, `frame` the kernel frame or None, `region` SBUF or
    PSUM (legacy `nc_matmul`'s); the tile is usually the spare one its call site's last statement left
    (`Program.result_tile`, with its `key` if the caller kept it)."""
    result = prog.result_tile(shape, dtype, frame, region, key)
    loops = prog.loops
    if loops:                           # (`alloc`)
        last = loops[-1]
        if last.is_scope:               # `record_scope`'s answer: the innermost loop is a scope
            result.storage.scope = last
        else:
            rules.record_scope(prog, result)
    elif result.storage.site is not None:
        rules.record_scope(prog, result)
    return result


def _planned_binary(prog, key, plan, x, y, out, api: str, frame):
    """`binary`'s lean path: the instruction the plain path builds for these arguments (`plan`). `frame`: the
    kernel frame (user_frame) when the result is a new tile (`out` None); into `out`, the one the caller
    knows (`kernel_frame`), else None (`Program.issue` walks the stack)."""
    form, opdef, shape, result_dtype, recipe, scalar_left, arith = plan
    if out is None:
        result = prog.result_tile(shape, result_dtype, frame)        # `planned_result`, inline (the hot path)
        loops = prog.loops
        if loops or result.storage.site is not None:   # (`alloc`)
            if not loops or result.storage.scope is not loops[-1]:
                rules.record_scope(prog, result)
    else:
        result = out
    if scalar_left is None:             # tile (+) tile, or a [P, 1] column on either side
        values = (result, y, x) if form == "column_left" else (result, x, y)
        if out is not None:
            _issue_planned(prog, key, True, recipe, values, api, frame)
            return out
        return _defer_planned(prog, key, True, recipe, values, result, api, frame)
    data, scalar = (y, x) if scalar_left else (x, y)
    if arith:
        scalar = float(scalar)
    values = (result, data, scalar)
    kind = type(scalar)
    vkey = (kind, scalar) if kind in _VALUE_KEYED else None
    if out is not None:
        _issue_planned(prog, key, vkey, recipe, values, api, frame)
        return out
    return _defer_planned(prog, key, vkey, recipe, values, result, api, frame)


def _issue_planned(prog, key, vkey, recipe: tuple, values: tuple, api: str, frame=None) -> None:
    """Issue (not defer: an in-place `acc += x` writes its destination) the instruction `recipe` makes of
    `values`, built from a plan: once its signature was clean it is issued as checked and built from the memo's
    template, as `_defer_planned` defers one (the memo is keyed apart from deferred ones' by its destination
    signature, which the plan's key holds). `frame`: the kernel frame, if the caller knows it (`Program.issue`)."""
    if vkey is None:
        prog.issue(_built(recipe, values), api, False, frame)
        return
    memo = (key, vkey)
    planned = prog.sim.planned
    entry = planned.get(memo)
    if entry is None:
        instr = _built(recipe, values)
        prog.issue(instr, api, False, frame)
        keep_plan(prog, memo, instr, recipe[1])
        return
    made = entry[1]
    prog.issue(made[0](made[1], values) if made is not None else _built(recipe, values), api, True, frame)


def binary(op, x, y, api: str, dtype=None, mask=None, default_dtype=None, limits: Limits | None = None,
           kernel_frame=None, *, out: TensorView | None = None):
    """`op(x, y)` element-wise into a new SBUF tile (or into `out`), with NumPy broadcasting. Without
    `dtype`, the result dtype follows the promotion rules, except that `divide` of integers gives float32.
    (The legacy `nl` front doors pass `api` to `kernel_frame` positionally: a call with keywords costs a
    small instruction more, some 50-80 ns.) `kernel_frame`: the kernel frame `user_frame()` would find, when
    the caller knows it (`frames.as_kernel_frame`: the legacy front doors and `acc += x` called from the kernel
    itself), else None.

    tile (+) tile -> tensor_tensor; tile (+) scalar or [P, 1] column -> tensor_scalar.
    `default_dtype` overrides promotion when `dtype` is None (comparisons in the legacy generation);
    `limits` selects the hardware-strict rules (`hardware_limits`).
    """
    prog = active() or current(api)     # current() raises outside a kernel
    key = None
    if mask is None:
        key, plan = _plan(prog, op, x, y, out, dtype, default_dtype, api)
        if plan is not None:
            return _planned_binary(prog, key, plan, x, y, out, api,
                                   (kernel_frame or user_frame()) if out is None else kernel_frame)
    opdef = alu(op)
    tx, ty = not isinstance(x, SCALAR_TYPES), not isinstance(y, SCALAR_TYPES)
    if not tx and not ty:
        raise KernelError(f"{api} needs at least one tile operand", got=(type(x).__name__, type(y).__name__))
    if tx:
        require_tile(x, "x", api)
    if ty:
        require_tile(y, "y", api)
    if tx and ty:
        try:
            shape = tuple(np.broadcast_shapes(x.shape, y.shape))
        except ValueError:
            raise ShapeError(f"{api}: operand shapes cannot be broadcast together", got=(x.shape, y.shape),
                             instruction=api) from None
        result_dtype = dtype_of(dtype) if dtype is not None else (default_dtype or promote(x.dtype, y.dtype))
    else:
        t, s = (x, y) if tx else (y, x)
        shape = t.shape
        result_dtype = dtype_of(dtype) if dtype is not None else (default_dtype or promote(t.dtype,
                                                                                           scalar_dtype(s)))
    if dtype is None and opdef.name == "divide" and result_dtype.is_int:
        # true division, like numpy.divide: integer operands give a float quotient. The official resize
        # kernel floors `position / width` and relies on it (an int32 quotient would round 58.97 up to 59).
        result_dtype = float32
    if prog.options.hardware_strict:
        hardware_limits(prog, opdef, x, y, shape, api, limits)
    if out is None:
        result = alloc(shape, result_dtype, SBUF)
    else:
        result = out
        shape = out.shape
    form = None
    if tx and ty:
        if x.shape == shape and _is_column(y, shape):
            form = "column"
            instr = TensorScalar(dst=result, data=x, op0=opdef, operand0=y, mask=mask)
        elif y.shape == shape and _is_column(x, shape):
            form = "column_left"
            instr = TensorScalar(dst=result, data=y, op0=opdef, operand0=x, reverse0=True, mask=mask)
        else:
            if x.shape == shape and y.shape == shape:
                form = "tensors"
            xs = materialize_broadcast(x, shape, api)
            ys = materialize_broadcast(y, shape, api)
            instr = TensorTensor(dst=result, data1=xs, data2=ys, op=opdef, mask=mask)
    else:
        form = "scalar_right" if tx else "scalar_left"
        data = materialize_broadcast(x if tx else y, shape, api)
        scalar = y if tx else x
        if opdef.category == "arith":
            scalar = float(scalar)
        instr = TensorScalar(dst=result, data=data, op0=opdef, operand0=scalar, reverse0=not tx, mask=mask)
    if key is not None and form is not None:
        _remember(key, (form, opdef, normalize_shape(shape), result_dtype, _binary_recipe(form, opdef),
                        form == "scalar_left" if form.startswith("scalar") else None, opdef.category == "arith"))
    if out is not None:
        prog.issue(instr, api)
        return out
    return prog.defer(instr, result, api)


def unary(fn_name: str, x, *, dtype=None, mask=None, api: str):
    """`fn(x)` on the Scalar Engine into a new SBUF tile."""
    prog = current(api)
    key, plan = _plan(prog, fn_name, x, type, None, dtype, None, api) if mask is None else (None, None)
    if plan is not None:                 # the lean path: what the plain path below decides for this key
        shape, result_dtype, recipe = plan
        frame = user_frame()
        result = planned_result(prog, shape, result_dtype, frame)
        return _defer_planned(prog, key, True, recipe, (result, x), result, api, frame)
    require_tile(x, "x", api)
    result = alloc(x.shape, dtype if dtype is not None else x.dtype, SBUF)
    instr = Activation(dst=result, op=ACTIVATIONS[fn_name].name, data=x, mask=mask)
    if key is not None:
        _remember(key, (normalize_shape(x.shape), result.dtype, (Activation, ("dst", "data"),
                                                                 {"op": instr.op, "mask": None})))
    return prog.defer(instr, result, api)


def unary_alu(op_name: str, x, *, dtype=None, mask=None, api: str, bool_fails: bool = False):
    """A unary ALU op (`logical_not`, `invert`) on the Vector Engine into a new SBUF tile. `bool_fails`:
    hardware gives wrong results for a bool input (the legacy `nl.invert` known issue), so hardware-strict
    mode rejects one."""
    prog = current(api)
    require_tile(x, "x", api)
    if bool_fails and prog.options.hardware_strict and x.dtype is bool_:
        raise HardwareUnsupportedError(f"{api} gives wrong results for a bool input on hardware (known issue)",
                                       got="bool", instruction=api, hint="invert an int8 tile instead")
    result = alloc(x.shape, dtype if dtype is not None else x.dtype, SBUF)
    instr = TensorScalar(dst=result, data=x, op0=op_name, operand0=0 if alu(op_name).category == "bitvec"
                         else 0.0, mask=mask)
    return prog.defer(instr, result, api)


def scale_into(t: TensorView, factor: float, dtype, *, mask=None, api: str):
    """`t * factor` into a new SBUF tile of `dtype` (tensor_scalar)."""
    prog = current(api)
    result = alloc(t.shape, dtype, SBUF)
    return prog.defer(TensorScalar(dst=result, data=t, op0="multiply", operand0=float(factor), mask=mask),
                      result, api)


# ---------------------------------------------------------------------------------------------- reductions

def reduce(op, x, axis, *, dtype=None, mask=None, keepdims=False, negate=False, api: str):
    """Reduce free `axis` of a tile with an ALU op (tensor_reduce); on-chip results stay >= 2-D.

    The lean path memoises what this decides (`_PLANS`: the axes, the result's shape and dtype, the
    instruction's recipe) per operator, operand signature, axis, flags, dtype asked for and API, and defers
    the instruction as planned (`_defer_planned`), as `unary` does; only for an int or a tuple or list of ints
    `axis` (a list by its type and items) and bool flags, whose equal values are the same value (`1.0 == 1`,
    `1 == True`)."""
    prog = active() or current(api)     # current() raises outside a kernel
    key = None
    kind = type(axis)
    if (mask is None and prog.lean and not prog.options.hardware_strict and type(op) is str
            and isinstance(x, TensorView) and type(keepdims) is bool and type(negate) is bool
            and (kind is int or (kind is tuple or kind is list) and all(type(a) is int for a in axis))):
        kx = x._sig or view_signature(x)
        if kx is not None:
            key = (op, kx, axis if kind is not list else (list, *axis), keepdims, negate, dtype, api)
            try:
                plan = _PLANS.get(key)
            except TypeError:           # an unhashable dtype argument: the plain path says what is wrong
                plan = key = None
            if plan is not None:        # what the plain path below decides for this key
                shape, result_dtype, recipe = plan
                frame = user_frame()
                result = planned_result(prog, shape, result_dtype, frame)
                return _defer_planned(prog, key, True, recipe, (result, x), result, api, frame)
    require_tile(x, "x", api)
    axes = normalize_axes(axis, x.ndim)
    shape = reduced_shape(x.shape, axes, keepdims)
    result = alloc(shape, dtype if dtype is not None else x.dtype, SBUF)
    instr = TensorReduce(dst=result, op=op, data=x, axis=axes, keepdims=keepdims, negate=negate, mask=mask)
    if key is not None:
        _remember(key, (normalize_shape(shape), result.dtype, (TensorReduce, ("dst", "data"), {
            "op": op, "axis": axes, "keepdims": keepdims, "negate": negate, "mask": None})))
    return prog.defer(instr, result, api)


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, api: str):
    """Sum in fp32, then scale by 1/count into the result dtype (fp32 for integer inputs)."""
    require_tile(x, "x", api)
    axes = normalize_axes(axis, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    total = reduce("add", x, axes, dtype=float32, mask=mask, keepdims=keepdims, api=api)
    out_dtype = dtype_of(dtype) if dtype is not None else (x.dtype if x.dtype.is_float else float32)
    return scale_into(total, 1.0 / count, out_dtype, mask=mask, api=api)


# ------------------------------------------------------------------------------------- data movement

def load(src, *, dtype=None, mask=None, api: str = "nl.load", kernel_frame=None):
    """HBM -> a new SBUF tile (DMA); the tile's dim 0 is the partition dim. `kernel_frame`: the kernel frame
    `user_frame()` would find, when the caller knows it (`frames.as_kernel_frame`), else None."""
    prog = active() or current(api)     # current() raises outside a kernel
    if not isinstance(src, TensorView) or src.storage.kind is not _HBM:
        where = src.kind.name.lower() if is_tensor(src) else type(src).__name__
        raise MemoryKindError(f"Expected operand 'src' of '{api}' to be in address space 'hbm', but got a "
                              f"tile in '{where}' instead.", instruction=api, code="err_unsupported_memory")
    if len(src.shape) < 2:
        # a 1-D access `x[0:128, j]` loads as a [128, 1] column and one element (`seed[0]`) as [1, 1]: the
        # partition dim comes first and on-chip tiles have at least two dims (the official samples rely on it)
        src = _as_column(src)
    frame = kernel_frame or user_frame()
    if mask is None and dtype is None and LOAD_PLANS:
        lkey = (src._sig or view_signature(src), api)
        if STATEMENT_PLANS and frame is not None:
            code = frame.f_code
            site = prog.statements.get((id(code), frame.f_lasti))
            if site is not None and site[0] is code and site[1] == lkey and site[5] is src.storage.dtype:
                # this statement's last load, of this signature and dtype (`STATEMENT_PLANS`)
                _, _, plan, made, shape, dt, key, stmt, _ = site
                result = planned_result(prog, shape, dt, frame, SBUF, key)
                return prog.defer(None, result, api, frame, True, plan, made, (result, src), stmt)
        plan = _LOAD_PLANS.get(lkey)
        if plan is not None and prog.lean and not prog.options.hardware_strict:
            entry = prog.sim.planned.get(plan[1])
            made = entry[1] if entry is not None and BUILD_WHEN_CLAIMED else None
            if made is not None and made[4] is not None:
                # what `defer_planned` finds for this signature: the planned instruction, clean, deferred unbuilt
                dt = src.storage.dtype
                result = planned_result(prog, plan[0], dt, frame)    # (`alloc`'s tile)
                out = prog.defer(None, result, api, frame, True, entry[0], made, (result, src))
                if STATEMENT_PLANS and frame is not None and lkey[0] is not None:
                    remember_statement(prog, frame, lkey, entry[0], made, plan[0], dt, SBUF)
                return out
    result = alloc(src.shape, dtype if dtype is not None else src.storage.dtype, SBUF, frame=frame, prog=prog)
    if mask is not None:
        return prog.defer(DmaCopy(dst=result, src=src, mask=mask), result, api, frame)
    # the tile's shape is src's
    dt = result.storage.dtype.name
    out = defer_planned(prog, _LOAD, (result, src), result, api, frame, (src,), (dt,))
    if dtype is None and LOAD_PLANS and src._sig is not None and prog.lean and not prog.options.hardware_strict:
        if len(_LOAD_PLANS) >= _PLANS_MAX:
            _LOAD_PLANS.clear()
        # `defer_planned`'s memo key (`_defer_planned`), whose entry a later load of this signature takes
        _LOAD_PLANS[(src._sig, api)] = (normalize_shape(src.shape), ((DmaCopy, api, (src._sig,), (dt,)), True))
    return out


_LOAD = (DmaCopy, ("dst", "src"), {"mask": None})       # `load`'s instruction (`_built`) of (tile, src)
# `load(src)` without `mask=` or `dtype=` on the lean path (no hardware-strict rules) is a function of `src`'s view
# signature and the API name: its result tile's shape (`normalize_shape`'s) and `defer_planned`'s memo key, kept
# per such key (`_LOAD_PLANS`); a load that finds its key's memo entry with a template defers the instruction
# unbuilt, as `_defer_planned` does then, without building the key again (a loop's loads repeat a few
# signatures). False: every load takes `defer_planned` (the plain path, which tests compare against).
LOAD_PLANS = True
_LOAD_PLANS: dict = {}      # (src view signature, api) -> (result shape, `_defer_planned`'s memo key)


def _as_column(t: TensorView) -> TensorView:
    """A 0-D or 1-D view as an [n, 1] view of the same elements (so a `mask=` over the column applies)."""
    nd = len(t.amap)
    first = [t.amap[d][0] if t.ndim else 0 for d in range(nd)]
    amap = tuple((first[d], 0) for d in range(nd))
    return t._derive((t.size, 1), amap, t.consts, t.dynamic)


def issue(instr, api: str, *, operator_names: bool = False) -> None:
    """Issue an instruction a facade built for the API `api`, after the front doors' operator check
    (`check_operator_args`; `operator_names`: the legacy generation also takes operators by name)."""
    prog = current(api)
    check_operator_args(instr, prog.options.hardware_strict, names=operator_names)
    prog.issue(instr, api)


def fill(t, value, api: str):
    """Write `value` into every element of `t`: a Memset on chip, a DMA store into HBM; returns `t`. A value
    of None (a tensor created without an initial value) writes nothing."""
    if value is None:
        return t
    if t.is_on_chip:
        current(api).issue(Memset(dst=t, value=value), api)
    else:
        store(t, value, api=api)
    return t


def store(dst, value, *, mask=None, api: str = "nl.store", kernel_frame=None) -> None:
    """On-chip value (or scalar) -> HBM (DMA). A PSUM value is first copied to SBUF; a smaller value is
    broadcast into the destination. `kernel_frame`: the kernel frame, when the caller knows it
    (`frames.as_kernel_frame`): the DMA is issued there (`Program.issue`), else the stack is walked."""
    prog = current(api)
    if not is_tensor(dst) or dst.kind is not MemoryKind.HBM:
        where = dst.kind.name.lower() if is_tensor(dst) else type(dst).__name__
        raise MemoryKindError(f"Expected operand 'dst' of '{api}' to be in address space 'hbm', but got a "
                              f"tile in '{where}' instead.", instruction=api, code="err_unsupported_memory")
    if is_scalar(value):
        rows = dst.shape[0] if dst.ndim >= 2 else 1
        tile = alloc((rows, max(dst.size // rows, 1)), dst.dtype, SBUF)
        prog.issue(Memset(dst=tile, value=value), api)
        value = tile
    if not is_tensor(value):
        raise DtypeError(f"{api} value must be a tile or a scalar", got=type(value).__name__, instruction=api)
    if value.kind is MemoryKind.PSUM:
        value = to_sbuf(value, api)
    if value.size != dst.size:
        expect_broadcastable(value.shape, dst.shape, api)
        value = materialize_broadcast(value, dst.shape, api)
    prog.issue(DmaCopy(dst=dst, src=value, mask=mask), api, False, kernel_frame)


def expect_broadcastable(src_shape, dst_shape, api: str) -> None:
    if src_shape == dst_shape:
        return
    try:
        ok = tuple(np.broadcast_shapes(src_shape, dst_shape)) == tuple(dst_shape)
    except ValueError:
        ok = False
    if not ok:
        raise ShapeError(f"{api}: the destination is smaller than the value assigned to it",
                         expected=dst_shape, got=src_shape, code="err_store_dst_shape_smaller_than_other_shape",
                         instruction=api)


def copy(x, *, dtype=None, mask=None, engine=None, api: str = "nl.copy", kernel_frame=None):
    """A new SBUF tile holding x (tensor_copy; bit-exact when the dtype is kept). Without `mask=` and
    `engine=` a planned instruction (`defer_planned`: a function of x's signature and the result dtype).
    `kernel_frame`: the kernel frame `user_frame()` would find, when the caller knows it, else None."""
    prog = active() or current(api)     # current() raises outside a kernel
    require_tile(x, "x", api)
    frame = kernel_frame or user_frame()
    if mask is None and engine is None and prog.lean:
        result = planned_result(prog, normalize_shape(x.shape), x.dtype if dtype is None else dtype_of(dtype),
                                 frame)
        return defer_planned(prog, _COPY, (result, x), result, api, frame, (x,), (result.storage.dtype.name,))
    result = alloc(x.shape, dtype if dtype is not None else x.dtype, SBUF, frame=frame, prog=prog)
    return prog.defer(TensorCopy(dst=result, src=x, engine=engine, mask=mask), result, api, frame)


_COPY = (TensorCopy, ("dst", "src"), {"engine": None, "mask": None})     # `copy`'s instruction of (tile, x)


# -------------------------------------------------------------------------------------- Tensor Engine

def transpose(x, *, dtype=None, mask=None, api: str = "nl.transpose"):
    """[P, F] -> [F, P] on the Tensor Engine (result in PSUM), or the Vector Engine for <= 32 x 32 tiles
    already in PSUM."""
    prog = current(api)
    require_tile(x, "x", api)
    if x.ndim > 2:
        raise ShapeError(f"{api} takes a 2-D tile", got=x.shape, code="err_exceed_max_supported_dimension",
                         instruction=api)
    pmax = prog.hw.tiles.pmax          # both dims pass through the PE array's partitions
    for d, n in enumerate(x.shape):
        if n > pmax:
            raise ShapeError(f"size of dimension {d} ({n}) exceed architecture limitation of {pmax}", got=x.shape,
                             code="err_size_of_dimension_exceed_arch_limit", instruction=api)
    x = to_sbuf(x, api)
    shape, result_dtype = NcTranspose.result(data=x)
    frame = user_frame()
    result = alloc(shape, dtype if dtype is not None else result_dtype, PSUM, frame=frame, prog=prog)
    if mask is None:                    # a planned instruction: a function of x's signature and the result dtype
        return defer_planned(prog, _TRANSPOSE, (result, x), result, api, frame, (x,), (result.storage.dtype.name,))
    return prog.defer(NcTranspose(dst=result, data=x, engine=Engine.TENSOR, mask=mask), result, api, frame)


_TRANSPOSE = (NcTranspose, ("dst", "data"), {"engine": Engine.TENSOR, "mask": None})     # `transpose`'s (`_built`)


def matmul(x, y, *, transpose_x=False, mask=None, api: str = "nl.matmul", limits: Limits | None = None):
    """x @ y (or x.T @ y with transpose_x) on the Tensor Engine into a new fp32 PSUM tile.

    Without transpose_x, x [M, K] is first transposed on the Tensor Engine (and copied back to SBUF, since
    matmul operands come from SBUF), as NKI lowers it. Hardware-strict mode rejects that form for the new
    generation (`limits` other than Limits.LEGACY), where it fails to compile (NKI 0.3-0.6 known issue).
    """
    prog = current(api)
    for role, t in (("x", x), ("y", y)):
        require_tile(t, role, api)
    if not transpose_x and prog.options.hardware_strict and limits is not Limits.LEGACY:
        raise HardwareUnsupportedError(f"{api} needs transpose_x=True on hardware", instruction=api,
                                       hint="pass x already transposed ([K, M]) with transpose_x=True")
    if not transpose_x:
        xt = transpose(x, api=api)
        stationary = to_sbuf(xt, api)
    else:
        stationary = to_sbuf(x, api)
    moving = to_sbuf(y, api)
    stationary, moving = _paired_for_pe(stationary, moving, api)
    (M, N), result_dtype = NcMatmul.result(stationary=stationary, moving=moving)
    # nl.matmul keeps the moving operand's free dims (the instruction's rule flattens them to N)
    frame = user_frame()
    result = alloc((M, N) if moving.ndim == 2 else (M,) + moving.shape[1:], result_dtype, PSUM, frame=frame,
                   prog=prog)
    if mask is None:
        # a planned instruction (`defer_planned`): a function of its operands' signatures (the result tile's
        # shape and dtype are), retargeted as checked into an accumulator it was clean with (`accumulate`)
        return defer_planned(prog, _MATMUL, (result, stationary, moving), result, api, frame, (stationary, moving))
    return prog.defer(NcMatmul(dst=result, stationary=stationary, moving=moving, accumulate=False, mask=mask),
                      result, api, frame)


_MATMUL = (NcMatmul, ("dst", "stationary", "moving"), {"accumulate": False, "mask": None})   # `matmul`'s (`_built`)


_FP32_LIKE = ("float32", "tfloat32")


def _paired_for_pe(stationary: TensorView, moving: TensorView, api: str) -> tuple[TensorView, TensorView]:
    """`nl.matmul` operands the Tensor Engine can pair: nc_matmul takes fp32 / tf32 only together with fp32 /
    tf32, while `nl.matmul` documents no dtype rule and NKI's own tutorial multiplies fp32 softmax scores by
    bf16 values with it (nki-samples' attention_fwd_performance v1, benchmarked in bf16). So the other operand
    is first copied to fp32 in SBUF (a Vector Engine copy the cost model sees). [GAP] which side NKI's compiler
    converts is not published; widening is exact, so the product is the one of the values the kernel holds."""
    s_wide, m_wide = stationary.dtype.name in _FP32_LIKE, moving.dtype.name in _FP32_LIKE
    if s_wide == m_wide:
        return stationary, moving

    def widened(t):
        out = alloc(t.shape, float32, SBUF)
        current(api).issue(TensorCopy(dst=out, src=t), api)
        if t.mask is not None:          # an operand mask (`x[i_f < 64]`) still restricts the copy
            out = out._derive(out.shape, out.amap, out.consts, (), t.mask)
        return out
    return (stationary, widened(moving)) if s_wide else (widened(stationary), moving)


# ------------------------------------------------------------------------------------------ assignment

def assign(dst: TensorView, value, *, api: str = "tensor assignment") -> None:
    """`dst[...] = value`: retarget a just-computed result to write `dst`, else copy (or fill)."""
    prog = active() or current(api)     # current() raises outside a kernel
    pending = prog.pending
    if (pending is not None and pending.result is value and pending.use == "temporary" and prog.lean
            and value.storage is not dst.storage and not dst.dynamic and tuple.__eq__(value.shape, dst.shape)):
        # the lean path of `buf[...] = nl.exp(x)`: what the plain path below does for a temporary of this shape
        prog.pending = None
        dsts = pending.plan             # a planned instruction: the destinations it was clean with (_defer_planned)
        if dsts is not None and (dst._sig or view_signature(dst)) in dsts:
            # the claimed instruction (nothing else holds it; a planned one holds its result tile in `dst` only),
            # as checked and deferred: `Program.execute`, inline
            instr = pending._instr
            if instr is None:           # not built yet (BUILD_WHEN_CLAIMED): built now, writing `dst`
                made = pending.made
                instr = made[4](made[1], dst, pending.values)
            else:
                instr = instr.moved_dst(dst)
            location, api = pending.location, pending.api
            prog._check_claimed(instr, location, api, _DST, pending.touch)           # (positional: hot calls)
            prog._run_and_emit(instr, location, api, True)
            prog.spare(pending.result, True, True)      # a planned one's fresh root tile (Program.spare)
            return
        changes = _retarget_changes(pending, dst)
        retargeted = _retargeted(prog, pending, changes, dst)
        if retargeted is not None:
            prog.execute(retargeted, pending.location, pending.api, checked=True, moved=changes)
            if dsts is not None and retargeted.signature() in prog.sim.clean:
                dsts[dst._sig or view_signature(dst)] = None
            prog.spare(pending.result)
            return
        prog.execute(pending.instr, pending.location, pending.api, deferred=True)
        copy_into(dst, value, api)
        return
    if is_tensor(value) and value.same_view(dst):
        return
    if is_scalar(value):
        if dst.is_on_chip:
            prog.issue(Memset(dst=dst, value=value), api)
        else:
            store(dst, value, api=api)
        return
    if not is_tensor(value):
        raise DtypeError("only tiles and scalars can be assigned into a tensor", got=type(value).__name__,
                         instruction=api)
    expect_broadcastable(value.shape, dst.shape, api)
    if dst.dynamic or value.dynamic:
        raise KernelError("a tensor assignment cannot copy through run-time (indirect) indices", instruction=api,
                          code="err_copy_dynamic_indirect_indices_not_natively_supported",
                          hint="use nl.load(src[idx_tile, i_f]) / nl.store(dst[idx_tile, i_f], value)")
    deferred = prog.take_pending(value)
    if deferred is not None:
        changes = _retarget_changes(deferred, dst)
        retargeted = _retargeted(prog, deferred, changes, dst) if value.shape == dst.shape else None
        if retargeted is not None and prog.retarget(deferred, changes, retargeted):
            return
        prog.execute(deferred.instr, deferred.location, deferred.api, deferred=True)
    copy_into(dst, value, api)


_DST = frozenset(("dst",))       # the fields a retarget moving only `dst` changes (`Program._check_clean`'s `moved`)


def _retarget_changes(deferred, dst) -> dict:
    """Every operand field holding the deferred result tile moves to `dst` (its `dst`, and the accumulator
    input of a self-referencing op such as `nl.loop_reduce`)."""
    fields, result = deferred.instr.__dict__, deferred.result
    return {name: dst for name, _ in deferred.instr._operand_fields if fields[name] is result}


def _retargeted(prog, deferred, changes, dst):
    """The deferred instruction writing the destination instead, checked; None if that fails its check.

    On the lean path a retarget whose check failed is remembered (`Simulator.unretargetable`) and not
    checked again: the check reads only what the signature holds (instructions/base.py), so it would fail
    again, and its error, built with the kernel line, is dropped here anyway (`sbuf_tile[...] =
    nl.transpose(x)`: the Tensor Engine writes only PSUM, so every such statement transposes, then copies)."""
    mark = None
    if prog.lean:
        # the retargeted signature is a function of the deferred one's, the fields moved and dst's (each moved
        # field holds dst, without run-time indices): a failure is remembered by these, found without `replace`
        base, kd = deferred.instr.signature(), dst._sig or view_signature(dst)     # (a planned one's: made here)
        if base is not None and kd is not None:
            mark = (base, tuple(changes), kd)
            if mark in prog.sim.unretargetable:
                return None
    instr = deferred.instr.replace(**changes)
    if prog.lean and (instr.mask is None or type(instr.mask) is bool) and instr.signature() in prog.sim.clean:
        return instr                    # its check passed for this signature before (Program._check)
    try:
        prog.check_instruction(instr)
    except OpenNKIError:
        if mark is not None:
            prog.sim.unretargetable.add(mark)
        return None
    return instr


def copy_into(dst: TensorView, value: TensorView, api: str) -> None:
    prog = current(api)
    if dst.kind is MemoryKind.HBM:
        store(dst, value, api=api)
        return
    if value.kind is MemoryKind.HBM:
        src = value if value.shape == dst.shape else broadcast_view(value, dst.shape)
        prog.issue(DmaCopy(dst=dst, src=src), api)
        return
    src = materialize_broadcast(value, dst.shape, api)
    if prog.lean and not prog.options.hardware_strict:
        # a planned instruction (`_issue_planned`): its signature is a function of the two views' signatures
        kd, ks = dst._sig or view_signature(dst), src._sig or view_signature(src)
        if kd is not None and ks is not None:
            _issue_planned(prog, (copy_into, kd, ks, api), True, _COPY, (dst, src), api)
            return
    prog.issue(TensorCopy(dst=dst, src=src), api)


def accumulate(dst: TensorView, value, op: str, *, api: str, caller=None) -> None:
    """`dst op= value` in place: a pending matmul accumulates straight into a PSUM destination (one matmul
    accumulation group); anything else is an element-wise op reading and writing dst.

    A matmul `+=` into PSUM that nothing wrote since its tensor was declared starts the accumulation group
    (it overwrites, `accumulate=False`), as the legacy compiler does for `psum_tile += nisa.nc_matmul(...)`:
    the direct-allocation kernels cannot zero-initialise their PSUM tiles and rely on it (for a zero-filled
    tile both readings agree). `caller`: the frame of the `dst op= value` statement (`__iadd__`'s caller), if
    known: the element-wise op hands it to `binary` when it is a kernel file's (`frames.as_kernel_frame`); looked
    at only there, as the `+=` of a matmul into PSUM (most of them) has the kernel line of its deferred matmul."""
    prog = active() or current(api)     # current() raises outside a kernel
    if op == "add" and dst.storage.kind is _PSUM and isinstance(value, TensorView):
        deferred = prog.take_pending(value)
        if deferred is not None:
            instr = deferred._instr
            made = deferred.made if instr is None else None     # not built yet (`core.BUILD_WHEN_CLAIMED`)
            if (issubclass(made[2], NcMatmul) if instr is None else isinstance(instr, NcMatmul)) \
                    and tuple.__eq__(value.shape, dst.shape):     # Shapes
                changes = {"dst": dst, "accumulate": not Machine.is_unwritten(dst)}
                dsts = deferred.plan if deferred.use == "temporary" else None
                mark = None
                if dsts is not None and not dst.dynamic:
                    # a planned matmul (legacy nc_matmul): the retargeted one is a function of its plan's key,
                    # dst's signature and the accumulate flag, so once that was clean it is issued as checked,
                    # as Program.retarget issues a temporary's instruction otherwise
                    mark = (dst._sig or view_signature(dst), changes["accumulate"])
                    if mark in dsts:        # the claimed instruction: nothing else holds it (`assign`)
                        params = dsts[mark]
                        # with the params kept for it; one not built yet is built writing `dst` (`assign`)
                        instr = instr.moved_to(changes, params) if made is None else \
                            made[4](made[1], dst, deferred.values).moved_to(changes, params, True)
                        if params is None:
                            # none kept yet (the first was not built from the template): this one's, which every
                            # later one built from the template has (the template's with `changes` set)
                            dsts[mark] = instr.__dict__.get("_params")
                        # as checked and deferred, moving `changes` (a planned one: no `mask=`, or a bool one):
                        # `Program.execute`, inline, as `assign` issues its claimed instruction
                        location, api = deferred.location, deferred.api
                        prog._check_claimed(instr, location, api, changes, deferred.touch)     # (positional: hot)
                        prog._run_and_emit(instr, location, api, True)
                        prog.spare(deferred.result, True, True)    # a planned one's fresh root tile (`assign`)
                        return
                instr = deferred.instr
                if not prog.retarget(deferred, changes):
                    # the product is read again: it is computed where it is, and a second matmul accumulates
                    # (adding one PSUM tile into another is no engine's operation)
                    prog.execute(instr, deferred.location, deferred.api, deferred=True)
                    prog.execute(instr.replace(**changes), deferred.location, deferred.api)
                elif mark is not None:
                    retargeted = instr.replace(**changes)
                    if retargeted.signature() in prog.sim.clean:
                        dsts[mark] = retargeted.__dict__.get("_params")    # its parameters, for the next ones
                return
            prog.execute(deferred.instr, deferred.location, deferred.api, deferred=True)
    if is_tensor(value) and value.shape != dst.shape:
        expect_broadcastable(value.shape, dst.shape, api)
    binary(op, dst, value, api, kernel_frame=as_kernel_frame(caller) if caller is not None else None, out=dst)


__all__ = ["alloc", "defer_planned", "binary", "unary", "unary_alu", "reduce", "mean", "load", "store", "copy",
           "transpose", "matmul", "assign", "accumulate", "region_of", "is_tensor", "is_scalar", "DataType"]
