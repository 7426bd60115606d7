"""`dtypes.QUIET_CONTEXTS`: an element-wise instruction's ufunc call runs in a context of its own holding the
"ignore everything" floating-point state, instead of setting and resetting that state in the caller's context.
Values (inf and NaN from overflow, invalid operations and division by zero), errors with their kernel lines,
events, the caller's own state and calls from several threads are those of the plain path."""

import threading
import warnings

import numpy as np
import pytest

import opennki.legacy.language as nl
from opennki.machine import dtypes
from tests.sim.outcomes import assert_same_outcome, fast_and_plain


def _overflowing(x):
    """Element-wise instructions whose results overflow, are invalid (inf - inf) or divide by zero."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for _ in nl.sequential_range(3):
        t[...] = nl.multiply(t, 3e30)
        t[...] = nl.add(t, 1.0)
    u = nl.subtract(t, t)
    w = nl.divide(nl.load(x), 0.0)
    nl.store(out[:, 0:32], value=nl.add(w, t)[:, 0:32])         # inf of x's sign
    nl.store(out[:, 32:64], value=u[:, 32:64])                  # NaN
    return out


def _mismatched(x):
    """An error after some element-wise instructions: tiles of shapes that do not broadcast."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    t[...] = nl.multiply(t, 3e30)
    nl.store(out, value=nl.add(t, nl.load(x[:, 0:3])))
    return out


@pytest.mark.parametrize("kernel", [_overflowing, _mismatched])
def test_quiet_contexts_give_the_plain_paths_values_errors_and_events(kernel):
    x = np.random.default_rng(7).standard_normal((128, 64), dtype=np.float32)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")          # a floating-point state leaking out would raise or warn here
        outcomes, events = fast_and_plain(kernel, (x,), dtypes, "QUIET_CONTEXTS")
        assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise", "invalid": "raise"}
    assert_same_outcome(*outcomes)
    assert len(events[0]) >= 6 and events[0] == events[1]
    if kernel is _overflowing:
        out = outcomes[0]
        assert np.isinf(out[:, :32]).all() and np.isnan(out[:, 32:]).all()     # as the hardware gives them, silently
    else:
        assert "nl.load(x[:, 0:3])" in outcomes[0].location.source


def test_quiet_into_ignores_fp_errors_keeps_the_callers_state_and_runs_in_threads():
    rng = np.random.default_rng(11)
    big = rng.uniform(1e38, 3e38, (128, 64)).astype(np.float32)
    results = {}

    def run(key, fast):
        dtypes.QUIET_CONTEXTS = fast
        out = np.empty_like(big)
        with np.errstate(all="raise"):             # a state leaking out of a call would raise here
            for _ in range(50):
                dtypes.quiet_into(np.multiply, big, big, out)          # overflow
                dtypes.quiet_into(np.subtract, out, out, out)          # inf - inf
            assert np.geterr()["over"] == "raise"
            with pytest.raises(FloatingPointError):
                big * big
        results[key] = out

    run("plain", False)
    threads = [threading.Thread(target=run, args=(i, True)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        dtypes.QUIET_CONTEXTS = True
    assert np.isnan(results["plain"]).all()
    for i in range(4):
        np.testing.assert_array_equal(results[i].view(np.uint32), results["plain"].view(np.uint32))
    with pytest.raises(ValueError):             # an error of the call itself comes out as it is
        dtypes.quiet_into(np.add, big, big[:, :3], big)
