"""ISA layer: the instruction base class, the registry, and the helpers instruction checks share.

Imports machine, events and errors. Each instruction is a frozen dataclass defined once, in the module of
its engine family, with:
  * its fields: tensor operands declared with `operand(...)` (role: read, write or accumulate) and plain
    parameters;
  * `check(ctx)`: every documented rule, from shapes, dtypes and buffers only (never data), so a kernel can
    run shape-only. A check reads `ctx.hw` and `ctx.options`, the plain fields, and of each tensor operand
    only its memory region, dtype, shape, storage shape and whether it has an operand mask or run-time
    indices: what `signature()` holds, so a check that passed once passes for every instruction of the same
    signature and the simulator runs it once per signature (a check reading more must extend `signature`);
  * `run(m)`: its semantics on the `Machine`, reading and writing only through `m.read*` / `m.write`.
The event an instruction emits is derived from its operand fields (`operands()`) and its plain fields
(`params()`), so nothing about an instruction is written twice. Its cost lives with the cost model, keyed by
`opcode`.

Both API generations construct these classes: the new generation with its `dst=` signatures, the legacy one
through functional wrappers that allocate the result first.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import itertools
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from opennki.errors import DtypeError, HardwareUnsupportedError, KernelError, MemoryKindError, ShapeError, expect
from opennki.events import AccessKind, Engine, MemoryKind
from opennki.hw import first_with
from opennki.instructions.enums import chosen_engine
from opennki.instructions.ops import SIMULATION_ONLY_OPS, ActivationFn, AluOp, op_name
from opennki.machine.dtypes import SCALAR_TYPES, DataType
from opennki.machine.index import Predicate, mask_array
from opennki.machine.machine import Machine
from opennki.machine.tensor import TensorView, forget_layouts, holds_view

REGISTRY: dict[str, type["Instruction"]] = {}
# instructions made from a plan's template share a run cell (`Instruction._usual`); False: none has one, every
# run takes its class's general steps (the plain path, which tests/sim/test_run_cells.py compares against)
USUAL_RUN_CELLS = True


def instruction(cls):
    """Class decorator: make `cls` a frozen keyword-only dataclass and register it under its opcode."""
    cls = dataclass(frozen=True, kw_only=True, eq=False)(cls)
    cls._operand_field_list = tuple(f for f in dataclasses.fields(cls) if "access" in f.metadata)
    cls._operand_fields = tuple((f.name, f.metadata["access"]) for f in cls._operand_field_list)
    cls._param_fields = tuple(f.name for f in dataclasses.fields(cls)
                              if "access" not in f.metadata and f.name not in ("mask", "name"))
    cls._param_names = frozenset(cls._param_fields)
    cls._field_names = frozenset(f.name for f in dataclasses.fields(cls))
    cls._operand_names = frozenset(f.name for f in cls._operand_field_list)
    cls._key_fields = tuple(f.name for f in cls._operand_field_list) + cls._param_fields
    cls._key_places = {name: 2 + i for i, name in enumerate(cls._key_fields)}    # in `signature()`
    cls._operand_rules = tuple((f.name, f.metadata["access"] is not AccessKind.READ, bool(f.metadata["optional"]),
                                bool(f.metadata["immediate"]), f.type in ("tuple", tuple))
                               for f in cls._operand_field_list)      # what check_operand_types reads
    # its `executor` when that is its class's alone (the base rule, without `chooses_engine`), else None: an
    # event reads it for every instruction, without the property call (`Program._event`)
    cls._engine = None if cls.chooses_engine or cls.executor is not Instruction.executor else cls.default_engine
    cls.__init__ = _dict_init(cls)
    if cls.opcode in REGISTRY:
        raise RuntimeError(f"instruction {cls.opcode} defined twice")
    REGISTRY[cls.opcode] = cls
    return cls


def _dict_init(cls):
    """The keyword-only __init__ of instruction class `cls`, filling the instance dict directly: the frozen
    dataclass __init__ sets every field through `object.__setattr__`, and an instruction is built for every
    operation a kernel issues. Same fields, defaults and errors for a missing or unknown field."""
    fields = dataclasses.fields(cls)
    if any(f.default_factory is not dataclasses.MISSING or not f.init for f in fields) or \
            hasattr(cls, "__post_init__"):
        return cls.__init__                       # keep the generated one (none of today's instructions)
    names = frozenset(f.name for f in fields)
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    valid: set = set()      # keyword tuples (in call order) found complete and known: a call site passes one

    def __init__(self, **values):
        order = tuple(values)
        if order not in valid:
            keys = values.keys()
            if not (required <= keys and keys <= names):
                missing, unknown = sorted(required - keys), sorted(keys - names)
                raise TypeError(f"{cls.__name__}() " + (f"missing required field(s) {missing}" if missing else
                                                        f"got unexpected field(s) {unknown}"))
            if len(valid) < 1024:
                valid.add(order)
        state = self.__dict__
        state.update(defaults)
        state.update(values)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def operand(access: AccessKind = AccessKind.READ, *, optional: bool = False, immediate: bool | None = None):
    """Declare a tensor operand field. `optional` operands default to None. `immediate`: the field may also
    be a scalar (a per-partition [P, 1] column or an immediate); optional read operands may by default (the
    instruction's own check says which forms it takes), nothing else may."""
    if immediate is None:
        immediate = optional and access is AccessKind.READ
    meta = {"access": access, "optional": optional, "immediate": immediate}
    if optional:
        return field(default=None, metadata=meta)
    return field(metadata=meta)


READ, WRITE, ACCUMULATE = AccessKind.READ, AccessKind.WRITE, AccessKind.ACCUMULATE


@dataclass(frozen=True, kw_only=True, eq=False)
class Instruction:
    """Base of every instruction. Subclasses set `opcode` and `default_engine` and add fields.

    Common fields:
        mask: legacy `mask=` predicate over the output (None: everything active).
        name: the new generation's `name=` label for profiling and scheduling.
    """

    opcode: ClassVar[str] = ""
    default_engine: ClassVar[Engine] = Engine.UNKNOWN
    chooses_engine: ClassVar[bool] = False   # its `engine` field names the engine; None means default_engine
    result_like: ClassVar[str] = ""          # the read operand whose shape and dtype its result has (`result`)
    indirect_fields: ClassVar[tuple] = ()    # operand fields that take a tensor-indirection view (indirection.py)
    # its check passes only if every operand it writes is in SBUF or PSUM (Observer.hbm_writes_only)
    writes_on_chip_only: ClassVar[bool] = False
    # its `run` may leave its data step waiting (`Machine.defer`), and catches up itself before any other
    # read or write; every other instruction's run is preceded by `Machine.catch_up` (`Program._run_and_emit`)
    defers_data: ClassVar[bool] = False

    mask: object = None
    name: object = None

    # -- derived views of the fields -------------------------------------------------------------------
    _operand_field_list: ClassVar[tuple] = ()
    _operand_fields: ClassVar[tuple] = ()
    _param_fields: ClassVar[tuple] = ()
    _param_names: ClassVar[frozenset] = frozenset()
    _field_names: ClassVar[frozenset] = frozenset()
    _operand_names: ClassVar[frozenset] = frozenset()
    _key_fields: ClassVar[tuple] = ()
    _key_places: ClassVar[dict] = {}
    _operand_rules: ClassVar[tuple] = ()
    # `operands()` of an instance once made, in its instance dict (not a field): `instr._operands or
    # instr.operands()` in the issue path's per-instruction loops reads it without a call
    _operands = None
    # the fields a class's `run` keys its run cell on: an instruction made from a plan's template (`maker`) whose
    # `names` are among them shares the template's cell (`_usual`), a one-element list holding what the last usual
    # run of one of them computed with (the class's `run` says what). Every other field of such an instruction is
    # the template's, and retargets move operand fields only, so `run` tests these fields alone. (): no cells
    usual_cells: ClassVar[tuple] = ()
    _usual = None

    @classmethod
    def api_name(cls) -> str:
        """The public function of this instruction in both generations' `nisa`: `nisa.<opcode>`, the name
        errors and events give (a facade function issuing an instruction of another name passes its own)."""
        return f"nisa.{cls.opcode}"

    @classmethod
    def operand_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The dataclass fields declared with `operand(...)` (tensor operands), in declaration order."""
        return cls._operand_field_list

    def operands(self) -> tuple:
        """(role, view, access) for every tensor operand present, including run-time index tiles."""
        cached = self._operands         # the instance's cache, else the class's None (one attribute read)
        if cached is not None:
            return cached
        fields = self.__dict__
        out = []
        for fname, access in self._operand_fields:
            value = fields[fname]
            if isinstance(value, TensorView):
                out.append((fname, value, access))
                if value.dynamic:
                    for term in value.dynamic:
                        out.append((f"index:{fname}", term.index, AccessKind.READ))
            elif isinstance(value, (tuple, list)):
                for i, v in enumerate(value):
                    if isinstance(v, TensorView):
                        out.append((f"{fname}[{i}]", v, access))
        out = fields["_operands"] = tuple(out)      # a cache in the instance dict (the fields are frozen)
        return out

    def operand_pattern(self) -> tuple | None:
        """The (field, access) of each entry of `operands()` when every entry is a field holding a view without
        run-time indices, else None: what `operands()` of an instruction of this class gives whenever the same
        fields hold views (and the others scalars or None), which a front door's plan fixes (core.defer_planned)."""
        pattern = []
        names = self._operand_names
        for role, view, access in self.operands():
            if role not in names:
                return None             # a run-time index tile, or a view in a tuple field
            pattern.append((role, access))
        return tuple(pattern)

    def maker(self, names: tuple):
        """(make, template, class, operands, claim): `make(template, values)` builds the instruction of this
        class whose fields `names` hold `values` and whose other fields are this one's, with the operand cache
        `operands()` would give it (and its `params()`, which its events copy: `_params`, when no field of `names`
        is a parameter), for values that are what this one's fields `names` hold (views without run-time indices
        where it has them, scalars where it has scalars: a front door's plan fixes that). None when an operand of
        this one is not one of the fields `names` holding a view (`operand_pattern`): the template would hold a
        view (and keep its storage alive), or the pattern does not say the operands. Building from the template
        fills the instance dict in one copy, instead of the keyword call and its checks (a plan builds one for
        every instruction a kernel's loop issues from it)."""
        pattern = self.operand_pattern()
        if pattern is None or any(role not in names for role, _ in pattern) or any(
                holds_view(v) for k, v in self.__dict__.items() if k not in names and not k.startswith("_")):
            return None
        template = {k: (None if k in names else v) for k, v in self.__dict__.items() if not k.startswith("_")}
        if self._param_names.isdisjoint(names):
            template["_params"] = self.params()     # every one built from it has these (`event_params`)
        if USUAL_RUN_CELLS and self.usual_cells and set(names) <= set(self.usual_cells):
            template["_usual"] = [None]             # its run cell (`usual_cells`)
        # `claim`: with `dst` first, the function building it with another `dst` (`_maker`), else None; `operands`:
        # then its operands but `dst` as `operands()` gives them, each view's place among the values for the view,
        # (role, place, access) (`Program.defer` reads them before it is built, and knows its result tile in `dst`)
        claim = _maker(type(self), names, pattern, True) if names[0] == "dst" else None
        return (_maker(type(self), names, pattern), template, type(self),
                tuple((r, names.index(r), a) for r, a in pattern if r != "dst") if claim is not None else None, claim)

    def replace(self, **changes) -> "Instruction":
        """A copy with some fields replaced, as `dataclasses.replace` makes it. The fields are values the
        generated __init__ has already set, so they are taken over as they are instead of running it again
        (retargeting a deferred result does this for most legacy instructions); the signature cache is dropped,
        and so is the operand cache if an operand field changes; kept parameters (`_params`, from a template:
        `maker`) are patched with the new values."""
        if hasattr(self, "__post_init__"):       # a class that derives state on construction: the slow way
            return dataclasses.replace(self, **changes)
        unknown = changes.keys() - self._field_names
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        new = object.__new__(type(self))
        state = new.__dict__
        state.update(self.__dict__)
        if "_operands" in state and not self._operand_names.isdisjoint(changes):
            state["_operands"] = _patched_operands(self, changes)
            if state["_operands"] is None:
                del state["_operands"]
        signature = self._patched_signature(changes)
        state.pop("_signature", None)
        if "_params" in state and not self._param_names.isdisjoint(changes):
            params = state["_params"] = dict(state["_params"])      # the copy's own, with the new values
            for name, value in changes.items():
                if name in self._param_names:
                    params[name] = value if type(value) in _PLAIN_TYPES else plain(value)
        state.update(changes)
        if signature is not None:
            state["_signature"] = signature
        return new

    def moved_to(self, changes: dict, params: dict | None = None, built: bool = False) -> "Instruction":
        """`self.replace(**changes)`, made by changing `self`, for `changes` that move `dst` to a destination
        without run-time indices and may set parameter fields (a matmul's `accumulate`): only for an instruction
        that nothing else holds (the lean path's deferred temporary, which only its `Deferred` record held until
        it was claimed). The operand cache keeps its order (the destination's entry replaced), kept parameters
        (`_params`) get the new values, or are `params` (what `replace` gave an instruction of the same template
        and changes, shared: never changed); the signature cache is dropped, as `replace` would recompute it.
        `built`: it was just built from its template with `changes["dst"]` in `dst` (`maker`'s `claim`), which
        is then not moved again."""
        state = self.__dict__
        if params is not None:
            state["_params"] = params
        elif len(changes) > 1 and "_params" in state:
            params = state["_params"] = dict(state["_params"])
            for name, value in changes.items():
                if name != "dst":
                    params[name] = value if type(value) in _PLAIN_TYPES else plain(value)
        for name, value in changes.items():
            if name != "dst":
                state[name] = value
        return self if built else self.moved_dst(changes["dst"])

    def moved_dst(self, dst) -> "Instruction":
        """`moved_to({"dst": dst})`: only the destination moves (`buf[...] = nl.add(x, 1.0)`), and the rest of
        every move: the signature cache dropped, the operand cache's destination entry replaced."""
        state = self.__dict__
        old = state["dst"]
        state["dst"] = dst
        state.pop("_signature", None)
        operands = state.get("_operands")
        if operands is not None:
            first = operands[0]
            if first[1] is old and first[0] == "dst" and not old.dynamic:
                state["_operands"] = (("dst", dst, first[2]), operands[1]) if len(operands) == 2 else \
                    (("dst", dst, first[2]),) + operands[1:]
            else:
                del state["_operands"]
        return self

    def runnable(self) -> "Instruction":
        """The instruction to run: itself, or for a constant `mask=True` (every element active; legacy kernels
        compute `mask=` as a comparison of loop indices, `i * 128 >= j * 512`) a copy without the mask, which
        writes the same values through the unmasked paths (in-place accumulation, plain writes)."""
        mask = self.mask
        if mask is True or (type(mask) is np.bool_ and mask):
            if hasattr(self, "__post_init__"):
                return self.replace(mask=None)
            # what `replace(mask=None)` makes, without its general steps: the mask is no operand or parameter,
            # and the copy is only run, never checked (its signature is dropped)
            new = object.__new__(type(self))
            state = new.__dict__
            state.update(self.__dict__)
            state["mask"] = None
            state.pop("_signature", None)
            return new
        return self

    def signature(self):
        """A hashable key of everything `check` reads (module docstring), or None when the instruction has a
        field the key cannot hold faithfully (run-time indices, a register, an unknown object): then it is
        checked every time. Kept on the instruction (instructions are immutable; `replace` drops it); the
        common field types take one set look-up."""
        fields = self.__dict__
        if "_signature" in fields:
            return fields["_signature"]
        key = [type(self), self.mask is None]
        for fname in self._key_fields:
            value = fields[fname]
            kind = type(value)
            if kind in _PLAIN_TYPES:
                key.append((kind, value))
            elif kind in _VIEW_TYPES and not value.dynamic:
                key.append(value._sig or view_signature(value))     # what _param_key gives a view
            else:
                part = _param_key(value)
                if part is None:
                    key = None
                    break
                key.append(part)
        key = tuple(key) if key is not None else None
        object.__setattr__(self, "_signature", key)
        return key

    def _patched_signature(self, changes: dict):
        """The signature of `self.replace(**changes)` from `self`'s (one key part per field, at a fixed
        place), or None when `self` has none yet or a new value cannot be keyed."""
        key = self.__dict__.get("_signature")
        if key is None:
            return None
        key = list(key)
        places = self._key_places
        for fname, value in changes.items():
            if fname == "mask":
                key[1] = value is None
                continue
            place = places.get(fname)
            if place is None:
                continue                        # `name`: not in the key
            part = (type(value), value) if type(value) in _PLAIN_TYPES else _param_key(value)
            if part is None:
                return None
            key[place] = part
        return tuple(key)

    def params_key(self):
        """A hashable key of what `params` reads: the signature when it is made already (it holds every
        parameter field), else the parameter fields alone, without the operands' view signatures (the most of
        a signature's cost): their values and types when each type's equality is faithful to `plain`
        (`_SELF_KEYED`; an empty tuple too, equal only to itself, as `tile_position=()` is), else keyed as
        `signature` keys them; None when a field cannot be keyed."""
        fields = self.__dict__
        key = fields.get("_signature")
        if key is not None:
            return key
        values = tuple(map(fields.__getitem__, self._param_fields))
        kinds = tuple(map(type, values))
        if _SELF_KEYED.issuperset(kinds) or (_SELF_KEYED_OR_TUPLE.issuperset(kinds)
                                             and values.count(()) == kinds.count(tuple)):
            return (type(self), kinds, values)      # never a signature: its second part is a bool
        key = [type(self), "params"]
        for value in values:
            kind = type(value)
            if kind in _SELF_KEYED:
                key.append((kind, value))
            elif kind is tuple and _SELF_KEYED.issuperset(map(type, value)):
                key.append((kind, value, tuple(map(type, value))))      # (1,) and (1.0,) are equal
            else:
                part = _param_key(value)
                if part is None:
                    return None
                key.append(part)
        return tuple(key)

    def params(self) -> dict:
        """The non-tensor fields as plain values (ops by name, enums by name, scalars as numbers)."""
        fields = self.__dict__
        out = {}
        for name in self._param_fields:
            value = fields[name]
            out[name] = value if type(value) in _PLAIN_TYPES else plain(value)   # most are None/bool/number
        return out

    @property
    def executor(self) -> Engine:
        """The engine that executes this instruction: default_engine, or with `chooses_engine` the one its
        `engine` field names (None: default_engine). Instructions with another rule override this."""
        if self.chooses_engine and self.engine is not None:
            return chosen_engine(self.engine, self.default_engine)
        return self.default_engine

    @property
    def output(self) -> TensorView | None:
        for _, view, access in self.operands():
            if access is not AccessKind.READ:
                return view
        return None

    # -- the rules -------------------------------------------------------------------------------------
    @classmethod
    def result(cls, **inputs) -> tuple[tuple[int, ...], DataType]:
        """The shape and dtype of the tile this instruction writes, from its input operands and parameters
        passed under their field names (`BnStats.result(data=t)`): what a functional API (the legacy
        `nisa`) allocates for the result, an explicit `dtype=` replacing the dtype. The rule here: the shape
        and dtype of the operand `result_like` names; instructions whose result differs override it, and one
        with neither has no result rule (`has_result_rule`: its callers always give the destination)."""
        if not cls.result_like:
            raise TypeError(f"{cls.__name__} has no result rule: its callers give the destination")
        t = inputs.get(cls.result_like)
        if not isinstance(t, TensorView):
            raise TypeError(f"{cls.__name__}.result() needs the tensor {cls.result_like!r}, got {sorted(inputs)}")
        return tuple(t.shape), t.dtype

    @classmethod
    def has_result_rule(cls) -> bool:
        """Whether `result` says what this instruction writes (it names `result_like` or overrides it; a
        field called `result`, as `ScalarLoad` has, is not a rule)."""
        for klass in cls.__mro__:
            if "result" in vars(klass):
                rule = vars(klass)["result"]
                return isinstance(rule, classmethod) and (klass is not Instruction or bool(cls.result_like))
        return False

    def check_operands(self, fields=None) -> None:
        """What every operand field (or each of `fields`) holds, before `check` reads `.shape` / `.dtype`
        (check_operand_types)."""
        check_operand_types(self, fields)

    def check(self, ctx) -> None:
        raise NotImplementedError

    def run(self, m) -> None:
        raise NotImplementedError


_PLAIN_TYPES = frozenset((type(None), bool, int, float, str))
# Types whose values key themselves in `Instruction.params_key`: equal values of one of them have equal
# `plain` forms (plain values; enum members are equal only to themselves; dtypes and NumPy ufuncs are never
# mutated). Enum and DataType subclasses join as `_param_key` meets them.
_SELF_KEYED = set(_PLAIN_TYPES)
_SELF_KEYED_OR_TUPLE = _SELF_KEYED | {tuple}     # the same, and tuple (`params_key`: empty tuples key themselves)
_VIEW_TYPES: set = set()        # TensorView and its subclasses met so far (`_keyer_for`)


@functools.lru_cache(maxsize=256)
def _maker(cls, names: tuple, pattern: tuple, claim: bool = False):
    """The function `Instruction.maker` returns: its parameters are the template and the tuple of the fields
    `names` (unpacked as `v0, v1...`: a call with a tuple, not `*values`, which builds a new one); it copies the
    template into a new instance's dict, sets those fields and the operand cache (`pattern`'s entries, each one
    of those fields). Generated once per class, names and pattern. `claim`: the function taking the first
    field's value apart, `make(template, v0, values)`, which ignores `values[0]` (a deferral claimed by its
    destination: `Deferred.made`)."""
    params = [f"v{i}" for i in range(len(names))]
    slot = dict(zip(names, params))
    unpacked = ["_"] + params[1:] if claim else params
    lines = ["def make(_template, v0, _values):" if claim else "def make(_template, _values):",
             "    " + ", ".join(unpacked) + ("," if len(params) == 1 else "") + " = _values",
             "    _instr = _new(_cls)",
             "    _state = _instr.__dict__",
             "    _state.update(_template)"]
    lines += [f"    _state[{name!r}] = {v}" for name, v in slot.items()]
    entries = ", ".join(f"({role!r}, {slot[role]}, _access{i})" for i, (role, _) in enumerate(pattern))
    lines += [f"    _state['_operands'] = ({entries}{',' if len(pattern) == 1 else ''})", "    return _instr"]
    scope = {"_new": object.__new__, "_cls": cls}
    scope.update({f"_access{i}": access for i, (_, access) in enumerate(pattern)})
    exec(compile("\n".join(lines) + "\n", f"<{cls.__name__} maker>", "exec"), scope)
    return scope["make"]


def _patched_operands(instr, changes: dict):
    """`operands()` of `instr.replace(**changes)` from `instr`'s cached one, when every changed operand field
    held, and gets, a tensor without run-time indices (their entries are one each, in field order); None
    otherwise (the copy then builds its own)."""
    fields = instr.__dict__
    for name, value in changes.items():
        if name in instr._operand_names:
            old = fields[name]
            if not (isinstance(old, TensorView) and isinstance(value, TensorView)) or old.dynamic or value.dynamic:
                return None
    return tuple([(role, changes[role], access) if role in changes else (role, view, access)
                  for role, view, access in fields["_operands"]])


def view_signature(view: TensorView):
    """What an instruction check may read of a tensor operand (`Instruction.signature`), and whether it is a
    read-only kernel argument (which the operand rules read: `Simulator.clean`), as a number; None for a view
    with run-time indices. Cached on the (immutable) view. Equal contents get the same number while
    `_SIG_NUMBERS` holds it, and a number is never given to other contents: hashing a tuple hashes every
    part, and a memo key holding one (the plans, the checked signatures) was hashed for every instruction."""
    sig = view._sig
    if sig is None:
        if view.dynamic:
            return None
        st = view.storage
        contents = (st.region._value_, st.dtype.name, st.shape, view.coords, tuple(view.shape), view.mask is None,
                    (st.base or st).read_only)
        sig = _SIG_NUMBERS.get(contents)
        if sig is None:
            if len(_SIG_NUMBERS) >= _SIG_NUMBERS_LIMIT:
                _SIG_NUMBERS.clear()            # the contents get new numbers: memos keyed by the old ones miss
                forget_layouts()                # and new views of layouts that had one
            sig = _SIG_NUMBERS[contents] = next(_sig_numbers)
        view._sig = sig
        if view._layout is not None:
            view._layout.signed(sig)        # every view of its layout has these contents (machine.tensor._Layout)
    return sig


_SIG_NUMBERS: dict = {}             # a view signature's contents -> its number (view_signature)
_SIG_NUMBERS_LIMIT = 1 << 16
_sig_numbers = itertools.count(1)   # from 1: `view._sig or view_signature(view)` tests the number's truth


def _param_key(value):
    """A field that is not a plain value, as a key part: tensors by `view_signature`, enums and operators by
    name, tuples element by element; None for what cannot be keyed faithfully. The way to key a value is
    chosen once per type."""
    kind = type(value)
    keyer = _KEYERS.get(kind)
    if keyer is None:
        keyer = _KEYERS[kind] = _keyer_for(kind)
    return keyer(value)


def _tuple_key(value):
    parts = []
    for v in value:
        part = (type(v), v) if type(v) in _PLAIN_TYPES else _param_key(v)
        if part is None:
            return None
        parts.append(part)
    return (type(value), tuple(parts))


def _keyer_for(kind):
    if issubclass(kind, TensorView):
        _VIEW_TYPES.add(kind)
        return view_signature
    if issubclass(kind, enum.Enum):
        _SELF_KEYED.add(kind)
        _SELF_KEYED_OR_TUPLE.add(kind)
        return lambda v: (kind, v._name_)
    if issubclass(kind, (tuple, list)):
        return _tuple_key
    if issubclass(kind, np.generic):
        return lambda v: (kind, v.item())
    if issubclass(kind, (np.ufunc, DataType)):          # never mutated; the key holds them, so ids stay unique
        _SELF_KEYED.add(kind)
        _SELF_KEYED_OR_TUPLE.add(kind)
        return lambda v: v
    if kind in (AluOp, ActivationFn):                  # their NKI name is their `name` field
        return lambda v: (kind, v.name)
    if issubclass(kind, tuple(OPERATOR_TYPES)):
        return lambda v: (kind, v.nki_name)
    return lambda v: None


_KEYERS: dict = {}
# Operator objects, immutable and keyed in signatures by their NKI name (not every object with an `nki_name`
# is: a register's changes value). The language layer adds its operator tokens.
OPERATOR_TYPES: set[type] = {AluOp, ActivationFn}


def plain(value):
    """A value safe to keep in an event: no live tensors, ops and enums by name."""
    if type(value) in _PLAIN_TYPES or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, TensorView):
        return f"<tensor {value.name} {value.shape}>"
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return tuple(plain(v) for v in value)
    name = getattr(value, "nki_name", None) or getattr(value, "name", None) or getattr(value, "__name__", None)
    return str(name) if name is not None else repr(value)


