"""Front door (legacy generation): `neuronxcc.nki.typing` (`nt`), tensor annotations and placeholders.

Imports sim (ShapeSpec, Observer, PROGRAM_SETUP) and errors. Uses (spec/entrypoints.md §7):

* `nt.tensor[[8192, 4096], nl.bfloat16]`: a shape-and-dtype placeholder passed instead of an array to
  shape-only runs (benchmark / profile); it is a `ShapeSpec`.
* `def kernel(a: nt.tensor[128, 512])`: the argument's shape is checked when the kernel starts
  (`err_annotation_shape_mismatch`). A plain `a: nt.tensor` only documents.
* `def kernel(a: nt.mutable_tensor)`: the kernel may update `a` in place and must return it
  (`err_mutable_parameter_not_returned`).

Parameter mutability (`err_cannot_update_immutable_parameter`): since SDK 2.20.1 legacy kernels allocate
their outputs and return them, and their array parameters are immutable unless annotated
`nt.mutable_tensor`. Kernels of the older convention return nothing and receive their outputs as parameters,
which they write. So opennki applies the rule to kernels that return a value (read from the function's
bytecode) and either run as the legacy generation (`Simulator.launch(generation=Generation.LEGACY)`) or use `nt`
annotations; a write into such a parameter raises at the writing instruction's kernel line.

An old-convention kernel of the legacy generation (it returns nothing) must write at least one of its
parameters, its output (`err_tensor_output_not_written_to`); which parameter is the output is not marked, so
a kernel writing none of them is what can be detected.

Local variable annotations (`x: nt.tensor[128, 512] = nl.load(...)`) are never evaluated by Python inside a
function (PEP 526), so an eager simulator cannot see them; only parameter annotations are checked (use
`tile.assert_shape(...)` for a run-time check of a local).
"""

from __future__ import annotations

import dis
import functools
import inspect
import weakref

from opennki.errors import KernelError, SourceLocation
from opennki.events import AccessKind
from opennki.machine.dtypes import dtype_of
from opennki.sim.program import PROGRAM_SETUP, Observer
from opennki.sim.simulator import UNWRITABLE_ARGUMENTS, ShapeSpec
from opennki.releases import Generation


class TensorType(ShapeSpec):
    """What `nt.tensor[...]` returns: a shape (and, for placeholders, a dtype); `mutable` for
    `nt.mutable_tensor[...]`."""

    def __init__(self, shape, dtype=None, mutable: bool = False):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype_of(dtype) if dtype is not None else None
        self.mutable = mutable

    def __repr__(self):
        kind = "mutable_tensor" if self.mutable else "tensor"
        return f"nt.{kind}[{list(self.shape)}{', ' + str(self.dtype) if self.dtype else ''}]"


def _parse(item, mutable: bool) -> TensorType:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (list, tuple)):
        return TensorType(item[0], item[1], mutable)
    if isinstance(item, (list, tuple)):
        return TensorType(item, None, mutable)
    return TensorType((item,), None, mutable)


class tensor:
    """`nt.tensor`: annotation of a kernel tensor; `nt.tensor[shape]` or `nt.tensor[[shape], dtype]`."""

    mutable = False

    def __class_getitem__(cls, item) -> TensorType:
        return _parse(item, cls.mutable)


class mutable_tensor(tensor):
    """`nt.mutable_tensor`: a kernel parameter the kernel may update in place (and must return)."""

    mutable = True


def scalar(t) -> int:
    """`nt.scalar(tile)`: the run-time value of a one-element integer tile, as the trip count of a loop
    (`for _ in range(nt.scalar(steps_sbuf))`, the legacy generation's experimental native scalars, which the
    nki-samples paged-attention kernel uses). The sequencer reads the value when the loop starts, so reading
    it then is exact; a shape-only run knows no value and runs the body once, as device loops do."""
    from opennki.sim.program import current
    prog = current("nt.scalar")
    if not hasattr(t, "storage") or t.size != 1:
        raise KernelError("nt.scalar takes a one-element integer tile", got=getattr(t, "shape", type(t).__name__))
    prog.flush()
    if prog.options.shape_only:
        return 1
    return int(prog.machine.read(t).reshape(-1)[0])


# ------------------------------------------------------------------------------------- parameter rules

def _annotation_kind(annotation):
    """(is an nt annotation, mutable, required shape or None)."""
    if isinstance(annotation, TensorType):
        return True, annotation.mutable, annotation.shape
    if isinstance(annotation, type) and issubclass(annotation, tensor):
        return True, annotation.mutable, None
    return False, False, None


@functools.lru_cache(maxsize=256)
def returns_value(code) -> bool:
    """True if the function's bytecode has a `return` of something other than None."""
    previous = None
    for ins in dis.get_instructions(code):
        if ins.opname == "RETURN_CONST" and ins.argval is not None:
            return True
        if ins.opname == "RETURN_VALUE" and not (previous is not None and previous.opname == "LOAD_CONST"
                                                 and previous.argval is None):
            return True
        previous = ins
    return False


_READ = AccessKind.READ        # bound once: class lookups of members are slow (3.11)


