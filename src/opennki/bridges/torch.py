"""Bridges layer (PyTorch): torch tensors at a kernel call, and the `opennki::nki_call` custom operator.

Imports torch (this module is only imported once a torch tensor reaches a kernel) and the dispatch layer.

Conversion: CPU tensors are seen by the simulator through NumPy views that share their memory, so inputs a
kernel writes are updated in place; bfloat16 and float8 tensors are viewed bit for bit as ml_dtypes arrays
(no rounding through float32). Outputs come back as CPU tensors of the kernel's dtype. Tensors on other
devices are refused with a clear error (the simulator runs on the CPU).

Custom operator: every kernel call goes through `torch.ops.opennki.nki_call(tensors, plan_id)` (or
`nki_call_mutating` when the kernel writes its inputs). `plan_id` names a *plan* — the kernel, the call's
non-tensor arguments and the traced program — made by `plan()`, which `torch.compile` treats as a constant
(`assume_constant_result`), so Dynamo never traces the simulator. What Dynamo does trace (the dispatch up
to `plan`) passes only constants: the kernel function, its launch options and the call's non-tensor
arguments; the kernel object that plans and runs the call is made inside `plan`, for real. The fake
implementation allocates outputs from the traced program's shapes (a shape-only run), which is all
`torch.compile(fullgraph=True)` needs; the real implementation runs the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from opennki.errors import KernelError
from opennki.kernels.base import Generation, LaunchSpec
from opennki.kernels.frameworks import TORCH_DTYPES, torch_numpy_dtype
from opennki.kernels.program import ResultKind, TracedProgram
from opennki.machine.dtypes import dtype_of
from opennki.sim.simulator import ShapeSpec

SHARES_MEMORY = True            # CPU tensors and the simulator's NumPy views share memory
LEAF = "__opennki_tensor__"     # marks where a tensor was in a call template (a plain, Dynamo-constant tuple)

_NUMPY_OF = {getattr(torch, name): np_dtype for name, np_dtype in TORCH_DTYPES.items() if hasattr(torch, name)}
_TORCH_OF = {v: k for k, v in _NUMPY_OF.items()}
# dtypes NumPy cannot hand to torch directly: moved as integers of the same width, bit for bit
_BITS_AS = {torch.bfloat16: (torch.int16, np.int16), torch.float8_e4m3fn: (torch.uint8, np.uint8),
            torch.float8_e5m2: (torch.uint8, np.uint8)}


numpy_dtype = torch_numpy_dtype


def torch_dtype(nki_name: str) -> torch.dtype:
    np_dtype = dtype_of(nki_name).dtype
    found = _TORCH_OF.get(np.dtype(np_dtype))
    if found is None:
        raise KernelError(f"kernel output dtype {nki_name} has no torch equivalent", got=nki_name)
    return found


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor sharing its memory (bit-exact for bfloat16 / float8)."""
    if t.device.type != "cpu":
        raise KernelError(f"opennki runs kernels on the CPU simulator; got a tensor on device {t.device}",
                          got=str(t.device), hint="move it with tensor.cpu() first")
    numpy_dtype(t.dtype)
    t = t.detach()
    bits = _BITS_AS.get(t.dtype)
    if bits is not None:
        return t.view(bits[0]).numpy().view(_NUMPY_OF[t.dtype])
    return t.resolve_conj().resolve_neg().numpy()


def from_numpy(a: np.ndarray) -> torch.Tensor:
    """A CPU tensor with the array's contents and dtype."""
    a = np.ascontiguousarray(a)
    tdtype = _TORCH_OF.get(a.dtype)
    if tdtype is None:
        raise KernelError(f"kernel output dtype {a.dtype} has no torch equivalent", got=str(a.dtype))
    bits = _BITS_AS.get(tdtype)
    if bits is not None:
        return torch.from_numpy(a.view(bits[1]).copy()).view(tdtype)
    return torch.from_numpy(a.copy() if not a.flags.writeable else a)


# ------------------------------------------------------------------------------------------------- plans

@dataclass(frozen=True)
class Plan:
    """One specialisation of one kernel, as the custom operator's implementations need it."""

    kernel: object
    template: tuple
    program: TracedProgram


_plans: dict[str, Plan] = {}
_plan_ids: dict = {}
_kernels: dict = {}        # launch configuration -> the PyTorchKernel that plans and runs it


def _fill(template, leaves):
    def walk(v):
        if isinstance(v, tuple) and len(v) == 2 and v[0] == LEAF:
            return leaves[v[1]]
        if isinstance(v, (tuple, list)):
            return type(v)(walk(x) for x in v)
        return v
    args, kwargs = template
    return walk(args), {k: walk(v) for k, v in kwargs}


