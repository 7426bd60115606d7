"""Dispatch layer: `GenericKernel`, what `nki.jit` returns, and `compute_mode`, which picks the kernel class
that runs a call (spec/entrypoints.md §2.1, §2.4).

Imports the kernel classes (opennki.kernels) and the bridges' framework detection (which never imports a
framework). Front doors sit above it.

`compute_mode(args, kwargs, mode)`:
  * an explicit mode is looked up in `_native_mode_map`; an unknown one is an error whose text contains
    `' passed to nki.jit`;
  * `"auto"` looks at the arguments: a JAX array or tracer -> `JAXKernel`, a torch tensor ->
    `PyTorchKernel`, anything else -> `BaremetalKernel` (NumPy in, NumPy out);
  * `NKI_SIMULATOR=1` sends every call that would need a device (auto, baremetal, torchxla, jax) to
    `SimulateKernel` — torch and concrete JAX arrays included (NKI's simulator takes only torch); calls
    under `jax.jit` (tracers) stay on `JAXKernel`, whose lowering runs the simulator. Benchmark and profile
    already run without a device and are kept.

`GenericKernel` memoises one kernel object per resolved class, so one kernel serves NumPy on one call and
torch on the next and each keeps its specialisation cache. `kernel[grid]` returns a new GenericKernel for
that launch; it owns its own `benchmark_result` and mirrors the latest one onto its parent (NKI's samples
read it from either). A kernel called from inside a running kernel is inlined (a helper sub-kernel).

`Kernel` is the new generation's `nki.jit` result: `kernel[lnc]` (1 or 2) instead of a grid, `mode=`
ignored (deprecated in NKI 0.3), `platform_target=` refused (the target comes from
`NEURON_PLATFORM_TARGET_OVERRIDE`), no keyword-only parameters, no list arguments, outputs in
`nl.shared_hbm`.
"""

from __future__ import annotations

import functools

from opennki.bridges import bridge
from opennki.environment import VARIABLES, setting
from opennki.errors import KernelError, OpenNKIError, public_error
from opennki.kernels.base import Generation, LaunchSpec, TraceKernel, check_signature, in_running_kernel
from opennki.kernels.frameworks import Framework, call_framework
from opennki.bridges.framework import JAXKernel, PyTorchKernel, PyTorchXLAKernel
from opennki.kernels.standalone import BaremetalKernel, BenchmarkKernel, ProfileKernel, SimulateKernel
from opennki.sim.options import SimOptions

SIMULATOR_ENV = VARIABLES["simulator"]

_native_mode_map: dict[str, type[TraceKernel]] = {
    "jax": JAXKernel,
    "torchxla": PyTorchXLAKernel,
    "baremetal": BaremetalKernel,
    "benchmark": BenchmarkKernel,
    "profile": ProfileKernel,
    "simulation": SimulateKernel,
    "trace": TraceKernel,
}
AUTO = "auto"
_DEVICE_MODES = (AUTO, "baremetal", "torchxla", "jax")
_FRAMEWORK_OF_MODE = {"jax": Framework.JAX, "torchxla": Framework.TORCH}


def check_mode(mode) -> str:
    if mode == AUTO or (isinstance(mode, str) and mode in _native_mode_map):
        return mode
    raise KernelError(f"Unsupported mode '{mode}' passed to nki.jit; expected one of "
                      f"{[AUTO, *_native_mode_map]}", got=mode)


def simulator_forced() -> bool:
    return setting("simulator")


def _has_tracer(args, kwargs) -> bool:
    is_tracer = bridge(Framework.JAX).is_tracer

    def walk(v):
        if isinstance(v, (tuple, list)):
            return any(walk(x) for x in v)
        return is_tracer(v)
    return walk(list(args) + list(kwargs.values()))


def compute_mode(args, kwargs, mode: str = AUTO, name: str = "kernel") -> type[TraceKernel]:
    """The kernel class that runs this call (module docstring)."""
    check_mode(mode)
    framework = call_framework(name, args, kwargs)
    if simulator_forced() and mode in _DEVICE_MODES:
        if framework is Framework.JAX and _has_tracer(args, kwargs):
            return JAXKernel
        return SimulateKernel
    if mode != AUTO:
        wanted = _FRAMEWORK_OF_MODE.get(mode)
        if wanted is not None and framework not in (wanted, Framework.NUMPY if wanted is Framework.JAX else None):
            got = framework.value if framework is not Framework.NUMPY else "NumPy arrays"
            raise KernelError(f"kernel {name} has mode {mode!r}, which takes {wanted.value} tensors, but was called "
                              f"with {got}", hint="use mode='auto' to choose from the argument types")
        return _native_mode_map[mode]
    if framework is Framework.JAX:
        return JAXKernel
    if framework is Framework.TORCH:
        return PyTorchKernel
    return BaremetalKernel


