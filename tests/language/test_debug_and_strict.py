"""nl.device_print (stdout, with values) and hardware-strict mode: operations that simulate but fail on
hardware raise only when OPENNKI_HARDWARE_STRICT / SimOptions(hardware_strict=True) asks for it."""

import numpy as np
import pytest

import opennki.language as nl2
import opennki.legacy.language as nl
from opennki.errors import HardwareUnsupportedError
from opennki.kernels.base import run_kernel
from opennki.sim.options import SimOptions
from tests.language.coverage import covers
from tests.language.helpers import run
from tests.raises import raises_at


@covers("device_print", "arange")
def test_device_print_shows_prefix_and_values(capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def kernel(x):
        t = nl.load(x)
        nl.device_print("tile:", nl.multiply(t, 2.0))
        nl.device_print("masked:", t, mask=nl.arange(2)[:, None] < 1)
        return x
    run(kernel, x)
    out = capsys.readouterr().out
    assert "tile: [[ 0.  2.  4.]\n [ 6.  8. 10.]]" in out
    assert "masked: [[0.0 1.0 2.0]\n [-- -- --]]" in out


def _strict(fn, *args):
    return run_kernel(fn, args, options=SimOptions(hardware_strict=True))


def test_device_print_is_simulation_only_in_strict_mode():
    x = np.zeros((2, 2), np.float32)
    with raises_at(HardwareUnsupportedError, match="only works in simulation"):
        _strict(lambda x: nl.device_print("x", nl.load(x)), x)


def test_env_var_turns_strict_mode_on(monkeypatch):
    monkeypatch.setenv("OPENNKI_HARDWARE_STRICT", "1")
    with raises_at(HardwareUnsupportedError):
        run(lambda x: nl.device_print("x", nl.load(x)), np.zeros((2, 2), np.float32))


def _binary_kernel(fn, a, b):
    def kernel(a, b):
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out, value=fn(nl.load(a), nl.load(b)))
        return out
    return kernel


def _f32(fn):
    """A NumPy reference computed in fp32 (the engines' arithmetic)."""
    return lambda a, b: fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float32)


def _matmul_ref(a, b):
    return (a[:, 0:4].astype(np.float64) @ b[0:4, :].astype(np.float64)).astype(np.float32)


# (what, kernel op, NumPy reference, the strict-mode message)
NEW_GEN_FAILURES = [
    ("divide", lambda x, y: nl2.divide(x, y), _f32(np.divide), "no divide instruction"),
    ("mod", lambda x, y: nl2.mod(x, y), _f32(np.mod), "no mod instruction"),
    ("fmod", lambda x, y: nl2.fmod(x, y), _f32(np.fmod), "no fmod instruction"),
    ("scalar exponent", lambda x, y: nl2.power(x, 2.0), lambda a, b: np.square(a), "exponent of nl.power"),
    ("broadcast", lambda x, y: nl2.add(x, y[0:1, :]), lambda a, b: a + b[0:1], "broadcasting between tiles"),
    ("matmul without transpose_x", lambda x, y: nl2.matmul(x[:, 0:4], y[0:4, :]), _matmul_ref, "transpose_x"),
]


@pytest.mark.parametrize("what,fn,ref,message", NEW_GEN_FAILURES, ids=[w[0] for w in NEW_GEN_FAILURES])
def test_new_generation_limits_raise_only_in_strict_mode(what, fn, ref, message, rng):
    a, b = rng.uniform(1, 2, (2, 4, 8)).astype(np.float32)
    a[0, 0], b[0, 0] = 7.25, 2.0            # a quotient and remainders that are not 0 or 1
    kernel = _binary_kernel(fn, a, b)
    np.testing.assert_allclose(run_kernel(kernel, (a, b)), ref(a, b), rtol=1e-6, atol=1e-6)
    with raises_at(HardwareUnsupportedError, match=message) as exc:     # at the line calling the nl op
        _strict(kernel, a, b)
    assert exc.value.location.lineno == fn.__code__.co_firstlineno


LEGACY_WITH_HARDWARE_SUPPORT = [
    (nl.divide, _f32(np.divide)), (nl.mod, _f32(np.mod)), (nl.fmod, _f32(np.fmod)),
    (lambda x, y: nl.add(x, y[0:1, :]), lambda a, b: a + b[0:1]),
    (lambda x, y: nl.matmul(x[:, 0:4], y[0:4, :]), _matmul_ref),
]


@pytest.mark.parametrize("fn,ref", LEGACY_WITH_HARDWARE_SUPPORT,
                         ids=["divide", "mod", "fmod", "partition broadcast", "matmul"])
def test_legacy_ops_keep_their_hardware_support_in_strict_mode(rng, fn, ref):
    a, b = rng.uniform(1, 2, (2, 4, 8)).astype(np.float32)
    a[0, 0], b[0, 0] = 7.25, 2.0
    np.testing.assert_allclose(_strict(_binary_kernel(fn, a, b), a, b), ref(a, b), rtol=1e-6, atol=1e-6)


def test_legacy_operators_cannot_broadcast_partitions_on_hardware(rng):
    a, b = rng.uniform(1, 2, (2, 4, 8)).astype(np.float32)
    kernel = _binary_kernel(lambda x, y: x + y[0:1, :], a, b)
    np.testing.assert_allclose(run_kernel(kernel, (a, b)), a + b[0:1], rtol=1e-6)
    with raises_at(HardwareUnsupportedError, match="partition"):
        _strict(kernel, a, b)
    np.testing.assert_allclose(_strict(_binary_kernel(lambda x, y: x + y[:, 0:1], a, b), a, b), a + b[:, 0:1],
                               rtol=1e-6)   # free-dim broadcast is native
