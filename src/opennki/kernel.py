"""Dispatch layer: a decorated kernel and how a call runs it on the simulator.

Imports sim and language. `Kernel` wraps a kernel function; `kernel[g0, g1](...)` launches an SPMD grid
(`kernel[2]` in the new generation is an LNC=2 launch), and calling it with NumPy arrays runs it on the
simulator and returns NumPy outputs. Errors raised for the user's kernel come out with opennki's own frames
removed, so the last traceback frame is the kernel line at fault.
"""

from __future__ import annotations

import functools

from opennki.errors import OpenNKIError, hide_internal_frames
from opennki.language.tensor import NkiTensor
from opennki.sim.options import SimOptions
from opennki.sim.simulator import Simulator


def run_kernel(fn, args=(), kwargs=None, *, grid=(), target=None, options: SimOptions | None = None,
               listeners=(), **launch_kwargs):
    """Run `fn` on a fresh Simulator and return its outputs as NumPy arrays."""
    sim = Simulator(target, options=options, listeners=listeners)
    try:
        return sim.launch(fn, args, kwargs, grid=grid, tensor_type=NkiTensor, **launch_kwargs)
    except OpenNKIError as e:
        raise hide_internal_frames(e) from None


def normalize_grid(key) -> tuple[int, ...]:
    if not isinstance(key, tuple):
        key = (key,)
    return tuple(int(k) for k in key)


class Kernel:
    """A kernel function plus its launch configuration (grid, target, simulator options, listeners)."""

    def __init__(self, fn, *, grid=(), target=None, options: SimOptions | None = None, listeners=(),
                 generation: str = "legacy", **config):
        functools.update_wrapper(self, fn)
        self.func = fn
        self.grid = tuple(grid)
        self.target = target
        self.options = options
        self.listeners = tuple(listeners)
        self.generation = generation
        self.config = config

    def __getitem__(self, key) -> "Kernel":
        return Kernel(self.func, grid=normalize_grid(key), target=self.target, options=self.options,
                      listeners=self.listeners, generation=self.generation, **self.config)

    def __call__(self, *args, **kwargs):
        return run_kernel(self.func, args, kwargs, grid=self.grid, target=self.target, options=self.options,
                          listeners=self.listeners)

    def __repr__(self) -> str:
        grid = f"[{', '.join(map(str, self.grid))}]" if self.grid else ""
        return f"<nki kernel {self.func.__name__}{grid}>"


def unwrap(kernel):
    """(function, grid) of a Kernel, a gridded Kernel or a plain function."""
    if isinstance(kernel, Kernel):
        return kernel.func, kernel.grid
    return kernel, ()
