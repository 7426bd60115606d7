"""LNC=2 cores run interleaved instruction by instruction (sim/cooperative.py, `SimOptions.interleave_seed`):
the order is reproducible per seed and differs across seeds; a race between the cores shows its effect as
hardware could see it and the race checker reports it at both cores' lines whatever the order; a kernel whose
cores are ordered by barriers computes the same values in every order."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from opennki.events import InstructionExecuted
from opennki.listeners import Recorder
from opennki.listeners.findings import collecting
from opennki.sim import SimOptions

SEEDS = range(6)


def _line(fn, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def last_writer_wins(x):
    """Each core writes its own rows of x into the same output rows eight times: the final contents show
    which core's write came last (a race on purpose)."""
    rank = nl.program_id(0)
    out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.sbuf)
    for i in range(8):
        nisa.dma_copy(dst=t, src=x[rank * 4:(rank + 1) * 4, :])
        nisa.dma_copy(dst=out[:, :], src=t)
    return out


def _order(seed: int, kernel=last_writer_wins, x=None):
    """(the output, the program of each instruction in the order they ran) of one run with `seed`."""
    x = np.arange(64, dtype=np.float32).reshape(8, 8) if x is None else x
    rec = Recorder()
    k = nki.jit(kernel)[2]
    out = k.launch((x,), options=SimOptions(interleave_seed=seed), listeners=[rec])
    return out, tuple(e.program[0] for e in rec.of_type(InstructionExecuted))


def test_the_cores_take_turns_instruction_by_instruction():
    _, order = _order(0)
    assert sorted(order) == [0] * 16 + [1] * 16
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches > 2        # not one core up to the end, then the other


def test_the_order_is_reproducible_per_seed_and_differs_across_seeds():
    runs = {seed: _order(seed) for seed in SEEDS}
    for seed in SEEDS:
        out, order = _order(seed)
        np.testing.assert_array_equal(out, runs[seed][0])
        assert order == runs[seed][1]
    assert len({order for _, order in runs.values()}) > 1
    # the race's result depends on the order: who wrote last (each output is one core's rows, never a mix)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    winners = set()
    for out, order in runs.values():
        winner = next(r for r in order[::-1])
        np.testing.assert_array_equal(out, x[winner * 4:(winner + 1) * 4])
        winners.add(winner)
    assert winners == {0, 1}


def _launched_order(kernel):
    rec = Recorder()
    kernel[2].launch((np.arange(64, dtype=np.float32).reshape(8, 8),), listeners=[rec])
    return tuple(e.program[0] for e in rec.of_type(InstructionExecuted))


def test_the_environment_variable_and_the_decorator_set_the_seed(monkeypatch):
    assert _order(3)[1] != _order(0)[1]
    monkeypatch.setenv("OPENNKI_INTERLEAVE_SEED", "3")
    assert SimOptions().interleave_seed == 3
    assert _launched_order(nki.jit(last_writer_wins)) == _order(3)[1]
    assert _launched_order(nki.jit(last_writer_wins, interleave_seed=0)) == _order(0)[1]


def _exchange(barrier: bool):
    def exchange(x):
        """Each core doubles its half into scratch; after the barrier it reads the other core's half."""
        half = x.shape[0] // 2
        rank = nl.program_id(0)
        other = 1 - rank
        scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        u = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[rank * half:(rank + 1) * half, :])
        nisa.tensor_scalar(dst=u, data=t, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=scratch[rank * half:(rank + 1) * half, :], src=u)
        if barrier:
            nisa.core_barrier(scratch, (0, 1))
        nisa.dma_copy(dst=t, src=scratch[other * half:(other + 1) * half, :])
        nisa.dma_copy(dst=out[rank * half:(rank + 1) * half, :], src=t)
        return out
    return exchange


