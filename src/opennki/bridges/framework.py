"""Dispatch layer: kernels called from a framework — PyTorch and JAX.

Imports the kernel base; the framework bridges (`opennki.bridges.torch`, `opennki.bridges.jax`) are imported
on the first call, so importing opennki never imports a framework.

`FrameworkKernel` is NKI's contract for framework integrations (spec/entrypoints.md §9.2): a subclass says
which values are its tensors (`is_framework_tensor`; anything else is a compile-time constant), their shape
and dtype (`map_framework_tensor`, `translate_to_neuron_dtype`), and `dump_config(*args, **kwargs)` gives
`(backend_config, input_names, output_names)` of the traced program, cached per specialisation.

  * `PyTorchKernel` (NKI's name: `PyTorchXLAKernel`): torch tensors in, torch tensors out, through a torch
    custom operator with a shape-only fake implementation, so models calling kernels work under
    `torch.compile(fullgraph=True)`.
  * `JAXKernel`: the `nki_call` JAX primitive (abstract evaluation by a shape-only trace, a CPU lowering that
    runs the simulator, a `stablehlo.custom_call` lowering for the Neuron platform), usable under `jax.jit`.
"""

from __future__ import annotations

import numpy as np

from opennki.kernels import arguments
from opennki.kernels.base import TraceKernel
from opennki.sim.simulator import ShapeSpec


class FrameworkKernel(TraceKernel):
    """Base of framework integrations (module docstring). Subclasses implement the three hooks."""

    mode = "framework"

    def translate_to_neuron_dtype(self, dtype):
        """The NKI dtype (a DataType) of a framework dtype."""
        raise NotImplementedError

    def is_framework_tensor(self, value) -> bool:
        raise NotImplementedError

    def map_framework_tensor(self, value):
        """(shape, NKI dtype) of a framework tensor."""
        return tuple(int(s) for s in value.shape), self.translate_to_neuron_dtype(value.dtype)

    def is_leaf(self, value) -> bool:
        return self.is_framework_tensor(value) or isinstance(value, (np.ndarray, ShapeSpec))

    def leaf_info(self, leaf, name) -> arguments.LeafInfo:
        if not self.is_framework_tensor(leaf):
            return super().leaf_info(leaf, name)
        shape, dtype = self.map_framework_tensor(leaf)
        return arguments.LeafInfo(name, tuple(shape), dtype.name)


class PyTorchKernel(FrameworkKernel):
    """torch tensors in, torch tensors out (module docstring)."""

    mode = "torchxla"

    def translate_to_neuron_dtype(self, dtype):
        from opennki.machine.dtypes import dtype_of
        return dtype_of(_torch_bridge().numpy_dtype(dtype))

    def is_framework_tensor(self, value) -> bool:
        return _torch_bridge().torch.is_tensor(value)

    def call(self, args, kwargs):
        return _torch_bridge().call(self, args, kwargs)


PyTorchXLAKernel = PyTorchKernel


def _torch_bridge():
    from opennki.bridges import torch as bridge
    return bridge


class JAXKernel(FrameworkKernel):
    """JAX arrays (or tracers) in, JAX arrays out, through the `nki_call` primitive (module docstring)."""

    mode = "jax"

    def __init__(self, spec):
        super().__init__(spec)
        from opennki.bridges import jax as bridge
        self.bridge = bridge

    def translate_to_neuron_dtype(self, dtype):
        from opennki.machine.dtypes import dtype_of
        return dtype_of(np.dtype(dtype))

    def is_framework_tensor(self, value) -> bool:
        return self.bridge.is_jax_value(value)

    def call(self, args, kwargs):
        return self.bridge.call(self, args, kwargs)


__all__ = ["FrameworkKernel", "PyTorchKernel", "PyTorchXLAKernel", "JAXKernel"]