# -- shared check helpers ---------------------------------------------------------------------------------

def describe(value) -> str:
    """A short account of a value a kernel passed, for error messages (never its repr at length)."""
    if isinstance(value, TensorView):
        return f"tensor {value.name} {list(value.shape)} {value.dtype} in {value.kind.name}"
    if value is None or isinstance(value, (bool, int, float, np.number)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40])
    return type(value).__name__


def check_operand_types(instr, fields=None) -> None:
    """The operand fields hold what they are declared to hold (`operand(...)`): a tensor, a tuple of them
    (`srcs`), None where optional, a scalar where `immediate`; the mask is a predicate (`nl.arange`
    comparisons, a bool) that fits an operand; no operand writes a read-only kernel argument. Runs before
    `check`, which may then use `.shape` / `.dtype` freely. Every instruction of both generations passes
    through here (Program issue path), so no instruction repeats these rules.

    `fields`: only these operand fields (a retargeted instruction, whose other fields and mask passed when it
    was deferred: its result moves to a destination of the same shape, so the mask still fits)."""
    for name, writes, optional, immediate, tuple_ok in instr._operand_rules:
        if fields is not None and name not in fields:
            continue
        value = getattr(instr, name)
        if isinstance(value, TensorView):
            if writes:
                st = value.storage.base or value.storage
                if st.read_only:
                    check_writable(value, name)
            if value.dynamic and name not in instr.indirect_fields and \
                    any(term.columns is not None for term in value.dynamic):
                takes = ", ".join(f"'{n}'" for n in instr.indirect_fields) or "no operand"
                raise KernelError(f"operand '{name}' of {instr.api_name()} does not take a tensor-indirection "
                                  f"(.indirect()) view", expected=f"tensor indirection on {takes}",
                                  got=describe(value))
            continue
        if value is None and optional:
            continue
        if immediate and isinstance(value, SCALAR_TYPES):
            continue
        if isinstance(value, (tuple, list)) and tuple_ok and all(isinstance(v, TensorView) for v in value):
            continue
        wanted = "a tensor" + (" or a scalar" if immediate else "") + (" (or None)" if optional else "")
        raise DtypeError(f"operand '{name}' must be {wanted}", expected=wanted, got=describe(value),
                         code="err_invalid_operand_type")
    mask = instr.mask
    if mask is not None and fields is None:
        check_mask(mask, [v for _, v, _ in instr.operands()])


