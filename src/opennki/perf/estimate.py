"""Front-door services: run a kernel shape-only with the cost model attached. Imports the dispatch layer
(which launches kernels), hw and the cost layer; the cost layer itself only listens to the run's events.

The estimate needs no data (NKI's benchmark ignores input values too), so array arguments, framework tensors
and `nt.tensor[...]` placeholders all become `ShapeSpec`s and the kernel runs with
`SimOptions(shape_only=True)`: every instruction is checked and accounted, nothing is computed. The launch
goes through the kernel's own dispatch (`TraceKernel.launch`), so SPMD grids, `nl.nc` placements and
new-generation `kernel[2]` LNC launches put programs on the same cores they would run on.
"""

from __future__ import annotations

import numpy as np

from opennki.checks import checking
from opennki.compile import kernel_spec
from opennki.cost.result import CostResult
from opennki.cost.scheduler import CostModel
from opennki.hw import get_target
from opennki.kernels.base import TraceKernel
from opennki.kernels.frameworks import to_shape_spec
from opennki.listeners.findings import collector
from opennki.sim.simulator import ShapeSpec


def as_shape_spec(value):
    """A ShapeSpec for anything array-like (NumPy array, torch/JAX tensor, `nt.tensor[...]` placeholder);
    other values (scalars, tuples of them, config objects) are returned unchanged."""
    if isinstance(value, ShapeSpec):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(as_shape_spec(v) for v in value)
    if getattr(value, "shape", None) is None or getattr(value, "dtype", None) is None \
            or isinstance(value, (np.generic, type)):
        return value
    return to_shape_spec(value)


def trace_kernel(kernel, grid=None):
    """The dispatch layer's TraceKernel for a plain function, a jit kernel or a gridded one (`k[4]`, a
    new-generation `k[2]`), with `grid` (a launch subscript) replacing the kernel's own when given."""
    spec = kernel_spec(kernel)
    if grid is not None:
        spec = spec.with_grid(grid)
    return TraceKernel(spec)


def estimate(kernel, args=(), kwargs=None, *, grid=None, target=None, keep_instructions: bool = True,
             precise_fp: bool | None = None, checks: bool = False) -> CostResult:
    """Estimate one call `kernel[grid](*args, **kwargs)` on `target` without computing anything.

    Args:
        kernel: a kernel function, a jit kernel (either generation), a gridded one, or a dispatch-layer
            TraceKernel.
        args / kwargs: the call's arguments; arrays may be placeholders (only shapes and dtypes are used).
        grid: launch subscript replacing the kernel's own (an int, a tuple, `nl.nc(2) * 2`, an LNC degree).
        target: trn1 / trn2 / trn3 (default: the kernel's, else `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3).
        keep_instructions: keep per-instruction records (needed for profiles).
        checks: run under `opennki.checks.checking()` (the race checker on the shape-only run, and the lint
            of the kernel) and keep what they found as `.findings` (a list of Findings) instead of raising
            it; the profile's reports show them, and an enclosing `collecting()` block gets them too.
    Returns:
        the CostResult, with `.outputs` holding the kernel's outputs as ShapeSpecs.
    """
    if checks:
        outer = collector()
        with checking() as found:
            result = estimate(kernel, args, kwargs, grid=grid, target=target,
                              keep_instructions=keep_instructions, precise_fp=precise_fp)
        result.findings = list(found)
        if outer is not None:           # an enclosing collecting() block (`opennki check`) gets them too
            outer.extend(found)
        return result
    tk = kernel if isinstance(kernel, TraceKernel) and grid is None else trace_kernel(kernel, grid)
    own = tk.spec.target
    hw = get_target(own if own is not None else target)
    model = CostModel(hw, keep_instructions=keep_instructions)
    changes = {"target": hw.name, "shape_only": True}
    if precise_fp is not None:
        changes["precise_fp"] = precise_fp
    options = tk.options(**changes)
    outputs = tk.launch(tuple(as_shape_spec(a) for a in args),
                        {k: as_shape_spec(v) for k, v in (kwargs or {}).items()},
                        options=options, listeners=[model])
    result = model.result()
    result.outputs = outputs
    return result