class ParameterRules(Observer):
    """The mutability rules for one program (module docstring)."""

    hbm_writes_only = True      # kernel parameters are HBM tensors (Simulator._arg_tensor)

    def __init__(self, mutable: set[str], immutable: set[str], location: SourceLocation | None,
                 old_convention: bool = False):
        self.mutable = mutable
        self.immutable = immutable
        self.location = location
        self.old_convention = old_convention
        self.written: set[str] = set()

    @staticmethod
    def _param(view) -> str | None:
        storage = view.storage.base or view.storage
        if not storage.is_kernel_arg:
            return None
        return _parameter(storage.name)

    def check(self, prog, instr) -> None:
        for _, view, access in instr.operands():
            if access is _READ:
                continue
            name = self._param(view)
            if name is None:
                continue
            if name in self.immutable:
                raise KernelError(f"kernel parameter '{name}' is immutable; annotate it nt.mutable_tensor to "
                                  "update it in place (and return it)",
                                  code="err_cannot_update_immutable_parameter",
                                  hint="or write the result into a new nl.shared_hbm tensor and return that")
            self.written.add(name)

    def finished(self, prog, result) -> None:
        if self.old_convention and not self.written:
            raise KernelError("the kernel returns nothing and writes none of its parameters: its output "
                              "parameter is never written", code="err_tensor_output_not_written_to",
                              location=self.location, hint="write the output parameter, or allocate the output "
                              "with nl.ndarray(..., buffer=nl.shared_hbm) and return it")
        returned = {self._param(v) for v in _tensors(result)}
        missing = sorted((self.written & self.mutable) - returned)
        if missing:
            raise KernelError(f"Mutable kernel parameter not returned by `return` statement: {missing}",
                              code="err_mutable_parameter_not_returned", location=self.location,
                              hint="return every nt.mutable_tensor parameter the kernel updates")


def _tensors(result):
    if isinstance(result, (tuple, list)):
        for r in result:
            yield from _tensors(r)
    elif hasattr(result, "storage"):
        yield result


def _install(prog) -> None:
    launch = prog.launch
    if "parameter_rules" not in launch.shared_state:
        launch.shared_state["parameter_rules"] = _rules_of(launch)
    rules = launch.shared_state["parameter_rules"]
    if rules is not None:
        prog.observers.append(ParameterRules(*rules))


def _rules_of(launch):
    """(mutable, immutable, location, old_convention) for the launch's kernel, or None when no rule applies;
    checks the annotated argument shapes."""
    static = _launch_rules(launch)
    if static is None:
        return None
    signature, shapes, rules = static
    if shapes:
        try:
            arguments = signature.bind(*launch.args[0], **launch.args[1]).arguments
        except TypeError:
            arguments = {}
        for name, shape in shapes.items():
            value = arguments.get(name)
            got = tuple(getattr(value, "shape", ()))
            if value is not None and got != shape:
                raise KernelError(f"argument '{name}' does not match its annotation nt.tensor{list(shape)}",
                                  expected=shape, got=got, code="err_annotation_shape_mismatch",
                                  location=rules[2])
    return rules if rules[0] or rules[1] or rules[3] else None


# kernel function -> generation -> _kernel_rules(...); weak keys: a kernel (and what its closure holds) is not
# kept alive by having been launched
_KERNEL_RULES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _launch_rules(launch):
    """`_kernel_rules` of the launch's kernel function and generation, worked out once (`_KERNEL_RULES`); None
    for a kernel without Python code or an introspectable signature."""
    fn = inspect.unwrap(launch.fn) if launch.fn is not None else None
    if getattr(fn, "__code__", None) is None:
        return None
    known = _KERNEL_RULES.get(fn)
    if known is None:
        known = _KERNEL_RULES[fn] = {}
    generation = launch.generation
    if generation not in known:
        known[generation] = _kernel_rules(fn, generation)
    return known[generation]


def _kernel_rules(fn, generation):
    """What `_rules_of` reads of a kernel function, which does not change from launch to launch (`_KERNEL_RULES`
    keeps it): (its signature, the shapes its `nt.tensor[...]` annotations ask for, (mutable, immutable,
    location, old_convention)); None when it has no signature."""
    code = fn.__code__
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    location = SourceLocation(code.co_filename, code.co_firstlineno, code.co_name)
    uses_nt, mutable, shapes = False, set(), {}
    for name, p in signature.parameters.items():
        is_nt, is_mutable, shape = _annotation_kind(p.annotation)
        uses_nt = uses_nt or is_nt
        if is_mutable:
            mutable.add(name)
        if shape is not None:
            shapes[name] = shape
    legacy_rules = uses_nt or generation is Generation.LEGACY
    returns = returns_value(code)
    immutable = {n for n in signature.parameters if n not in mutable} if legacy_rules and returns else set()
    old_convention = generation is Generation.LEGACY and not returns and bool(signature.parameters)
    return signature, shapes, (frozenset(mutable), frozenset(immutable), location, old_convention)


def _parameter(argument: str) -> str:
    """The kernel parameter of an argument's tensor name (`x`, or `x[1]` for an element of a tuple parameter)."""
    return argument.split("[", 1)[0]


def _immutable_argument(launch, name: str) -> bool:
    """The argument `name` is of an immutable kernel parameter: every instruction writing it fails
    `ParameterRules.check` before it runs (simulator.UNWRITABLE_ARGUMENTS)."""
    static = _launch_rules(launch)
    return static is not None and _parameter(name) in static[2][1]


PROGRAM_SETUP.append(_install)
UNWRITABLE_ARGUMENTS.append(_immutable_argument)

__all__ = ["tensor", "mutable_tensor", "scalar", "TensorType"]
