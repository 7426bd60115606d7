"""Dispatch layer: kernels run standalone with NumPy arrays — simulation, baremetal, benchmark, profile.

Imports the kernel base, bridges (for framework tensors in simulation) and errors; the cost model's
services (`opennki.perf`, which sits above this layer) are plugged in by the front door (`provide_services`). There is no Neuron device and no compiler
here: every class runs the kernel on the simulator.

  * `NumpyKernel`: NumPy in, NumPy out; a framework tensor is a clear error (modes that NKI runs without a
    framework).
  * `SimulateKernel` (`mode="simulation"`, `simulate_kernel`, `nki.simulate`, `NKI_SIMULATOR=1`): NumPy in,
    NumPy out, or torch / JAX tensors in and the same framework's tensors out; inputs the kernel writes are
    written back into the caller's arrays (CPU torch tensors included).
  * `BaremetalKernel`: runs once and returns the outputs. It accepts NKI's artifact options and writes what
    it honestly can: NO NEFF EXISTS (no Neuron compiler runs), so `save_neff_name` and `artifacts_dir` get
    the traced program as JSON instead (`<stem>.program.json`, `<artifacts_dir>/<kernel>.program.json`),
    with a warning saying so; `save_trace_name` gets a profile trace from the cost model.
    `additional_compile_opt` is recorded in the program and otherwise ignored.
  * `BenchmarkKernel` / `ProfileKernel`: ask the cost model for a latency / a profile; the call returns
    output arrays of the right shapes whose contents are undefined (NaN, or 4 for integers — as NKI, whose
    benchmark outputs are undefined), and `benchmark_result` holds the result.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from opennki.bridges import eager_call
from opennki.errors import KernelError, UnsupportedError
from opennki.kernels.base import TraceKernel
from opennki.kernels.frameworks import Framework, call_framework
from opennki.kernels.program import ResultKind, TracedProgram
from opennki.machine.dtypes import dtype_of, poison_value

DEFAULT_NEFF_NAME = "file.neff"


class NumpyKernel(TraceKernel):
    """Runs on the simulator with NumPy arrays (see the module docstring)."""

    mode = "numpy"

    def call(self, args, kwargs):
        framework = call_framework(self.spec.name, args, kwargs)
        if framework is not Framework.NUMPY:
            raise KernelError(f"kernel {self.spec.name} runs in mode {self.mode!r}, which takes NumPy arrays, but "
                              f"was called with {framework.value} tensors",
                              hint="use mode='auto' (the default) to pick the framework from the arguments, or "
                                   "run it with nki.simulate(kernel) / simulate_kernel")
        return self.launch(args, kwargs)


class SimulateKernel(TraceKernel):
    """`mode="simulation"`: runs on the simulator; NumPy, torch or JAX tensors in, the same type out."""

    mode = "simulation"

    def __getitem__(self, key) -> "SimulateKernel":
        """`nki.simulate(kernel)[lnc](...)` (new generation) / `simulate(kernel)[grid]`: the same kernel on a
        launch grid; equal to `nki.simulate(kernel[lnc])`."""
        return type(self)(self.spec.with_grid(key))

    def call(self, args, kwargs):
        return eager_call(self, args, kwargs)


class BaremetalKernel(NumpyKernel):
    """`mode="baremetal"` / `nki.baremetal`: one run, plus the artifacts it can honestly write (module doc)."""

    mode = "baremetal"

    def __init__(self, spec):
        super().__init__(spec)
        config = spec.config
        self.save_neff_name = config.get("save_neff_name")
        self.save_trace_name = config.get("save_trace_name")
        self.artifacts_dir = config.get("artifacts_dir")
        if self.save_trace_name and self.save_neff_name not in (None, DEFAULT_NEFF_NAME):
            raise KernelError(f"save_trace_name requires save_neff_name to be {DEFAULT_NEFF_NAME!r} (a known NKI "
                              f"limitation); got save_neff_name={self.save_neff_name!r}",
                              expected=DEFAULT_NEFF_NAME, got=self.save_neff_name,
                              hint=f"drop save_neff_name or set it to {DEFAULT_NEFF_NAME!r}")
        self._artifacts_checked = False

    def call(self, args, kwargs):
        self._check_artifacts_dir()
        result = super().call(args, kwargs)
        self.write_artifacts(args, kwargs)
        return result

    def _check_artifacts_dir(self) -> None:
        if not self.artifacts_dir or self._artifacts_checked:
            return
        path = Path(self.artifacts_dir)
        if path.exists() and any(path.iterdir()):
            raise KernelError(f"artifacts_dir {str(path)!r} must be empty before the kernel is compiled",
                              got=sorted(p.name for p in path.iterdir())[:5],
                              hint="pass a new or empty directory")
        path.mkdir(parents=True, exist_ok=True)
        self._artifacts_checked = True

    def write_artifacts(self, args, kwargs) -> None:
        wanted = []
        if self.artifacts_dir:
            wanted.append(Path(self.artifacts_dir) / f"{self.spec.name}.program.json")
        if self.save_neff_name:
            wanted.append(Path(self.save_neff_name).with_suffix(".program.json"))
        if wanted:
            text = self.specialize(args, kwargs).dumps(indent=1)
            for path in wanted:
                path.write_text(text)
            warnings.warn(f"opennki: no NEFF exists (no Neuron compiler runs here); wrote the traced program of "
                          f"{self.spec.name} to {', '.join(str(p) for p in wanted)}", stacklevel=4)
        if self.save_trace_name:
            perf_service("write_trace")(self, args, kwargs, self.save_trace_name)


class BenchmarkKernel(BaremetalKernel):
    """`mode="benchmark"` / `nki.benchmark`: the cost model's latency in `benchmark_result` (module doc)."""

    mode = "benchmark"

    def __init__(self, spec):
        super().__init__(spec)
        self.benchmark_result = None

    def call(self, args, kwargs):
        self.benchmark_result = perf_service("benchmark")(self, args, kwargs, **self.spec.config)
        return undefined_outputs(self.specialize(args, kwargs))


