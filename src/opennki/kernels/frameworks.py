"""Dispatch layer: which framework a kernel call's tensors belong to, and their shapes and NKI dtypes.

Imports the simulator's ShapeSpec and the machine's dtypes only, and never imports a framework: a torch
tensor can only exist if torch was imported, so `framework_of` looks at `sys.modules`. The framework
bridges (`opennki.bridges.torch`, `opennki.bridges.jax`) sit above the dispatch layer's kernel base and use
these helpers too; the dtype names below are the one table of torch dtypes a kernel may take.
"""

from __future__ import annotations

import enum
import sys

import ml_dtypes
import numpy as np

from opennki.errors import KernelError
from opennki.machine.dtypes import dtype_of
from opennki.sim.simulator import ShapeSpec


class Framework(enum.Enum):
    NUMPY = "numpy"
    TORCH = "torch"
    JAX = "jax"


# torch dtype name (`torch.<name>`) -> the NumPy / ml_dtypes dtype a kernel sees; absent names are refused
TORCH_DTYPES = {
    "float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int8": np.dtype(np.int8), "int16": np.dtype(np.int16), "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8), "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_), "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


def torch_numpy_dtype(dtype) -> np.dtype:
    """The NumPy / ml_dtypes dtype of a torch dtype or its name (error for the 64-bit and complex types)."""
    name = str(dtype).removeprefix("torch.")
    found = TORCH_DTYPES.get(name)
    if found is None:
        hint = "use torch.int32" if name == "int64" else "use torch.float32 or torch.bfloat16"
        raise KernelError(f"{dtype} is not a NeuronCore dtype and cannot be passed to an NKI kernel",
                          got=str(dtype), hint=hint)
    return found


def _is_jax_value(value) -> bool:
    jax = sys.modules["jax"]
    return isinstance(value, (jax.Array, jax.core.Tracer))


def framework_of(value) -> Framework | None:
    """The framework a tensor belongs to (None for non-tensors); never imports a framework."""
    if isinstance(value, (np.ndarray, ShapeSpec)):
        return Framework.NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and torch.is_tensor(value):
        return Framework.TORCH
    if "jax" in sys.modules and _is_jax_value(value):
        return Framework.JAX
    return None


def frameworks_in(values) -> set[Framework]:
    """The frameworks of the tensors among `values`, also inside tuples and lists."""
    found, todo = set(), list(values)
    while todo:                         # a loop, not a closure calling itself (a reference cycle per call)
        v = todo.pop()
        if isinstance(v, (tuple, list)):
            todo.extend(v)
            continue
        f = framework_of(v)
        if f is not None:
            found.add(f)
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
    if framework_of(value) is Framework.TORCH:
        return ShapeSpec(tuple(value.shape), torch_numpy_dtype(value.dtype))
    try:
        return ShapeSpec(tuple(value.shape), dtype_of(np.dtype(value.dtype)))
    except TypeError as e:
        raise KernelError(f"tensor of dtype {value.dtype} cannot be a kernel argument: {e}",
                          got=str(value.dtype)) from None
