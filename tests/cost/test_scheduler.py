"""The scheduler: placement on engine timelines, dependencies, pipelining, roofline, multi-program launches."""

import traceback

import numpy as np
import pytest

import opennki as nki_new
import opennki.isa as nisa
import opennki.language as nl
from opennki.cost import CostModel
from opennki.perf.estimate import estimate
from opennki.events import AccessKind, Engine, InstructionExecuted, MemoryKind, Operand, Region
from opennki.hw import TRN2
from opennki.kernels.base import run_kernel
from tests.cost import kernels as K
from tests.cost.helpers import spec
from tests.raises import raises_at


def test_a_single_load_waits_trigger_plus_setup_then_moves_its_descriptors():
    r = estimate(K.one_load, (spec((128, 2048)),), target="trn2")
    (rec,) = r.records
    dma = TRN2.cost.dma
    trigger = 64 / 1.2
    assert dma.fixed_latency_ns == pytest.approx(853.5, abs=0.1)         # the efficiency curve's flat part
    assert rec.start == pytest.approx(trigger + dma.fixed_latency_ns)
    per_engine = 128 * 2048 * 4 / 16
    assert rec.duration_ns == pytest.approx(per_engine / 23.0 + 8 * 2.2)   # 8 row descriptors per engine
    assert r.latency_ns == pytest.approx(max(rec.end, TRN2.cost.launch_floor_ns))


def test_dependent_instruction_starts_after_its_producer_plus_the_semaphore_overhead():
    r = estimate(K.one_tensor_scalar, (spec((128, 512)),), target="trn2")
    load, scale = r.records
    # the multiply was left to the compiler: ACT (1.2 GHz) finishes it before DVE (0.96 GHz)
    assert scale.row == "Scalar" and scale.start == pytest.approx(load.end + 100 / 1.2)
    assert scale.pred == load.index and scale.stall_kind == "raw"


def test_dma_bound_kernel_approaches_bytes_over_bandwidth():
    a = spec((2048, 8192))                               # 32 KiB per partition per tile: full efficiency
    r = estimate(K.stream_copy, (a,), target="trn2")
    bytes_moved = 2 * 2048 * 8192 * 4
    ideal = bytes_moved / TRN2.cost.dma.aggregate_bandwidth_bytes_per_ns
    assert ideal <= r.latency_ns <= 1.08 * ideal
    assert r.roofline.bound == "dma" and r.dma_utilization > 0.9


