"""Dispatch layer: the original import path of the kernel objects, kept for code that uses it.

`run_kernel` lives in `opennki.kernels.base`, the jit kernel classes in `opennki.compile` (`GenericKernel`
for the legacy generation, `Kernel` for the new one); `unwrap` gives a kernel's function and grid key.
"""

from __future__ import annotations

from opennki.compile import GenericKernel, Kernel
from opennki.kernels.base import run_kernel


def unwrap(kernel):
    """(function, grid key) of a jit kernel, a gridded one, or a plain function (grid () when none)."""
    if isinstance(kernel, GenericKernel):
        return kernel.func, () if kernel.grid is None else kernel.grid
    return kernel, ()


__all__ = ["GenericKernel", "Kernel", "run_kernel", "unwrap"]
