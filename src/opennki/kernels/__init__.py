"""Dispatch layer: the kernel classes a jit kernel resolves to, one per way of running it.

`TraceKernel` (base: launch, trace, specialise; NKI's `trace` mode), `NumpyKernel`, `SimulateKernel`,
`BaremetalKernel`, `BenchmarkKernel`, `ProfileKernel` (standalone, NumPy); the framework kernels
(`FrameworkKernel`, `PyTorchKernel`, `JAXKernel`) sit above, in `opennki.bridges.framework`.
`opennki.compile` picks one per call.
"""

from opennki.kernels.base import (Generation, KernelCall, LaunchSpec, TraceKernel, observe_calls,
                                  run_kernel)
from opennki.kernels.program import TracedProgram
from opennki.kernels.standalone import (BaremetalKernel, BenchmarkKernel, NumpyKernel, ProfileKernel,
                                        SimulateKernel)

__all__ = ["Generation", "KernelCall", "LaunchSpec", "TraceKernel", "observe_calls", "run_kernel",
           "TracedProgram",
           "BaremetalKernel", "BenchmarkKernel", "NumpyKernel", "ProfileKernel", "SimulateKernel"]