def test_matmul_bound_kernel_approaches_the_tensor_engine_peak():
    for target in ("trn1", "trn2"):
        r = estimate(K.matmul_resident, (spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"), 400),
                     target=target)
        assert r.roofline.bound == "compute"
        assert 0.88 <= r.mfu <= 1.0, (target, r.mfu)
        assert r.folded_fills == 400                     # nl.zeros(psum) + matmul: the accumulation flag


def test_fresh_buffers_per_iteration_overlap_while_one_reused_buffer_serialises():
    a = spec((2048, 2048))
    fresh = estimate(K.scale_fresh, (a,), target="trn2")
    reused = estimate(K.scale_reused, (a,), target="trn2")
    assert fresh.total_ns * 1.3 < reused.total_ns
    assert any(rec.stall_kind == "war" for rec in reused.records)
    assert not any(rec.stall_kind in ("war", "waw") for rec in fresh.records)


@pytest.mark.parametrize("kernel, args, target", [
    (K.stream_copy, (spec((512, 1024)),), "trn1"),
    (K.tiled_matmul, (spec((512, 256), "bfloat16"), spec((512, 1024), "bfloat16")), "trn2"),
    (K.tiled_matmul, (spec((256, 128)), spec((256, 512))), "trn3"),
    (K.matmul_resident, (spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"), 50), "trn3"),
    (K.softmax_rows, (spec((256, 512)),), "trn2"),
    (K.narrow_loads, (spec((128, 256)),), "trn1"),
])
def test_estimate_is_never_below_the_roofline(kernel, args, target):
    r = estimate(kernel, args, target=target)
    assert r.total_ns >= r.roofline.bound_ns > 0
    assert r.latency_ns >= r.total_ns
    for row in ("TensorMatrix", "Vector", "Scalar", "GpSimd"):
        assert r.engine_busy_ns(row) <= r.total_ns * r.cores + 1e-6


def test_spmd_programs_on_one_core_run_back_to_back():
    def tile_kernel(a):
        out = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.tensor_scalar(dst=x, data=x, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out, src=x)
        return out
    one = estimate(tile_kernel, (spec((128, 2048)),), target="trn2")
    four = estimate(tile_kernel, (spec((128, 2048)),), grid=4, target="trn2")
    assert four.programs == 4 and four.cores == 1 and {r.core for r in four.records} == {0}
    # each program reuses the previous one's SBUF addresses: they queue up behind each other
    assert 3.0 * one.total_ns < four.total_ns <= 4.0 * one.total_ns + 3 * 250


def test_lnc2_launch_runs_its_programs_on_two_cores_in_parallel():
    @nki_new.jit
    def halves(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        half = a.shape[0] // nl.num_programs()
        base = nl.program_id(0) * half
        for i in nl.affine_range(half // 128):
            x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a[base + i * 128:base + (i + 1) * 128, :])
            nisa.dma_copy(dst=out[base + i * 128:base + (i + 1) * 128, :], src=x)
        return out
    a = spec((2048, 4096))
    lnc1 = estimate(halves, (a,), target="trn2")
    lnc2 = estimate(halves[2], (a,), target="trn2")
    assert lnc1.cores == 1 and lnc2.cores == 2 and {r.core for r in lnc2.records} == {0, 1}
    assert lnc2.total_ns < 0.65 * lnc1.total_ns


def test_an_instruction_without_a_rule_is_reported_uncosted_not_free():
    model = CostModel("trn2")
    op = Operand("dst", AccessKind.WRITE, Region(MemoryKind.SBUF, 1, 0, 128, 0, 512), (128, 128), "float32", 4,
                 128, 128, (128, 1), 0, "t", (128, 128))
    model.on_event(InstructionExecuted(0, (), 0, "mystery_op", Engine.VECTOR, (op,)))
    r = model.result()
    assert r.uncosted == {"mystery_op": 1} and "UNCOSTED" in r.format()


def test_listening_does_not_change_results(rng):
    a = rng.standard_normal((256, 512)).astype(np.float32)
    model = CostModel("trn2")
    out = run_kernel(K.softmax_rows, (a,), target="trn2", listeners=[model])
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-6)
    assert model.result().opcode_counts["activation"] == 2


def test_estimate_errors_name_the_kernel_line():
    from opennki.errors import ShapeError

    def bad(a):
        x = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        return a
    with raises_at(ShapeError, match="same number of elements") as exc:     # 256 per partition into 512
        estimate(bad, (spec((128, 256)),), target="trn2")
    assert traceback.extract_tb(exc.value.__traceback__)[-1].line == "nisa.dma_copy(dst=x, src=a)"


def test_critical_path_ends_at_the_last_instruction_and_follows_gating_records():
    r = estimate(K.scale_fresh, (spec((512, 1024)),), target="trn2")
    path = r.critical_path
    assert path[-1].end == pytest.approx(r.total_ns)
    for a, b in zip(path, path[1:]):
        assert b.pred == a.index and a.end <= b.start + 1e-6


def test_an_in_place_update_waits_on_its_input_not_on_buffer_reuse():
    r = estimate(K.one_activation, (spec((128, 512)),), target="trn2")
    load, act1, act2 = r.records
    assert act1.stall_kind == "raw" and act2.stall_kind == "raw"     # act2 overwrites x, which it also follows


def _ns(cycles, ghz):
    return cycles / ghz


def test_write_after_write_waits_for_the_first_write_plus_the_trigger_overhead():
    def twice(a):
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=x, src=a)
        return a
    first, second = estimate(twice, (spec((128, 2048)),), target="trn2").records
    assert second.stall_kind == "waw" and second.pred == first.index
    # the Sync engine triggers it 100 cycles after the first write ends, then 64 cycles, then the setup
    assert second.issue_start == pytest.approx(first.end + _ns(100, 1.2))
    assert second.start == pytest.approx(first.end + _ns(100 + 64, 1.2) + TRN2.cost.dma.fixed_latency_ns)
    assert second.duration_ns == pytest.approx(first.duration_ns)


def test_address_reuse_waits_for_the_last_use_of_the_previous_tensor_there():
    def tile_kernel(a):
        out = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.dma_copy(dst=out, src=x)
        return out
    r = estimate(tile_kernel, (spec((128, 2048)),), grid=2, target="trn2")
    load0, store0, load1, store1 = r.records
    # program 1's x takes program 0's SBUF range: its load may not write before program 0's store read it
    assert load1.stall_kind == "reuse" and load1.pred == store0.index
    assert load1.issue_start == pytest.approx(store0.end + _ns(100, 1.2))


def test_engine_left_to_the_compiler_goes_where_the_copy_finishes_first():
    def copies(a):
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        for _ in range(3):
            y = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=y, src=x)
        z = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=z, src=x, engine=nisa.vector_engine)
        return a
    load, c1, c2, c3, pinned = estimate(copies, (spec((128, 2048)),), target="trn2").records
    dve, act = _ns(2048, 0.96), _ns(2048, 1.2)         # fp32, N = 2048: 2133 ns on DVE, 1707 on ACT and POOL
    assert (c1.row, c2.row, c3.row) == ("Scalar", "GpSimd", "Vector")
    assert c1.start == pytest.approx(load.end + _ns(100, 1.2)) and c1.duration_ns == pytest.approx(act)
    assert c2.start == pytest.approx(load.end + _ns(100, 1.2)) and c2.duration_ns == pytest.approx(act)
    assert c3.start == pytest.approx(load.end + _ns(100, 0.96)) and c3.duration_ns == pytest.approx(dve)
    assert pinned.row == "Vector" and pinned.start == pytest.approx(c3.end)     # engine= is honoured


