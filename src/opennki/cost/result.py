"""Cost layer: what an estimate found, as data. Imports events, hw and the roofline.

`CostResult` is filled instruction by instruction by the scheduler and summarised by `finish()`: total
latency, per-engine busy time and utilisation, DMA statistics, flops against the target's peak, HBM
traffic, the roofline bound and the critical path. `to_dict()` gives the JSON summary (field names follow
the Neuron profiler's summary where one exists); `format()` / `table_row()` the short text forms. The long
profile report is `opennki.perf.report`.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import reduce
from itertools import compress, groupby, repeat
from operator import add, and_, attrgetter, is_not, lt as _lt, mul, neg, sub, truediv

from opennki.cost.deps import NO_PRODUCER
from opennki.cost.roofline import Roofline, peak_for, roofline
from opennki.events import Engine


SMALL_DMA_EFFICIENCY = 0.5    # a transfer below half the DMA bandwidth in a stream of its kind is "small"


# fields read by CostResult._tally, record by record, in C loops
_START, _END, _CORE, _ROW, _OPCODE, _COST, _LOCATION, _STALL_NS, _STALL_KIND = map(
    attrgetter, ("start", "end", "core", "row", "opcode", "cost", "location", "stall_ns", "stall_kind"))
_LS_START, _LS_END, _ISSUE_START, _ISSUE_END, _ISSUE_ROW, _DMA_ENGINE_NS = map(
    attrgetter, ("ls_start", "ls_end", "issue_start", "issue_end", "issue_row", "dma_engine_ns"))
_ELEM_OPS, _TRANSPOSE_FLOPS, _DMA = map(attrgetter, ("elem_ops", "transpose_flops", "dma"))
_SIZE_BYTES, _HBM_READ, _HBM_WRITE, _EFFICIENCY, _DESCRIPTOR_BYTES = map(
    attrgetter, ("size_bytes", "hbm_read_bytes", "hbm_write_bytes", "efficiency", "descriptor_bytes"))


def _groups(keys: list, positions: list | None = None) -> list[tuple[object, list[int]]]:
    """(key, indices of `keys` holding it) per distinct key, in order of first use, each key's indices in
    order; the order is that of `positions` (one per key) when given, else the keys' own (C loops and a
    stable sort)."""
    order = range(len(keys)) if positions is None else sorted(range(len(keys)), key=positions.__getitem__)
    first = list(dict.fromkeys(map(keys.__getitem__, order)))
    if len(first) == 1:
        return [(first[0], list(order))]
    code = dict(zip(first, range(len(first))))
    codes = list(map(code.__getitem__, keys))
    return [(first[c], list(idx)) for c, idx in groupby(sorted(order, key=codes.__getitem__), codes.__getitem__)]


class Row:
    """Timeline rows, named as the Neuron profiler names them."""

    TENSOR = "Tensor"                # LoadStationary
    TENSOR_MATRIX = "TensorMatrix"   # MultiplyMoving (and PE transposes)
    VECTOR = "Vector"
    SCALAR = "Scalar"
    GPSIMD = "GpSimd"
    SYNC = "Sync"
    ENGINES = (TENSOR, TENSOR_MATRIX, VECTOR, SCALAR, GPSIMD, SYNC)
    # keyed by Engine value: hashing an Enum member runs Python code, and every instruction looks its row up
    _BY_ENGINE = {Engine.TENSOR.value: TENSOR_MATRIX, Engine.VECTOR.value: VECTOR, Engine.SCALAR.value: SCALAR,
                  Engine.GPSIMD.value: GPSIMD, Engine.SYNC.value: SYNC}

    @classmethod
    def of(cls, engine: Engine) -> str:
        return cls._BY_ENGINE.get(engine._value_, cls.SYNC)

    @staticmethod
    def dma(queue: str) -> str:
        return queue


# dependence kinds as the Neuron profiler's instruction details name them (address reuse: a new tensor over
# the bytes of a freed one, an output dependence across tensors)
DEPENDENCE_NAMES = {"raw": "flow", "war": "anti", "waw": "output", "reuse": "reuse"}


class InstructionRecord:
    """Where one instruction landed: its row and [start, end) in ns, the record that gated its start
    (`pred`), how long it stalled on a dependency (`stall_ns`, `stall_kind`: raw/war/waw/reuse), and every
    dependence it has (`deps`: (record index, kind, operand index) per predecessor)."""

    # the fields every record sets; the others default here (a record that sets one keeps it in its __dict__)
    __slots__ = ("index", "seq", "opcode", "core", "program", "row", "start", "end", "pred", "stall_ns",
                 "stall_kind", "cost", "location", "name", "__dict__")
    event = None
    ls_start = ls_end = None
    issue_start = issue_end = issue_row = None
    dma_engine_ns = 0.0
    deps = ()

    def __init__(self, index, ev, cost, row, start, end, pred, stall_ns, stall_kind):
        self.index = index
        self.seq = ev.seq
        self.opcode = ev.opcode
        self.core = ev.core
        self.program = ev.program
        self.row = row
        self.start = start
        self.end = end
        self.pred = pred if pred != index else NO_PRODUCER
        self.stall_ns = stall_ns
        self.stall_kind = stall_kind
        self.cost = cost
        self.location = ev.location
        self.name = ev.name

    @property
    def duration_ns(self) -> float:
        return self.end - self.start


_LOCATION_KEYS: dict = {}


def location_key(loc) -> str:
    """`file.py:LINE` of a kernel line (cached: every instruction of a loop shares its location)."""
    if loc is None:
        return "<unknown>"
    line = (loc.filename, loc.lineno)   # a plain tuple: hashing a SourceLocation runs Python code
    key = _LOCATION_KEYS.get(line)
    if key is None:
        if len(_LOCATION_KEYS) > 65536:
            _LOCATION_KEYS.clear()
        key = _LOCATION_KEYS[line] = f"{os.path.basename(loc.filename)}:{loc.lineno}"
    return key


class CostResult:
    """An estimate (see the module docstring). Times are ns; `latency_ns` is what `benchmark` reports."""

    def __init__(self, hw, *, keep_instructions: bool = True, kernel: str = "kernel", grid=(), cores: int = 1):
        self.hw = hw
        self.kernel = kernel
        self.grid = tuple(grid)
        self.cores = cores
        self.programs = 0
        self.keep_instructions = keep_instructions
        self.records: list[InstructionRecord] = []
        self.uncosted: dict[str, int] = {}
        self.busy_ns: dict[tuple[int, str], float] = {}
        self.counts: dict[tuple[int, str], int] = {}
        self.opcode_counts: dict[str, int] = {}
        self.flops = self.transpose_flops = self.elem_ops = 0.0
        self.flops_by_peak: dict[float, float] = {}
        self._matmul_rates: dict[tuple, tuple[bool, float]] = {}   # (opcode, dtypes) -> _matmul_rate()
        self.fp32_matmuls = 0
        self.folded_fills = 0                        # PSUM zero-fills folded into matmul accumulation
        self.matmuls = 0
        self.dma_count = 0
        self.dma_bytes = 0
        self.dma_engine_ns = 0.0
        self.hbm_read_bytes = self.hbm_write_bytes = 0
        self.small_dmas: dict[str, list] = {}        # line -> [count, bytes, min stream eff., min piece, ns]
        self.lines: dict[str, list] = {}             # line -> [busy ns, count, stall ns, opcodes]
        self.stalls: dict[str, list] = {}            # line -> [stall ns, count, kinds]
        self.total_ns = 0.0
        self.critical_path: list[InstructionRecord] = []
        self.critical_by_line: dict[str, float] = {}
        self.critical_by_row: dict[str, float] = {}
        self.roofline: Roofline | None = None
        self.outputs = None                          # the kernel's outputs (ShapeSpecs), set by estimate()
        self.findings = None                         # what the checks found in the run (estimate(checks=True))
        self._finished = False
        self._tallied = 0                            # records added to the aggregates (`_tally`)

    # -- filling --------------------------------------------------------------------------------------
    def add(self, rec: InstructionRecord, ev, rate: tuple[bool, float] | None = None) -> None:
        """Keep one placed instruction. The aggregates it adds to (busy time, counts, kernel lines, stalls,
        DMA statistics) are tallied when the result is finished (`_tally`), over the records added since, in
        C loops; only what needs the event (a matmul's operand dtypes: its `matmul_rate`, unless given) is taken
        here."""
        self._finished = False
        if self.keep_instructions:
            rec.event = ev
        self.records.append(rec)
        if rec.cost.flops:
            self._matmul(ev, rec.cost, rate)

    def _tally(self) -> None:
        """Add the records kept since the last tally to the aggregates, as adding them one by one would (each
        sum taken in record order, each dict and set filled in first-use order), by C loops over the records'
        fields: per record, `rec.end - rec.start` to busy_ns[(core, row)] and its kernel line, LoadStationary
        and DMA-issue time to their rows, the stall to its line, a DMA's bytes and engine time to the totals
        and, for a transfer below SMALL_DMA_EFFICIENCY in a stream of its kind, to small_dmas."""
        recs = self.records[self._tallied:]
        self._tallied = len(self.records)
        if not recs:
            return
        n = len(recs)
        starts, ends = list(map(_START, recs)), list(map(_END, recs))
        durations = list(map(sub, ends, starts))
        cores, opcodes, costs = list(map(_CORE, recs)), list(map(_OPCODE, recs)), list(map(_COST, recs))
        # engine rows, in the order adding records one by one would use them: each record's own row, then its
        # LoadStationary (the Tensor row) and its DMA issue row; those two add `busy + end - start`, that is
        # end, then -start (the same float sums), and count once
        # on one core (the usual case) rows stand for their (core, row) keys: strings hash once
        one_core = cores.count(cores[0]) == n
        keys = list(map(_ROW, recs)) if one_core else list(zip(cores, map(_ROW, recs)))
        values = durations
        positions = weights = None
        ls_starts, issue_starts = list(map(_LS_START, recs)), list(map(_ISSUE_START, recs))
        has_ls = list(map(is_not, ls_starts, repeat(None, n)))
        has_issue = list(map(is_not, issue_starts, repeat(None, n)))
        if any(has_ls) or any(has_issue):
            if one_core:
                ls_keys = [Row.TENSOR] * has_ls.count(True)
                issue_keys = list(compress(map(_ISSUE_ROW, recs), has_issue))
            else:
                ls_keys = list(zip(compress(cores, has_ls), repeat(Row.TENSOR)))
                issue_keys = list(zip(compress(cores, has_issue), compress(map(_ISSUE_ROW, recs), has_issue)))
            ls_pos = list(compress(range(0, 5 * n, 5), has_ls))
            issue_pos = list(compress(range(0, 5 * n, 5), has_issue))
            keys = keys + ls_keys + ls_keys + issue_keys + issue_keys
            values = (durations + list(compress(map(_LS_END, recs), has_ls))
                      + list(map(neg, compress(ls_starts, has_ls))) + list(compress(map(_ISSUE_END, recs), has_issue))
                      + list(map(neg, compress(issue_starts, has_issue))))
            positions = (list(range(0, 5 * n, 5)) + list(map(add, ls_pos, repeat(1)))
                         + list(map(add, ls_pos, repeat(2))) + list(map(add, issue_pos, repeat(3)))
                         + list(map(add, issue_pos, repeat(4))))
            weights = ([1] * n + [1] * len(ls_keys) + [0] * len(ls_keys) + [1] * len(issue_keys)
                       + [0] * len(issue_keys))
        busy, counts = self.busy_ns, self.counts
        for key, idx in _groups(keys, positions):
            if one_core:
                key = (cores[0], key)
            busy[key] = reduce(add, map(values.__getitem__, idx), busy.get(key, 0.0))
            counts[key] = counts.get(key, 0) + (len(idx) if weights is None else sum(map(weights.__getitem__, idx)))
        opcode_counts = self.opcode_counts
        for opcode, count in Counter(opcodes).items():
            opcode_counts[opcode] = opcode_counts.get(opcode, 0) + count
        self.total_ns = max(self.total_ns, max(ends))
        self.elem_ops = reduce(add, map(_ELEM_OPS, costs), self.elem_ops)
        self.transpose_flops = reduce(add, map(_TRANSPOSE_FLOPS, costs), self.transpose_flops)
        # kernel lines, by the location objects the records hold (alive, so their ids stay unique)
        loc_ids = list(map(id, map(_LOCATION, recs)))
        names = {i: location_key(loc) for i, loc in dict(zip(loc_ids, map(_LOCATION, recs))).items()}
        lines = list(map(names.__getitem__, loc_ids))
        entries = self.lines
        stall_ns = list(map(_STALL_NS, recs))
        for line, idx in _groups(lines):
            entry = entries.get(line)
            if entry is None:
                entry = entries[line] = [0.0, 0, 0.0, set()]
            entry[0] = reduce(add, map(durations.__getitem__, idx), entry[0])
            entry[1] += len(idx)
            entry[2] = reduce(add, map(stall_ns.__getitem__, idx), entry[2])
            entry[3].update(dict.fromkeys(map(opcodes.__getitem__, idx)))       # in first-use order
        stall_kinds = list(map(_STALL_KIND, recs))
        stalled = list(map(and_, map(is_not, stall_kinds, repeat(None, n)), map(_lt, repeat(0, n), stall_ns)))
        if any(stalled):
            s_lines, s_ns, s_kinds = (list(compress(v, stalled)) for v in (lines, stall_ns, stall_kinds))
            for line, idx in _groups(s_lines):
                s = self.stalls.setdefault(line, [0.0, 0, set()])
                s[0] = reduce(add, map(s_ns.__getitem__, idx), s[0])
                s[1] += len(idx)
            for line, kind in dict.fromkeys(zip(s_lines, s_kinds)):
                self.stalls[line][2].add(kind)
        works = list(map(_DMA, costs))
        is_dma = list(map(is_not, works, repeat(None, n)))
        if any(is_dma):
            self._tally_dmas(list(compress(works, is_dma)), list(compress(durations, is_dma)),
                             list(compress(lines, is_dma)), list(compress(recs, is_dma)))

    def _tally_dmas(self, works, durations, lines, recs) -> None:
        """`_tally`'s DMA part, over the DMA records (their works, durations and kernel lines)."""
        self.dma_count += len(works)
        self.dma_bytes = reduce(add, map(_SIZE_BYTES, works), self.dma_bytes)
        self.hbm_read_bytes = reduce(add, map(_HBM_READ, works), self.hbm_read_bytes)
        self.hbm_write_bytes = reduce(add, map(_HBM_WRITE, works), self.hbm_write_bytes)
        self.dma_engine_ns = reduce(add, map(_DMA_ENGINE_NS, recs), self.dma_engine_ns)
        # the stream efficiency of each DmaWork object (costs are memoised, so a loop's transfers share one;
        # they are alive, so their ids stay unique)
        eff = self.hw.cost.dma.efficiency
        work_ids = list(map(id, works))
        streams = {i: eff(work.partition_bytes) * work.efficiency for i, work in dict(zip(work_ids, works)).items()}
        stream = list(map(streams.__getitem__, work_ids))
        small = list(map(_lt, stream, repeat(SMALL_DMA_EFFICIENCY, len(works))))
        if not any(small):
            return
        works, durations, lines, stream = (list(compress(v, small)) for v in (works, durations, lines, stream))
        # what each costs in a stream of its kind: duration * efficiency / stream
        cost_ns = list(map(truediv, map(mul, durations, map(_EFFICIENCY, works)), stream))
        for line, idx in _groups(lines):
            s = self.small_dmas.setdefault(line, [0, 0, 1.0, float("inf"), 0.0])
            s[0] += len(idx)
            s[1] = reduce(add, map(_SIZE_BYTES, map(works.__getitem__, idx)), s[1])
            s[2] = min(s[2], *map(stream.__getitem__, idx))
            s[3] = min(s[3], *map(_DESCRIPTOR_BYTES, map(works.__getitem__, idx)))
            s[4] = reduce(add, map(cost_ns.__getitem__, idx), s[4])

    def _matmul(self, ev, cost, rate) -> None:
        self.flops += cost.flops
        self.matmuls += 1
        is_fp32, peak = rate if rate is not None else self.matmul_rate(ev)
        if is_fp32:
            self.fp32_matmuls += 1
        self.flops_by_peak[peak] = self.flops_by_peak.get(peak, 0.0) + cost.flops

    def matmul_rate(self, ev) -> tuple[bool, float]:
        """(counts as an fp32 matmul, peak flops/ns) of the matmul `ev`, by its opcode and the dtypes of its
        stationary and moving operands (kept per opcode and dtypes; the scheduler keeps it per event
        signature)."""
        key = (ev.opcode, *[o.dtype for o in ev.operands if o.role in ("stationary", "moving")])
        rate = self._matmul_rates.get(key)
        if rate is None:
            rate = self._matmul_rates[key] = self._matmul_rate(key[0], key[1:])
        return rate

    def _matmul_rate(self, opcode: str, dtypes: tuple[str, ...]) -> tuple[bool, float]:
        """(counts as an fp32 matmul, peak flops/ns) for a matmul with operand `dtypes`."""
        dtype = ("float32" if "float32" in dtypes else
                 next((d for d in dtypes if d.startswith("float8")), dtypes[0] if dtypes else "bfloat16"))
        return dtype == "float32", peak_for(self.hw, dtype, "mx" if opcode == "nc_matmul_mx" else None)

    # -- summary --------------------------------------------------------------------------------------
    def finish(self) -> "CostResult":
        if self._finished:
            return self
        self._tally()
        self.roofline = roofline(self.hw, self.flops_by_peak, self.hbm_bytes, self.dma_bytes, self.cores)
        self._critical_path()
        self._finished = True
        return self

    def _critical_path(self) -> None:
        self.critical_path = []
        self.critical_by_line, self.critical_by_row = {}, {}
        if not self.records:
            return
        i = max(range(len(self.records)), key=lambda k: self.records[k].end)
        seen = set()
        ends = None
        while i != NO_PRODUCER and i not in seen:
            seen.add(i)
            rec = self.records[i]
            self.critical_path.append(rec)
            line = location_key(rec.location)
            self.critical_by_line[line] = self.critical_by_line.get(line, 0.0) + rec.duration_ns
            self.critical_by_row[rec.row] = self.critical_by_row.get(rec.row, 0.0) + rec.duration_ns
            i = rec.pred
            if i == NO_PRODUCER and rec.start > 0:
                # placed at the start of an idle stretch (out of program order): its engine gated it, so
                # the path goes on through the record on its row that ended there
                if ends is None:
                    ends = {(r.row, r.end): k for k, r in enumerate(self.records)}
                i = ends.get((rec.row, rec.start), NO_PRODUCER)
        self.critical_path.reverse()

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def latency_ns(self) -> float:
        """Device time of one execution: the schedule's length, at least the launch floor."""
        return max(self.total_ns, self.hw.cost.launch_floor_ns)

    @property
    def peak_flops_per_ns(self) -> float:
        return self.hw.cost.tensor.peak_bf16_flops_per_ns * self.cores

    def engine_busy_ns(self, row: str) -> float:
        """Busy time of one timeline row, summed over cores."""
        return sum(v for (c, r), v in self.busy_ns.items() if r == row)

    def utilization(self, row: str) -> float:
        total = self.total_ns * self.cores
        return self.engine_busy_ns(row) / total if total else 0.0

    @property
    def dma_utilization(self) -> float:
        total = self.total_ns * self.cores * self.hw.cost.dma.engines
        return self.dma_engine_ns / total if total else 0.0

    @property
    def mfu(self) -> float:
        return self.flops / (self.peak_flops_per_ns * self.total_ns) if self.total_ns else 0.0

    @property
    def hbm_bandwidth_bytes_per_ns(self) -> float:
        return self.hbm_bytes / self.total_ns if self.total_ns else 0.0

    @property
    def mbu(self) -> float:
        cap = self.hw.cost.hbm_bandwidth_bytes_per_ns * self.cores
        return self.hbm_bandwidth_bytes_per_ns / cap

    def to_dict(self) -> dict:
        """The JSON summary (profiler field names where they exist; times in seconds there, ns elsewhere)."""
        self.finish()
        rf = self.roofline
        rows = sorted({r for (_, r) in self.busy_ns})
        return {
            "kernel": self.kernel, "target": self.hw.name, "grid": list(self.grid), "cores": self.cores,
            "programs": self.programs,
            "total_time": self.latency_ns * 1e-9,
            "total_exec_time": self.total_ns * 1e-9,
            "latency_ns": self.latency_ns, "schedule_ns": self.total_ns,
            "instruction_count": len(self.records),
            "engines": {r: {"active_time": self.engine_busy_ns(r) * 1e-9,
                            "active_time_percent": 100.0 * self.utilization(r),
                            "instruction_count": sum(v for (c, rr), v in self.counts.items() if rr == r)}
                        for r in rows},
            "matmul_instruction_count": self.matmuls,
            "model_flops": self.flops, "transpose_flops": self.transpose_flops, "elementwise_ops": self.elem_ops,
            "achieved_flops_per_s": self.flops / (self.total_ns * 1e-9) if self.total_ns else 0.0,
            "peak_flops_per_s": self.peak_flops_per_ns * 1e9,
            "mfu_estimated_percent": 100.0 * self.mfu,
            "dma_transfer_count": self.dma_count, "dma_transfer_total_bytes": self.dma_bytes,
            "dma_transfer_average_bytes": self.dma_bytes / self.dma_count if self.dma_count else 0.0,
            "dma_active_time_percent": 100.0 * self.dma_utilization,
            "hbm_read_bytes": self.hbm_read_bytes, "hbm_write_bytes": self.hbm_write_bytes,
            "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_ns * 1e9,
            "mbu_estimated_percent": 100.0 * self.mbu,
            "roofline": {"bound": rf.bound, "bound_ns": rf.bound_ns, "compute_ns": rf.compute_ns,
                         "hbm_ns": rf.hbm_ns, "dma_ns": rf.dma_ns,
                         "mm_arithmetic_intensity": (rf.arithmetic_intensity
                                                     if rf.arithmetic_intensity != float("inf") else None),
                         "peak_flops_bandwidth_ratio": rf.ridge_flops_per_byte},
            "critical_path": {"instructions": len(self.critical_path),
                              "by_row_ns": dict(self.critical_by_row),
                              "by_line_ns": dict(sorted(self.critical_by_line.items(), key=lambda kv: -kv[1]))},
            "uncosted": dict(self.uncosted),
        }

    # -- text -----------------------------------------------------------------------------------------
    TABLE_HEADER = f"{'kernel':<28} {'target':<6} {'latency':>12} {'bound':>8} {'roofline':>12} {'MFU':>6} {'PE':>5} " \
                   f"{'DVE':>5} {'ACT':>5} {'POOL':>5} {'DMA':>5}"

    def table_row(self) -> str:
        """One line of the `opennki benchmark` table (see TABLE_HEADER)."""
        self.finish()
        pct = lambda x: f"{100 * x:4.0f}%"     # noqa: E731
        return (f"{self.kernel[:28]:<28} {self.hw.name:<6} {_time(self.latency_ns):>12} "
                f"{self.roofline.bound:>8} {_time(self.roofline.bound_ns):>12} {pct(self.mfu):>6} "
                f"{pct(self.utilization(Row.TENSOR_MATRIX)):>5} {pct(self.utilization(Row.VECTOR)):>5} "
                f"{pct(self.utilization(Row.SCALAR)):>5} {pct(self.utilization(Row.GPSIMD)):>5} "
                f"{pct(self.dma_utilization):>5}")

    def format(self) -> str:
        """A short multi-line summary."""
        self.finish()
        rf = self.roofline
        lines = [f"{self.kernel} on {self.hw.name} ({self.cores} core{'s' if self.cores > 1 else ''}, "
                 f"{len(self.records)} instructions): estimated latency {_time(self.latency_ns)}",
                 f"  roofline {_time(rf.bound_ns)} ({rf.bound}-bound); compute {_time(rf.compute_ns)}, "
                 f"HBM {_time(rf.hbm_ns)}, DMA {_time(rf.dma_ns)}"]
        for row in Row.ENGINES:
            if self.engine_busy_ns(row):
                lines.append(f"  {row:<13} busy {_time(self.engine_busy_ns(row)):>10}  "
                             f"{100 * self.utilization(row):5.1f}%")
        if self.dma_count:
            lines.append(f"  DMA           {self.dma_count} transfers, {_bytes(self.dma_bytes)}, average "
                         f"{_bytes(self.dma_bytes / self.dma_count)}, engines {100 * self.dma_utilization:.1f}% busy")
        if self.flops:
            lines.append(f"  matmul        {self.flops / 1e9:.3g} GFLOP at {self.flops / self.total_ns:.4g} "
                         f"GFLOP/s = {100 * self.mfu:.1f}% of the {self.peak_flops_per_ns:.4g} GFLOP/s peak")
        if self.hbm_bytes:
            lines.append(f"  HBM           {_bytes(self.hbm_bytes)} at {self.hbm_bandwidth_bytes_per_ns:.4g} GB/s "
                         f"({100 * self.mbu:.1f}% of the NeuronCore's share)")
        if self.uncosted:
            lines.append(f"  UNCOSTED      {', '.join(f'{k} x{v}' for k, v in sorted(self.uncosted.items()))}")
        return "\n".join(lines)

    __str__ = format


def _time(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


format_time, format_bytes = _time, _bytes
