"""The cost model's caches and fast paths change no figure. The plain path: the per-signature memo of cost
rules, the scheduler's per-signature placement plans and the events' parameters kept per instruction
signature (sim/program.py `event_params`) off, every instruction checked in full (`program.LEAN_ISSUE`
off: no checks skipped by signature), every event placed as it arrives (`scheduler.BATCH_EVENTS` 1, not
in batches), loops emitting their events for the model to skip (`CostModel.loop_events`) and timelines walking
every idle gap (`timeline.SEARCHED_GAPS`) (every cost computed
by its rule, every engine
choice made from scratch, so the per-transfer caches of the scheduler and the result miss too), records
keeping their events (the dependency search then lists every dependence edge). The fast path: the memos on,
and for `keep_instructions=False` no events kept and no edges listed. Every record of an estimate (where,
when, why it waited, its dependences, its event) and the summary are the same, on kernels in the tutorials'
style (matmul steps, layernorm, Mamba, attention), the bundled examples, an LNC=2 launch and instructions
left to the compiler's engine choice. The summary's aggregates, tallied with C loops when a result is
finished, equal adding the records one at a time (values, and the order of every dict). (A record reads its
cost and kernel line through `CostResult.held`, which rows placed by a kernel line's remembered plan do not
store again: `SITE_PLANS` off, every row stores them.)"""

import dataclasses
import gc
import operator
import sys

import numpy as np
import pytest

import opennki as nki_new
import opennki.isa as nisa
import opennki.language as nl
from examples import attention_head, blocked_matmul, gelu_mlp, residual_rmsnorm, tiled_matmul
from opennki.cost.result import ROW_FIELDS, SMALL_DMA_EFFICIENCY, CostResult, Row, location_key
from opennki.cost import deps, scheduler, timeline
from opennki.cost import result as cost_result
from opennki.cost.rules import registry
from opennki.perf.estimate import estimate, trace_kernel
from opennki.sim import program
from tests.cost import kernels as K
from tests.cost import tutorial_kernels as T
from tests.cost.helpers import spec

MM = (spec((1024, 512), "bfloat16"), spec((1024, 1024), "bfloat16"))
MAMBA = tuple(spec(s) for s in ((1, 256, 128), (1, 256, 128), (256, 4), (1, 4, 128), (1, 4, 128)))


