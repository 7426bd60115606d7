"""The legacy front doors' operand test (instructions/base.py `takes_operands`, `POSITIONAL_OPERAND_TEST`):
testing the operands passed by position in one pass gives what the plain per-operand walk gives: the same
outputs bit for bit and events field by field on random data, and for a non-tensor operand, passed by position or
by keyword, the same error (class, text, rule code, kernel line)."""

import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError
from opennki.instructions import base
from opennki.instructions import tensor_engine as _pe
from opennki.instructions import vector as _dve
from tests.isa.helpers import rand
from tests.sim.outcomes import assert_same_outcome, fast_and_plain

FRONT_DOORS = {"nc_matmul": _pe.NcMatmul, "tensor_tensor": _dve.TensorTensor, "tensor_copy": _dve.TensorCopy}


def _both(monkeypatch, kernel, args):
    """The kernel with the front doors decorated with the one-pass test, then with the plain walk only (the
    switch is read at decoration): the same outcome and events; the outcome."""
    facades = {}
    for fast in (True, False):
        monkeypatch.setattr(base, "POSITIONAL_OPERAND_TEST", fast)
        facades[fast] = {name: base.takes_operands(cls)(getattr(nisa, name).__wrapped__)
                         for name, cls in FRONT_DOORS.items()}

    def use(fast):
        for name, facade in facades[fast].items():
            monkeypatch.setattr(nisa, name, facade)

    outcomes, events = fast_and_plain(kernel, args, base, "POSITIONAL_OPERAND_TEST",
                                      setup=lambda: use(base.POSITIONAL_OPERAND_TEST))
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 3 and events[0] == events[1]
    return outcomes[0]


def _matmul_and_add(a_t, b, c, out, keywords):
    """out = a_t.T @ b + c (fp32), the operands passed by position or by keyword."""
    at = nl.load(a_t)
    bt = nl.load(b)
    ct = nl.load(c)
    if keywords:
        p = nisa.nc_matmul(stationary=at, moving=bt)
        s = nisa.tensor_tensor(data1=p, data2=ct, op=np.add)
        nl.store(out, value=nisa.tensor_copy(src=s))
    else:
        p = nisa.nc_matmul(at, bt)
        s = nisa.tensor_tensor(p, ct, np.add)
        nl.store(out, value=nisa.tensor_copy(s))
    return out


@pytest.mark.parametrize("keywords", [False, True])
def test_tensor_operands_give_the_plain_values_and_events(monkeypatch, rng, keywords):
    a_t, b, c = rand(rng, 64, 32), rand(rng, 64, 48), rand(rng, 32, 48)
    out = np.zeros((32, 48), np.float32)
    got = _both(monkeypatch, lambda *a: _matmul_and_add(*a, keywords), (a_t, b, c, out))
    want = a_t.astype(np.float64).T @ b.astype(np.float64) + c
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _bad_operand(a_t, b, out, form):
    at = nl.load(a_t)
    bt = nl.load(b)
    if form == "positional first":
        p = nisa.nc_matmul(1.0, bt)
    elif form == "positional second":
        p = nisa.nc_matmul(at, a_t.shape)
    elif form == "keyword":
        p = nisa.nc_matmul(at, moving=2.0)
    elif form == "all keywords":
        p = nisa.nc_matmul(moving=bt, stationary="x")
    elif form == "tensor_tensor second":
        p = nisa.tensor_tensor(bt, 3, np.add)
    else:
        p = nisa.tensor_copy(src=None)
    nl.store(out, value=p)
    return out


@pytest.mark.parametrize("form, operand", [("positional first", "stationary"), ("positional second", "moving"),
                                           ("keyword", "moving"), ("all keywords", "stationary"),
                                           ("tensor_tensor second", "data2"), ("copy keyword", "src")])
def test_a_non_tensor_operand_gives_the_plain_error(monkeypatch, rng, form, operand):
    a_t, b = rand(rng, 64, 32), rand(rng, 64, 48)
    out = np.zeros((32, 48), np.float32)
    err = _both(monkeypatch, lambda *a: _bad_operand(*a, form), (a_t, b, out))
    assert isinstance(err, DtypeError) and err.code == "err_invalid_operand_type"
    assert f"operand '{operand}' must be a tensor" in str(err)
    assert err.location.filename == __file__
