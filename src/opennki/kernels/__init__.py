"""Dispatch layer: the kernel base every way of running a kernel builds on.

`TraceKernel` (launch, trace, specialise; NKI's `trace` mode), `LaunchSpec`, `Generation`, `TracedProgram`
and the call observers. The kernel classes a jit kernel resolves to sit above this package's face:
`opennki.kernels.standalone` (`NumpyKernel`, `SimulateKernel`, `BaremetalKernel`, `BenchmarkKernel`,
`ProfileKernel`: NumPy in and out) and `opennki.bridges.framework` (`FrameworkKernel`, `PyTorchKernel`,
`JAXKernel`); `opennki.compile` picks one per call.
"""

from opennki.kernels.base import (Generation, KernelCall, LaunchSpec, TraceKernel, observe_calls,
                                  run_kernel)
from opennki.kernels.program import TracedProgram

__all__ = ["Generation", "KernelCall", "LaunchSpec", "TraceKernel", "observe_calls", "run_kernel",
           "TracedProgram"]
