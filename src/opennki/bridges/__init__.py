"""Bridges layer: framework tensors (PyTorch, JAX) at the boundary of a kernel call.

Imports the dispatch layer's argument helpers (`opennki.kernels.arguments`, `opennki.kernels.frameworks`:
which framework a call's tensors belong to, their shape specs); `opennki.bridges.torch` and
`opennki.bridges.jax` import their framework and are only imported once the framework itself is in use.

Each bridge module offers `to_numpy(tensor)` (a writable array; a view sharing memory where the framework
allows, `SHARES_MEMORY`), `from_numpy(array)` and `numpy_dtype`-style dtype mapping.

`eager_call` is the one place where a call with framework tensors runs on the simulator directly: tensors in
the framework's own type go in, are seen by the kernel as HBM tensors (CPU torch tensors share memory with
the NumPy view the simulator reads, so inputs the kernel writes are updated in place; JAX arrays are
immutable, so a kernel that returns nothing returns the inputs it wrote), and outputs come back as tensors of
the same framework. Mixing frameworks in one call is an error.
"""

from __future__ import annotations

import numpy as np

from opennki.kernels.arguments import call_args
from opennki.kernels.frameworks import Framework, call_framework


def bridge(framework: Framework):
    """The bridge module of a framework (imports the framework)."""
    if framework is Framework.TORCH:
        from opennki.bridges import torch as module
    elif framework is Framework.JAX:
        from opennki.bridges import jax as module
    else:
        raise ValueError(framework)
    return module


def eager_call(kernel, args, kwargs):
    """Run `kernel` (a TraceKernel) once on the simulator with framework tensors in and out (module doc)."""
    framework = call_framework(kernel.spec.name, args, kwargs)
    if framework is Framework.NUMPY:
        return kernel.launch(args, kwargs)
    module = bridge(framework)
    leaves, infos, template = kernel.split(args, kwargs)
    arrays = [module.to_numpy(leaf) for leaf in leaves]
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
