"""The race and hazard checker (`detect_races=`, listeners/races.py): loop-carried RAW / WAR / WAW between
iterations of a legacy `affine_range` loop, races between SPMD programs on shared HBM and between LNC cores
around barriers; each kernel with the bug is reported at its lines, the same kernel fixed reports nothing,
and the outputs are the same with the checker attached."""

import numpy as np
import pytest

import opennki as nki_new
import opennki.isa as nisa_new
import opennki.language as nl_new
import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.releases import Generation
from opennki.errors import RaceError
from opennki.listeners.findings import FindingKind, collecting
from opennki.kernels.base import run_kernel
from opennki.listeners.races import RaceChecker
from opennki.sim import SimOptions
from tests.raises import raises_at


def _line(fn, text: str) -> int:
    """The line number of the statement of `fn` containing `text`."""
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _findings(kernel, *args, grid=None, new=False):
    front = nki_new if new else nki
    k = front.jit(kernel, detect_races=True)
    if grid is not None:
        k = k[grid]
    with collecting() as found:
        result = k(*args)
    plain = front.jit(kernel)
    plain = plain[grid] if grid is not None else plain
    reference = plain(*args)
    for got, want in zip(result if isinstance(result, tuple) else (result,),
                         reference if isinstance(reference, tuple) else (reference,)):
        np.testing.assert_array_equal(got, want)     # the checker observes, never changes a value
    return found


# -- affine_range loop-carried hazards ------------------------------------------------------------------------

def _prefix_sum(loop):
    def prefix_sum(x):
        out = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((16, 32), dtype=nl.float32)
        buf[:, 0:8] = nl.load(x[0])
        for i in loop(1, 4):
            prev = buf[:, nl.ds((i - 1) * 8, 8)]
            buf[:, nl.ds(i * 8, 8)] = nl.add(prev, nl.load(x[i]))     # reads what iteration i-1 wrote
        nl.store(out, value=buf)
        return out
    return prefix_sum


