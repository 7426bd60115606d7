"""Shared test fixtures: a seeded random generator, the environment restored after each test, and helpers to
compare with NumPy."""

import os

import ml_dtypes
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves the process environment as it found it: the command line's `--target` sets the target
    variable for the script it runs and what that starts (cli.main run in-process by the tests), which the
    later tests of the process would otherwise inherit."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def bf16(a):
    """Round an array to bfloat16 (as the simulator stores it)."""
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


def rounded(dtype):
    """`r(v)`: fp32 values as a tile of `dtype` stores them (round to nearest even), back in fp32. References
    built with it round where the kernel rounds, so they can be compared within an ulp."""
    def r(v):
        return np.asarray(v, np.float32).astype(dtype).astype(np.float32)
    return r


def assert_within_ulps(out, ref, dtype, ulps=1.0, atol=0.0):
    """|out - ref| <= `ulps` units in the last place of `dtype` at |ref| (plus `atol`, for fp32 summation
    orders): for kernels whose reference rounds at the same points (`rounded`)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    eps = float(ml_dtypes.finfo(dtype).eps)
    ulp = eps * np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), np.finfo(np.float32).tiny))))
    bad = np.abs(out - ref) > ulps * ulp + atol
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} elements beyond {ulps} ulp(s) of {np.dtype(dtype)}: "
                           f"first at {np.argwhere(bad)[0]}: {out[bad][0]} vs {ref[bad][0]}")
