"""The one way tests run a kernel function (on NumPy inputs, on a fresh simulator, a recorder listening),
and the one way they run a Python command as a user would (`run_python`)."""

import os
import subprocess
import sys

from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from opennki.sim.options import SimOptions


def run(kernel, *args, grid=(), target=None, options=None, recorder=None, **kwargs):
    """Run `kernel(*args, **kwargs)` (a plain function written like an NKI kernel of either generation) on
    a fresh simulator and return its outputs as NumPy arrays. `grid`: the SPMD launch grid (`kernel[grid]`);
    `target`: the NeuronCore target (None: `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3); `options`: a
    SimOptions or a dict of its fields. A recorder (`recorder`, else a new one) listens, so every instruction
    must also produce its event (listeners never change results) and the kernel must issue at least one."""
    if not isinstance(grid, tuple):
        grid = (grid,)
    if isinstance(options, dict):
        options = SimOptions(**options)
    recorder = Recorder() if recorder is None else recorder
    out = run_kernel(kernel, args, kwargs or None, grid=grid, target=target, options=options,
                     listeners=(recorder,))
    assert recorder.of_type(InstructionExecuted), "the kernel issued no instruction"
    return out


def run_python(args, cwd, env=None) -> subprocess.CompletedProcess:
    """`python ARGS` (this interpreter) in `cwd` as a user's shell runs it: the environment, `env` added, without
    `NKI_SIMULATOR` (the command must not depend on it), output captured as text, at most 300 s."""
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("NKI_SIMULATOR", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, env=full_env,
                          timeout=300)
