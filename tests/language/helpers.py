"""Helpers for the legacy language tests: run a kernel function on NumPy arrays (`tests.running.run`),
NumPy references."""

import math

import ml_dtypes
import numpy as np

import opennki.legacy.language as nl
from tests.running import run  # noqa: F401  (the language tests import it from here)


def apply(fn, *arrays, out_dtype=None):
    """out = fn(*loaded tiles), each array loaded whole into SBUF; returns the stored result."""
    def kernel(*xs):
        tiles = [nl.load(x) for x in xs]
        result = fn(*tiles)
        out = nl.ndarray(result.shape, dtype=out_dtype or result.dtype, buffer=nl.shared_hbm)
        nl.store(out, result)
        return out
    return run(kernel, *arrays)


def bf16(a):
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x):
    return _erf(np.asarray(x, np.float64))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def gelu(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def softplus(x):
    return np.logaddexp(0.0, np.asarray(x, np.float64))
