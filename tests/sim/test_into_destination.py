"""Element-wise instructions computing fp32 results straight into their fp32 destination
(`Machine.fp32_target`, vector.py `INTO_FP32`) store exactly what the plain path stores (a new result array,
then the write), and what NumPy computes: overlapping operands, a column of the destination as the second
stage's operand, reversed operands, other destination dtypes and integer inputs included."""

import warnings

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.instructions import gpsimd
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


@nki.jit
def activations_and_selects(x, y, c):
    """activation, scalar_tensor_tensor and affine_select into fp32 (and bf16) destinations: in place, with
    operands that are part of the destination, reductions, and a masked instruction."""
    out = nl.ndarray((9, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.ndarray((2, 128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t, u, col = nl.load(x), nl.load(y), nl.load(c)
    i_p, i_f = nl.mgrid[0:128, 0:64]
    e = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    e[...] = nisa.activation(np.exp, data=t, bias=col, scale=0.5)
    nl.store(out[0], value=e)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    e[...] = nisa.activation_reduce(np.exp, data=e, reduce_op=np.add, reduce_res=r, bias=e[:, 3:4], scale=0.1)
    nl.store(out[1], value=e)                                  # in place, the bias a column of the destination
    nl.store(sums[0], value=r)
    e[:, 0:1] = nisa.activation_reduce(np.exp, data=e[:, 0:1], reduce_op=np.add, reduce_res=e[:, 0:1])
    nl.store(out[2], value=e)                                  # reduce_res aliases dst
    e[...] = nisa.activation(np.tanh, data=u)                  # not a NumPy ufunc: computed, then written
    nl.store(out[3], value=e)
    s = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s[...] = nisa.scalar_tensor_tensor(data=t, op0=np.subtract, operand0=col, op1=np.multiply, operand1=u)
    nl.store(out[4], value=s)
    s[...] = nisa.scalar_tensor_tensor(data=u, op0=np.multiply, operand0=s[:, 5:6], op1=np.add, operand1=s,
                                       reverse1=True)          # operand1 is the destination: the plain path
    nl.store(out[5], value=s)
    s[...] = nisa.scalar_tensor_tensor(data=s, op0=np.add, operand0=1.5, op1=np.maximum, operand1=t,
                                       reverse0=True)          # data is the destination
    nl.store(out[6], value=s)
    s[...] = nisa.affine_select(pred=(i_p >= i_f), on_true_tile=s, on_false_value=-9984.0)
    nl.store(out[7], value=s)
    s[...] = nisa.affine_select(pred=(i_p < i_f + 7), on_true_tile=t, on_false_value=2.5, mask=(i_f < 40))
    nl.store(out[8], value=s)                                  # masked: two masked writes
    b = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    b[...] = nisa.affine_select(pred=(i_p + 3 >= i_f), on_true_tile=t, on_false_value=1e-3)
    nl.store(low, value=b)                                     # converted through fp32 into bf16
    q = nisa.activation_reduce(np.exp, data=t, reduce_op=np.add, reduce_res=r)
    nl.store(sums[1], value=r)
    return out, sums, low


def _expected_selects(x, y, c):
    with np.errstate(over="ignore"):           # exp of exp overflows to inf in out[2]
        return _expected_selects_values(x, y, c)


def _expected_selects_values(x, y, c):
    f = np.float32
    i_p, i_f = np.mgrid[0:128, 0:64]
    r = []
    e = np.exp((x * f(0.5) + c).astype(np.float64)).astype(f)
    r.append(e)
    e = np.exp((e * f(0.1) + e[:, 3:4]).astype(np.float64)).astype(f)
    r.append(e)
    sums = [e.sum(axis=1, keepdims=True, dtype=np.float64)]
    e = e.copy()
    e[:, 0:1] = np.exp(e[:, 0:1].astype(np.float64)).astype(f)
    r.append(e)
    r.append(None)                                              # gelu: compared with the plain path only
    s = (x - c) * y
    r.append(s)
    s = s * 0 + (s + y * s[:, 5:6])
    r.append(s)
    s = np.maximum(f(1.5) + s, x)
    r.append(s)
    s = np.where(i_p >= i_f, s, f(-9984.0))
    r.append(s)
    s = np.where(i_f < 40, np.where(i_p < i_f + 7, x, f(2.5)), s)
    r.append(s)
    low = np.where(i_p + 3 >= i_f, x, f(1e-3)).astype(ml_dtypes.bfloat16)
    sums.append(np.exp(x.astype(np.float64)).astype(f).sum(axis=1, keepdims=True, dtype=np.float64))
    return r, np.stack(sums), low


def test_activation_stt_and_affine_select_into_the_destination_equal_the_plain_path(rng, monkeypatch):
    """`activation` (a NumPy ufunc function, its float64 results rounded into the fp32 destination as the
    plain path's astype rounds them), `scalar_tensor_tensor` (both stages into the destination unless
    operand1 overlaps it) and `affine_select` without a mask (one write of the selection; with a mask, two
    masked writes) store what the plain path stores, and what NumPy computes."""
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    c = rng.standard_normal((128, 1), dtype=np.float32)
    warned = []
    for into in (True, False):
        monkeypatch.setattr(machine, "COMPUTE_INTO_FP32_TARGETS", into)
        monkeypatch.setattr(gpsimd, "SELECT_IN_ONE_WRITE", into)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outputs = activations_and_selects(x, y, c)
        warned.append(sorted((w.category.__name__, str(w.message)) for w in caught))
        if into:
            fast = outputs
    for got, want in zip(fast, outputs):
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert warned[0] == warned[1] and ("RuntimeWarning", "overflow encountered in cast") in warned[0]
    out, sums, low = fast
    expected, expected_sums, expected_low = _expected_selects(x, y, c)
    for k, want in enumerate(expected):
        if want is not None:
            np.testing.assert_allclose(out[k], want, rtol=2e-6, atol=1e-6, err_msg=f"out[{k}]")
    np.testing.assert_allclose(sums, expected_sums, rtol=1e-5)
    np.testing.assert_array_equal(low.view(np.uint16), expected_low.view(np.uint16))


@nki.jit
def one_stage_immediates(x, n):
    """tensor_scalar's one stage with an immediate (vector.ONE_STAGE_IMMEDIATES): each operator computing into
    fp32, reversed, zero and integer immediates, a bf16 destination, an integer input, a shifted in-place one."""
    out = nl.ndarray((8, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    low = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)
    i = nl.load(n)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r[...] = nl.add(t, 2.5)
    nl.store(out[0], value=r)
    r[...] = nl.subtract(1.5, r)                               # reversed
    nl.store(out[1], value=r)
    r[...] = nl.multiply(r, -0.0)                              # a zero immediate (its sign matters)
    nl.store(out[2], value=r)
    r[...] = nl.maximum(t, -0.25)
    nl.store(out[3], value=r)
    r[...] = nl.minimum(3, t)                                  # an int immediate, reversed
    nl.store(out[4], value=r)
    r[...] = nl.multiply(i, 0.75)                              # int32 input
    nl.store(out[5], value=r)
    r[:, 1:] = nl.add(r[:, :63], 1.0)                          # overlapping, shifted
    nl.store(out[6], value=r)
    b = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    b[...] = nl.subtract(t, 0.1)                               # not an fp32 destination: computed, then written
    nl.store(low, value=b)
    s = nl.add(t, 4.0)                                         # a new tile, held
    nl.store(out[7], value=s)
    return out, low


def test_one_stage_immediates_equal_the_general_path_and_numpy(rng, monkeypatch):
    from opennki.instructions import vector
    x = rng.standard_normal((128, 64), dtype=np.float32)
    x[::9, ::4] = np.nan
    n = rng.integers(-1000, 1000, (128, 64), dtype=np.int32)
    out, low = one_stage_immediates(x, n)
    monkeypatch.setattr(vector, "ONE_STAGE_IMMEDIATES", False)
    plain_out, plain_low = one_stage_immediates(x, n)
    np.testing.assert_array_equal(out.view(np.uint32), plain_out.view(np.uint32))
    np.testing.assert_array_equal(low.view(np.uint16), plain_low.view(np.uint16))
    f = np.float32
    r0 = x + f(2.5)
    r1 = f(1.5) - r0
    expected = [r0, r1, r1 * f(-0.0), np.maximum(x, f(-0.25)), np.minimum(f(3), x), n.astype(np.float32) * f(0.75)]
    r6 = expected[5].copy()
    r6[:, 1:] = r6[:, :63] + f(1.0)
    expected += [r6, x + f(4.0)]
    np.testing.assert_array_equal(out.view(np.uint32), np.stack(expected).view(np.uint32))
    np.testing.assert_array_equal(low.view(np.uint16), (x - f(0.1)).astype(ml_dtypes.bfloat16).view(np.uint16))