# takes_operands: test the operands passed by position in one pass (False: the plain per-operand walk only;
# read at decoration, so set it before the front doors are imported). Values and errors are the same either way.
POSITIONAL_OPERAND_TEST = True


def takes_operands(cls):
    """Decorator of a front-door function that builds an instruction of class `cls` and may size its result
    from the inputs (the legacy functional API): the parameters named like `cls`'s required tensor operands
    are checked to be tensors before the function body reads their `.shape` / `.dtype`. The rest of the
    operand rules run on the issue path (check_operand_types)."""
    required = tuple(f.name for f in cls.operand_fields() if f.metadata["access"] is AccessKind.READ
                     and not f.metadata["optional"] and not f.metadata["immediate"])

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        positional = {p.name: i for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD}
        slots = tuple((name, positional.get(name)) for name in required if any(p.name == name for p in params))
        api = f"nisa.{fn.__name__}"
        # the usual call passes every checked operand by position: then one test of those positions suffices
        # (a tensor at each: nothing to report); any other call takes the plain per-operand walk below, which
        # reports the first offender in `required` order exactly as before. Both call `fn` from the facade
        # itself, so `fn` sees its caller at the same frame depth (nc_matmul's sys._getframe(2)).
        # (`least`: the positional arguments such a call passes; none can when some operand has no position or
        # the switch is off, and every call takes the walk)
        positions = tuple(pos for _, pos in slots)
        fast = POSITIONAL_OPERAND_TEST and None not in positions
        least = max(positions, default=-1) + 1 if fast else float("inf")

        def check(args, kwargs):
            for name, pos in slots:
                if pos is not None and pos < len(args):
                    value = args[pos]
                elif name in kwargs:
                    value = kwargs[name]
                else:
                    continue                 # missing: Python's own TypeError names it
                if not isinstance(value, TensorView):
                    raise DtypeError(f"operand '{name}' must be a tensor", instruction=api, expected="a tensor",
                                     got=describe(value), code="err_invalid_operand_type")

        @functools.wraps(fn)
        def facade(*args, **kwargs):
            if len(args) >= least:
                for pos in positions:
                    if not isinstance(args[pos], TensorView):
                        break
                else:
                    return fn(*args, **kwargs)
            check(args, kwargs)
            return fn(*args, **kwargs)
        return facade
    return wrap


