"""opennki: an open, pure-Python implementation of AWS's Neuron Kernel Interface (NKI).

This package is the new-generation `nki` surface (`import opennki as nki`; `opennki.language`,
`opennki.isa`, `opennki.collectives`); `opennki.legacy` is the `neuronxcc.nki` surface. Kernels run on a
CPU simulator of a NeuronCore with hardware numerics and checks. See DESIGN.md for the architecture.

Front door (new generation): `jit` returns a `Kernel` (`kernel[lnc]` for LNC=2), `simulate(kernel)` runs it
on the simulator (NumPy or torch or JAX in, the same out); `benchmark`, `profile` and `baremetal` are the
legacy services offered for new-generation kernels too (an opennki extension: NKI 0.2+ has none).
"""

from __future__ import annotations

from opennki import collectives, compiler, isa, language, perf, typing  # noqa: F401  (the nki module tree)
from opennki.compile import AUTO, Kernel, kernel_spec
from opennki.errors import KernelError, OpenNKIError  # noqa: F401  (opennki.KernelError)
from opennki.kernel import run_kernel, unwrap  # noqa: F401
from opennki.kernels.base import CHECK_SWITCHES, Generation
from opennki.kernels.standalone import SimulateKernel, provide_services
from opennki.releases import Change
from opennki.sim import SimOptions, Simulator

__version__ = "0.1.0"

# the benchmark, profile and baremetal kernels of the dispatch layer ask the cost model through these
provide_services(perf.SERVICES)

# `nki.dtype`: the type of new-generation dtype values (strings such as nl.float32 == "float32"). NKI Library
# kernels use it only to annotate dtype parameters (`index_dtype: nki.dtype = nl.int32`); NKI documents no more.
dtype = language.DType


PLATFORM_TARGET = Change("nki.jit(platform_target=...)", "the NEURON_PLATFORM_TARGET_OVERRIDE environment variable",
                         removed_in="0.3", source="Migrating from NKI 0.2.0 to NKI 0.3.0: nki.jit(platform_target=...)")
JIT_MODE = Change("nki.jit(mode=...)", "no mode (the argument types pick the framework; nki.simulate or "
                  "NKI_SIMULATOR=1 for the CPU simulator)", deprecated_in="0.3",
                  source="Migrating from NKI 0.2.0 to NKI 0.3.0: nki.jit(mode=...)")


def jit(fn=None, **kwargs):
    """`@nki.jit`: a Kernel; the argument types pick NumPy, torch or JAX per call; `kernel[lnc](...)`.

    `api_version=` (an opennki extension, also `$OPENNKI_API_VERSION`) holds the kernel to one public release
    (opennki.releases); by default every release's forms are accepted. `mode=` is ignored (deprecated in
    NKI 0.3); `platform_target=` (NKI 0.2) sets the target, removed in NKI 0.3 for
    `NEURON_PLATFORM_TARGET_OVERRIDE`.
    """
    options = SimOptions(**{k: kwargs[k] for k in ("api_version", "hardware_strict") if kwargs.get(k) is not None})
    if "platform_target" in kwargs:
        PLATFORM_TARGET.apply(options)
    if kwargs.pop("mode", AUTO) != AUTO:
        JIT_MODE.apply(options)
    return _decorator(AUTO, fn, kwargs)


def _decorator(mode: str, fn, config: dict):
    def wrap(f):
        if isinstance(f, Kernel):
            spec = f.spec
            return Kernel(spec.func, mode, spec=type(spec)(spec.func, spec.generation, spec.grid_key, spec.target,
                                                           spec.options, spec.listeners, dict(spec.config, **config)))
        return Kernel(f, mode, **config)
    return wrap(fn) if fn is not None else wrap


def baremetal(kernel=None, **kwargs):
    """Run once with NumPy arrays and write what can be written (see opennki.legacy.baremetal)."""
    return _decorator("baremetal", kernel, kwargs)


def benchmark(kernel=None, **kwargs):
    """The cost model's latency for a new-generation kernel (see opennki.legacy.benchmark)."""
    return _decorator("benchmark", kernel, kwargs)


def profile(func=None, **kwargs):
    """A cost-model profile of a new-generation kernel (see opennki.legacy.profile)."""
    return _decorator("profile", func, kwargs)


def simulate(kernel, api_version=None, **checks):
    """`nki.simulate(kernel)(*args)`: run on the CPU simulator. NumPy arrays in -> NumPy out; torch tensors
    in -> torch tensors out (JAX arrays likewise); inputs the kernel modifies are written back. `kernel` may be
    a jit kernel, `kernel[2]` (LNC=2) or a plain function. opennki extensions, as for jit: `api_version=` and
    the check switches `detect_races=`, `uninitialized=`, `interleave_seed=`, `hardware_strict=` (each a
    `SimOptions` field; given here, it overrides the jit decorator's)."""
    unknown = set(checks) - set(CHECK_SWITCHES)
    if unknown:
        raise TypeError(f"nki.simulate() got unexpected keyword arguments {sorted(unknown)}")
    config = {k: v for k, v in dict(checks, api_version=api_version).items() if v is not None}
    if config:
        spec = kernel_spec(kernel, Generation.NEW)
        kernel = Kernel(spec.func, spec=type(spec)(spec.func, Generation.NEW, spec.grid_key, spec.target, spec.options,
                                                   spec.listeners, dict(spec.config, **config)))
    if isinstance(kernel, Kernel):
        return kernel.resolve(SimulateKernel)
    return SimulateKernel(kernel_spec(kernel, Generation.NEW))


__all__ = ["jit", "simulate", "baremetal", "benchmark", "profile", "isa", "language", "collectives", "typing",
           "compiler", "dtype", "Kernel",
           "Simulator", "SimOptions", "OpenNKIError"]