@nki_new.jit
def _halves(a):
    """Each core of an LNC=2 launch loads its half, scales it on the engine the compiler picks, stores it."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    half = a.shape[0] // nl.num_programs()
    base = nl.program_id(0) * half
    for i in range(half // 128):
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[base + i * 128:base + (i + 1) * 128, :])
        nisa.tensor_copy(dst=y, src=x)
        nisa.tensor_scalar(dst=x, data=y, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[base + i * 128:base + (i + 1) * 128, :], src=x)
    return out


def _example_args(module):
    return module.EXAMPLE["make_inputs"](np.random.default_rng(0))


CASES = [(T.mm_tiled, MM, "trn1"), (T.mm_fully_blocked, MM, "trn2"), (blocked_matmul.blocked_matmul, MM, "trn2"),
         (tiled_matmul.tiled_matmul, MM, "trn3"),
         (T.layernorm_v2, (spec((300, 512)), spec((512,)), spec((512,))), "trn2"),
         (T.mamba_v2, MAMBA, "trn1"), (T.attention_divide_output, (spec((128, 512), "bfloat16"),) * 3, "trn2"),
         (T.attention_evict_with_max, (spec((128, 512), "bfloat16"),) * 3, "trn3"),
         (_halves[2], (spec((1024, 512)),), "trn2"), (_halves, (spec((512, 512)),), "trn3")]
CASES += [(m.EXAMPLE["kernel"], _example_args(m), target)
          for m in (attention_head, gelu_mlp, residual_rmsnorm) for target in ("trn2", "trn3")]
CASES += [(K.mixed_boxes, (spec((512, 256)),), "trn2"), (K.alternating_tiles, (spec((1024, 256)),), "trn1")]
IDS = [f"{getattr(k, '__name__', type(k).__name__)}-{t}-{i}" for i, (k, _, t) in enumerate(CASES)]


def _records(result, events=True):
    storages = {}          # storage ids count on over runs: numbered by first use in each
    return [(r.index, r.seq, r.opcode, r.core, r.program, r.row, r.start, r.end, r.pred, r.stall_ns,
             r.stall_kind, r.ls_start, r.ls_end, r.issue_start, r.issue_end, r.issue_row, r.dma_engine_ns,
             r.cost, r.location, r.name) + ((r.deps, _event(r.event, storages)) if events else ())
            for r in result.records]


def _event(ev, storages):
    return (ev.seq, ev.program, ev.core, ev.opcode, ev.engine, ev.params, ev.location, ev.name, ev.ordered,
            None if ev.mask is None else ev.mask.tolist(),
            [(o.role, o.access, o.region.kind, storages.setdefault(o.region.storage_id, len(storages)),
              o.region.partition_start, o.region.partition_count, o.region.byte_start, o.region.byte_end,
              o.shape, o.dtype, o.itemsize, o.partitions, o.free_elems, o.strides, o.offset, o.tensor_name,
              o.storage_shape, o.gathered) for o in ev.operands])


def _summary(result):
    return (result.to_dict(), result.busy_ns, result.counts, result.lines, result.stalls, result.small_dmas,
            result.opcode_counts, result.uncosted, result.flops_by_peak, result.folded_fills,
            [r.index for r in result.critical_path])


@pytest.mark.parametrize("kernel,args,target", CASES, ids=IDS)
def test_cached_estimate_equals_the_plain_one(kernel, args, target, monkeypatch):
    fast = estimate(kernel, args, target=target)
    lean = estimate(kernel, args, target=target, keep_instructions=False)
    monkeypatch.setattr(registry, "_signature", lambda ev: None)
    monkeypatch.setattr(program, "event_params", lambda instr: instr.params())
    monkeypatch.setattr(program, "LEAN_ISSUE", False)
    monkeypatch.setattr(scheduler, "BATCH_EVENTS", 1)
    monkeypatch.setattr(deps, "ONE_BOX", False)
    monkeypatch.setattr(scheduler, "SITE_PLANS", False)
    monkeypatch.setattr(deps, "LAYOUT_BOXES", False)
    monkeypatch.setattr(deps, "LAYOUT_OVERLAPS", False)
    monkeypatch.setattr(deps, "SEARCHED_READS", False)
    monkeypatch.setattr(scheduler.CostModel, "loop_events", True)
    monkeypatch.setattr(timeline, "SEARCHED_GAPS", False)
    plain = estimate(kernel, args, target=target)
    assert len(fast.records) > 10
    assert _records(fast) == _records(plain)
    assert _summary(fast) == _summary(plain)
    assert all(r.event is None and r.deps == () for r in lean.records)
    assert _records(lean, events=False) == _records(plain, events=False)
    assert _summary(lean) == _summary(plain)
    assert len({id(r.event.params) for r in fast.records}) == len(fast.records)     # each event its own dict


class _Events:
    """A listener keeping the events of a run."""

    def __init__(self):
        self.events = []

    def on_event(self, ev):
        self.events.append(ev)


def test_events_placed_in_batches_give_the_figures_of_events_placed_one_by_one(monkeypatch):
    """The cost model keeps events and places them in batches (`on_event`, `place_events`); fed the events of
    a run one at a time, a batch size of 1 or a batch size that leaves a partial batch for `result()`, it
    gives every record and the summary of a model placing each event as it arrives."""
    events = _Events()
    launch = trace_kernel(_halves[2])           # run with values: the events stay as emitted while it runs on
    a = np.random.default_rng(0).standard_normal((8192, 256), dtype=np.float32)
    out = launch.launch((a,), {}, options=launch.options(target="trn2"), listeners=[events])
    np.testing.assert_array_equal(out, 2 * a)

    def placed(batch):
        monkeypatch.setattr(scheduler, "BATCH_EVENTS", batch)
        model = scheduler.CostModel()
        for ev in events.events:
            model.on_event(ev)
        return model.result()
    one_by_one = placed(1)
    assert len(events.events) > 3 * 64 and len(one_by_one.records) > 200
    assert {r.core for r in one_by_one.records} == {0, 1}
    for batch in (64, 7, 10 ** 6):
        result = placed(batch)
        assert _records(result) == _records(one_by_one)
        assert _summary(result) == _summary(one_by_one)


def test_a_model_alone_takes_the_programs_events_by_its_program_sink_with_the_figures_of_on_event(monkeypatch):
    """As a launch's only listener, the cost model takes the events a running program emits by
    `on_program_event` (sim/program.py: no test for a LaunchStarted there), and the rest by `on_event`; beside
    another listener, every event reaches it by `on_event` (`Simulator.emit`): the same records and summary,
    with values computed as usual."""
    sunk, told = [], set()
    sink, on_event = scheduler.CostModel.on_program_event, scheduler.CostModel.on_event

    def kept(model, ev):
        if id(ev) not in told:      # (not by way of `on_event`)
            sunk.append(type(ev))
        sink(model, ev)

    def heard(model, ev):
        told.add(id(ev))
        on_event(model, ev)
    launch = trace_kernel(_halves[2])
    a = np.random.default_rng(1).standard_normal((4096, 256), dtype=np.float32)
    beside, events = scheduler.CostModel(), _Events()
    out = launch.launch((a,), {}, options=launch.options(target="trn2"), listeners=[beside, events])
    np.testing.assert_array_equal(out, 2 * a)
    monkeypatch.setattr(scheduler.CostModel, "on_program_event", kept)
    monkeypatch.setattr(scheduler.CostModel, "on_event", heard)
    alone = scheduler.CostModel()
    out = launch.launch((a,), {}, options=launch.options(target="trn2"), listeners=[alone])
    np.testing.assert_array_equal(out, 2 * a)
    assert {"InstructionExecuted", "TensorAllocated", "TensorFreed"} <= {k.__name__ for k in sunk}
    assert len(sunk) < len(events.events) and "LaunchStarted" not in {k.__name__ for k in sunk}
    assert _records(alone.result()) == _records(beside.result())
    assert _summary(alone.result()) == _summary(beside.result())
    assert len(alone.result().records) > 100


def test_loops_emit_no_events_for_a_model_alone_and_every_one_beside_a_listener_that_takes_them(monkeypatch):
    """Loops cost nothing, so the cost model does not take their events (`CostModel.loop_events`): alone, it
    hears none (loops emit none); beside a listener that takes them, both hear every one. The model's records
    and summary are the same either way, and so are the kernel's values."""
    heard, sink = [], scheduler.CostModel.on_program_event      # (`on_event` hands every event on to it)
    monkeypatch.setattr(scheduler.CostModel, "on_program_event",
                        lambda model, ev: (heard.append(type(ev)), sink(model, ev)))
    example = blocked_matmul.EXAMPLE
    args = _example_args(blocked_matmul)
    launch = trace_kernel(example["kernel"])
    loop_events = {"LoopStarted", "LoopIteration", "LoopFinished"}
    beside, events = scheduler.CostModel(), _Events()
    out = launch.launch(args, {}, options=launch.options(target="trn2"), listeners=[beside, events])
    np.testing.assert_allclose(out, example["reference"](*args), rtol=2e-5, atol=1e-3)
    assert loop_events <= {type(ev).__name__ for ev in events.events} <= {k.__name__ for k in heard}
    assert len(heard) == len(events.events)
    heard.clear()
    alone = scheduler.CostModel()
    again = launch.launch(args, {}, options=launch.options(target="trn2"), listeners=[alone])
    np.testing.assert_array_equal(again, out)
    assert heard and not loop_events & {k.__name__ for k in heard}
    assert len(alone.result().records) > 50
    assert _records(alone.result()) == _records(beside.result())
    assert _summary(alone.result()) == _summary(beside.result())


