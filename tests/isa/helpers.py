"""Helpers for the per-instruction tests: run a kernel on the simulator, and check that a rejected
instruction raises our error with the kernel line that issued it."""

import numpy as np
import pytest

from opennki.events import InstructionExecuted
from opennki.kernel import run_kernel
from opennki.listeners import Recorder
from tests.raises import raises_at

TARGETS = ("trn1", "trn2", "trn3")


def run(kernel, *args, target="trn3", options=None):
    """Run `kernel(*args)` (NumPy inputs) on a fresh simulator; returns its outputs as NumPy arrays. A
    recorder listens, so every instruction must also produce its event (listeners never change results)."""
    recorder = Recorder()
    out = run_kernel(kernel, args, target=target, options=options, listeners=(recorder,))
    assert recorder.of_type(InstructionExecuted), "the kernel issued no instruction"
    return out


def rejects(kernel, *args, error, match=None, target="trn3", api=None):
    """`kernel(*args)` raises `error` (matching `match`), located at the kernel line that issued it."""
    with raises_at(error, match=match) as exc:
        run(kernel, *args, target=target)
    location = exc.value.location
    assert location is not None, "the error names no kernel line"
    assert location.filename == kernel.__code__.co_filename, location
    if api is not None:   # the line calls the instruction (through whatever module alias the test uses)
        assert api.rsplit(".", 1)[-1] + "(" in location.source, (api, location.source)
    return exc.value


def rand(rng, *shape, dtype=np.float32, low=-2.0, high=2.0):
    """Random test data (never constant) of `shape` and `dtype`."""
    return rng.uniform(low, high, size=shape).astype(dtype)
