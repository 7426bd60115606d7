"""`detect_races=` and `uninitialized=` reach the checks from every front door of both generations: the jit
decorators (NumPy, torch and JAX arguments), `nki.simulate` (its own keywords too), legacy `mode="simulation"`
and `simulate_kernel`, baremetal, benchmark; profiles always check and put the findings in their reports.
Without the switches the same kernels run unchecked, and nothing of the checks is attached or built."""

import contextlib
import io
import warnings

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
import opennki.legacy as lnki
import opennki.legacy.language as lnl
from opennki.errors import RaceError, UninitializedReadError
from tests.checks.test_races import _mirror


lnc_race = _mirror(barrier=False)     # LNC=2: each core reads the half of scratch the other core writes, unordered


def half_written_new(x):
    """Stores a tile of which only the first 8 rows were written."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:8, :], src=x[0:8, :])
    nisa.dma_copy(dst=out, src=t)
    return out


def carried(x):
    """Legacy: an affine_range iteration reads what the previous one wrote."""
    out = lnl.ndarray((16, 8), dtype=x.dtype, buffer=lnl.shared_hbm)
    buf = lnl.ndarray((16, 32), dtype=lnl.float32)
    buf[:, 0:8] = lnl.load(x[0:16, :])
    for i in lnl.affine_range(1, 4):
        buf[:, lnl.ds(i * 8, 8)] = lnl.add(buf[:, lnl.ds((i - 1) * 8, 8)], 1.0)
    lnl.store(out, value=buf[:, 24:32])
    return out


def half_written_legacy(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    t = lnl.ndarray(x.shape, dtype=x.dtype)
    t[0:8, :] = lnl.load(x[0:8, :])
    lnl.store(out, value=t)
    return out


def _torch(x):
    torch = pytest.importorskip("torch")
    return torch.from_numpy(x)


def _jax(x):
    jnp = pytest.importorskip("jax.numpy")
    return jnp.asarray(x)


def _numpy(x):
    return x


# (name, generation, how to call a kernel function with the check switches `kw` and the grid `grid`)
NEW_DOORS = {
    "jit numpy": lambda f, grid, kw, x: nki.jit(f, **kw)[grid](_numpy(x)),
    "jit torch": lambda f, grid, kw, x: nki.jit(f, **kw)[grid](_torch(x)),
    "jit jax": lambda f, grid, kw, x: nki.jit(f, **kw)[grid](_jax(x)),
    "simulate a jit kernel": lambda f, grid, kw, x: nki.simulate(nki.jit(f, **kw)[grid])(x),
    "simulate's own keywords": lambda f, grid, kw, x: nki.simulate(nki.jit(f)[grid], **kw)(x),
    "simulate a plain function": lambda f, grid, kw, x: nki.simulate(f, **kw)[grid](_torch(x)),
    "baremetal": lambda f, grid, kw, x: nki.baremetal(f, **kw)[grid](x),
}
LEGACY_DOORS = {
    "jit numpy": lambda f, kw, x: lnki.jit(f, **kw)(_numpy(x)),
    "jit torch": lambda f, kw, x: lnki.jit(f, **kw)(_torch(x)),
    "jit jax": lambda f, kw, x: lnki.jit(f, **kw)(_jax(x)),
    "mode simulation": lambda f, kw, x: lnki.jit(f, mode="simulation", **kw)(x),
    "simulate_kernel": lambda f, kw, x: lnki.simulate_kernel(lnki.jit(f, **kw), x),
    "baremetal": lambda f, kw, x: lnki.baremetal(f, **kw)(x),
}


def _quiet(call):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return call()


@pytest.fixture
def x(rng):
    return rng.standard_normal((16, 8)).astype(np.float32)


@pytest.mark.parametrize("door", list(NEW_DOORS))
def test_new_generation_front_doors(door, x):
    call = NEW_DOORS[door]
    with pytest.raises(RaceError, match="program_race_write_read"):
        _quiet(lambda: call(lnc_race, 2, {"detect_races": True}, x))
    with pytest.raises(UninitializedReadError, match=r"uninitialized_read.*element \[8, 0\]"):
        _quiet(lambda: call(half_written_new, 1, {"uninitialized": "raise"}, x))
    # off (the default): the same kernels run, unchecked, as on NKI's simulator
    _quiet(lambda: call(lnc_race, 2, {}, x))
    out = np.asarray(_quiet(lambda: call(half_written_new, 1, {"uninitialized": "zero"}, x)))
    np.testing.assert_array_equal(out, np.concatenate([x[:8], np.zeros_like(x[8:])]))


@pytest.mark.parametrize("door", list(LEGACY_DOORS))
def test_legacy_front_doors(door, x):
    call = LEGACY_DOORS[door]
    with pytest.raises(RaceError, match="affine_loop_carried_raw"):
        _quiet(lambda: call(carried, {"detect_races": True}, x))
    with pytest.raises(UninitializedReadError, match=r"uninitialized_read.*element \[8, 0\]"):
        _quiet(lambda: call(half_written_legacy, {"uninitialized": "raise"}, x))
    out = np.asarray(_quiet(lambda: call(carried, {}, x)))
    np.testing.assert_allclose(out, x + 3.0, rtol=1e-6)


@pytest.mark.parametrize("generation", ["new", "legacy"])
def test_benchmark_checks_races_on_its_shape_only_run(generation, x):
    """A benchmark computes nothing (its outputs are undefined, as NKI's), so there is no value to find
    uninitialised; the race checker needs only the accesses, and runs."""
    if generation == "new":
        kernel, rule = nki.benchmark(lnc_race, detect_races=True)[2], "program_race_write_read"
    else:
        kernel, rule = lnki.benchmark(carried, detect_races=True), "affine_loop_carried_raw"
    with pytest.raises(RaceError, match=rule):
        _quiet(lambda: kernel(x))
    plain = nki.benchmark(lnc_race)[2] if generation == "new" else lnki.benchmark(carried)
    _quiet(lambda: plain(x))
    assert plain.benchmark_result is not None


@pytest.mark.parametrize("generation", ["new", "legacy"])
def test_a_shape_only_run_says_uninitialised_reads_are_not_checked(generation, x):
    """uninitialized='raise' on a benchmark cannot be honoured (no values, no written elements): a warning
    says so instead of a silently clean run; the kernel run through jit raises (test above)."""
    if generation == "new":
        kernel = nki.benchmark(half_written_new, uninitialized="raise")[1]
    else:
        kernel = lnki.benchmark(half_written_legacy, uninitialized="raise")
    with pytest.warns(UserWarning, match=r"half_written_\w+: uninitialized='raise' is not checked in a shape-only"):
        with contextlib.redirect_stdout(io.StringIO()):
            kernel(x)
    assert kernel.benchmark_result is not None


@pytest.mark.parametrize("generation", ["new", "legacy"])
def test_a_profile_reports_the_findings_instead_of_raising(generation, x, tmp_path):
    import json
    if generation == "new":
        kernel, rule = nki.profile(working_directory=str(tmp_path), save_trace_name="p.ntff")(lnc_race)[2], \
            "program_race_write_read"
    else:
        kernel, rule = lnki.profile(working_directory=str(tmp_path), save_trace_name="p.ntff")(carried), \
            "affine_loop_carried_raw"
    _quiet(lambda: kernel(x))
    summary = json.loads((tmp_path / "json_reports" / "p.json").read_text())["summary"][0]
    assert rule in {f["rule"] for f in summary["findings"]}
    assert f"[{rule}]" in (tmp_path / "p.txt").read_text()


def test_off_nothing_of_the_checks_is_attached_or_built(x, monkeypatch):
    """The checks cost nothing when off: no race checker is made, no per-element flags are kept, and with
    no listener no instruction event is even built."""
    from opennki.machine import memory
    from opennki.sim import program, simulator

    made = []

    class Counting(simulator.RaceChecker):
        def __init__(self):
            made.append(self)
            super().__init__()

    monkeypatch.setattr(simulator, "RaceChecker", Counting)
    tracked = []
    new_storage = memory.Memory.new_storage

    def spy(self, *args, **kwargs):
        storage = new_storage(self, *args, **kwargs)
        tracked.append(storage.initialized is not None)
        return storage
    monkeypatch.setattr(memory.Memory, "new_storage", spy)

    def correct(x):
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        lnl.store(out, value=lnl.load(x))
        return out
    np.testing.assert_array_equal(lnki.jit(correct, detect_races=True, uninitialized="raise")(x), x)
    assert len(made) == 1 and any(tracked)          # on: the spies see the checks
    made.clear()
    tracked.clear()

    def no_event(self, *args):
        raise AssertionError("an instruction event was built with nothing listening")
    monkeypatch.setattr(program.Program, "_event", no_event)
    np.testing.assert_allclose(lnki.jit(carried)(x), x + 3.0, rtol=1e-6)
    assert made == [] and tracked and not any(tracked)
