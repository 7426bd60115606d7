"""The new generation's planned front doors (isa `PLANNED_DOORS`: once an instruction of a key was issued clean,
the next ones of the key are built from its template and issued as checked) give the plain path's outputs bit for
bit, its errors with their kernel lines, and with a listener its events field by field: every planned door in
loops (immediates changing, zeros of either sign at one call site, [P, 1] columns, two stages, accumulating
matmuls, PSUM), calls from a helper function, and an error on a later call of a call site. Random data, results
against NumPy."""

import numpy as np
import pytest

import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import OpenNKIError
from tests.sim.outcomes import assert_same_outcome, fast_and_plain

F = np.float32


def _scale(dst, src, factor):
    """A helper of the kernel's: its nisa call's kernel line is found by walking the stack."""
    nisa.tensor_scalar(dst=dst, data=src, op0=nl.multiply, operand0=factor)


def doors(x, y, w):
    out = nl.ndarray((8, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    mm = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    for i in range(4):
        nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.25)
        nisa.tensor_scalar(dst=c, data=b, op0=nl.multiply, operand0=(0.0, -0.0, -0.0, 0.0)[i])
        nisa.tensor_scalar(dst=b, data=b, op0=nl.subtract, operand0=0.5 * i, reverse0=True)
        nisa.tensor_tensor(dst=a, data1=a, data2=c, op=nl.maximum)
        nisa.tensor_scalar(dst=c, data=a, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=3)
        nisa.tensor_reduce(dst=col, op=nl.add, data=c, axis=1)
        nisa.tensor_scalar(dst=col, data=col, op0=nl.multiply, operand0=0.015625)
        nisa.tensor_scalar(dst=b, data=b, op0=nl.multiply, operand0=col)
        nisa.activation(dst=c, op=nl.exp, data=b, scale=0.125, bias=col)
        nisa.scalar_tensor_tensor(dst=c, data=c, op0=nl.multiply, operand0=col, op1=nl.add, operand1=a)
        nisa.reciprocal(dst=c, data=c)
        _scale(b, b, 0.5)
        nisa.dma_copy(dst=out[i], src=c)
    nisa.tensor_copy(dst=c, src=a)
    nisa.dma_copy(dst=out[4], src=c)
    nisa.dma_copy(dst=out[5], src=b)
    wt = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wt, src=w)
    p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
    for k in range(3):
        nisa.nc_matmul(dst=p, stationary=wt, moving=a, accumulate=k > 0)
    nisa.tensor_copy(dst=c, src=p)
    nisa.dma_copy(dst=mm, src=c)
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    for _ in range(2):
        nisa.nc_transpose(dst=t, data=wt)
    s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=t)
    nisa.dma_copy(dst=out[6], src=s[:, 0:64])
    nisa.dma_copy(dst=out[7], src=s[:, 64:128])
    return out, mm


def _expected(x, y, w):
    a, b = x.copy(), y.copy()
    out = []
    for i in range(4):
        a = a + F(1.25)
        c = b * F((0.0, -0.0, -0.0, 0.0)[i])
        b = F(0.5 * i) - b
        a = np.maximum(a, c)
        c = a * F(2.0) + F(3)
        col = c.sum(axis=1, keepdims=True, dtype=np.float32) * F(0.015625)
        b = b * col
        c = np.exp((b * F(0.125) + col).astype(np.float64)).astype(F)
        c = c * col + a
        c = F(1.0) / c
        b = b * F(0.5)
        out.append(c)
    out += [a, b, w.T[:, 0:64], w.T[:, 64:128]]
    return out, w.T.astype(np.float64) @ a


def test_planned_doors_give_the_plain_path_values_and_events(rng):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32) * F(0.01)
    w = rng.standard_normal((128, 128), dtype=np.float32)
    x[::9, ::5] = np.nan
    outcomes, events = fast_and_plain(doors, (x, y, w), nisa, "PLANNED_DOORS")
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 60 and events[0] == events[1]
    (out, mm), (expected, expected_mm) = outcomes[0], _expected(x, y, w)
    for i in (4, 5, 6, 7):                       # exact: adds, maxima, multiplies, copies
        np.testing.assert_array_equal(out[i].view(np.uint32), expected[i].view(np.uint32), err_msg=f"out[{i}]")
    for i in range(4):
        np.testing.assert_allclose(out[i], expected[i], rtol=2e-3, atol=1e-6, err_msg=f"out[{i}]")
    good = ~np.isnan(expected_mm)
    np.testing.assert_allclose(mm[good], expected_mm[good], rtol=1e-3, atol=1e-2)


def late_error(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    for i in range(4):
        src = a if i < 3 else x                  # the fourth call reads HBM: the instruction's check fails
        nisa.tensor_scalar(dst=a, data=src, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=a)
    return out


def test_an_error_on_a_later_call_is_the_plain_paths(rng):
    x = rng.standard_normal((128, 64), dtype=np.float32)
    outcomes, events = fast_and_plain(late_error, (x,), nisa, "PLANNED_DOORS")
    assert isinstance(outcomes[0], OpenNKIError)
    assert_same_outcome(*outcomes)
    assert outcomes[0].location.source.strip().startswith("nisa.tensor_scalar(")
    assert events[0] == events[1]


@pytest.mark.parametrize("planned", [True, False])
def test_a_planned_instruction_is_the_keyword_built_one(rng, monkeypatch, planned):
    """The handle's instruction equals, field by field, the one the plain path builds by keywords."""
    from opennki.kernels.base import run_kernel
    from opennki.instructions.vector import TensorScalar
    from opennki.machine.tensor import TensorView
    monkeypatch.setattr(nisa, "PLANNED_DOORS", planned)
    handles = []

    def kernel(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=x)
        for v in (2.0, 2.0, -1.5):
            handles.append((nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=v, name="scale"), a, v))
        nisa.dma_copy(dst=out, src=a)
        return out

    x = rng.standard_normal((128, 64), dtype=np.float32)
    out = run_kernel(kernel, (x,))
    np.testing.assert_array_equal(out.view(np.uint32), (x * F(2.0) * F(2.0) * F(-1.5)).view(np.uint32))
    for handle, a, v in handles:
        want = TensorScalar(dst=a, data=a, op0=nl.multiply, operand0=v, reverse0=False, op1=None, operand1=None,
                            reverse1=False, engine=nisa.engine.unknown, name="scale")     # the door's keyword call
        got = handle.handle
        assert type(got) is TensorScalar
        for f in TensorScalar._field_names:
            g, w = getattr(got, f), getattr(want, f)
            assert g is w if isinstance(w, TensorView) else (type(g) is type(w) and g == w), f
        assert [(r, access) for r, _, access in got.operands()] == [(r, access) for r, _, access in want.operands()]
        assert all(g is w for (_, g, _), (_, w, _) in zip(got.operands(), want.operands()))
        assert got.params() == want.params()