class GenericKernel:
    """What `nki.jit` returns (legacy generation); see the module docstring.

    Attributes:
        func: the kernel function.
        mode: the requested mode (`auto` by default).
        spec: its LaunchSpec (grid key, target, decorator options).
        benchmark_result: the latest benchmark result (benchmark mode), else None.
    """

    generation = Generation.LEGACY
    # NKI's kernel objects are not functions, so pytest never collects a kernel named `test_*` as a test.
    # Ours carry the function's metadata (`__wrapped__`, which pytest follows to decide), so they opt out.
    __test__ = False

    def __init__(self, func, mode: str = AUTO, *, spec: LaunchSpec | None = None, parent=None, **config):
        if spec is None:
            target = config.pop("platform_target", None)
            spec = LaunchSpec(func, self.generation, None, target=target, config=config)
        self.spec = spec
        self.mode = check_mode(mode)
        self._kernels: dict[type, TraceKernel] = {}
        self._parent = parent
        self.benchmark_result = None
        functools.update_wrapper(self, spec.func)

    @property
    def func(self):
        return self.spec.func

    @property
    def grid(self):
        return self.spec.grid_key

    def resolve(self, cls: type[TraceKernel]) -> TraceKernel:
        """The memoised kernel object of class `cls` for this launch."""
        kernel = self._kernels.get(cls)
        if kernel is None:
            kernel = self._kernels[cls] = cls(self.spec)
        return kernel

    def __getitem__(self, key) -> "GenericKernel":
        return type(self)(self.spec.func, self.mode, spec=self.spec.with_grid(key), parent=self)

    def __call__(self, *args, **kwargs):
        if in_running_kernel():
            return self.resolve(TraceKernel)(*args, **kwargs)
        try:
            kernel = self.resolve(compute_mode(args, kwargs, self.mode, self.spec.name))
            result = kernel(*args, **kwargs)
        except OpenNKIError as e:
            raise public_error(e) from None
        bench = getattr(kernel, "benchmark_result", None)
        if bench is not None:
            node = self
            while node is not None:
                node.benchmark_result = bench
                node = node._parent
        return result

    # -- services beyond a call -------------------------------------------------------------------------
    def launch(self, args, kwargs=None, **launch_options):
        """Run once on the simulator with listeners / per-program callbacks (see TraceKernel.launch)."""
        return self.resolve(SimulateKernel).launch(args, kwargs, **launch_options)

    def specialize(self, *args, **kwargs):
        """The traced program of a call with these arguments (cached per shapes, dtypes, scalar values)."""
        return self.resolve(TraceKernel).specialize(args, kwargs)

    def dump_config(self, *args, **kwargs):
        """(base64 backend_config, input_names, output_names) of a call with these arguments."""
        return self.resolve(TraceKernel).dump_config(*args, **kwargs)

    def __repr__(self) -> str:
        grid = "" if self.spec.grid_key is None else f"[{self.spec.grid_key}]"
        return f"<nki kernel {self.spec.name}{grid} mode={self.mode}>"


class Kernel(GenericKernel):
    """What the new generation's `nki.jit` returns (module docstring)."""

    generation = Generation.NEW

    def __init__(self, func, mode: str = AUTO, *, spec: LaunchSpec | None = None, parent=None, **config):
        if spec is None:
            check_signature(func, SimOptions(**{k: config[k] for k in ("api_version", "hardware_strict")
                                                if config.get(k) is not None}))
        super().__init__(func, mode, spec=spec, parent=parent, **config)

    def __getitem__(self, lnc) -> "Kernel":
        return type(self)(self.spec.func, self.mode, spec=self.spec.with_grid(lnc), parent=self)


def kernel_spec(kernel, generation: Generation = Generation.LEGACY) -> LaunchSpec:
    """The LaunchSpec of a jit kernel, a gridded one, or a plain function."""
    if isinstance(kernel, GenericKernel):
        return kernel.spec
    if isinstance(kernel, TraceKernel):
        return kernel.spec
    if not callable(kernel):
        raise KernelError(f"expected an NKI kernel or a function, got {type(kernel).__name__}", got=kernel)
    return LaunchSpec(kernel, generation)


__all__ = ["GenericKernel", "Kernel", "compute_mode", "check_mode", "_native_mode_map", "kernel_spec"]