def test_the_cases_cover_engine_choices_two_cores_and_cross_engine_dependences():
    rows = {r.row for k, a, t in CASES[:9] for r in estimate(k, a, target=t).records}
    lnc2 = estimate(*CASES[8][:2], target="trn2")
    assert {r.core for r in lnc2.records} == {0, 1}
    assert any(r.row == "Scalar" for r in lnc2.records if r.opcode == "tensor_copy")   # the compiler's choice
    assert {"TensorMatrix", "Vector", "Scalar"} <= rows
    kinds = {kind for r in lnc2.records for _, kind, _ in r.deps}
    assert {"raw", "war"} <= kinds


def test_a_plan_remembered_per_kernel_line_is_the_plan_of_the_events_signature(monkeypatch):
    """`CostModel._site_plan` gives an event the plan its signature keys (`_plans`), or none; on these cases
    most events take it (a loop's line repeats its instruction), and lines issuing several signatures in turn
    (K.alternating_tiles) are told apart."""
    site_plan = scheduler.CostModel._site_plan
    taken = []

    def checked(model, ev):
        plan = site_plan(model, ev)
        if plan is not None:
            assert model._plans[registry._signature(ev)] is plan
        taken.append(plan is not None)
        return plan
    monkeypatch.setattr(scheduler.CostModel, "_site_plan", checked)
    for kernel, args, target in CASES:
        del taken[:]
        estimate(kernel, args, target=target, keep_instructions=False)
        if kernel is K.alternating_tiles or kernel is tiled_matmul.tiled_matmul:
            assert sum(taken) > len(taken) / 2


