"""Front door (legacy generation): the `neuronxcc.nki` surface.

`import opennki.legacy as nki`, `opennki.legacy.language as nl`, `opennki.legacy.isa as nisa` give what
`neuronxcc.nki`, `neuronxcc.nki.language` and `neuronxcc.nki.isa` give; `opennki run`, the pytest plugin and
`opennki.compat.install()` map those import names here.

`jit`, `baremetal`, `benchmark`, `profile`, `trace` and `simulate_kernel` (spec/entrypoints.md §2-§6) all
make or run a `GenericKernel` (opennki.compile); there is no device, so every mode runs on the simulator
and benchmark / profile ask the cost model.

Importing it also gives the standard `logging` module a level `logging.OFF` (above CRITICAL) when it has
none: importing the real `neuronxcc.nki` does, and public harnesses (every Stanford CS149 Trainium
assignment's, NKI autotuning scripts) call `logging.disable(logging.OFF)` right after it to silence the
compiler's logs (decision, docs/compatibility.md "Side effects of importing `neuronxcc.nki`").
"""

from __future__ import annotations

import logging

from opennki.compile import GenericKernel, kernel_spec
from opennki.bridges.framework import FrameworkKernel  # noqa: F401  (NKI's integration contract)
from opennki.kernels.standalone import SimulateKernel
from opennki._src.tensor import NkiTensor as tensor  # `nki.tensor`: the tile type (annotations, isinstance)
from opennki.legacy import compile, compiler, isa, language, meta, typing  # noqa: F401,A004  (the module tree)

if not hasattr(logging, "OFF"):
    logging.OFF = logging.CRITICAL + 50      # what `logging.disable(logging.OFF)` after `import neuronxcc.nki` needs


def _decorator(mode: str, func, config: dict):
    def wrap(fn):
        if isinstance(fn, GenericKernel):      # nki.baremetal(jit_kernel): same kernel, another mode
            spec = fn.spec
            merged = dict(spec.config, **config)
            target = merged.pop("platform_target", spec.target)
            return GenericKernel(spec.func, mode, spec=type(spec)(spec.func, spec.generation, spec.grid_key,
                                                                  target, spec.options, spec.listeners, merged))
        return GenericKernel(fn, mode, **config)
    return wrap(func) if func is not None else wrap


def jit(func=None, mode="auto", **kwargs):
    """`@nki.jit` / `@nki.jit(mode=...)` / `nki.jit(f, mode=..., platform_target=...)`: a GenericKernel.

    Modes: auto (from the argument types), baremetal, simulation, benchmark, profile, torchxla, jax, trace.
    """
    return _decorator(mode, func, kwargs)


def baremetal(kernel=None, **kwargs):
    """`@nki.baremetal(save_neff_name=..., save_trace_name=..., additional_compile_opt=..., artifacts_dir=...)`:
    run once with NumPy arrays (on the simulator; no NEFF exists, see opennki.kernels.standalone)."""
    return _decorator("baremetal", kernel, kwargs)


def benchmark(kernel=None, **kwargs):
    """`@nki.benchmark(warmup=10, iters=100, ...)`: the cost model's latency in `kernel.benchmark_result`."""
    return _decorator("benchmark", kernel, kwargs)


def profile(func=None, **kwargs):
    """`@nki.profile(working_directory=..., ...)`: the cost model writes a profile of each call."""
    return _decorator("profile", func, kwargs)


def trace(func=None, **kwargs):
    """`@nki.trace`: a helper kernel, inlined when another kernel calls it."""
    return _decorator("trace", func, kwargs)


def simulate_kernel(kernel, *args, **kwargs):
    """Run `kernel` (a jit kernel in any mode, a gridded one `k[g0, g1]`, or a plain function) on the CPU
    simulator and return its outputs as NumPy arrays; arrays the kernel writes are updated in place."""
    if isinstance(kernel, GenericKernel):
        return kernel.resolve(SimulateKernel)(*args, **kwargs)
    return SimulateKernel(kernel_spec(kernel))(*args, **kwargs)


__all__ = ["jit", "baremetal", "benchmark", "profile", "trace", "simulate_kernel", "GenericKernel",
           "FrameworkKernel", "tensor", "isa", "language", "compiler", "typing", "compile", "meta"]