def test_an_instruction_ready_early_runs_in_the_idle_stretch_before_a_waiting_one():
    def unlucky_order(a):
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        y = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=x)            # waits for the load
        small = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=small, value=1.0, engine=nisa.gpsimd_engine)
        w = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=w, op=nl.exp, data=small)        # ready long before: runs first on ACT
        return a
    load, act1, fill, act2 = estimate(unlucky_order, (spec((128, 2048)),), target="trn2").records
    assert fill.start == 0 and fill.end == pytest.approx(_ns(64, 1.2))          # POOL MIN_II
    assert act2.start == pytest.approx(fill.end + _ns(100, 1.2))
    # the exp table load is charged to the first exp in program order (act1); act2 finds it loaded
    assert act2.end == pytest.approx(act2.start + _ns(64, 1.2)) and act2.end <= act1.start
    assert act1.start == pytest.approx(load.end + _ns(100, 1.2))


def test_no_reorder_keeps_program_order_on_the_engine():
    def in_order(a):
        with nl.no_reorder():
            x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            y = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
            nisa.activation(dst=y, op=nl.exp, data=x)
            small = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
            nisa.memset(dst=small, value=1.0, engine=nisa.gpsimd_engine)
            w = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
            nisa.activation(dst=w, op=nl.exp, data=small)
        return a
    load, act1, fill, act2 = estimate(in_order, (spec((128, 2048)),), target="trn2").records
    assert act2.start == pytest.approx(act1.end) and act2.pred == act1.index     # behind act1, not in the gap


def test_write_after_read_waits_for_the_reader_plus_the_trigger_overhead():
    def reread(a):
        x = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, 2048), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a)
        nisa.tensor_copy(dst=y, src=x, engine=nisa.vector_engine)
        nisa.dma_copy(dst=x, src=a)                  # overwrites what the copy reads
        return a
    load, copy, reload = estimate(reread, (spec((128, 2048)),), target="trn2").records
    assert copy.start == pytest.approx(load.end + _ns(100, 0.96))          # flow: the Vector Engine's semaphore
    assert copy.duration_ns == pytest.approx(_ns(2048, 0.96))              # fp32: N cycles, no perf mode
    assert reload.stall_kind == "war" and reload.pred == copy.index
    # the Sync engine triggers the reload 100 cycles after the copy's read ends, then 64 cycles, then the setup
    assert reload.issue_start == pytest.approx(copy.end + _ns(100, 1.2))
    assert reload.start == pytest.approx(copy.end + _ns(100 + 64, 1.2) + TRN2.cost.dma.fixed_latency_ns)
    assert reload.duration_ns == pytest.approx(load.duration_ns)


def _two_accumulation_groups(a, b, ordered):
    x = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    w = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w, src=b)
    slow = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=slow, op=nl.exp, data=x)                 # two table loads keep it late
    nisa.activation(dst=slow, op=nl.tanh, data=slow)
    p1 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    p2 = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p1, stationary=slow, moving=w)            # group 1 waits for the exp
    if ordered:
        with nl.no_reorder():
            nisa.nc_matmul(dst=p2, stationary=x, moving=w)
    else:
        nisa.nc_matmul(dst=p2, stationary=x, moving=w)           # group 2: ready when the loads are
    nisa.nc_matmul(dst=p1, stationary=x, moving=w, accumulate=True)   # group 1 again: after its first matmul
    return a


