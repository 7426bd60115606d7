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
from itertools import compress, repeat
from operator import add, and_, attrgetter, is_not, lt as _lt, mul, neg, sub, truediv

import numpy as np

from opennki.cost.deps import NO_PRODUCER
from opennki.cost.roofline import Roofline, peak_for, roofline
from opennki.events import Engine


SMALL_DMA_EFFICIENCY = 0.5    # a transfer below half the DMA bandwidth in a stream of its kind is "small"


# a placed instruction as the scheduler adds it (`CostResult.add_row`): InstructionRecord's fields in this order,
# but for the cost and the kernel line, which a row holds as their ids (`id()`: `CostResult.held` keeps the objects,
# so the ids stay unique). The result keeps the rows' values one after another in one list (`CostResult.values`):
# they are numbers, strings, None and the program's tuple of ints, so an estimate keeps no object per instruction
# that CPython's garbage collector tracks or counts (a tuple per row, kept to the end, set off most of the
# collections of a shape-only estimate and made every full collection traverse the rows).
ROW_FIELDS = ("index", "seq", "opcode", "core", "program", "row", "start", "end", "pred", "stall_ns", "stall_kind",
              "cost_id", "location_id", "name", "ls_start", "ls_end", "issue_start", "issue_end", "issue_row",
              "dma_engine_ns")
_COST, _LOCATION = ROW_FIELDS.index("cost_id"), ROW_FIELDS.index("location_id")
_WIDTH = len(ROW_FIELDS)
# rows taken as columns at once (`CostResult._tally`): each column reads every row's part of the values, so a part
# small enough to stay in the CPU caches costs a row's misses once (the tally of 25,088 rows transposed by zip:
# 1.8-1.9 -> 1.2-1.5 us a row)
_ROWS_PER_TALLY = 1024

# fields read by CostResult._tally, in C loops
_ELEM_OPS, _TRANSPOSE_FLOPS, _DMA = map(attrgetter, ("elem_ops", "transpose_flops", "dma"))
_SIZE_BYTES, _HBM_READ, _HBM_WRITE, _EFFICIENCY, _DESCRIPTOR_BYTES = map(
    attrgetter, ("size_bytes", "hbm_read_bytes", "hbm_write_bytes", "efficiency", "descriptor_bytes"))


_NONE = {None: None}          # .get(x, y): None for None, else y
_ZERO = {None: 0.0}           # .get(x, x): 0.0 for None, else x
_NO_SMALL = (0, 0, 1.0, float("inf"), 0.0)


