"""`core.STATEMENT_PLANS`: a kernel statement whose `nl.load` or legacy `nisa.nc_matmul` deferred a planned
instruction unbuilt keeps what it decided (memo entry, result tile's shape, dtype and key, the statement's site),
and its next call with the same memo key takes them with one look-up. Outputs or errors (with their kernel
lines) and every event field by field are the plain path's, on the planned kernels' cases and on statements whose
signatures, dtypes and flags change from call to call, and statements inside a helper the kernel calls."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from tests.sim.outcomes import assert_same_outcome, fast_and_plain
from tests.sim.test_planned_loads_matmuls import _PLAN_CASES, _inputs, _plan_case


def _product(a_src, b_src, flag: bool):
    """One load statement and one matmul statement for every call (the kernel calls it with other dtypes and
    flags)."""
    a = nl.load(a_src)
    return nisa.nc_matmul(a, nl.load(b_src), is_stationary_onezero=flag)


def _alternating(lhsT, rhs, lhsT16, rhs16, mixed: bool):
    """The same statements (`_product`'s and the loop's) meet fp32 and bf16 sources, two widths and two flags
    in turn; a matmul bound to a local and read again. `mixed`: the last call of the loop's matmul statement
    multiplies fp32 by bf16 (an error, at a statement planned for fp32 x fp32 before)."""
    out = nl.ndarray((4, 64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in range(4):
        acc = nl.zeros((64, 128), nl.float32, buffer=nl.psum)
        wide = nl.zeros((64, 256), nl.float32, buffer=nl.psum)
        for k in range(2):
            odd = (i + k) % 2 == 1
            src_l, src_r = (lhsT16, rhs16) if odd else (lhsT, rhs)
            a = nl.load(src_l[k * 128:(k + 1) * 128, 0:64])
            b = nl.load(src_r[k * 128:(k + 1) * 128, 0:128 * (1 + odd)])
            if mixed and i == 3 and k == 1:
                b = nl.load(rhs16[k * 128:(k + 1) * 128, 0:128])
            acc[...] += nisa.nc_matmul(a, b[:, 0:128])
            wide[:, 0:128 * (1 + odd)] += nisa.nc_matmul(a, b, is_moving_onezero=(i % 2 == 1))
            acc += _product(src_l[k * 128:(k + 1) * 128, 0:64], src_r[k * 128:(k + 1) * 128, 0:128], k == 1)
            p = nisa.nc_matmul(a, b[:, 0:128])
            acc += p
            nl.store(out[i, :, 0:64], value=nl.copy(p[:, 0:64]))
        nl.store(out[i], value=nl.copy(acc))
        nl.store(out[i, :, 0:64], value=nl.copy(wide[:, 0:64]))
    return out


@nki.jit
def alternating(lhsT, rhs, lhsT16, rhs16):
    return _alternating(lhsT, rhs, lhsT16, rhs16, False)


@nki.jit
def alternating_mixed(lhsT, rhs, lhsT16, rhs16):
    return _alternating(lhsT, rhs, lhsT16, rhs16, True)


def _counted(monkeypatch):
    from opennki._src import core

    calls = []
    remember = core.remember_statement
    monkeypatch.setattr(core, "remember_statement", lambda *a, **k: calls.append(1) or remember(*a, **k))
    return calls


@pytest.mark.parametrize("case", _PLAN_CASES + ("alternating", "alternating_mixed"))
def test_statement_plans_give_the_plain_path_values_errors_and_events(rng, monkeypatch, case):
    from opennki._src import core

    if case.startswith("alternating"):
        lhsT, rhs = _inputs(rng, (256, 64), (256, 256), np.float32)
        kernel = alternating if case == "alternating" else alternating_mixed
        args = (lhsT, rhs, lhsT.astype(nl.bfloat16), rhs.astype(nl.bfloat16))
    else:
        kernel, args = _plan_case(rng, case)
    remembered = _counted(monkeypatch) if case in ("tiled_fp32", "alternating") else None
    outcomes, events = fast_and_plain(kernel.func, args, core, "STATEMENT_PLANS")
    assert_same_outcome(*outcomes)
    assert len(events[0]) > 8 and events[0] == events[1]
    if case in ("flagged", "load_out_of_bounds", "mixed_dtypes", "alternating_mixed"):
        assert isinstance(outcomes[1], Exception)
    if remembered is not None:
        # statements were remembered, and most loads and matmuls took their statement's plan
        deferrals = sum(1 for e in events[0] if e[0] == "InstructionExecuted" and ("dma_copy" in e or "nc_matmul" in e))
        assert 0 < len(remembered) < deferrals // 2
    if case == "alternating":
        assert not isinstance(outcomes[0], Exception) and np.isfinite(outcomes[0]).all()
    if case == "tiled_fp32":
        np.testing.assert_allclose(outcomes[0], args[0].T.astype(np.float64) @ args[1], rtol=1e-4, atol=1e-3)