def test_a_plan_taken_by_the_events_params_source_is_the_one_comparing_its_params_gives(monkeypatch):
    """An event whose params the simulator copied from a dict an instruction keeps (`params_source`) has params
    equal to it in its order at the end of the run (such a dict is never changed), and
    `CostModel._site_plan` taking an entry's plan by that dict (`scheduler.SITE_SOURCES`) gives every event the
    plan comparing its params gives (an event without it); on these cases most events of a loop take it so."""
    site_plan = scheduler.CostModel._site_plan
    by_source = []

    def checked(model, ev):
        compared = site_plan(model, dataclasses.replace(ev, params_source=None))     # (the plain path)
        source = ev.params_source
        by_source.append(source is not None and any(
            entry[7] is source for entry in model._sites.get(id(ev.location), ())))
        plan = site_plan(model, ev)
        assert plan is compared
        return plan
    monkeypatch.setattr(scheduler.CostModel, "_site_plan", checked)
    sourced = 0
    for kernel, args, target in CASES:
        del by_source[:]
        result = estimate(kernel, args, target=target)
        for ev in (r.event for r in result.records):
            if ev.params_source is not None:
                sourced += 1
                assert ev.params == ev.params_source and list(ev.params) == list(ev.params_source), ev
                assert ev.params is not ev.params_source
        if kernel is tiled_matmul.tiled_matmul:
            assert sum(by_source) > len(by_source) / 2
    assert sourced > 500


def test_operands_of_equal_layout_numbers_hold_equal_values():
    """Operands of equal `Operand.layout` numbers (which key their boxes: `deps.LAYOUT_BOXES`) hold equal
    values in every field but their role, access, tensor name and placement, over every case (several
    launches, so numbers meet across launches too); most operands have one, and a loop repeats them. Those of
    equal `Operand.form` numbers (which `CostModel._site_plan` compares) hold equal memories, shapes, dtypes,
    item sizes and strides, and have no run-time offsets; an operand has a form number when it has a layout
    number, and a form number covers several layouts (a loop's accesses at other offsets)."""
    layouts, forms, numbered, unnumbered = {}, {}, 0, 0
    for kernel, args, target in TALLY_CASES:
        for ev in (r.event for r in estimate(kernel, args, target=target).records):
            for o in ev.operands:
                assert (o.form is None) == (o.layout is None), o
                if o.layout is None:
                    unnumbered += 1
                    continue
                numbered += 1
                fields = (o.shape, o.dtype, o.itemsize, o.partitions, o.free_elems, o.strides, o.offset,
                          o.storage_shape, o.offsets, o.gathered, o.region.kind, o.region.partition_count,
                          o.region.byte_end - o.region.byte_start)
                assert layouts.setdefault(o.layout, fields) == fields, o
                form = (o.region.kind, o.shape, o.dtype, o.itemsize, o.strides, o.offsets)
                assert forms.setdefault(o.form, form) == form and o.offsets is None, o
    assert numbered > 5 * len(layouts) and numbered > 20 * unnumbered, (numbered, len(layouts), unnumbered)
    assert len(forms) < len(layouts) and not set(forms) & set(layouts)


