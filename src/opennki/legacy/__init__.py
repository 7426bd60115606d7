"""Front door (legacy generation): the `neuronxcc.nki` surface.

`import opennki.legacy as nki`, `opennki.legacy.language as nl`, `opennki.legacy.isa as nisa` give what
`neuronxcc.nki`, `neuronxcc.nki.language` and `neuronxcc.nki.isa` give; `opennki run` and the pytest plugin
map those import names here.
"""

from __future__ import annotations

from opennki.kernel import Kernel, run_kernel, unwrap
from opennki.legacy import isa, language  # noqa: F401


def jit(func=None, mode="auto", **kwargs):
    """`@nki.jit` / `@nki.jit(mode=...)`: make a kernel callable with NumPy arrays (runs the simulator)."""
    def wrap(fn):
        return Kernel(fn, generation="legacy", mode=mode, **kwargs)
    return wrap(func) if func is not None else wrap


def simulate_kernel(kernel, *args, **kwargs):
    """Run `kernel` (a jit kernel, a gridded one `k[g0, g1]`, or a plain function) on the CPU simulator and
    return its outputs as NumPy arrays; arrays the kernel writes are updated in place."""
    fn, grid = unwrap(kernel)
    target = getattr(kernel, "target", None)
    return run_kernel(fn, args, kwargs, grid=grid, target=target)


__all__ = ["jit", "simulate_kernel", "isa", "language"]
