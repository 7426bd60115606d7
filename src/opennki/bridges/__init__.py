"""Bridges layer: framework tensors (PyTorch, JAX) at the boundary of a kernel call.

Imports the simulator's ShapeSpec and the machine's dtypes; `opennki.bridges.torch` and `opennki.bridges.jax`
import their framework and are only imported once the framework itself is in use (a torch tensor can only
exist if torch was imported, so `framework_of` looks at `sys.modules` and never imports a framework).

Each bridge module offers `to_numpy(tensor)` (a writable array; a view sharing memory where the framework
allows, `SHARES_MEMORY`), `from_numpy(array)` and `numpy_dtype`-style dtype mapping.

`eager_call` is the one place where a call with framework tensors runs on the simulator directly: tensors in
the framework's own type go in, are seen by the kernel as HBM tensors (CPU torch tensors share memory with
the NumPy view the simulator reads, so inputs the kernel writes are updated in place; JAX arrays are
immutable, so a kernel that returns nothing returns the inputs it wrote), and outputs come back as tensors of
the same framework. Mixing frameworks in one call is an error.
"""

from __future__ import annotations

import enum
import sys

import numpy as np

from opennki.errors import KernelError
from opennki.machine.dtypes import dtype_of
from opennki.sim.simulator import ShapeSpec


class Framework(enum.Enum):
    NUMPY = "numpy"
    TORCH = "torch"
    JAX = "jax"


def framework_of(value) -> Framework | None:
    """The framework a tensor belongs to (None for non-tensors); never imports a framework."""
    if isinstance(value, (np.ndarray, ShapeSpec)):
        return Framework.NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and torch.is_tensor(value):
        return Framework.TORCH
    if "jax" in sys.modules and bridge(Framework.JAX).is_jax_value(value):
        return Framework.JAX
    return None


def bridge(framework: Framework):
    """The bridge module of a framework (imports the framework)."""
    if framework is Framework.TORCH:
        from opennki.bridges import torch as module
    elif framework is Framework.JAX:
        from opennki.bridges import jax as module
    else:
        raise ValueError(framework)
    return module


def frameworks_in(values) -> set[Framework]:
    found = set()

    def walk(v):
        if isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
            return
        f = framework_of(v)
        if f is not None:
            found.add(f)
    for v in values:
        walk(v)
    return found


def call_framework(func_name: str, args, kwargs) -> Framework:
    """The one framework of a call's tensors (NUMPY when there are none); mixing frameworks is an error."""
    found = frameworks_in(list(args) + list(kwargs.values()))
    if len(found) > 1:
        names = sorted(f.value for f in found)
        raise KernelError(f"kernel {func_name} was called with tensors of several frameworks ({', '.join(names)}); "
                          "pass all tensors of one call as the same type",
                          hint="convert them first, e.g. torch.from_numpy(a) or np.asarray(t)")
    return found.pop() if found else Framework.NUMPY


def to_shape_spec(value) -> ShapeSpec:
    """Shape and NKI dtype of any tensor (NumPy, torch, JAX, tracer, placeholder)."""
    if isinstance(value, ShapeSpec):
        return value
    framework = framework_of(value)
    if framework is Framework.TORCH:
        return ShapeSpec(tuple(value.shape), bridge(framework).numpy_dtype(value.dtype))
    try:
        return ShapeSpec(tuple(value.shape), dtype_of(np.dtype(value.dtype)))
    except TypeError as e:
        raise KernelError(f"tensor of dtype {value.dtype} cannot be a kernel argument: {e}",
                          got=str(value.dtype)) from None


def eager_call(kernel, args, kwargs):
    """Run `kernel` (a TraceKernel) once on the simulator with framework tensors in and out (module doc)."""
    framework = call_framework(kernel.spec.name, args, kwargs)
    if framework is Framework.NUMPY:
        return kernel.launch(args, kwargs)
    module = bridge(framework)
    leaves, infos, template = kernel.split(args, kwargs)
    arrays = [module.to_numpy(leaf) for leaf in leaves]
    from opennki.kernels.arguments import call_args
    np_args, np_kwargs = call_args(kernel.spec.func, template, arrays)
    result = kernel.launch(np_args, np_kwargs)
    if result is None and not module.SHARES_MEMORY:
        # immutable arrays (JAX): a kernel that only writes its inputs returns the written ones
        written = [module.from_numpy(arrays[i]) for i in kernel.specialize(np_args, np_kwargs).mutated]
        return None if not written else written[0] if len(written) == 1 else tuple(written)
    return convert_result(result, module.from_numpy)


def convert_result(result, convert):
    if isinstance(result, np.ndarray):
        return convert(result)
    if isinstance(result, (tuple, list)):
        return type(result)(convert_result(r, convert) for r in result)
    return result
