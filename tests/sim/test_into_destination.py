"""Element-wise instructions computing fp32 results straight into their fp32 destination
(`Machine.fp32_target`, vector.py `_INTO_FP32`) store exactly what the plain path stores (a new result array,
then the write), and what NumPy computes: overlapping operands, a column of the destination as the second
stage's operand, reversed operands, other destination dtypes and integer inputs included."""

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.machine import machine


@nki.jit
def shifted_and_staged(x, y):
    out = nl.ndarray((6, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(y)
    t[:, 1:] = nl.add(t[:, :63], 2.5)                          # destination overlaps its input, shifted
    nl.store(out[0], value=t)
    u[:, 1:] = nl.maximum(u[:, :63], t[:, 1:])                 # tensor_tensor, overlapping destination
    nl.store(out[1], value=u)
    t[...] = nisa.tensor_scalar(t, op0=np.multiply, operand0=1.75, op1=np.add, operand1=t[:, 5:6])
    nl.store(out[2], value=t)                                  # second stage's column: part of the destination
    u[...] = nisa.tensor_scalar(u, op0=np.subtract, operand0=3.0, reverse0=True, op1=np.maximum, operand1=-0.5)
    nl.store(out[3], value=u)
    v = nl.multiply(t, u)                                      # a new tile, both operands fp32
    nl.store(out[4], value=v)
    w = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    w[...] = nl.minimum(v, t[:, 0:1])                          # a column operand
    nl.store(out[5], value=w)
    return out


def _expected(x, y):
    f = np.float32
    t, u = x.copy(), y.copy()
    t[:, 1:] = t[:, :63] + f(2.5)
    r = [t.copy()]
    u[:, 1:] = np.maximum(u[:, :63], t[:, 1:])
    r.append(u.copy())
    t = t * f(1.75) + t[:, 5:6]                    # the column is read before either stage writes
    r.append(t.copy())
    u = np.maximum(f(3.0) - u, f(-0.5))
    r.append(u.copy())
    v = t * u
    r.append(v)
    r.append(np.minimum(v, t[:, 0:1]))
    return np.stack(r)


def _run_both(monkeypatch, kernel, *args):
    fast = kernel(*args)
    monkeypatch.setattr(machine, "COMPUTE_INTO_FP32_TARGETS", False)
    plain = kernel(*args)
    monkeypatch.setattr(machine, "COMPUTE_INTO_FP32_TARGETS", True)
    return fast, plain


def test_fp32_results_into_the_destination_equal_the_plain_path_and_numpy(rng, monkeypatch):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    fast, plain = _run_both(monkeypatch, shifted_and_staged, x, y)
    np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))
    expected = _expected(x, y)
    np.testing.assert_array_equal(fast[[0, 1, 3]], expected[[0, 1, 3]])
    np.testing.assert_allclose(fast[[2, 4, 5]], expected[[2, 4, 5]], rtol=1e-6, atol=1e-6)


@nki.jit
def mixed_dtypes(a, n):
    out16 = nl.ndarray((128, 32), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    out32 = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((128, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
    b[...] = nl.add(nl.load(a), 0.1)                           # bf16 destination: rounded, not computed into
    nl.store(out16, value=b)
    i = nl.load(n)
    f = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
    f[...] = nl.multiply(i, 0.5)                               # int32 input, fp32 destination
    nl.store(out32, value=f)
    return out16, out32


def test_other_destination_dtypes_and_integer_inputs(rng, monkeypatch):
    a = rng.standard_normal((128, 32), dtype=np.float32)
    n = rng.integers(-1000, 1000, (128, 32), dtype=np.int32)
    (f16, f32), (p16, p32) = _run_both(monkeypatch, mixed_dtypes, a, n)
    np.testing.assert_array_equal(f16.view(np.uint16), p16.view(np.uint16))
    np.testing.assert_array_equal(f32, p32)
    np.testing.assert_array_equal(f16, (a + np.float32(0.1)).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(f32, n.astype(np.float32) * np.float32(0.5))


@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_special_values_pass_through_as_on_the_plain_path(rng, monkeypatch, fill):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    x[::7, ::5] = fill
    y = rng.standard_normal((128, 64), dtype=np.float32)
    fast, plain = _run_both(monkeypatch, shifted_and_staged, x, y)
    np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))