# the parameters that take an ALU operator or activation function
OPERATOR_FIELDS = frozenset(("op", "op0", "op1", "reduce_op", "comp_op0", "comp_op1", "cmp_op", "dst_rmw_op"))


def check_operator_args(instr, hardware_strict: bool = False, names: bool = False) -> None:
    """A new-generation kernel passes operators as `nl` objects (`nl.add`, `nl.exp`, `nl.bypass`), never by
    name: `op="add"` is no NKI 0.2+ form. Names are the internal spelling (`nl` compositions use them, so the
    front doors check this, not the instructions); the legacy front door passes `names=True`: NKI 0.1 took
    NumPy functions and `nl` callables, and legacy kernels also name tokens legacy `nl` lacks (`"average"`),
    which is harmless, so names stay accepted there. `divide`, `mod` and
    `fmod` are in no opcode table (ops.SIMULATION_ONLY_OPS): they run, and raise under hardware-strict.
    Whether the operator is one the instruction takes is the instruction's check."""
    for name in OPERATOR_FIELDS & instr._field_names:
        value = getattr(instr, name)
        if isinstance(value, str) and not names:
            raise KernelError(f"'{name}' must be an nl operator such as nl.{value} (not the string {value!r})",
                              expected="an nl operator", got=repr(value), hint=f"pass {name}=nl.{value}")
        if hardware_strict and value is not None and op_name(value) in SIMULATION_ONLY_OPS:
            raise HardwareUnsupportedError(f"'{name}': there is no {op_name(value)} opcode on hardware (it runs "
                                           "in simulation only)", got=op_name(value),
                                           hint="multiply by a reciprocal (nisa.reciprocal) instead of dividing")