def test_a_later_accumulation_group_runs_in_the_tensor_engines_idle_stretch_while_a_group_keeps_its_order():
    # trn1: no dI/dt throttle (on trn2 the idle PE would start at half rate, and group 2 no longer fits)
    args = (spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"))
    load_x, load_w, _, act, mm1, mm2, mm3 = estimate(
        lambda a, b: _two_accumulation_groups(a, b, False), args, target="trn1").records
    ls, mm, overhead = _ns(128 / 4, 2.8), _ns(512, 2.8), _ns(64, 2.8)   # LoadStationary M/4, MultiplyMoving N
    assert mm1.start == pytest.approx(act.end + overhead + ls) and mm1.stall_kind == "raw"
    # group 2 in the PE's idle stretch before mm1: its LoadStationary, then its MultiplyMoving, before mm1
    assert mm2.ls_start == pytest.approx(max(load_x.end, load_w.end) + overhead)
    assert mm2.start == pytest.approx(mm2.ls_start + ls) and mm2.end == pytest.approx(mm2.start + mm)
    assert mm2.end < mm1.start
    # the second matmul of group 1 ready as early, but kept behind the group's first (LoadStationary hidden)
    assert mm3.start == pytest.approx(mm1.end) and mm3.end == pytest.approx(mm1.end + mm)


def test_no_reorder_keeps_a_matmul_behind_the_earlier_group():
    args = (spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"))
    *_, mm1, mm2, mm3 = estimate(lambda a, b: _two_accumulation_groups(a, b, True), args, target="trn1").records
    assert mm2.start == pytest.approx(mm1.end) and mm3.start == pytest.approx(mm2.end)


def test_critical_path_goes_on_through_the_engine_before_an_instruction_placed_at_an_idle_stretchs_start():
    def gap_start(a):
        x = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=x, value=1.0, engine=nisa.gpsimd_engine)
        y = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=x)                      # A
        big = nl.ndarray((128, 4096), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=big, src=a)
        z = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=z, op=nl.exp, data=big[:, 0:64])           # B: waits for the load
        w = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=w, op=nl.exp, data=x)                      # C: ready early, in the stretch after A
        o = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.sbuf)
        nisa.reciprocal(dst=o, data=w)                                 # D: 8N Vector cycles, ends last
        return a
    r = estimate(gap_start, (spec((128, 4096)),), target="trn2")
    fill, act_a, load, act_b, act_c, recip = r.records
    assert act_c.start == act_a.end and act_c.end < act_b.start           # out of program order, at A's end
    assert act_c.pred == -1 and recip.pred == act_c.index
    # C waited for its engine (A), not for a dependence: the path goes on through A to the fill A read
    assert [rec.index for rec in r.critical_path] == [fill.index, act_a.index, act_c.index, recip.index]



def test_a_matmul_placed_without_trying_the_idle_stretches_fits_none(rng):
    """`_place_pe` calls `_backfill_pe` only when the last idle stretch, from the dependency's time, has room for
    the MultiplyMoving (the groups a matmul waits for and its LoadStationary only make `_backfill_pe`'s own test
    stricter). On random Tensor Engine timelines, dependencies, accumulation groups and costs, every matmul it
    places without the call is one `_backfill_pe` would have placed in no stretch; matmuls placed without the
    call, placed in a stretch and tried in vain all occur."""
    import copy

    from opennki.cost.deps import Dependency
    from opennki.cost.scheduler import _PE
    from opennki.cost.timeline import Timeline
    from opennki.cost.value import Cost

    model = CostModel("trn2")
    model._start(TRN2)
    backfill = model._backfill_pe
    calls = []
    model._backfill_pe = lambda *args: calls.append(backfill(*args)) or calls[-1]
    outcomes = set()
    for i in range(3000):
        state = copy.deepcopy(model._core(0))
        line = state.lines[_PE] = Timeline()
        for k in range(int(rng.integers(1, 12))):
            line.reserve(float(rng.uniform(0, line.free + 400)), float(rng.uniform(1, 150)), k)
        state.free[_PE], state.last[_PE] = line.free, line.last
        dep = Dependency()
        if rng.random() < 0.8:
            dep.ready, dep.producer = float(rng.uniform(0, line.free)), int(rng.integers(0, 20))
        groups = [int(g) for g in rng.choice(4, int(rng.integers(1, 3)), replace=False)]
        state.groups = {g: (float(rng.uniform(0, line.free + 50)), int(rng.integers(0, 20))) for g in range(4)
                        if rng.random() < 0.5}
        operands = tuple(Operand("dst", AccessKind.ACCUMULATE, Region(MemoryKind.PSUM, g, 0, 128, 0, 2048), (128, 512),
                                 "float32", 4, 128, 512, (512, 1), 0, "acc", (128, 512)) for g in groups)
        ev = InstructionExecuted(i, (), 0, "nc_matmul", Engine.TENSOR, operands)
        cost = Cost(Engine.TENSOR, busy_ns=float(rng.uniform(1, 200)),
                    load_stationary_ns=float(rng.choice([0.0, rng.uniform(1, 60)])), is_transpose=rng.random() < 0.2)
        calls.clear()
        model._place_pe(ev, cost, copy.deepcopy(state), dep, i, (tuple(range(len(groups))), None))
        if calls:
            outcomes.add(("tried", calls[0] is not None))
        else:
            assert backfill(ev, cost, copy.deepcopy(state), dep, i, TRN2.cost.tensor, groups) is None
            outcomes.add("not tried")
    assert {("tried", True), ("tried", False), "not tried"} <= outcomes