def _keyed_sums(keys: list, columns: tuple, start) -> tuple[list, object, list[list[float]]]:
    """(the distinct keys but None, in order of first use; every key's code, None's the last; per column, per
    distinct key, `start(key)[column]` + the column's values of the key added one by one in order). NumPy's
    bincount adds each bin's weights one at a time in array order, as a loop would (the start goes first:
    0.0 + start is start)."""
    distinct = list(dict.fromkeys(keys))
    if None in distinct:
        distinct.remove(None)
    k = len(distinct)
    code = dict(zip(distinct, range(k)))
    code[None] = k
    codes = np.fromiter(map(code.__getitem__, keys), np.intp, len(keys))
    bins = np.concatenate((np.arange(k), codes))
    starts = [start(key) for key in distinct]
    sums = [np.bincount(bins, np.array([s[j] for s in starts] + column, np.float64), k + 1)[:k].tolist()
            for j, column in enumerate(columns)]
    return distinct, codes, sums


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

    def __init__(self, values: tuple, event=None, deps: tuple = ()):
        """The record of `values` (ROW_FIELDS' values, with the cost and kernel line themselves:
        `CostResult.record_values`), with its event and dependences when kept."""
        (self.index, self.seq, self.opcode, self.core, self.program, self.row, self.start, self.end, self.pred,
         self.stall_ns, self.stall_kind, self.cost, self.location, self.name, ls_start, ls_end, issue_start,
         issue_end, issue_row, dma_engine_ns) = values
        if ls_start is not None:
            self.ls_start, self.ls_end = ls_start, ls_end
        if issue_start is not None:
            self.issue_start, self.issue_end, self.issue_row = issue_start, issue_end, issue_row
        if dma_engine_ns:
            self.dma_engine_ns = dma_engine_ns
        if event is not None:
            self.event = event
        if deps:
            self.deps = deps

    def values(self) -> tuple:
        """Its values in ROW_FIELDS' order (the cost and the kernel line themselves, not their ids)."""
        return (self.index, self.seq, self.opcode, self.core, self.program, self.row, self.start, self.end,
                self.pred, self.stall_ns, self.stall_kind, self.cost, self.location, self.name, self.ls_start,
                self.ls_end, self.issue_start, self.issue_end, self.issue_row, self.dma_engine_ns)

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
        # the placed instructions' rows (ROW_FIELDS' values, one row after another: `rows` makes the tuples), and
        # with keep_instructions their events and dependences; `records` are made from them when read
        self.values: list = []
        self.placed = 0                              # rows added
        self._rows: list[tuple] = []                 # `rows`, as far as made
        self.held: dict[int, object] = {}            # id -> the cost or kernel line a row refers to by that id
        self._events: list = []
        self._deps: list[tuple] = []
        self._records: list[InstructionRecord] = []
        self.uncosted: dict[str, int] = {}
        self.busy_ns: dict[tuple[int, str], float] = {}
        self.counts: dict[tuple[int, str], int] = {}
        self._opcode_counts: dict[str, int] = {}
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
        self._small_dmas: dict[str, list] = {}       # line -> [count, bytes, min stream eff., min piece, ns]
        self._lines: dict[str, list] = {}            # line -> [busy ns, count, stall ns, opcodes]
        self._stalls: dict[str, list] = {}           # line -> [stall ns, count, kinds]
        self.total_ns = 0.0
        self._critical: tuple | None = None          # (records, path, by line, by row): `_critical_path`
        self.roofline: Roofline | None = None
        self.outputs = None                          # the kernel's outputs (ShapeSpecs), set by estimate()
        self.findings = None                         # what the checks found in the run (estimate(checks=True))
        self._finished = False
        self._tallied = 0                            # records added to the aggregates (`_tally`)
        self._detailed = 0                           # records added to the reports' aggregates (`_tally_details`)

    # -- filling --------------------------------------------------------------------------------------
    def add(self, rec: InstructionRecord, ev, rate: tuple[bool, float] | None = None) -> None:
        """Keep the placed instruction of record `rec` (`add_row`)."""
        values = rec.values()
        cost, location = values[_COST], values[_LOCATION]
        self.add_row(values[:_COST] + (id(cost), id(location)) + values[_LOCATION + 1:], ev, cost, rate, rec.deps)

    def add_row(self, row: tuple, ev, cost, rate: tuple[bool, float] | None = None, deps: tuple = (),
                held: bool = False) -> None:
        """Keep one placed instruction, as its row (ROW_FIELDS' values, with `id(cost)` and `id(ev.location)`; a
        record gated by itself has none), with its `cost` and `ev`'s location in `held` (unless `held` says an
        earlier row put them there: the scheduler's plans reused per kernel line, `_site_plan`), and,
        with keep_instructions, its event `ev` and dependences. The aggregates it adds to (busy time, counts,
        kernel lines, stalls, DMA statistics) are tallied when the result is finished (`_tally`), over the rows
        added since, in C loops, and records are made when read (`records`): an estimate that reads neither
        makes no object per instruction; only what needs the event (a matmul's operand dtypes: its
        `matmul_rate`, unless given) is taken here."""
        self._finished = False
        if row[8] == row[0]:
            row = row[:8] + (NO_PRODUCER,) + row[9:]
        self.values.extend(row)
        self.placed += 1
        if not held:
            objects = self.held
            objects[row[_COST]] = cost
            objects[row[_LOCATION]] = ev.location
        if self.keep_instructions:
            self._events.append(ev)
            self._deps.append(deps)
        flops = cost.flops
        if flops:                               # a matmul: its totals (here, not in a call: one per matmul)
            self.flops += flops
            self.matmuls += 1
            is_fp32, peak = rate if rate is not None else self.matmul_rate(ev)
            if is_fp32:
                self.fp32_matmuls += 1
            by_peak = self.flops_by_peak
            by_peak[peak] = by_peak.get(peak, 0.0) + flops

    @property
    def rows(self) -> list[tuple]:
        """The placed instructions' rows, in placement order (made from `values` when first read after rows were
        added; the same tuples on every read)."""
        rows = self._rows
        if len(rows) < self.placed:
            rows.extend(zip(*self._columns(len(rows), self.placed)))
        return rows

    def _columns(self, start: int, stop: int) -> list[list]:
        """The columns (ROW_FIELDS' order) of rows `start` to `stop`, sliced out of `values`."""
        values, first, end = self.values, start * _WIDTH, stop * _WIDTH
        return [values[first + j:end:_WIDTH] for j in range(_WIDTH)]

    @property
    def records(self) -> list[InstructionRecord]:
        """One record per placed instruction, in placement order (made from the rows when first read after
        rows were added; the same objects on every read)."""
        made = self._records
        if len(made) < self.placed:
            start = len(made)
            rows = map(self.record_values, zip(*self._columns(start, self.placed)))
            if self.keep_instructions:
                made.extend(map(InstructionRecord, rows, self._events[start:], self._deps[start:]))
            else:
                made.extend(map(InstructionRecord, rows))
        return made

    def record_values(self, row: tuple) -> tuple:
        """ROW_FIELDS' values of `row` with the cost and the kernel line themselves (an InstructionRecord's)."""
        held = self.held
        return row[:_COST] + (held[row[_COST]], held[row[_LOCATION]]) + row[_LOCATION + 1:]

    def _tally(self) -> None:
        """Add the records kept since the last tally to the summary's aggregates, as adding them one by one would
        (each sum taken in record order, each dict filled in first-use order), by C loops over the records'
        fields and NumPy's bincount for the sums per key (`_keyed_sums`): per record, `rec.end - rec.start` to
        busy_ns[(core, row)], LoadStationary and DMA-issue time to their rows, its end to total_ns, its element
        operations and transpose flops, a DMA's bytes and engine time to the totals. (The aggregates only
        reports read are `_tally_details`'.) The rows are taken as columns, some at a time: tallied in parts, the
        aggregates are the same."""
        start, self._tallied = self._tallied, self.placed
        for part in range(start, self.placed, _ROWS_PER_TALLY):
            self._tally_columns(*self._columns(part, min(part + _ROWS_PER_TALLY, self.placed)))

    def _tally_columns(self, _index, _seq, _opcode, cores, _program, own_rows, starts, ends, _pred, _stall_ns,
                       _stall_kind, cost_ids, _location, _name, ls_starts, ls_ends, issue_starts, issue_ends,
                       issue_rows, dma_engine_ns) -> None:
        """`_tally` over rows given as their columns (ROW_FIELDS' order)."""
        n = len(starts)
        costs = list(map(self.held.__getitem__, cost_ids))
        durations = list(map(sub, ends, starts))
        # engine rows, in the order adding records one by one would use them: each record's own row, then its
        # LoadStationary (the Tensor row) and its DMA issue row; those two add `busy + end - start`, that is
        # end, then -start (the same float sums), and count once: entries 5i .. 5i + 4 of record i, absent
        # ones keyed None
        # on one core (the usual case) rows stand for their (core, row) keys: strings hash once
        one_core = cores.count(cores[0]) == n
        keys = own_rows if one_core else list(zip(cores, own_rows))
        values = durations
        paired = ls_starts.count(None) != n or issue_starts.count(None) != n
        if paired:
            if one_core:
                ls_keys = list(map(_NONE.get, ls_starts, repeat(Row.TENSOR, n)))
                issue_keys = issue_rows
            else:
                ls_keys = list(map(_NONE.get, ls_starts, zip(cores, repeat(Row.TENSOR, n))))
                issue_keys = list(map(_NONE.get, issue_rows, zip(cores, issue_rows)))
            own, keys, values = keys, [None] * (5 * n), [0.0] * (5 * n)
            keys[0::5] = own
            keys[1::5] = keys[2::5] = ls_keys
            keys[3::5] = keys[4::5] = issue_keys
            values[0::5] = durations
            values[1::5] = map(_ZERO.get, ls_ends, ls_ends)
            values[2::5] = map(neg, map(_ZERO.get, ls_starts, ls_starts))
            values[3::5] = map(_ZERO.get, issue_ends, issue_ends)
            values[4::5] = map(neg, map(_ZERO.get, issue_starts, issue_starts))
        busy, counts = self.busy_ns, self.counts
        full = (lambda key: (cores[0], key)) if one_core else (lambda key: key)
        distinct, codes, (sums,) = _keyed_sums(keys, (values,), lambda key: (busy.get(full(key), 0.0),))
        k = len(distinct)
        counted = codes.reshape(n, 5)[:, (0, 1, 3)].ravel() if paired else codes
        for key, total, count in zip(distinct, sums, np.bincount(counted, minlength=k + 1)[:k].tolist()):
            key = full(key)
            busy[key] = total
            counts[key] = counts.get(key, 0) + count
        self.total_ns = max(self.total_ns, max(ends))
        self.elem_ops = reduce(add, map(_ELEM_OPS, costs), self.elem_ops)
        self.transpose_flops = reduce(add, map(_TRANSPOSE_FLOPS, costs), self.transpose_flops)
        works = list(map(_DMA, costs))
        is_dma = list(map(is_not, works, repeat(None, n)))
        if any(is_dma):
            works = list(compress(works, is_dma))
            self.dma_count += len(works)
            self.dma_bytes = reduce(add, map(_SIZE_BYTES, works), self.dma_bytes)
            self.hbm_read_bytes = reduce(add, map(_HBM_READ, works), self.hbm_read_bytes)
            self.hbm_write_bytes = reduce(add, map(_HBM_WRITE, works), self.hbm_write_bytes)
            self.dma_engine_ns = reduce(add, compress(dma_engine_ns, is_dma), self.dma_engine_ns)

    def _tally_details(self) -> None:
        """`_tally` for the aggregates only reports read, done when one of them is first read after records were
        added (`lines`, `stalls`, `small_dmas`, `opcode_counts`): per record, `rec.end - rec.start` and its stall
        to its kernel line, its opcode to the counts and the line's opcodes, its stall to the line's stalls and,
        for a transfer below SMALL_DMA_EFFICIENCY in a stream of its kind, to small_dmas."""
        start, self._detailed = self._detailed, self.placed
        for part in range(start, self.placed, _ROWS_PER_TALLY):
            self._detail_columns(*self._columns(part, min(part + _ROWS_PER_TALLY, self.placed)))

    def _detail_columns(self, _index, _seq, opcodes, _core, _program, _row, starts, ends, _pred, stall_ns,
                        stall_kinds, cost_ids, loc_ids, _name, *_rest) -> None:
        """`_tally_details` over rows given as their columns (ROW_FIELDS' order)."""
        n = len(starts)
        held = self.held
        durations = list(map(sub, ends, starts))
        opcode_counts = self._opcode_counts
        for opcode, count in Counter(opcodes).items():
            opcode_counts[opcode] = opcode_counts.get(opcode, 0) + count
        # kernel lines, by the ids of the location objects the rows refer to
        names = {i: location_key(held[i]) for i in dict.fromkeys(loc_ids)}
        lines = list(map(names.__getitem__, loc_ids))
        entries = self._lines

        def start(line):
            entry = entries.get(line)
            return (0.0, 0.0) if entry is None else (entry[0], entry[2])
        distinct, codes, (busy_sums, stall_sums) = _keyed_sums(lines, (durations, list(stall_ns)), start)
        k = len(distinct)
        for line, b, c, st in zip(distinct, busy_sums, np.bincount(codes, minlength=k + 1)[:k].tolist(), stall_sums):
            entry = entries.get(line)
            if entry is None:
                entry = entries[line] = [0.0, 0, 0.0, set()]
            entry[0] = b
            entry[1] += c
            entry[2] = st
        for line, opcode in dict.fromkeys(zip(lines, opcodes)):        # in first-use order
            entries[line][3].add(opcode)
        stalled = list(map(and_, map(is_not, stall_kinds, repeat(None, n)), map(_lt, repeat(0, n), stall_ns)))
        if any(stalled):
            s_lines, s_ns, s_kinds = (list(compress(v, stalled)) for v in (lines, stall_ns, stall_kinds))
            stalls = self._stalls
            distinct, codes, (sums,) = _keyed_sums(s_lines, (s_ns,), lambda line: (stalls.get(line, (0.0,))[0],))
            k = len(distinct)
            for line, total, count in zip(distinct, sums, np.bincount(codes, minlength=k + 1)[:k].tolist()):
                s = stalls.setdefault(line, [0.0, 0, set()])
                s[0] = total
                s[1] += count
            for line, kind in dict.fromkeys(zip(s_lines, s_kinds)):
                stalls[line][2].add(kind)
        works = list(map(_DMA, map(held.__getitem__, cost_ids)))
        is_dma = list(map(is_not, works, repeat(None, n)))
        if any(is_dma):
            self._small_transfers(list(compress(works, is_dma)), list(compress(durations, is_dma)),
                                  list(compress(lines, is_dma)))

    def _small_transfers(self, works, durations, lines) -> None:
        """`_tally_details`' small transfers, over the DMA records (their works, durations and kernel lines)."""
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
        small_dmas = self._small_dmas
        distinct, _, (sums,) = _keyed_sums(lines, (cost_ns,), lambda line: (small_dmas.get(line, _NO_SMALL)[4],))
        for line, total in zip(distinct, sums):
            s = small_dmas.setdefault(line, [0, 0, 1.0, float("inf"), 0.0])
            s[4] = total
        # the rest per transfer kind (DmaWork) of a line, in first-use order: counts, byte sums (count * size:
        # sizes are integers, whose sum is the same in any order), minima (the first least value, as min()
        # over every transfer of the line gives it)
        ids = list(map(id, works))
        kinds = dict(zip(zip(lines, ids), works))
        for (line, i), count in Counter(zip(lines, ids)).items():
            work, s = kinds[line, i], small_dmas[line]
            s[0] += count
            s[1] += count * work.size_bytes
            if streams[i] < s[2]:
                s[2] = streams[i]
            if work.descriptor_bytes < s[3]:
                s[3] = work.descriptor_bytes

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
        self._finished = True
        return self

    # the aggregates only reports read, and the critical path: made when first read after records were added
    @property
    def lines(self) -> dict[str, list]:
        self._tally_details()
        return self._lines

    @property
    def stalls(self) -> dict[str, list]:
        self._tally_details()
        return self._stalls

    @property
    def small_dmas(self) -> dict[str, list]:
        self._tally_details()
        return self._small_dmas

    @property
    def opcode_counts(self) -> dict[str, int]:
        self._tally_details()
        return self._opcode_counts

    @property
    def critical_path(self) -> list[InstructionRecord]:
        return self._critical_path()[1]

    @property
    def critical_by_line(self) -> dict[str, float]:
        return self._critical_path()[2]

    @property
    def critical_by_row(self) -> dict[str, float]:
        return self._critical_path()[3]

    def _critical_path(self) -> tuple:
        """(records, path, ns per kernel line, ns per row) of the critical path over the records so far."""
        records = self.records
        if self._critical is not None and self._critical[0] == len(records):
            return self._critical
        path, by_line, by_row = [], {}, {}
        self._critical = (len(records), path, by_line, by_row)
        if not records:
            return self._critical
        i = max(range(len(records)), key=lambda k: records[k].end)
        seen = set()
        ends = None
        while i != NO_PRODUCER and i not in seen:
            seen.add(i)
            rec = records[i]
            path.append(rec)
            line = location_key(rec.location)
            by_line[line] = by_line.get(line, 0.0) + rec.duration_ns
            by_row[rec.row] = by_row.get(rec.row, 0.0) + rec.duration_ns
            i = rec.pred
            if i == NO_PRODUCER and rec.start > 0:
                # placed at the start of an idle stretch (out of program order): its engine gated it, so
                # the path goes on through the record on its row that ended there
                if ends is None:
                    ends = {(r.row, r.end): k for k, r in enumerate(records)}
                i = ends.get((rec.row, rec.start), NO_PRODUCER)
        path.reverse()
        return self._critical

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
            "instruction_count": self.placed,
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
                 f"{self.placed} instructions): estimated latency {_time(self.latency_ns)}",
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