def test_overlaps_kept_per_pair_of_layout_numbers_give_the_dependences_of_boxes_compared(monkeypatch):
    """With `deps.LAYOUT_OVERLAPS` the dependency search takes whether two boxes overlap from `deps._OVERLAPS`
    (per pair of layout numbers) after comparing them once: every record, with its dependence edges, and the
    summary equal those of comparing every pair (the switch alone off), on kernels whose searches compare
    boxes that overlap and boxes that do not (block tensors' slices, in-place updates of parts of tiles)."""
    compared = []
    overlap = deps._boxes_overlap
    monkeypatch.setattr(deps, "_boxes_overlap", lambda a, b: compared.append(overlap(a, b)) or compared[-1])
    for kernel, args, target in ((blocked_matmul.blocked_matmul, MM, "trn2"), (T.mm_fully_blocked, MM, "trn2"),
                                 (K.mixed_boxes, (spec((512, 256)),), "trn2")):
        deps._OVERLAPS.clear()
        del compared[:]
        monkeypatch.setattr(deps, "LAYOUT_OVERLAPS", True)
        kept = estimate(kernel, args, target=target)
        n_kept = len(compared)
        monkeypatch.setattr(deps, "LAYOUT_OVERLAPS", False)
        plain = estimate(kernel, args, target=target)
        assert _records(kept) == _records(plain)
        assert _summary(kept) == _summary(plain)
        if kernel is not K.mixed_boxes:
            assert True in compared and False in compared
            assert n_kept < (len(compared) - n_kept) / 2          # most comparisons taken from the memo
            assert any(deps._OVERLAPS.values())


def test_the_cases_index_storages_first_accessed_as_one_box(monkeypatch):
    """A storage accessed as one box gets its address index when accessed otherwise: found at an operand's
    dependency search, and at the record of an instruction whose operands touch a fresh storage as two boxes
    (K.mixed_boxes), so the comparison with the plain path (every storage indexed) meets both."""
    where = []
    index = deps._StorageAccesses.index
    monkeypatch.setattr(deps._StorageAccesses, "index",
                        lambda self: (where.append(sys._getframe(1).f_code.co_name), index(self)))
    estimate(K.mixed_boxes, (spec((512, 256)),), target="trn2")
    assert {"dependency", "record"} <= set(where)


