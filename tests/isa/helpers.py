"""Helpers for the per-instruction tests: run a kernel on the simulator, check that a rejected instruction
raises our error with the kernel line that issued it, and the new-generation load/store steps every
instruction kernel starts and ends with."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
from tests.raises import raises_at
from tests.running import run as _run

TARGETS = ("trn1", "trn2", "trn3")


def run(kernel, *args, target="trn3", options=None):
    """`tests.running.run` on the newest target unless told otherwise: every instruction exists there."""
    return _run(kernel, *args, target=target, options=options)


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


def to_sbuf(src, dtype):
    """In a new-generation kernel: a new SBUF tensor of `src`'s shape and `dtype`, filled from the HBM
    tensor `src` by one `nisa.dma_copy` (converting its dtype if it differs)."""
    tile = nl2.ndarray(src.shape, dtype=dtype, buffer=nl2.sbuf)
    nisa2.dma_copy(dst=tile, src=src)
    return tile


def to_hbm(tile):
    """In a new-generation kernel: a new shared-HBM tensor of `tile`'s shape and dtype holding `tile` (one
    `nisa.dma_copy`), for the kernel to return."""
    out = nl2.ndarray(tile.shape, dtype=tile.dtype, buffer=nl2.shared_hbm)
    nisa2.dma_copy(dst=out, src=tile)
    return out


def rejecting(rows, *, inputs=((128, 16),), target="trn3", api=None):
    """The test of a table of rejected kernels, each row `(id, kernel, [target,] error, match)`: every kernel,
    called on random inputs (fp32 arrays of the shapes `inputs`, or the arrays `inputs(rng)` returns), raises
    `error` matching `match` at the kernel line that issued it (`rejects`), on the row's target or `target`.
    Assign it to a `test_...` name of the test module."""
    cases = [pytest.param(r[1], r[2] if len(r) == 5 else target, r[-2], r[-1], id=r[0]) for r in rows]

    @pytest.mark.parametrize("kernel,target,error,match", cases)
    def test(rng, kernel, target, error, match):
        args = inputs(rng) if callable(inputs) else tuple(rand(rng, *shape) for shape in inputs)
        rejects(kernel, *args, error=error, match=match, target=target, api=api)
    return test