@pytest.mark.parametrize("seed", SEEDS)
def test_a_kernel_ordered_by_a_barrier_gives_the_same_values_in_every_order(seed, rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    want = np.concatenate([2 * x[8:], 2 * x[:8]])
    with collecting() as found:
        out = nki.jit(_exchange(True), detect_races=True, interleave_seed=seed)[2](x)
    np.testing.assert_array_equal(out, want)
    assert found == []


def _report(found):
    """What a finding says, apart from physical addresses (which depend on allocation order)."""
    return sorted((f.rule, tuple(loc.lineno for loc in f.lines), f.programs, f.message, f.why, f.fix)
                  for f in found)


def test_the_race_without_the_barrier_is_reported_at_both_cores_lines_whatever_the_order(rng):
    kernel = _exchange(False)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    write, read = _line(kernel, "dst=scratch[rank"), _line(kernel, "src=scratch[other")
    reports, orders = [], set()
    for seed in SEEDS:
        with collecting() as found:
            nki.jit(kernel, detect_races=True, interleave_seed=seed)[2](x)
        reports.append(_report(found))
        orders.add(_order(seed, kernel, x)[1])
    assert len(orders) > 1            # the seeds ran the cores' accesses in different orders ...
    assert all(r == reports[0] for r in reports)      # ... and every seed reports the same two races:
    # core 1 reads the half core 0 writes, core 0 the half core 1 writes; each named lower core first
    assert [(rule, lines, programs) for rule, lines, programs, *_ in reports[0]] == [
        ("program_race_write_read", (write, read), ((0,), (1,))),
        ("program_race_write_read", (read, write), ((0,), (1,)))]
    messages = [m for *_, m, _, _ in reports[0]]
    assert messages[1].startswith(f"write/read race between program [0] (line {read}) and program [1] "
                                  f"(line {write}): program [0] reads and program [1] writes the same 64 "
                                  f"element(s) of 'shared_hbm_(16, 8)' (created at line "
                                  f"{_line(kernel, 'scratch = nl.ndarray')})")
    assert "program [0] writes and program [1] reads the same 64" in messages[0]


def _diverging_kernel():
    def diverging(x):
        rank = nl.program_id(0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if rank == 0:
            nisa.core_barrier(out, (0, 1))
            nisa.dma_copy(dst=out, src=t)
        return out
    return diverging


def test_cores_diverging_name_the_waiting_line_and_where_the_other_core_ended(rng):
    from opennki.errors import KernelError
    diverging = _diverging_kernel()
    x = rng.standard_normal((16, 8)).astype(np.float32)
    barrier, ended = _line(diverging, "nisa.core_barrier(out"), _line(diverging, "nisa.dma_copy(dst=t")
    for seed in SEEDS:
        with pytest.raises(KernelError, match="err_divergent_control_flow") as info:
            nki.jit(diverging, interleave_seed=seed)[2](x)
        text = str(info.value)
        assert "programs [[1]] finished without making this call" in text
        assert info.value.location.lineno == barrier
        assert "[1] ended after" in text and f":{ended}:" in text


def test_a_collective_one_core_skips_names_both_cores_lines(rng):
    """Legacy `kernel[nl.nc(2)]`: one program per core, interleaved; core 1 returns without the all_reduce."""
    from opennki.errors import KernelError
    import opennki.legacy as lnki
    import opennki.legacy.language as lnl

    def skips(x):
        out = lnl.ndarray((2, 4, 8), dtype=x.dtype, buffer=lnl.shared_hbm)
        i = lnl.program_id(0)
        t = lnl.load(x[i])
        if i == 0:
            t = lnl.all_reduce(t, op=np.add, program_axes=[0])
        lnl.store(out[i], value=t)
        return out

    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    reduce_line, store_line = _line(skips, "lnl.all_reduce("), _line(skips, "lnl.store(out[i]")
    for seed in SEEDS:
        with pytest.raises(KernelError, match="err_divergent_control_flow") as info:
            lnki.jit(skips, interleave_seed=seed)[lnl.nc(2)](x)
        text = str(info.value)
        assert info.value.location.lineno == reduce_line
        assert "[1] ended after" in text and f":{store_line}:" in text


# -- legacy grids with several programs per core ---------------------------------------------------------------

def _neighbour(racy: bool):
    import opennki.legacy.language as lnl

    def neighbour(x):
        """Eight programs, four per core (`nl.nc(2) * 4` puts programs 0-3 on core 0, 4-7 on core 1): each
        doubles its tile into shared scratch, then reads back the slot of the program at the same place on
        the other core (racy) or its own slot (fixed)."""
        scratch = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm, name="scratch")
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        i = lnl.program_id(0)
        lnl.store(scratch[i], value=lnl.multiply(lnl.load(x[i]), 2.0))
        j = (i + 4) % 8 if racy else i
        lnl.store(out[i], value=lnl.load(scratch[j]))
        return out
    return neighbour


GRIDS = ["nc(2) * 4", "(nc(2), 4)"]


def _grid(text: str):
    import opennki.legacy.language as lnl
    return eval(text, {"nc": lnl.nc})


def _run_grid(kernel, key, x, seed, rec=None):
    import opennki.legacy as lnki
    k = lnki.jit(kernel, platform_target="trn2", detect_races=True, interleave_seed=seed)[key]
    with collecting() as found:
        out = k.launch((x,), listeners=[rec] if rec is not None else [])
    return out, found


@pytest.mark.parametrize("grid", GRIDS)
def test_the_cores_of_a_grid_interleave_and_each_core_runs_its_programs_in_turn(grid, rng):
    from opennki.events import ProgramStarted
    key = _grid(grid)
    kernel, shape = (_neighbour(False), (8, 16, 8)) if grid == GRIDS[0] else (_neighbour_2d(), (2, 4, 16, 8))
    x = rng.standard_normal(shape).astype(np.float32)
    orders = set()
    for seed in SEEDS:
        rec = Recorder()
        out, found = _run_grid(kernel, key, x, seed, rec)
        np.testing.assert_array_equal(out, 2 * x)
        assert found == []
        core = {e.program: e.core for e in rec.of_type(ProgramStarted)}
        assert sorted(set(core.values())) == [0, 1]
        order = [e.program for e in rec.of_type(InstructionExecuted)]
        for c in (0, 1):
            mine = [p for p in order if core[p] == c]
            # one core's programs one after another, in grid order: never a switch back to an earlier one
            assert [p for k, p in enumerate(mine) if k == 0 or p != mine[k - 1]] == sorted(set(mine))
        cores = [core[p] for p in order]
        assert sum(a != b for a, b in zip(cores, cores[1:])) > 2      # the two cores take turns
        orders.add(tuple(order))
    assert len(orders) > 1


def _neighbour_2d():
    import opennki.legacy.language as lnl

    def neighbour(x):
        """`kernel[nl.nc(2), 4]`: the core is the first grid index, four programs per core."""
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        c, i = lnl.program_id(0), lnl.program_id(1)
        lnl.store(out[c, i], value=lnl.multiply(lnl.load(x[c, i]), 2.0))
        return out
    return neighbour


@pytest.mark.parametrize("racy", [True, False])
def test_a_race_between_the_cores_of_a_grid_is_reported_at_both_lines_whatever_the_order(racy, rng):
    import opennki.legacy.language as lnl
    kernel = _neighbour(racy)
    x = rng.standard_normal((8, 16, 8)).astype(np.float32)
    write, read = _line(kernel, "lnl.store(scratch[i]"), _line(kernel, "lnl.store(out[i]")
    reports, values = [], set()
    for seed in SEEDS:
        out, found = _run_grid(kernel, lnl.nc(2) * 4, x, seed)
        reports.append(_report(found))
        values.add(tuple(np.isnan(out[:, 0, 0])))
        if not racy:
            np.testing.assert_array_equal(out, 2 * x)
    if not racy:
        assert reports == [[]] * len(SEEDS)
        return
    # what a program reads depends on whether the other core's program got to its store first
    assert len(values) > 1
    assert all(r == reports[0] for r in reports)
    # program p (core 0) and program p + 4 (core 1) each read the slot the other writes: reported once per
    # pair of lines, for the lowest pair of programs
    assert [(rule, lines, programs) for rule, lines, programs, *_ in reports[0]] == [
        ("program_race_write_read", (write, read), ((0,), (4,))),
        ("program_race_write_read", (read, write), ((0,), (4,)))]


def test_a_collective_over_programs_of_one_core_completes_in_every_order(rng):
    """A program waiting at an all_reduce lets the next program of its core start (else programs 0 and 1,
    both on core 0, could never meet)."""
    import opennki.legacy as lnki
    import opennki.legacy.language as lnl

    def twice_reduced(x):
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
        i = lnl.program_id(0)
        t = lnl.load(x[i])
        for _ in range(2):
            t = lnl.all_reduce(t, op=np.add, program_axes=[0])
        lnl.store(out[i], value=t)
        return out

    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    want = np.broadcast_to(4 * x.sum(axis=0), x.shape)
    for seed in SEEDS:
        with collecting() as found:
            out = lnki.jit(twice_reduced, platform_target="trn2", detect_races=True,
                           interleave_seed=seed)[lnl.nc(2) * 2](x)
        np.testing.assert_allclose(out, want, rtol=1e-5)
        assert found == []


def test_when_findings_are_collected_a_divergence_is_a_finding_naming_both_cores_lines(rng):
    """`opennki check` / `--nki-check`: the launch still fails (its cores cannot go on), and the findings
    hold a divergence record with each core's line, why it matters and the fix."""
    from opennki.errors import KernelError
    from opennki.listeners.findings import FindingKind
    diverging = _diverging_kernel()
    x = rng.standard_normal((16, 8)).astype(np.float32)
    barrier, ended = _line(diverging, "nisa.core_barrier(out"), _line(diverging, "nisa.dma_copy(dst=t")
    for seed in SEEDS:
        with collecting() as found, pytest.raises(KernelError, match="err_divergent_control_flow"):
            nki.jit(diverging, interleave_seed=seed)[2](x)
        assert [f.kind for f in found] == [FindingKind.DIVERGENCE]
        f = found[0]
        assert f.rule == "err_divergent_control_flow" and f.kernel == "diverging"
        assert [(p, loc.lineno) for p, loc in zip(f.programs, f.lines)] == [((0,), barrier), ((1,), ended)]
        assert "finished without making this call" in f.message
        assert "hangs" in f.why and "every core named in the call must make it" in f.fix
        assert f.to_json()["kind"] == "divergence"