@torch.compiler.assume_constant_result
def plan(launch: tuple, template: tuple, shapes: tuple) -> str:
    """The id of the plan for this call, made (traced shape-only) on first use. A constant to Dynamo, which
    therefore never traces the simulator; `launch` is `launch_key(kernel)`, constants only."""
    key = (launch, template, shapes)
    try:
        found = _plan_ids.get(key)
    except TypeError:        # an unhashable constant argument: plan anew
        key, found = None, None
    if found is not None:
        return found
    kernel = _kernel_for(launch)
    specs = [ShapeSpec(shape, numpy_dtype(dtype)) for shape, dtype in shapes]
    args, kwargs = _fill(template, specs)
    program = kernel.specialize(args, kwargs)
    plan_id = f"{kernel.spec.name}:{len(_plans)}"
    _plans[plan_id] = Plan(kernel, template, program)
    if key is not None:
        _plan_ids[key] = plan_id
    return plan_id


def launch_key(kernel) -> tuple:
    """A kernel's class and launch configuration as plain constants (what Dynamo can pass to `plan`)."""
    spec = kernel.spec
    return (type(kernel), spec.func, spec.generation.value, spec.grid_key, spec.target,
            tuple(sorted(spec.config.items())))


def _kernel_for(launch: tuple):
    """The PyTorchKernel of a launch configuration, made outside any Dynamo trace (`plan` runs for real)."""
    try:
        kernel = _kernels.get(launch)
    except TypeError:
        kernel = None
    if kernel is None:
        cls, func, generation, grid_key, target, config = launch
        kernel = cls(LaunchSpec(func, Generation(generation), grid_key, target, config=dict(config)))
        try:
            _kernels[launch] = kernel
        except TypeError:
            pass
    return kernel


@torch.compiler.assume_constant_result
def result_kind(plan_id: str) -> str:
    return _plans[plan_id].program.result.value


@torch.compiler.assume_constant_result
def is_mutating(plan_id: str) -> bool:
    return bool(_plans[plan_id].program.mutated)


def _run(tensors, plan_id):
    p = _plans[plan_id]
    arrays = [to_numpy(t) for t in tensors]
    args, kwargs = _fill(p.template, arrays)
    result = p.kernel.launch(args, kwargs)
    outs = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
    return [from_numpy(o) for o in outs]


def _fake(tensors, plan_id):
    device = tensors[0].device if tensors else torch.device("cpu")
    return [torch.empty(o.shape, dtype=torch_dtype(o.dtype), device=device)
            for o in _plans[plan_id].program.outputs]


@torch.library.custom_op("opennki::nki_call", mutates_args=())
def nki_call(tensors: list[torch.Tensor], plan_id: str) -> list[torch.Tensor]:
    """Run the planned kernel call on the simulator (pure: the kernel writes none of its inputs)."""
    return _run(tensors, plan_id)


@torch.library.custom_op("opennki::nki_call_mutating", mutates_args=("tensors",))
def nki_call_mutating(tensors: list[torch.Tensor], plan_id: str) -> list[torch.Tensor]:
    """Run the planned kernel call; the kernel writes some of its input tensors (updated in place)."""
    return _run(tensors, plan_id)


nki_call.register_fake(_fake)
nki_call_mutating.register_fake(_fake)
_OPS = {False: nki_call, True: nki_call_mutating}


def call(kernel, args, kwargs):
    """Call `kernel` (a PyTorchKernel) with torch tensors through the custom operator (module docstring)."""
    tensors = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return (LEAF, len(tensors) - 1)
        if isinstance(v, (tuple, list)):
            return type(v)(walk(x) for x in v)
        return v

    template = (walk(args), tuple((k, walk(v)) for k, v in kwargs.items()))
    for t in tensors:
        if t.device.type != "cpu":
            raise KernelError(f"opennki runs kernels on the CPU simulator; kernel {kernel.spec.name} got a tensor "
                              f"on device {t.device}", got=str(t.device), hint="move it with tensor.cpu() first")
    shapes = tuple((tuple(int(s) for s in t.shape), str(t.dtype)) for t in tensors)
    plan_id = plan(launch_key(kernel), template, shapes)
    outs = _OPS[is_mutating(plan_id)](tensors, plan_id)
    kind = result_kind(plan_id)
    if kind == ResultKind.NONE.value:
        return None
    if kind == ResultKind.SINGLE.value:
        return outs[0]
    return tuple(outs) if kind == ResultKind.TUPLE.value else list(outs)
