"""opennki: an open, pure-Python implementation of AWS's Neuron Kernel Interface (NKI).

This package is the new-generation `nki` surface (`import opennki as nki`; `opennki.language`,
`opennki.isa`); `opennki.legacy` is the `neuronxcc.nki` surface. Kernels run on a CPU simulator of a
NeuronCore with hardware numerics and checks. See DESIGN.md for the architecture.
"""

from __future__ import annotations

from opennki import isa, language  # noqa: F401
from opennki.errors import OpenNKIError
from opennki.kernel import Kernel, run_kernel, unwrap
from opennki.sim import SimOptions, Simulator

__version__ = "0.1.0"


def jit(fn=None, **kwargs):
    """`@nki.jit`: make a kernel callable with NumPy arrays; `kernel[lnc](...)` picks the LNC degree."""
    def wrap(f):
        return Kernel(f, generation="new", **kwargs)
    return wrap(fn) if fn is not None else wrap


def simulate(kernel):
    """`nki.simulate(kernel)(*args)`: run a kernel on the CPU simulator (NumPy in, NumPy out; inputs the
    kernel modifies are written back)."""
    fn, grid = unwrap(kernel)

    def run(*args, **kwargs):
        return run_kernel(fn, args, kwargs, grid=grid, target=getattr(kernel, "target", None))
    return run


__all__ = ["jit", "simulate", "isa", "language", "Kernel", "Simulator", "SimOptions", "OpenNKIError"]
