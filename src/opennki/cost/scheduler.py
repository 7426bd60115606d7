"""Cost layer: the scheduler, a listener that places every executed instruction on engine timelines.

Imports events, hw, and the cost layer's rules and dependency tracker. It never looks at live state: each
`InstructionExecuted` event is costed by its rule and placed at

    start = max(engine free, producers done + dependency overhead)

on its core's engine timeline (Tensor, Vector, Scalar, GpSimd, Sync), or earlier in an idle stretch the
engine left before instructions placed earlier (the compiler's list scheduler; `no_reorder` keeps program
order; on the Tensor Engine across accumulation groups only), dependencies coming from the memory regions
it reads and writes (`AccessTracker`).

* Tensor Engine: LoadStationary and MultiplyMoving are two overlapping pipes (the next LoadStationary may
  start once the current MultiplyMoving has; it is skipped while the same stationary tile is loaded), with
  dI/dt throttling after idle stretches. Matmuls accumulating into one PSUM tile follow each other without
  semaphore waits, and a zero-fill of a PSUM tile that matmuls then accumulate into costs nothing: it is the
  group's first-write flag, as NKI's compiler folds `nl.zeros(..., buffer=nl.psum)`.
* DMA: issued in order on its queue (a DMA that waits for its buffer blocks the ones queued behind it;
  loads, stores and on-chip copies use separate queues, as the compiler spreads them), a few cycles of its
  trigger engine, optionally a hardware DGE, the transfer setup (one at a time per queue, overlapping the
  previous transfer's data), then its descriptors on the DMA engines that own its partitions
  (backfilling idle gaps, as engines serve their queues round-robin), capped by the HBM bandwidth the
  launch's cores share.
* Engines: an instruction the kernel left to the compiler (`engine=unknown`: tensor_copy, tensor_scalar,
  memset) goes to the eligible engine on which it finishes first (`cost/engines.py`).
* Programs of an SPMD grid on one core queue up behind each other on the same engines; programs on
  different cores (LNC=2) run in parallel.

The result is a `CostResult`.
"""

from __future__ import annotations

import dataclasses

from opennki.cost.deps import NO_PRODUCER, AccessTracker
from opennki.cost.engines import candidate_engines
from opennki.cost.result import CostResult, Row
from opennki.cost.rules import cost_of, registry
from opennki.cost.rules.common import engine_spec, schedulable_engine
from opennki.cost.timeline import Timeline
from opennki.cost.value import Cost
from opennki.events import (AccessKind, Engine, InstructionExecuted, LaunchStarted, LoopFinished, LoopIteration,
                            LoopStarted, MemoryKind, ProgramFinished, ProgramStarted, TensorAllocated, TensorFreed)
from opennki.hw import get_target


_PE = Engine.TENSOR.value
_BY_VALUE = [Engine(v) for v in range(max(e.value for e in Engine) + 1)]      # the engines by value
_PLANS_LIMIT = 4096
# an instruction whose kernel line issued one of the same signature lately takes its plan (`_site_plan`), from
# the latest SITE_ENTRIES of each line; False: every plan found by its signature (`_plan`)
SITE_PLANS = True
SITE_ENTRIES = 4
# `_site_plan` takes an event's params as equal to an entry's, in the same order, when the simulator copied both
# from one dict (`InstructionExecuted.params_source`: such a dict is never changed), without comparing them;
# False: every entry's params compared (the plain path)
SITE_SOURCES = True
# events kept before they are placed together (`CostModel.on_event`); 1 places every event as it arrives
BATCH_EVENTS = 64
# bound once: class lookups of members are slow (3.11)
_TENSOR, _DMA, _VECTOR, _ACCUMULATE = Engine.TENSOR, Engine.DMA, Engine.VECTOR, AccessKind.ACCUMULATE
_HBM = MemoryKind.HBM
_TENSOR_MATRIX = Row.TENSOR_MATRIX      # (a class attribute: read as a global, 3.11 specialises that)
_HBM_SPACE = AccessTracker.space(_HBM, 0)
# events of loops, by their exact class: loops cost nothing by themselves (`place_events` skips them, as they
# arrive beside a listener that takes them; alone, the model hears none: `CostModel.loop_events`). Batches without
# them hold more instructions, which once set off three times the garbage collections (4096 x 8192 x 8192
# blocked: gen0 265 -> 867); no longer: gen0 / gen1 / full 106 / 9 / 1 with them, 110 / 10 / 1 without (tiled
# 148 / 13 / 1, 153 / 14 / 1; gc.callbacks)
_LOOP_EVENTS = frozenset((LoopIteration, LoopStarted, LoopFinished))