def check_writable(view: TensorView, role: str) -> None:
    st = view.storage.base or view.storage
    if getattr(st, "read_only", False):
        raise KernelError(f"operand '{role}' writes kernel argument {st.name!r}, a read-only NumPy array",
                          expected="a writeable array", got="a read-only array (flags.writeable is False)",
                          hint="pass a writeable array (np.array(x) or x.copy()) for a parameter the kernel writes")


def check_mask(mask, views) -> None:
    """`mask=` is a predicate (a comparison of `nl.arange` index expressions, `&`/`|`/`~` of such, or a bool)
    that can be laid over at least one operand of the instruction (Machine.effective_mask)."""
    if not isinstance(mask, (Predicate, bool, np.bool_)) and \
            not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_):
        raise KernelError("mask= must be a predicate over nl.arange indices (e.g. i_p < 64)",
                          expected="a predicate", got=describe(mask), code="err_unsupported_expression_in_mask")
    if isinstance(mask, (bool, np.bool_)) or not views:
        return
    for view in views:
        try:
            mask_array(mask, view.shape)
            return
        except ShapeError:
            continue
    raise ShapeError("mask shape does not fit any operand of the instruction",
                     expected=" or ".join(str(list(v.shape)) for v in views), got=list(mask.shape),
                     code="err_unsupported_expression_in_mask")


