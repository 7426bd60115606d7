"""Shared test fixtures: a seeded random generator and helpers to compare with NumPy."""

import ml_dtypes
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def bf16(a):
    """Round an array to bfloat16 (as the simulator stores it)."""
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)
