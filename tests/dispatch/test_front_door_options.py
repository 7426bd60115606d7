"""Options reaching the simulator through the front doors: hardware-strict mode (decorator keyword and
environment variable) and the legacy generation's parameter rules in plain `@nki.jit` kernels."""

import numpy as np
import pytest

import opennki as nki_new
import opennki.language as nl_new
import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.errors import HardwareUnsupportedError, KernelError
from tests.raises import raises_at


def _broadcast_add(a, b):
    out = nl_new.ndarray(a.shape, dtype=a.dtype, buffer=nl_new.shared_hbm)
    x = nl_new.load(a)                  # [128, 64]
    y = nl_new.load(b)                  # [1, 64]: a partition broadcast, unsupported on hardware
    nl_new.store(out, nl_new.add(x, y))
    return out


@pytest.fixture
def operands(rng):
    return rng.standard_normal((128, 64), dtype=np.float32), rng.standard_normal((1, 64), dtype=np.float32)


def test_simulation_accepts_what_hardware_rejects_by_default(operands):
    a, b = operands
    np.testing.assert_allclose(nki_new.jit(_broadcast_add)(a, b), a + b, rtol=1e-6)


def test_hardware_strict_keyword_on_jit(operands):
    a, b = operands
    with raises_at(HardwareUnsupportedError, match="broadcasting between tiles"):
        nki_new.jit(_broadcast_add, hardware_strict=True)(a, b)


def test_hardware_strict_environment_variable(monkeypatch, operands):
    a, b = operands
    monkeypatch.setenv("OPENNKI_HARDWARE_STRICT", "1")
    with raises_at(HardwareUnsupportedError):
        nki_new.jit(_broadcast_add)(a, b)
    monkeypatch.setenv("OPENNKI_HARDWARE_STRICT", "0")
    np.testing.assert_allclose(nki_new.jit(_broadcast_add)(a, b), a + b, rtol=1e-6)


@nki.jit
def writes_its_input(a):
    nl.store(a, value=nl.exp(nl.load(a)))
    return a


def test_legacy_jit_kernels_may_not_write_unannotated_inputs(rng):
    a = rng.standard_normal((16, 16), dtype=np.float32)
    with raises_at(KernelError, match="err_cannot_update_immutable_parameter"):
        writes_its_input(a)
