"""Language layer: `device_print`, printing a tensor's values from inside a running kernel.

Imports language.core and errors. In the legacy generation `nl.device_print` only works in simulation
(spec/language.md §5.9), so hardware-strict mode rejects it.
"""

from __future__ import annotations

import sys

import numpy as np

from opennki.errors import HardwareUnsupportedError, KernelError
from opennki._src import core
from opennki.machine.dtypes import to_public
from opennki.machine.machine import Machine


def device_print(prefix, x, *, mask=None, simulation_only: bool = True, api: str = "nl.device_print"):
    """Print `prefix` and the current values of tensor `x` (any memory) to stdout; masked-off elements print
    as `--`. Issues no instruction. `simulation_only`: the legacy rule (hardware-strict mode rejects it); the
    new generation's device_print also works on hardware (the runtime dumps the tensor)."""
    prog = core.current(api)
    if not isinstance(prefix, str):
        raise KernelError(f"{api}: the prefix must be a constant string", got=type(prefix).__name__,
                          instruction=api)
    if not core.is_tensor(x):
        raise KernelError(f"{api} prints a tensor", got=type(x).__name__, instruction=api)
    if simulation_only and prog.options.hardware_strict:
        raise HardwareUnsupportedError(f"{api} only works in simulation (legacy NKI)", instruction=api,
                                       hint="remove the print, or run without hardware-strict mode")
    prog.flush()
    if prog.options.shape_only:
        text = f"<{x.shape} {x.dtype}>"
    else:
        values = np.array(to_public(np.array(prog.machine.read(x, mask)), x.dtype))
        active = Machine.effective_mask(x, mask)
        if active is not None:
            values = np.ma.masked_array(values, ~np.broadcast_to(active, values.shape))
        with np.printoptions(threshold=sys.maxsize if values.size <= 4096 else 1000):
            text = str(values)
    print(f"{prefix} {text}", flush=True)


__all__ = ["device_print"]
