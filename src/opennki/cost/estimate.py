"""Cost layer: run a kernel shape-only with the cost model attached. Imports sim, kernel and the cost layer.

The estimate needs no data (NKI's benchmark ignores input values too), so array arguments, framework tensors
and `nt.tensor[...]` placeholders all become `ShapeSpec`s and the kernel runs with
`SimOptions(shape_only=True)`: every instruction is checked and accounted, nothing is computed.
"""

from __future__ import annotations

import numpy as np

from opennki.cost.result import CostResult
from opennki.cost.scheduler import CostModel
from opennki.hw import get_target
from opennki.machine.dtypes import dtype_of
from opennki.sim.options import SimOptions
from opennki.sim.simulator import ShapeSpec


def as_shape_spec(value):
    """A ShapeSpec for anything array-like (NumPy array, torch/JAX tensor, `nt.tensor[...]` placeholder);
    other values (scalars, tuples of them, config objects) are returned unchanged."""
    if isinstance(value, ShapeSpec):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(as_shape_spec(v) for v in value)
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None or isinstance(value, (np.generic, type)):
        return value
    try:
        dt = dtype_of(dtype)
    except TypeError:
        dt = dtype_of(str(dtype).split(".")[-1])     # torch.bfloat16 -> "bfloat16"
    return ShapeSpec(tuple(int(s) for s in shape), dt)


def unwrap_kernel(kernel):
    """(function, grid, target, cores_of) of a plain function, a jit Kernel or a gridded Kernel; a
    new-generation `kernel[2]` is an LNC=2 launch on two cores."""
    fn = getattr(kernel, "func", kernel)
    grid = tuple(getattr(kernel, "grid", ()) or ())
    target = getattr(kernel, "target", None)
    cores_of = getattr(kernel, "cores_of", None)
    if cores_of is None and getattr(kernel, "generation", None) == "new" and grid == (2,):
        cores_of = _lnc_core
    return fn, grid, target, cores_of


def _lnc_core(ids) -> int:
    return int(ids[0])


def estimate(kernel, args=(), kwargs=None, *, grid=None, target=None, cores_of=None,
             keep_instructions: bool = True, precise_fp: bool | None = None) -> CostResult:
    """Estimate one call `kernel[grid](*args, **kwargs)` on `target` without computing anything.

    Args:
        kernel: a kernel function, a jit `Kernel` or a gridded one (`k[4]`).
        args / kwargs: the call's arguments; arrays may be placeholders (only shapes and dtypes are used).
        grid: SPMD grid (default: the kernel's own).
        target: trn1 / trn2 / trn3 (default: the kernel's, else `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3).
        cores_of: maps program ids to a physical core (LNC=2 / `nl.nc` grids); default one core, or two
            for a new-generation `kernel[2]`.
        keep_instructions: keep per-instruction records (needed for profiles).
    Returns:
        the CostResult, with `.outputs` holding the kernel's outputs as ShapeSpecs.
    """
    from opennki.kernel import run_kernel     # dispatch layer: imported late, it sits above this one

    fn, own_grid, own_target, own_cores_of = unwrap_kernel(kernel)
    hw = get_target(target if target is not None else own_target)
    model = CostModel(hw, keep_instructions=keep_instructions)
    options = SimOptions(target=hw.name, shape_only=True,
                         **({} if precise_fp is None else {"precise_fp": precise_fp}))
    launch = {}
    if (cores_of or own_cores_of) is not None:
        launch["cores_of"] = cores_of or own_cores_of
    outputs = run_kernel(fn, tuple(as_shape_spec(a) for a in args),
                         {k: as_shape_spec(v) for k, v in (kwargs or {}).items()},
                         grid=own_grid if grid is None else tuple(grid), target=hw.name, options=options,
                         listeners=[model], **launch)
    result = model.result()
    result.outputs = outputs
    return result
