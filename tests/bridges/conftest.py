"""Fixtures shared by the framework-bridge tests (JAX, PyTorch)."""

import numpy as np
import pytest


@pytest.fixture
def x(rng):
    """A [256, 64] fp32 input: two 128-row tiles for tests/dispatch/kernels.py's row kernels."""
    return rng.standard_normal((256, 64), dtype=np.float32)