def is_tensor(x) -> bool:
    return isinstance(x, TensorView)


def check_on_chip(t: TensorView, role: str, kinds=(MemoryKind.SBUF, MemoryKind.PSUM)) -> None:
    if t.storage.kind not in kinds:
        names = "/".join(k.name for k in kinds)
        raise MemoryKindError(f"operand '{role}' must be in {names}", expected=names, got=t.kind.name,
                              code="err_unsupported_memory")


def check_partitions(t: TensorView, role: str, hw) -> None:
    if not (t.is_on_chip and len(t.shape) >= 2):
        raise ShapeError(f"operand '{role}' must be an on-chip tile of rank >= 2", got=t.shape)
    pmax = hw.tiles.pmax
    if t.shape[0] > pmax:
        raise ShapeError(f"{role} partition dimension {t.shape[0]} exceeds maximum {pmax}", expected=f"<= {pmax}",
                         got=t.shape[0], code="err_num_partition_exceed_arch_limit",
                         hint="tile the partition dimension into blocks of 128")


def check_same_partitions(a: TensorView, b: TensorView, ra: str, rb: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"'{ra}' and '{rb}' must have the same number of partitions", expected=a.shape[0],
                         got=b.shape[0], code="err_num_partition_mismatch")


def check_same_free(a: TensorView, b: TensorView, ra: str, rb: str) -> None:
    if a.free_size != b.free_size:
        raise ShapeError(f"'{ra}' and '{rb}' must have the same number of elements per partition",
                         expected=a.free_size, got=b.free_size)