class ProfileKernel(NumpyKernel):
    """`mode="profile"` / `nki.profile`: the cost model writes a profile into `working_directory` (its own
    options: `working_directory`, `save_neff_name`, `save_trace_name`, `overwrite`, `profile_nth`, ...)."""

    mode = "profile"

    def call(self, args, kwargs):
        perf_service("profile")(self, args, kwargs, **self.spec.config)
        return undefined_outputs(self.specialize(args, kwargs))


def undefined_outputs(program: TracedProgram):
    """Arrays shaped like the program's outputs, holding what fresh memory holds (NaN / 4)."""
    outs = []
    for info in program.outputs:
        dt = dtype_of(info.dtype)
        outs.append(np.full(info.shape, poison_value(dt), dtype=dt.dtype))
    if program.result is ResultKind.NONE:
        return None
    if program.result is ResultKind.SINGLE:
        return outs[0]
    return tuple(outs) if program.result is ResultKind.TUPLE else outs


def perf_service(name: str):
    """A cost-model service: `benchmark(kernel, args, kwargs, **config)`, `profile(kernel, args, kwargs,
    **config)`, `write_trace(kernel, args, kwargs, path)`. Each gets the TraceKernel, whose
    `launch(args, kwargs, options=, listeners=)` runs it (shape-only for estimates)."""
    service = _SERVICES.get(name) or _PROVIDED.get(name)
    if service is None:
        raise UnsupportedError(f"{name} needs opennki's cost model (opennki.perf), which this build lacks")
    return service


_PROVIDED: dict = {}        # the cost model's services (opennki.perf.SERVICES), given by the front door
_SERVICES: dict = {}        # stand-ins that tests and tools plug in over them


def provide_services(services: dict) -> None:
    """The front door gives the cost model's services here (the dispatch layer does not import perf)."""
    _PROVIDED.update(services)


def use_services(**services):
    """Replace cost-model services by name (tests and tools plug stand-ins in); returns the previous ones."""
    previous = {k: _SERVICES.get(k) for k in services}
    for k, v in services.items():
        if v is None:
            _SERVICES.pop(k, None)
        else:
            _SERVICES[k] = v
    return previous


__all__ = ["NumpyKernel", "SimulateKernel", "BaremetalKernel", "BenchmarkKernel", "ProfileKernel",
           "undefined_outputs", "perf_service", "provide_services", "use_services"]