class _CoreState:
    """Timelines of one NeuronCore."""

    def __init__(self, dma_engines: int, dge_instances: int):
        n = max(e.value for e in Engine) + 1
        self.free = [0.0] * n                     # by Engine value (cheaper than hashing the enum): the PE
        self.last = [NO_PRODUCER] * n
        self.lines = [Timeline() for _ in range(n)]   # every engine's idle stretches (the PE's: MultiplyMoving)
        self.groups: dict[int, tuple] = {}        # PSUM storage accumulated into -> (end, record) of its last
        self.ls_free = 0.0
        self.mm_last_start = 0.0
        self.mm_last_end = None
        self.ramp_origin = 0.0
        self.stationary = None
        self.act_table = None
        # DMA queue key -> [issue free, its last record, transfer setup free] (one look-up per transfer)
        self.queues: dict[tuple, list] = {}
        self.dma = [Timeline()] * dma_engines      # shared while transfers span the same engines (`_place_dma`)
        self.dge_free = [0.0] * dge_instances


class CostModel:
    """Listener: attach to a Simulator (`listeners=[CostModel()]`), run a kernel, read `result()`.

    Args:
        target: the NeuronCore target (name or HwConfig); None takes the launch's target.
        keep_instructions: keep one record per instruction (needed for profiles and the critical path's
            detail); aggregates are kept either way.
    """

    # loops cost nothing (`place_events` skips their events), so they need not emit them for the model
    # (listeners/__init__.py); True: the plain path, every loop event emitted and skipped here
    loop_events = False

    def __init__(self, target=None, *, keep_instructions: bool = True):
        self._target = target
        self.keep_instructions = keep_instructions
        self.hw = None
        self.result_ = None
        self.program_core: dict[tuple, int] = {}
        self._pending: list = []                  # events not placed yet (`on_event`)
        self._start(get_target(target) if target is not None else None)

    def _start(self, hw, kernel: str = "kernel", grid=(), cores: int = 1) -> None:
        """Fresh timelines for a launch on `hw`."""
        if hw is not None and hw.cost is None:
            raise ValueError(f"target {hw.name} has no cost parameters (HwConfig.cost); it cannot be estimated")
        self.hw = hw
        self.cores: dict[int, _CoreState] = {}
        self.deps = AccessTracker()
        self.hbm = Timeline()
        self.pending_fills: dict[int, InstructionExecuted] = {}
        self._dma_plans: dict[int, tuple] = {}
        self._plans: dict[tuple, tuple] = {}      # event signature -> CostModel._plan(event), for this hw
        # id(kernel line) -> what its latest instructions' signatures held, with their plans (`_site_plan`)
        self._sites: dict[int, list] = {}
        # by Engine value: the engine's dependency overhead (semaphore wait) in ns, which every placement adds
        self._overhead_ns = [] if hw is None else [
            spec.ns(spec.dependency_overhead_cycles) for spec in (engine_spec(hw, e) for e in _BY_VALUE)]
        self.launch_cores = max(1, cores)
        if hw is not None:
            self.result_ = CostResult(hw, keep_instructions=self.keep_instructions, kernel=kernel, grid=grid,
                                      cores=self.launch_cores)

    # -- listener entry point -------------------------------------------------------------------------
    def on_event(self, ev) -> None:
        """Keep the event; the kept ones are placed together every BATCH_EVENTS events (`place_events`), and
        when a launch starts (so that a target the model cannot estimate is reported there)."""
        self.on_program_event(ev)
        if type(ev) is LaunchStarted:
            self.place_events()

    def on_program_event(self, ev) -> None:
        """`on_event` for the events a running program emits (its instructions, allocations, frees and loop
        iterations: sim/program.py calls this when the model is the only listener), never a LaunchStarted: only
        the batch's size places them (one test less per event: ~3 events per instruction)."""
        pending = self._pending
        pending.append(ev)
        if len(pending) >= BATCH_EVENTS:
            self.place_events()

    def place_events(self) -> None:
        """Place the events kept so far, in order. The placement is a function of the events alone (values,
        which the simulator does not change once emitted), so placing them in batches gives the figures
        placing each as it arrives gives; a batch runs faster, in a tight loop (the simulator's and the cost
        model's code and data do not evict each other at every event)."""
        events, self._pending = self._pending, []
        place = self._place
        # (bound here: only `_start`, from `_instruction` without a target or `_other_event` at a launch, makes new
        # ones and sets the target, so they are bound again after those calls; `program_core` is never replaced)
        fills, deps, no_target, cores = self.pending_fills, self.deps, self.hw is None, self.program_core
        for ev in events:
            kind = type(ev)             # the per-instruction events by their exact class first
            if kind is InstructionExecuted:
                if fills or ev.opcode == "memset" or no_target:
                    self._instruction(ev)
                    fills, deps, no_target = self.pending_fills, self.deps, self.hw is None
                else:                   # (what `_instruction` does with it)
                    place(ev)
            elif kind is TensorFreed:
                if fills:
                    fill = fills.pop(ev.storage_id, None)
                    if fill is not None:
                        place(fill)
                deps.freed(ev.storage_id)
            elif kind is TensorAllocated:
                memory = ev.kind               # AccessTracker.space, inlined
                deps.allocated(ev.storage_id, (memory._value_, cores.get(ev.program, 0))
                               if memory is not _HBM else _HBM_SPACE,
                               ev.byte_start, ev.size_bytes, ev.partitions, ev.program)
            elif kind not in _LOOP_EVENTS:
                self._other_event(ev)
                fills, deps, no_target = self.pending_fills, self.deps, self.hw is None

    def _other_event(self, ev) -> None:
        if isinstance(ev, InstructionExecuted):
            self._instruction(ev)
        elif isinstance(ev, TensorAllocated):
            space = AccessTracker.space(ev.kind, self.program_core.get(ev.program, 0))
            self.deps.allocated(ev.storage_id, space, ev.byte_start, ev.size_bytes, ev.partitions, ev.program)
        elif isinstance(ev, TensorFreed):
            fill = self.pending_fills.pop(ev.storage_id, None)
            if fill is not None:
                self._place(fill)
            self.deps.freed(ev.storage_id)
        elif isinstance(ev, ProgramStarted):
            self.program_core[ev.program] = ev.core
        elif isinstance(ev, ProgramFinished):
            self.flush_fills()
            self.deps.program_finished(ev.program)
            self.result_.programs += 1
        elif isinstance(ev, LaunchStarted):
            hw = get_target(ev.target) if self._target is None else self.hw
            self._start(hw, ev.kernel, ev.grid, ev.cores)

    def result(self) -> CostResult:
        self.place_events()
        if self.result_ is None:
            raise RuntimeError("the cost model has seen no launch yet")
        self.flush_fills()
        return self.result_.finish()

    report = result

    # -- placement ------------------------------------------------------------------------------------
    def _core(self, core: int) -> _CoreState:
        state = self.cores.get(core)
        if state is None:
            dma = self.hw.cost.dma
            state = self.cores[core] = _CoreState(dma.engines, dma.dge_instances)
        return state

    def _instruction(self, ev: InstructionExecuted) -> None:
        if self.hw is None:                      # events without a LaunchStarted: the default target
            self._start(get_target(None))
        if self.pending_fills:
            self._settle_fills(ev)
        if ev.opcode == "memset" and _is_psum_zero_fill(ev):
            self.pending_fills[ev.operands[0].region.storage_id] = ev
            return
        self._place(ev)

    def _settle_fills(self, ev) -> None:
        """A zero-fill of PSUM followed by a matmul accumulating into it is the accumulation flag of that
        matmul (the first write of a group overwrites), so it costs nothing; any other access places it."""
        for op in ev.operands:
            fill = self.pending_fills.pop(op.region.storage_id, None)
            if fill is None:
                continue
            if ev.engine is Engine.TENSOR and op.access is AccessKind.ACCUMULATE:
                self.result_.folded_fills += 1
            else:
                self._place(fill)

    def flush_fills(self) -> None:
        for fill in list(self.pending_fills.values()):
            self._place(fill)
        self.pending_fills.clear()

    def _place(self, ev: InstructionExecuted) -> None:
        result = self.result_
        plan = self._site_plan(ev) if SITE_PLANS else None
        # a plan its kernel line placed before: the result holds its cost and the line already (`add_row`)
        held = plan is not None
        if not held:
            plan = self._plan(ev)
        cost, engine, queue, choices, uncosted, engine_plan, rate = plan
        if uncosted:
            result.uncosted[ev.opcode] = result.uncosted.get(ev.opcode, 0) + 1
        core = ev.core
        state = self.cores.get(core) or self._core(core)
        index = result.placed
        deps, keep = self.deps, self.keep_instructions
        dep = deps.dependency(ev.operands, queue, core, keep)
        if choices is not None:
            ev, cost, engine = self._choose_engine(ev, choices, state, dep)
            queue = engine
            held = False
        if cost.dma is not None:
            row = self._place_dma(ev, cost, state, dep, index, engine_plan)
        elif engine is _TENSOR:
            row = self._place_pe(ev, cost, state, dep, index, engine_plan)
        else:
            row = self._place_engine(ev, cost, state, dep, index, engine)
        deps.record(dep, row[7], index, queue, core)
        result.add_row(row, ev, cost, rate, tuple((p, kind, i) for (p, kind), i in dep.edges.items())
                       if keep and dep.edges else (), held)

    def _plan(self, ev) -> tuple:
        """What placing `ev` derives from the event alone: (cost, engine, queue, the engines to choose from
        with their costs or None, uncosted, the DMA plan or, on the Tensor Engine, the indices of the operands
        it accumulates into and of its stationary operand (None without one), a matmul's rate for the result
        (`CostResult.matmul_rate`) or None). A pure function of what a cost rule sees, so it is kept per event
        signature (as `cost_of` keeps costs): loops repeat the same instructions."""
        key = registry._signature(ev)
        plans = self._plans
        if key is not None:
            try:
                plan = plans.get(key)       # hashes the key once (a tuple does not keep its hash)
            except TypeError:               # an unhashable parameter value: not kept
                key = None
            else:
                if plan is not None:
                    if SITE_PLANS:
                        self._remember_site(ev, plan)
                    return plan
        cost = cost_of(ev, self.hw)
        uncosted = cost is None
        if uncosted:
            cost = Cost(schedulable_engine(ev.engine))
        choices = engine_plan = None
        if cost.dma is None:
            engine = queue = schedulable_engine(cost.engine)
            if engine is _TENSOR:
                engine_plan = (tuple(i for i, op in enumerate(ev.operands) if op.access is _ACCUMULATE),
                               next((i for i, op in enumerate(ev.operands) if op.role == "stationary"), None))
            # only a Vector Engine instruction may have other engines to choose from (candidate_engines)
            if engine is not _TENSOR and ev.engine is _VECTOR:
                engines = candidate_engines(ev, self.hw.capabilities)
                if len(engines) > 1:
                    choices = []
                    for e in engines:
                        cost_e = cost if e is ev.engine else cost_of(dataclasses.replace(ev, engine=e), self.hw)
                        if cost_e is not None:
                            choices.append((e, cost_e))
                    choices = tuple(choices)
        else:
            engine, queue = schedulable_engine(cost.dma.trigger), _DMA
            engine_plan = self._dma_plan(cost.dma)
        rate = self.result_.matmul_rate(ev) if cost.flops else None
        plan = (cost, engine, queue, choices, uncosted, engine_plan, rate)
        if key is not None:
            if len(plans) >= _PLANS_LIMIT:
                plans.clear()
            plans[key] = plan
            if SITE_PLANS:
                self._remember_site(ev, plan)
        return plan

    def _site_plan(self, ev) -> tuple | None:
        """The plan of `ev` when an instruction its kernel line issued lately had the signature `ev` has, else
        None (`_plan` then finds it, and remembers it here). A loop's line issues the same instruction again and
        again, so comparing the signature's fields with theirs (what the signature holds: the opcode and engine,
        each operand's role, access, first partition, and memory, shape, dtype, item size and strides by their
        number, `Operand.form`, no run-time offsets, the parameters in their order; no mask), most by identity,
        is a hit: cheaper than building the signature and hashing it. Only signatures `_plan` keeps are
        remembered. The params are not compared when the simulator copied the event's from the dict the entry's
        were copied from (`InstructionExecuted.params_source`, which an entry takes at its first hit by
        comparison; `SITE_SOURCES`): such a dict is never changed, so they are equal, in the same order."""
        loc = ev.location
        entries = self._sites.get(id(loc))
        if entries is None or ev.mask is not None:
            return None
        opcode, engine, operands = ev.opcode, ev.engine, ev.operands
        for entry in entries:       # (all of `loc`: the entries hold it, so no other location has its id)
            fields = entry[5]
            if entry[1] != opcode or entry[2] is not engine or len(fields) != len(operands):
                continue
            # each operand's fields as one tuple, compared with the entry's by one comparison (element by element,
            # identity first, as the fields' own comparisons would): fewer steps than comparing them one by one.
            # Its memory, shape, dtype, item size and strides by their number (`Operand.form`): entries hold
            # numbers only (`_remember_site`), and an operand has none when it has run-time offsets
            i = 0
            for o in operands:
                if (o.role, o.access, o.form, o.region.partition_start) != fields[i]:
                    break
                i += 1
            else:
                source = ev.params_source
                if source is not None and source is entry[7]:
                    return entry[6]         # params copied from the dict the entry's were copied from (SITE_SOURCES)
                params = ev.params
                try:
                    same = params == entry[3] and tuple(params) == entry[4]
                except (TypeError, ValueError):      # (parameters whose equality is not a bool)
                    same = False
                if same:
                    if source is not None and SITE_SOURCES:
                        entry[7] = source           # (its params equal those of events copied from it)
                    return entry[6]
        return None

    def _remember_site(self, ev, plan) -> None:
        """Keep what `_site_plan` compares of `ev`, with its plan: the latest SITE_ENTRIES of its kernel line.
        Not when an operand has no `form` number (run-time offsets, or a record not made by a program)."""
        forms = [o.form for o in ev.operands]
        if None in forms:
            return
        loc = ev.location
        sites = self._sites
        entries = sites.get(id(loc))
        if entries is None or entries[0][0] is not loc:
            if len(sites) >= _PLANS_LIMIT:
                sites.clear()
            entries = sites[id(loc)] = []
        elif len(entries) >= SITE_ENTRIES:
            del entries[0]
        entries.append([loc, ev.opcode, ev.engine, dict(ev.params), tuple(ev.params),
                        tuple((o.role, o.access, o.form, o.region.partition_start) for o in ev.operands), plan,
                        ev.params_source if SITE_SOURCES else None])

    def _choose_engine(self, ev, choices, state, dep):
        """(event, cost, engine) on the engine where `ev` finishes first (cost/engines.py), among `choices`
        ((engine, cost) pairs). The event is the instruction's on the chosen engine when records keep events;
        otherwise the given one (what a record reads of it does not depend on the engine)."""
        best = None
        for e, cost_e in choices:
            start = self._slot(self._overhead_ns[e._value_], state.lines[e._value_], dep, cost_e.busy_ns, ev)[0]
            finish = start + cost_e.busy_ns
            if best is None or finish < best[0]:
                best = (finish, cost_e, e)
        _, cost, engine = best
        if self.keep_instructions and engine is not ev.engine:
            ev = dataclasses.replace(ev, engine=engine)
        return ev, cost, engine

    @staticmethod
    def _gate(overhead_ns: float, free: float, last: int, dep) -> tuple[float, int, float, str | None]:
        """(start, gating record, stall, stall kind) on an engine free at `free` after record `last`, whose
        dependency overhead is `overhead_ns`."""
        if dep.producer == NO_PRODUCER:
            return free, last, 0.0, None
        ready = dep.ready + overhead_ns
        if ready > free:
            return ready, dep.producer, ready - free, dep.kind
        return free, last, 0.0, None

    def _slot(self, overhead_ns: float, line: Timeline, dep, duration: float,
              ev) -> tuple[float, int, float, str | None]:
        """(start, gating record, stall, stall kind) of an instruction on an engine timeline. Like the
        compiler's list scheduler, an instruction whose inputs are ready early runs in an idle stretch the
        engine left before instructions placed earlier (which waited for their own inputs), when it fits;
        an instruction inside `no_reorder` (`ev.ordered`) keeps program order on its engine."""
        if ev.ordered or not line.gaps:
            return self._gate(overhead_ns, line.free, line.last, dep)
        ready = 0.0 if dep.producer == NO_PRODUCER else dep.ready + overhead_ns
        start, gap = line.fit(ready, duration)
        if gap is None:
            return self._gate(overhead_ns, line.free, line.last, dep)
        if dep.producer != NO_PRODUCER and start == ready:
            return start, dep.producer, 0.0, None
        return start, NO_PRODUCER, 0.0, None

    def _place_engine(self, ev, cost, state, dep, index, engine) -> tuple:
        """The row (`CostResult.add_row`) of `ev` placed on compute engine `engine`."""
        e = engine._value_
        duration = cost.busy_ns
        if cost.table is not None and engine is Engine.SCALAR and cost.table != state.act_table:
            duration += self.hw.cost.scalar.table_load_ns
            state.act_table = cost.table
        start, pred, stall, kind = self._slot(self._overhead_ns[e], state.lines[e], dep, duration, ev)
        state.lines[e].reserve(start, duration, index)
        end = start + duration
        return (index, ev.seq, ev.opcode, ev.core, ev.program, Row.of(engine), start, end, pred, stall, kind,
                id(cost), id(ev.location), ev.name, None, None, None, None, None, 0.0)

    def _place_pe(self, ev, cost, state, dep, index, plan) -> tuple:
        """The row of a matmul or transpose `ev` placed on the Tensor Engine (see the module docstring)."""
        pe = self.hw.cost.tensor
        accumulates, stationary = plan
        operands = ev.operands
        groups = [operands[i].region.storage_id for i in accumulates] if len(accumulates) != 1 else (
            operands[accumulates[0]].region.storage_id,)
        gaps = state.lines[_PE].gaps
        # `_backfill_pe` only when the last idle stretch (which ends latest) has room for the MultiplyMoving from
        # the dependency's time: its own first test, which the groups it waits for and a LoadStationary only
        # make harder (most matmuls fail it: no call for them)
        if gaps and not ev.ordered and gaps[-1][1] - (
                0.0 if dep.producer == NO_PRODUCER else dep.ready + self._overhead_ns[_PE]) >= cost.busy_ns:
            row = self._backfill_pe(ev, cost, state, dep, index, pe, groups)
            if row is not None:
                return row
        start = state.free[_PE]
        pred = last = state.last[_PE]
        stall, kind = 0.0, None
        if dep.producer != NO_PRODUCER:             # CostModel._gate, inlined
            ready = dep.ready + self._overhead_ns[_PE]
            if ready > start:
                start, pred, stall, kind = ready, dep.producer, ready - start, dep.kind
        ls_start = ls_end = None
        if cost.is_transpose:
            state.stationary = None
        elif cost.load_stationary_ns > 0.0:
            if stationary is None:
                key = None
            else:       # the stationary tile: where it is, and how often it was written
                r = operands[stationary].region
                acc = self.deps.storages.get(r.storage_id)      # (the tracker's write serial of the storage)
                key = (r.storage_id, r.partition_start, r.partition_count, r.byte_start, r.byte_end,
                       0 if acc is None else acc.write_serial)
            if key is None or key != state.stationary:
                # background LoadStationary: one shadow set of weights, loaded while the current MM runs
                dep_ready = start if pred == dep.producer != NO_PRODUCER else 0.0
                ls_start = state.ls_free                 # max(ls_free, mm_last_start, dep_ready), by compares
                if state.mm_last_start > ls_start:
                    ls_start = state.mm_last_start
                if dep_ready > ls_start:
                    ls_start = dep_ready
                ls_end = ls_start + cost.load_stationary_ns
                state.ls_free = ls_end
                state.stationary = key
                if ls_end > start:
                    start = ls_end
                    if pred != dep.producer:
                        pred = last
        duration = cost.busy_ns
        if pe.throttle_ramp_ns > 0.0:
            if state.mm_last_end is None or start - state.mm_last_end > pe.throttle_idle_ns:
                state.ramp_origin = start
            ramp = (start - state.ramp_origin) / pe.throttle_ramp_ns
            if not ramp < 1.0:                          # min(1.0, ramp)
                ramp = 1.0
            duration /= pe.throttle_start_fraction + (1.0 - pe.throttle_start_fraction) * ramp
        end = start + duration
        state.free[_PE] = end
        state.last[_PE] = index
        state.mm_last_start, state.mm_last_end = start, end
        state.lines[_PE].reserve(start, duration, index)
        for group in groups:
            state.groups[group] = (end, index)
        return (index, ev.seq, ev.opcode, ev.core, ev.program, _TENSOR_MATRIX, start, end, pred, stall, kind,
                id(cost), id(ev.location), ev.name, ls_start, ls_end, None, None, None, 0.0)

    def _backfill_pe(self, ev, cost, state, dep, index, pe, groups) -> tuple | None:
        """The row of a matmul or transpose placed in an idle stretch the PE left before matmuls placed
        earlier, or None when none fits. The Tensor Engine "can have up to eight outstanding matmul
        accumulation groups, which allows flexible scheduling of matmul instructions" and "can move onto the
        next accumulation group without waiting for VectorE/ScalarE to evict previous accumulation group
        results" (NKI architecture guide, hw §7): so the compiler may issue the matmuls of a later group
        before those of an earlier one that wait for their inputs. Within a group (matmuls accumulating into
        one PSUM tensor) the order is kept; the PSUM banks bound how many groups are in flight through the
        allocator (a group's tile reusing a bank waits for the bank's last reader). In a gap, the
        LoadStationary runs before its MultiplyMoving (no earlier matmul there to hide it behind), and the PE
        runs at the dI/dt throttle's starting rate when the gap began more than the throttle's idle time
        before (the rate at the start for the whole instruction, as for the in-order placement)."""
        ready = 0.0 if dep.producer == NO_PRODUCER else dep.ready + self._overhead_ns[_PE]
        gate = dep.producer
        for group in groups:
            end, prev = state.groups.get(group, (0.0, NO_PRODUCER))
            if end > ready:
                ready, gate = end, prev
        line = state.lines[_PE]
        ls = cost.load_stationary_ns if not cost.is_transpose else 0.0
        mm = cost.busy_ns
        if line.gaps[-1][1] - ready < ls + mm:
            return None         # no gap fits: `fit`'s own first test, without its call (most matmuls meet it)
        start, gap = line.fit(ready, ls + mm)
        if gap is None:
            return None
        if pe.throttle_ramp_ns > 0.0 and start - line.gaps[gap][0] > pe.throttle_idle_ns:
            mm /= pe.throttle_start_fraction
            if start + ls + mm > line.gaps[gap][1]:
                return None
        line.take(start, ls + mm, gap)          # (`reserve` from `start` would fit it there again)
        for group in groups:
            state.groups[group] = (start + ls + mm, index)
        pred = gate if start == ready else NO_PRODUCER
        ls_start, ls_end = (start, start + ls) if ls > 0 else (None, None)
        return (index, ev.seq, ev.opcode, ev.core, ev.program, _TENSOR_MATRIX, start + ls, start + ls + mm, pred,
                0.0, None, id(cost), id(ev.location), ev.name, ls_start, ls_end, None, None, None, 0.0)

    def _dma_plan(self, work) -> tuple:
        """What `_place_dma` derives from a transfer alone (its trigger engine and that engine's dependency
        overhead, queue key, DMA engine span and data time, issue row, a hardware DGE's issue time when one issues
        it (else None), its HBM occupancy, DMA engine time, row, the queue's setup time), kept per DmaWork object:
        costs are memoised per signature, so a loop's transfers share one (the object is held in the entry, so its
        id stays unique)."""
        plan = self._dma_plans.get(id(work))
        if plan is None or plan[0] is not work:
            hw = self.hw
            dma = hw.cost.dma
            trigger = schedulable_engine(work.trigger)
            first, last = dma.engine_span(work.partition_start, work.partition_count)
            n_engines = last - first + 1
            t_data = work.size_bytes / n_engines / (dma.engine_bandwidth_bytes_per_ns * work.efficiency)
            hbm = work.hbm_read_bytes + work.hbm_write_bytes
            occupancy = hbm / (hw.cost.hbm_bandwidth_bytes_per_ns * self.launch_cores) if hbm else None
            if len(self._dma_plans) >= 4096:
                self._dma_plans.clear()
            plan = self._dma_plans[id(work)] = (
                work, trigger, self._overhead_ns[trigger._value_], (work.queue, trigger._value_), first, last,
                n_engines, t_data, Row.of(trigger), dma.hwdge_issue_ns if work.dge == "hwdge" else None,
                occupancy, t_data * n_engines, Row.dma(work.queue), dma.fixed_latency_ns)
        return plan

    def _place_dma(self, ev, cost, state, dep, index, plan) -> tuple:
        """The row of a transfer `ev` placed on its queue and DMA engines (see the module docstring)."""
        (_, _, overhead_ns, queue, first, last, n_engines, t_data, issue_row, hwdge_ns, occupancy, engine_ns, row,
         setup_ns) = plan
        q = state.queues.get(queue)
        if q is None:
            q = state.queues[queue] = [0.0, NO_PRODUCER, 0.0]
        t_start, pred = q[0], q[1]
        stall, kind = 0.0, None
        if dep.producer != NO_PRODUCER:             # CostModel._gate, inlined
            ready = dep.ready + overhead_ns
            if ready > t_start:
                t_start, pred, stall, kind = ready, dep.producer, ready - t_start, dep.kind
        t_end = t_start + cost.busy_ns
        q[0] = t_end
        q[1] = index
        ready = t_end
        if hwdge_ns is not None:
            dge_free = state.dge_free                   # the first least busy DGE instance (as min() finds it)
            i = 0
            for k in range(1, len(dge_free)):
                if dge_free[k] < dge_free[i]:
                    i = k
            d_start = dge_free[i] if dge_free[i] > ready else ready
            ready = dge_free[i] = d_start + hwdge_ns
        # a queue prepares one transfer at a time (descriptors, semaphores), overlapping the previous
        # transfer's data: a stream of transfers on one queue runs at max(setup, data) per transfer
        setup_start = q[2] if q[2] > ready else ready           # max(ready, q[2])
        data_ready = q[2] = setup_start + setup_ns
        dmas = state.dma
        timeline = dmas[first]
        if dmas.count(timeline) == n_engines and (n_engines == len(dmas) or
                                                  dmas[first:last + 1].count(timeline) == n_engines):
            # the usual case: the transfer's engines share one timeline no other engine has
            start, end, waited = timeline.spread(data_ready, t_data, index)
            if waited != NO_PRODUCER:
                pred = waited                        # the DMA engines' previous transfer gated it
        else:
            # each distinct timeline of the span gets a copy with the transfer, shared by the engines that
            # shared it
            start = end = None
            placed: dict[int, Timeline] = {}
            for e in range(first, last + 1):
                old = dmas[e]
                new = placed.get(id(old))
                if new is None:
                    new = placed[id(old)] = old.copy()
                    s, e_end, waited = new.spread(data_ready, t_data, index)
                    if waited != NO_PRODUCER and (end is None or e_end > end):
                        pred = waited
                    start = s if start is None else min(start, s)
                    end = e_end if end is None else max(end, e_end)
                dmas[e] = new
        if occupancy is not None:
            h_end = self.hbm.spread(start, occupancy, index)[1]
            if h_end > end:
                end = h_end
        return (index, ev.seq, ev.opcode, ev.core, ev.program, row, start, end, pred, stall, kind, id(cost),
                id(ev.location), ev.name, None, None, t_start, t_end, issue_row, engine_ns)


def _is_psum_zero_fill(ev) -> bool:
    """`memset(psum_tile, 0)` (the legacy `nl.zeros(..., buffer=nl.psum)` before `+=` matmuls)."""
    return (ev.opcode == "memset" and len(ev.operands) == 1 and ev.operands[0].kind is MemoryKind.PSUM
            and ev.params.get("value") in (0, 0.0) and ev.mask is None)