def check_column(t, role: str, P: int) -> None:
    """A scalar immediate or a [P, 1] per-partition vector."""
    if is_tensor(t):
        check_on_chip(t, role)
        if not (t.shape[0] == P and t.free_size == 1):
            raise ShapeError(f"'{role}' must be a scalar or a [P, 1] vector", expected=f"[{P}, 1]", got=t.shape,
                             code="err_num_partition_mismatch")
    elif not isinstance(t, SCALAR_TYPES):
        raise DtypeError(f"'{role}' must be a scalar or a [P, 1] vector", got=type(t).__name__)


def check_not_both_psum(a, b, ra: str, rb: str) -> None:
    if is_tensor(a) and is_tensor(b):
        expect(not (a.kind is MemoryKind.PSUM and b.kind is MemoryKind.PSUM),
               f"'{ra}' and '{rb}' cannot both be in PSUM", got="PSUM, PSUM", error=MemoryKindError)


def first_column(values: np.ndarray, P: int) -> np.ndarray:
    """The first column of a [P, ...] operand's values, [P, 1] (a view of them when they are [P, F])."""
    return values.reshape(P, -1)[:, :1]


def column(m, x, P: int) -> np.ndarray:
    """An immediate or [P, 1] tile as a [P, 1] fp32 column (broadcasts along the free dims)."""
    if is_tensor(x):
        return first_column(m.read_f32(x), P)
    return np.full((P, 1), x, np.float32)


