"""The one way tests run a kernel function: on NumPy inputs, on a fresh simulator, a recorder listening."""

from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from opennki.sim.options import SimOptions


def run(kernel, *args, grid=(), target=None, options=None, **kwargs):
    """Run `kernel(*args, **kwargs)` (a plain function written like an NKI kernel of either generation) on
    a fresh simulator and return its outputs as NumPy arrays. `grid`: the SPMD launch grid (`kernel[grid]`);
    `target`: the NeuronCore target (None: `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3); `options`: a
    SimOptions or a dict of its fields. A recorder listens, so every instruction must also produce its event
    (listeners never change results) and the kernel must issue at least one."""
    if not isinstance(grid, tuple):
        grid = (grid,)
    if isinstance(options, dict):
        options = SimOptions(**options)
    recorder = Recorder()
    out = run_kernel(kernel, args, kwargs or None, grid=grid, target=target, options=options,
                     listeners=(recorder,))
    assert recorder.of_type(InstructionExecuted), "the kernel issued no instruction"
    return out