def _added_one_by_one(result):
    """The summary's aggregates as adding the records one at a time gives them (the reference for the tally
    `CostResult.finish` makes with C loops): every dict in first-use order, every sum in record order."""
    busy, counts, opcodes, lines, stalls, small = {}, {}, {}, {}, {}, {}
    totals = dict(total_ns=0.0, elem_ops=0.0, transpose_flops=0.0, dma_count=0, dma_bytes=0, hbm_read_bytes=0,
                  hbm_write_bytes=0, dma_engine_ns=0.0)
    for rec in result.records:
        cost, duration = rec.cost, rec.end - rec.start
        spans = [((rec.core, rec.row), duration)]
        if rec.ls_start is not None:
            spans.append(((rec.core, Row.TENSOR), (rec.ls_end, rec.ls_start)))
        if rec.issue_start is not None:
            spans.append(((rec.core, rec.issue_row), (rec.issue_end, rec.issue_start)))
        for key, span in spans:
            if isinstance(span, tuple):                 # LoadStationary and issue time: busy + end - start
                busy[key] = busy.get(key, 0.0) + span[0] - span[1]
            else:
                busy[key] = busy.get(key, 0.0) + span
            counts[key] = counts.get(key, 0) + 1
        opcodes[rec.opcode] = opcodes.get(rec.opcode, 0) + 1
        if rec.end > totals["total_ns"]:
            totals["total_ns"] = rec.end
        totals["elem_ops"] += cost.elem_ops
        totals["transpose_flops"] += cost.transpose_flops
        line = location_key(rec.location)
        entry = lines.setdefault(line, [0.0, 0, 0.0, set()])
        entry[0] += duration
        entry[1] += 1
        entry[2] += rec.stall_ns
        entry[3].add(rec.opcode)
        if rec.stall_kind is not None and rec.stall_ns > 0:
            s = stalls.setdefault(line, [0.0, 0, set()])
            s[0] += rec.stall_ns
            s[1] += 1
            s[2].add(rec.stall_kind)
        work = cost.dma
        if work is not None:
            totals["dma_count"] += 1
            totals["dma_bytes"] += work.size_bytes
            totals["hbm_read_bytes"] += work.hbm_read_bytes
            totals["hbm_write_bytes"] += work.hbm_write_bytes
            totals["dma_engine_ns"] += rec.dma_engine_ns
            stream = result.hw.cost.dma.efficiency(work.partition_bytes) * work.efficiency
            if stream < SMALL_DMA_EFFICIENCY:
                s = small.setdefault(line, [0, 0, 1.0, float("inf"), 0.0])
                s[0] += 1
                s[1] += work.size_bytes
                s[2] = min(s[2], stream)
                s[3] = min(s[3], work.descriptor_bytes)
                s[4] += duration * work.efficiency / stream
    return busy, counts, opcodes, lines, stalls, small, totals


def _aggregates(result):
    return (result.busy_ns, result.counts, result.opcode_counts, result.lines, result.stalls, result.small_dmas,
            {name: getattr(result, name) for name in ("total_ns", "elem_ops", "transpose_flops", "dma_count",
                                                       "dma_bytes", "hbm_read_bytes", "hbm_write_bytes",
                                                       "dma_engine_ns")})


def _ordered(aggregates):
    """Each dict as its list of items (so the order counts), sets as sets."""
    return [list(a.items()) for a in aggregates]


TALLY_CASES = CASES + [(K.narrow_loads, (spec((128, 256)),), "trn1"), (K.hwdge_loads, (spec((1024, 256)),), "trn2")]