def operand_f32(m, x, P: int):
    """`column` for an element-wise operand: an immediate stays an fp32 NumPy scalar, which broadcasts to the
    same fp32 values as the [P, 1] column (NumPy broadcasts a scalar several times faster). A nonzero Python
    float's fp32 scalar is made once (`_F32`: equal nonzero floats are the same number; zeros, whose sign an
    equal key would lose, are converted each time)."""
    if isinstance(x, TensorView):
        return first_column(m.read_f32(x), P)
    if type(x) is float and x:
        found = _F32.get(x)
        if found is None:
            if len(_F32) >= 4096:
                _F32.clear()
            found = _F32[x] = np.float32(x)
        return found
    return np.float32(x)


_F32: dict = {}     # nonzero Python float -> np.float32 of it (operand_f32)


def read_whole(view: TensorView, values: np.ndarray) -> bool:
    """`values`, what `Machine.read_f32(view)` gave, is the view's NumPy array itself, read without a copy, a
    conversion or a check of written elements: a run cell (`Instruction.usual_cells`) may hold it."""
    return values is view._np and view.mask is None and view.storage.initialized is None


def flat(a: np.ndarray) -> np.ndarray:
    """[P, F]: all free dims flattened in row-major order."""
    return a.reshape(a.shape[0], -1)


def require(ctx, capability: str, what: str, *, error=KernelError, code: str | None = None,
            hint: str = "select a newer target (NEURON_PLATFORM_TARGET_OVERRIDE or target=)") -> None:
    """`what` needs the target capability `capability` (a field of `hw.capabilities`), else an `error`
    (KernelError unless the rule says otherwise) naming the first NeuronCore generation that has it
    (`hw.first_with`: `NeuronCore-v3 (trn2)`), from the capability's data: no message spells a generation
    itself."""
    hw = getattr(ctx, "hw", ctx)
    if not getattr(hw.capabilities, capability):
        since = type(hw.capabilities).since(capability)
        raise error(f"{what} needs {first_with(capability)} or newer", expected=f"NeuronCore-v{since}+",
                    got=f"{hw.name} (NeuronCore-v{hw.nc_version})", code=code, hint=hint)


def check_dtype(t, role: str, names, what: str = "") -> None:
    """The operand's dtype is one of `names` (NKI dtype names)."""
    expect(t.dtype.name in names, f"'{role}' must be {what or ' / '.join(names)}", expected="/".join(names),
           got=t.dtype.name, error=DtypeError)


def read_operand(m, view: TensorView, dst: TensorView, mask, *, raw: bool = False) -> np.ndarray:
    """A [P, F] input of an instruction (fp32, or stored values if `raw`), read under the instruction's
    mask where the mask can be laid over it: masked-off elements are not read (no bounds error for them;
    they come back as poison and must not be written)."""
    active = Machine.effective_mask(view, mask) if mask is not None else None
    values = m.read(view, active) if raw else m.read_f32(view, active)
    return flat(values)