def test_loop_carried_read_after_write_is_reported_at_both_lines(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    kernel = _prefix_sum(nl.affine_range)
    found = _findings(kernel, x)
    assert len(found) == 1
    f = found[0]
    assert f.kind is FindingKind.RACE and f.rule == "affine_loop_carried_raw"
    assert f.iterations == (1, 2)
    line = _line(kernel, "buf[:, nl.ds(i * 8, 8)] =")
    assert [loc.lineno for loc in f.lines] == [line, line]
    assert f.regions[0].overlaps(f.regions[1])
    assert "sequential_range" in f.fix and "reorder" in f.why
    assert f"created at line {_line(kernel, 'buf = nl.ndarray')}" in f.message


def test_the_same_dependency_in_a_sequential_loop_is_not_reported(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    found = _findings(_prefix_sum(nl.sequential_range), x)
    assert found == []


def test_outside_a_collecting_block_the_first_finding_raises(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    kernel = _prefix_sum(nl.affine_range)
    with raises_at(RaceError, match="affine_loop_carried_raw") as info:
        nki.jit(kernel, detect_races=True)(x)
    assert info.value.location.lineno == _line(kernel, "buf[:, nl.ds(i * 8, 8)] =")
    nki.jit(kernel)(x)                           # off: nothing attached, nothing reported


def test_environment_variable_turns_the_checker_on(rng, monkeypatch):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    monkeypatch.setenv("OPENNKI_DETECT_RACES", "1")
    with raises_at(RaceError):
        nki.jit(_prefix_sum(nl.affine_range))(x)


def _shift_left(source):
    def shift_left(x):
        out = nl.ndarray((16, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        buf = nl.ndarray((16, 40), dtype=nl.float32)
        src = nl.ndarray((16, 40), dtype=nl.float32)
        for j in nl.static_range(5):
            buf[:, nl.ds(j * 8, 8)] = nl.load(x[j])
            src[:, nl.ds(j * 8, 8)] = nl.load(x[j])
        for i in nl.affine_range(4):
            nxt = (buf if source == "buf" else src)[:, nl.ds((i + 1) * 8, 8)]   # iteration i+1 writes it
            buf[:, nl.ds(i * 8, 8)] = nl.multiply(nxt, 2.0)
        nl.store(out, value=buf[:, 0:32])
        return out
    return shift_left


@pytest.mark.parametrize("source,reported", [("buf", True), ("src", False)])
def test_loop_carried_write_after_read(source, reported, rng):
    x = rng.standard_normal((5, 16, 8)).astype(np.float32)
    kernel = _shift_left(source)
    found = _findings(kernel, x)
    assert [f.rule for f in found] == (["affine_loop_carried_war"] if reported else [])
    if reported:
        line = _line(kernel, "buf[:, nl.ds(i * 8, 8)] =")
        assert [loc.lineno for loc in found[0].lines] == [line, line] and found[0].iterations == (0, 1)


def test_write_after_write_is_reported_in_a_shape_only_run():
    """Writes of the same location are also the compiler's err_unexpected_output_dependencies (raised at run
    time by the legacy rules); shape-only runs (benchmark, profile) see them through the checker."""
    from opennki.sim.simulator import ShapeSpec

    def reuse(a):
        out = nl.ndarray((4 * 16, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((16, 8), dtype=a.dtype)
        for i in nl.affine_range(4):
            t[...] = nl.load(a[i * 16:(i + 1) * 16, :])
            nl.store(out[i * 16:(i + 1) * 16, :], value=t)
        return out
    checker = RaceChecker()
    run_kernel(reuse, (ShapeSpec((64, 8), np.float32),), options=SimOptions(shape_only=True),
               listeners=[checker], generation=Generation.LEGACY)
    rules = sorted({f.rule for f in checker.report()})
    assert rules == ["affine_loop_carried_raw", "affine_loop_carried_war", "affine_loop_carried_waw"]
    assert all(loc.lineno in (_line(reuse, "t[...] ="), _line(reuse, "nl.store(out[i"))
               for f in checker.report() for loc in f.lines)


def _accumulating(pattern):
    def kernel(x):
        out = nl.ndarray((16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((16, 8), dtype=nl.float32)
        psum = nl.zeros((16, 8), dtype=nl.float32, buffer=nl.psum)
        ident = nl.load(nl.shared_identity_matrix(16, dtype=nl.float32))
        peek = nl.ndarray((16, 32), dtype=nl.float32)
        for i in nl.affine_range(4):
            t = nl.load(x[i])
            if pattern == "sbuf_add":
                acc += t
            elif pattern == "psum_matmul":
                psum += nl.matmul(ident, t, transpose_x=True)
            elif pattern == "psum_matmul_then_read":
                psum += nl.matmul(ident, t, transpose_x=True)
                peek[:, nl.ds(i * 8, 8)] = nl.copy(psum)     # reads the sum other iterations add to
            elif pattern == "inner_tile":
                inner = nl.ndarray((16, 8), dtype=nl.float32)
                inner[...] = nl.exp(t)
                acc += inner
        nl.store(out, value=nl.add(acc, psum))
        return out
    return kernel


@pytest.mark.parametrize("pattern,rules", [
    ("sbuf_add", []), ("psum_matmul", []), ("inner_tile", []),
    ("psum_matmul_then_read", ["affine_loop_carried_raw", "affine_loop_carried_war"]),
])
def test_accumulation_across_iterations_is_allowed_but_reading_it_is_not(pattern, rules, rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    kernel = _accumulating(pattern)
    found = _findings(kernel, x)
    assert sorted({f.rule for f in found}) == rules
    if rules:
        matmul = _line(kernel, "= nl.copy(psum)") - 1
        assert {loc.lineno for f in found for loc in f.lines} == {matmul, matmul + 1}


# -- SPMD programs ------------------------------------------------------------------------------------------

def _spmd(own_slice: bool):
    def spmd(x):
        out = nl.ndarray((2, 16, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        t = nl.exp(nl.load(x[i]))
        nl.store(out[i if own_slice else 0], value=t)
        return out
    return spmd


@pytest.mark.parametrize("own_slice", [False, True])
def test_spmd_programs_writing_the_same_shared_bytes(own_slice, rng):
    x = rng.standard_normal((2, 16, 8)).astype(np.float32)
    kernel = _spmd(own_slice)
    found = _findings(kernel, x, grid=2)
    if own_slice:
        assert found == []
        return
    assert [f.rule for f in found] == ["program_race_write_write"]
    assert found[0].programs == ((0,), (1,))
    line = _line(kernel, "nl.store(out[")
    assert [loc.lineno for loc in found[0].lines] == [line, line]


def _gather_after_store(rows_read: int):
    """Program 0 stores rows 64..71 of shared scratch; every program then gathers rows
    `rows_read..rows_read+7` back through a run-time index tile (an access without an index box)."""
    def gather(x):
        scratch = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray((2, 8, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        i_p, i_f = nl.arange(8)[:, None], nl.arange(16)[None, :]
        if i == 0:
            nl.store(scratch[64 + i_p, i_f], value=nl.load(x))
        idx = nisa.iota(rows_read + i_p, dtype=nl.int32)
        nl.store(out[i], value=nl.load(scratch[idx, i_f]))
        return out
    return gather


@pytest.mark.parametrize("rows_read", [64, 0])
def test_a_gather_racing_with_a_store_of_the_same_rows_is_found(rows_read, rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    kernel = _gather_after_store(rows_read)
    with collecting() as found:
        nki.jit(kernel, detect_races=True)[2](x)
    if rows_read == 0:          # rows never stored: uninitialised, but no race
        assert found == []
        return
    # program 1's gather reads the rows program 0 stored (its own gather is ordered after its own store)
    assert [f.rule for f in found] == ["program_race_write_read"]
    assert [loc.lineno for loc in found[0].lines] == [_line(kernel, "nl.store(scratch["),
                                                      _line(kernel, "nl.store(out[i]")]
    assert found[0].programs == ((0,), (1,))


# -- LNC=2 cores around barriers ------------------------------------------------------------------------------

def _mirror(barrier: bool):
    def mirror(x):
        half = x.shape[0] // 2
        rank = nl_new.program_id(0)
        scratch = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
        out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
        t = nl_new.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=t, src=x[rank * half:(rank + 1) * half, :])
        nisa_new.dma_copy(dst=scratch[rank * half:(rank + 1) * half, :], src=t)
        if barrier:
            nisa_new.core_barrier(scratch, (0, 1))
        other = 1 - rank
        nisa_new.dma_copy(dst=t, src=scratch[other * half:(other + 1) * half, :])
        nisa_new.dma_copy(dst=out[rank * half:(rank + 1) * half, :], src=t)
        return out
    return mirror


@pytest.mark.parametrize("barrier", [False, True])
def test_lnc_cores_reading_what_the_other_core_writes(barrier, rng):
    x = rng.standard_normal((64, 16)).astype(np.float32)
    kernel = _mirror(barrier)
    with collecting() as found:
        nki_new.jit(kernel, detect_races=True)[2](x)
    if barrier:
        assert found == []
        return
    # core 1 reads the half core 0 writes, and core 0 reads the half core 1 writes: two write/read races,
    # each named lower core first
    assert [f.rule for f in found] == ["program_race_write_read"] * 2
    write, read = _line(kernel, "dst=scratch[rank"), _line(kernel, "src=scratch[other")
    assert sorted(tuple(loc.lineno for loc in f.lines) for f in found) == sorted([(write, read), (read, write)])
    for f in found:
        assert f.programs == ((0,), (1,))
        first, second = (loc.lineno for loc in f.lines)
        verbs = {write: "writes", read: "reads"}
        assert f"program [0] {verbs[first]} and program [1] {verbs[second]} the same" in f.message


def _diverging(same_path: bool):
    def diverging(x):
        rank = nl_new.program_id(0)
        out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
        t = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
        u = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=t, src=x)
        if rank == 0 or same_path:
            nisa_new.core_barrier(out, (0, 1))
        else:
            nisa_new.sendrecv(src=t, dst=u, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        if rank == 0:
            nisa_new.dma_copy(dst=out, src=t)
        return out
    return diverging


@pytest.mark.parametrize("same_path", [False, True])
def test_cores_diverging_around_a_barrier_name_both_lines(same_path, rng):
    from opennki.errors import KernelError
    x = rng.standard_normal((16, 8)).astype(np.float32)
    kernel = _diverging(same_path)
    if same_path:
        np.testing.assert_array_equal(nki_new.jit(kernel, detect_races=True)[2](x), x)
        return
    with pytest.raises(KernelError, match="err_divergent_control_flow") as info:
        nki_new.jit(kernel)[2](x)
    text = str(info.value)
    barrier, send = _line(kernel, "nisa_new.core_barrier(out"), _line(kernel, "nisa_new.sendrecv(")
    assert "[0] waits at nisa.core_barrier" in text and f":{barrier}:" in text
    assert "[1] waits at nisa.sendrecv" in text and f":{send}:" in text
    assert info.value.location.lineno == barrier
    with collecting() as found, pytest.raises(KernelError, match="err_divergent_control_flow"):
        nki_new.jit(kernel)[2](x)      # collected: also a divergence finding with each core's waiting line
    assert [(f.kind, f.programs, tuple(loc.lineno for loc in f.lines)) for f in found] == [
        (FindingKind.DIVERGENCE, ((0,), (1,)), (barrier, send))]


# -- ordered loops: no report ----------------------------------------------------------------------------------

@pytest.mark.parametrize("loop", ["sequential_range", "static_range", "range"])
def test_legacy_loops_whose_order_is_guaranteed_report_nothing(loop, rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    kernel = _prefix_sum(getattr(nl, loop) if loop != "range" else range)
    with collecting() as found:
        out = nki.jit(kernel, detect_races=True)(x)
    np.testing.assert_allclose(out, np.cumsum(x, axis=0).transpose(1, 0, 2).reshape(16, 32), rtol=1e-5)
    assert found == []


def _new_doubling(loop: str):
    """New generation: every iteration doubles `a` through `b` (reads what the previous iteration wrote,
    rewrites what it read), over an unrolled loop (`nl.affine_range` is an alias of `range` there) or a
    device loop: the order is guaranteed, so nothing is reported."""
    def doubling(x):
        out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
        a = nl_new.ndarray(x.shape, dtype=nl_new.float32, buffer=nl_new.sbuf)
        b = nl_new.ndarray(x.shape, dtype=nl_new.float32, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=a, src=x)

        def body(i):
            nisa_new.tensor_scalar(dst=b, data=a, op0=nl_new.multiply, operand0=2.0)
            nisa_new.tensor_copy(dst=a, src=b)

        if loop == "fori_loop":
            nl_new.fori_loop(0, 4, body)
        else:
            for i in (nl_new.dynamic_range(0, 4, 1) if loop == "dynamic_range" else
                      nl_new.affine_range(4) if loop == "affine_range" else range(4)):
                body(i)
        nisa_new.dma_copy(dst=out, src=a)
        return out
    return doubling


@pytest.mark.parametrize("loop", ["affine_range", "range", "dynamic_range", "fori_loop"])
def test_new_generation_loops_and_device_loops_report_nothing(loop, rng):
    x = rng.standard_normal((16, 8)).astype(np.float32)
    with collecting() as found:
        out = nki_new.jit(_new_doubling(loop), detect_races=True)(x)
    np.testing.assert_array_equal(out, 16 * x)
    assert found == []