@pytest.mark.parametrize("kernel,args,target", TALLY_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_the_tally_equals_adding_records_one_by_one(kernel, args, target):
    result = estimate(kernel, args, target=target)
    assert _ordered(_aggregates(result)) == _ordered(_added_one_by_one(result))
    # tallied in two parts (a result finished and its aggregates read, then added to): the same
    again = CostResult(result.hw, cores=result.cores)
    half = len(result.records) // 2
    for rec in result.records[:half]:
        again.add(rec, rec.event)
    again.finish()
    assert sum(again.opcode_counts.values()) == half and sum(e[1] for e in again.lines.values()) == half
    first = list(again.records)                   # records are made from the rows when read
    for rec in result.records[half:]:
        again.add(rec, rec.event)
    again.finish()
    assert _ordered(_aggregates(again)) == _ordered(_added_one_by_one(result))
    assert len(again.records) == len(result.records) and all(map(operator.is_, again.records[:half], first))
    assert _records(again) == _records(result)


def test_the_tally_in_parts_of_any_size_equals_the_tally_at_once(monkeypatch):
    """The tally transposes the rows some at a time (`result._ROWS_PER_TALLY`): parts of 7 rows, or one part,
    give the same aggregates, in the same order."""
    for kernel, args, target in TALLY_CASES[:3] + TALLY_CASES[-2:]:
        aggregates = []
        for size in (7, 10 ** 6):
            monkeypatch.setattr(cost_result, "_ROWS_PER_TALLY", size)
            result = estimate(kernel, args, target=target, keep_instructions=False)
            assert len(result.rows) > 7
            aggregates.append((_ordered(_aggregates(result)), _summary(result)))
        assert aggregates[0] == aggregates[1]


def test_records_made_from_rows_hold_their_events_fields_and_placements():
    """A record made from its row (`CostResult.records`) has its event's fields, its place (a transfer's issue
    span and DMA engine time, a matmul's LoadStationary), and an index equal to its position."""
    for kernel, args, target in TALLY_CASES[:4] + TALLY_CASES[-2:]:
        result = estimate(kernel, args, target=target)
        records = result.records
        assert records is result.records and len(records) == len(result.rows) > 10
        for i, r in enumerate(records):
            e = r.event
            assert (r.index, r.seq, r.opcode, r.core, r.program, r.location, r.name) == (
                i, e.seq, e.opcode, e.core, e.program, e.location, e.name)
            row = result.rows[i]
            assert r.values() == result.record_values(row) and r.start <= r.end
            assert row[11:13] == (id(r.cost), id(r.location)) and row[:11] + row[13:] == (
                r.values()[:11] + r.values()[13:])
            is_dma = r.cost.dma is not None
            assert (r.issue_start is not None) == (r.issue_row is not None) == (r.dma_engine_ns > 0) == is_dma
            assert r.ls_start is None or (r.row == Row.TENSOR_MATRIX and r.ls_start < r.ls_end <= r.end)
        assert any(r.ls_start is not None for r in records) or all(r.row != Row.TENSOR_MATRIX for r in records)


def test_box_overlap_is_every_dimension_overlapping(rng):
    """`deps._boxes_overlap` (unrolled for three dims, a loop for the others) says whether two [lo, hi) boxes
    share a point: the pointwise definition, on random boxes of one to four dims, touching, nested and apart."""
    seen = set()
    for _ in range(4000):
        dims = int(rng.integers(1, 5))
        a_lo, b_lo = rng.integers(0, 6, dims), rng.integers(0, 6, dims)
        a = (tuple(int(x) for x in a_lo), tuple(int(x) for x in a_lo + rng.integers(1, 4, dims)))
        b = (tuple(int(x) for x in b_lo), tuple(int(x) for x in b_lo + rng.integers(1, 4, dims)))
        expected = all(max(a[0][d], b[0][d]) < min(a[1][d], b[1][d]) for d in range(dims))
        assert deps._boxes_overlap(a, b) is expected and deps._boxes_overlap(b, a) is expected
        seen.add((dims, expected))
    assert len(seen) == 8


def test_an_estimate_keeps_no_tracked_object_per_instruction():
    """The result keeps its rows' values one after another in one list (`CostResult.values`), a row's cost and
    kernel line as their ids (`CostResult.held` keeps the objects): numbers, strings, None and tuples of ints,
    which the garbage collector no longer tracks once a collection has met them, so the rows add nothing to what
    collections count and traverse. The rows and records made from them hold the objects."""
    for kernel, args, target in TALLY_CASES[:3] + TALLY_CASES[-2:]:
        result = estimate(kernel, args, target=target, keep_instructions=False)
        gc.collect()
        assert result.placed > 7 and len(result.values) == result.placed * len(ROW_FIELDS)
        assert not any(map(gc.is_tracked, result.values))
        assert len(result.rows) == len(result.records) == result.placed
        for r, row in zip(result.records, result.rows):
            assert result.held[row[11]] is r.cost and result.held[row[12]] is r.location and r.cost is not None
            assert result.record_values(row) == r.values() and len(row) == len(ROW_FIELDS)


def test_the_tally_cases_cover_stalls_small_transfers_and_load_stationary():
    results = [estimate(k, a, target=t, keep_instructions=False) for k, a, t in TALLY_CASES]
    assert any(r.small_dmas for r in results) and any(r.stalls for r in results)
    assert any(rec.ls_start is not None for r in results for rec in r.records)
    assert any(len({c for c, _ in r.busy_ns}) == 2 for r in results)


def test_a_read_takes_what_the_last_search_of_its_layout_found_until_a_write(monkeypatch, rng):
    """With `deps.SEARCHED_READS` a read of an indexed storage takes the latest-ending write slot the last search
    of its layout number met, until a write of the storage comes: on random writes (ends drawn from a few values,
    so that slots end together with other producers) and reads of overlapping column ranges of one SBUF tensor,
    each read after a floor or another operand set the running answer (ready, kind "reuse" or "raw"), the
    dependency is the search's (the switch off, in a second tracker fed the same accesses); reads take kept
    answers, and searches meet equally late slots of different producers."""
    from opennki.events import AccessKind, Engine, MemoryKind, Operand, Region

    base = 1 << 40                  # layout numbers no run of the process gives (`Operand.layout`)
    ranges = [(0, 128), (64, 192), (128, 256), (0, 256), (32, 96), (192, 256)]

    def operand(sid, address, r, access):
        c0, c1 = ranges[r]
        region = Region(MemoryKind.SBUF, sid, 0, 128, address + 4 * c0, address + 4 * c1)
        return Operand("x", access, region, (128, c1 - c0), "float32", 4, 128, c1 - c0, (256, 1), c0, "t",
                       (128, 256), layout=base + r)

    other = Operand("y", AccessKind.READ, Region(MemoryKind.SBUF, 2, 0, 128, 0, 64), (128, 16), "float32", 4, 128,
                    16, (16, 1), 0, "u", (128, 16), layout=base + len(ranges))
    trackers = deps.AccessTracker(), deps.AccessTracker()
    kept, ties = [], 0
    searched = deps.AccessTracker.dependency

    for step in range(3000):
        if step % 500 == 0:           # a fresh storage every 500 accesses, written first
            sid, address = 1000 + step, 4096
            for tracker in trackers:
                tracker.dependency((operand(sid, address, 3, AccessKind.WRITE),), Engine.DMA, 0, edges=False)
            first = True
        r = int(rng.integers(len(ranges)))
        end, index = float(rng.choice([5.0, 10.0, 10.0, 15.0, 20.0])), step
        if first or rng.random() < 0.3:
            operands = (operand(sid, address, r, AccessKind.WRITE),)
            first = False
        else:
            operands = ((other,) if rng.random() < 0.5 else ()) + (operand(sid, address, r, AccessKind.READ),)
            floor = float(rng.choice([0.0, 5.0, 10.0, 15.0]))
            for tracker in trackers:
                tracker.floor[sid] = (floor, 7) if floor else (0.0, -1)
        answers = []
        for tracker, on in zip(trackers, (True, False)):
            monkeypatch.setattr(deps, "SEARCHED_READS", on)
            acc = tracker.storages.get(sid)
            before = acc is not None and acc.writes is not None and operands[-1].access is AccessKind.READ and \
                operands[-1].layout in acc.searched and acc.searched[operands[-1].layout][0] == acc.write_serial
            dep = searched(tracker, operands, Engine.VECTOR, 0, edges=False)
            answers.append((dep.ready, dep.producer, dep.kind))
            tracker.record(dep, end, index, Engine.VECTOR, 0)
            if on:
                kept.append(before)
                slots = [s for s in acc.slots if s is not acc.read] if acc is not None else []
                box = deps.box_of((128, 256), (256, 1), ranges[r][0], (128, ranges[r][1] - ranges[r][0]))
                late = [s for s in slots if s[deps._S_BOX] is not None and deps._boxes_overlap(box, s[deps._S_BOX])
                        and s in acc.write_slots.values()] if acc is not None and acc.writes is not None else []
                top = max((s[deps._S_END] for s in late), default=None)
                ties += len({s[deps._S_PRODUCER] for s in late if s[deps._S_END] == top}) > 1
        assert answers[0] == answers[1], step
    assert sum(kept) > 500 and ties > 100
