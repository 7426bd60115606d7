"""Front-door services: the timeline of an estimate as a Chrome / Perfetto trace (JSON "trace event" format).
Imports the cost layer's result types only.

One process per NeuronCore, one thread (row) per engine as the Neuron profiler names them (`Tensor` for
LoadStationary, `TensorMatrix` for MultiplyMoving, `Vector`, `Scalar`, `GpSimd`, `Sync`) and per DMA queue
(`qSyncIO0`, ...; overlapping transfers of one queue get extra lanes `qSyncIO0 #2`, ...). One slice per
instruction, named by opcode, with its sizes, dtypes, memories and kernel line in `args`. Open it in
https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

import json
import os

from opennki.cost.result import DEPENDENCE_NAMES, Row, location_key
from opennki.perf.estimate import estimate

MAX_DMA_LANES = 16


def trace_path(save_trace_name: str) -> str:
    """Where a trace named like NKI's NTFF goes: `profile.ntff` -> `profile.trace.json`."""
    root, ext = os.path.splitext(save_trace_name)
    if ext == ".json":
        return save_trace_name
    return (root if ext == ".ntff" else save_trace_name) + ".trace.json"


def describe_operands(event) -> str:
    """`dst=sbuf bfloat16[128, 512]; src=hbm bfloat16[128, 512]` for an instruction event."""
    if event is None:
        return ""
    return "; ".join(f"{o.role}={o.kind.value} {o.dtype}{list(o.shape)}" for o in event.operands)


def describe_region(op) -> str:
    """`sbuf x partitions [0, 128) bytes [0, 8192)` / `hbm out bytes [0, 65536)` for an operand."""
    r = op.region
    where = f"partitions [{r.partition_start}, {r.partition_start + r.partition_count}) " if r.kind.is_on_chip else ""
    return f"{r.kind.value} {op.tensor_name} {where}bytes [{r.byte_start}, {r.byte_end})"


def predecessors(rec, records) -> list[dict]:
    """The instruction's dependences, as the profiler's instruction details list them: the predecessor, the
    kind (flow = read after write, anti = write after read, output = write after write, reuse = a tensor
    over a freed tensor's bytes) and the region of this instruction's operand that carries it."""
    out = []
    for p, kind, i in rec.deps:
        item = {"instruction": p, "kind": DEPENDENCE_NAMES.get(kind, kind), "gating": p == rec.pred}
        if 0 <= p < len(records):
            item["opcode"] = records[p].opcode
            item["nki_source_location"] = location_key(records[p].location)
        if rec.event is not None and i < len(rec.event.operands):
            op = rec.event.operands[i]
            item["operand"] = op.role
            item["region"] = describe_region(op)
        out.append(item)
    return out


def instruction_args(rec, records=()) -> dict:
    args = {"opcode": rec.opcode, "nki_source_location": location_key(rec.location),
            "duration_ns": round(rec.duration_ns, 3), "program": list(rec.program)}
    if rec.event is not None:
        args["operands"] = describe_operands(rec.event)
        if rec.location is not None:
            args["source"] = rec.location.source
    if rec.name:
        args["name"] = str(rec.name)
    if rec.stall_ns > 0:
        args["stall_ns"] = round(rec.stall_ns, 3)
        args["stall_on"] = DEPENDENCE_NAMES.get(rec.stall_kind, rec.stall_kind)
    if rec.deps:
        args["predecessors"] = predecessors(rec, records)
    cost = rec.cost
    if cost.perf_mode:
        args["performance_mode"] = cost.perf_mode
    if cost.flops:
        args["flops"] = cost.flops
    if cost.dma is not None:
        args.update(bytes=cost.dma.size_bytes, descriptors=cost.dma.descriptors,
                    descriptor_bytes=round(cost.dma.descriptor_bytes, 3), dma_path=cost.dma.path,
                    efficiency=round(cost.dma.efficiency, 4), dge=cost.dma.dge)
    return args


class _Rows:
    """Thread ids per (core, row name), engines first, DMA queue lanes after."""

    def __init__(self):
        self.tids: dict[tuple[int, str], int] = {}
        self.lanes: dict[tuple[int, str], list[float]] = {}

    def tid(self, core: int, row: str) -> int:
        key = (core, row)
        if key not in self.tids:
            order = Row.ENGINES.index(row) if row in Row.ENGINES else len(Row.ENGINES) + len(self.tids)
            self.tids[key] = order * 100 + len(self.tids) % 100
        return self.tids[key]

    def dma_lane(self, core: int, queue: str, start: float, end: float) -> str:
        ends = self.lanes.setdefault((core, queue), [])
        for i, e in enumerate(ends):
            if e <= start:
                ends[i] = end
                return queue if i == 0 else f"{queue} #{i + 1}"
        if len(ends) < MAX_DMA_LANES:
            ends.append(end)
            i = len(ends) - 1
        else:
            i = min(range(len(ends)), key=ends.__getitem__)
            ends[i] = max(ends[i], end)
        return queue if i == 0 else f"{queue} #{i + 1}"


def chrome_trace(result) -> dict:
    """The trace of a CostResult (see the module docstring) as a JSON-ready dict."""
    result.finish()
    rows = _Rows()
    events = []

    def slice_(core, row, name, start, end, args):
        events.append({"name": name, "cat": row, "ph": "X", "pid": core, "tid": rows.tid(core, row),
                       "ts": start / 1000.0, "dur": max(end - start, 0.0) / 1000.0, "args": args})

    for rec in result.records:
        args = instruction_args(rec, result.records)
        row = rec.row
        if rec.cost.dma is not None:
            row = rows.dma_lane(rec.core, rec.row, rec.start, rec.end)
            if rec.issue_start is not None:
                slice_(rec.core, rec.issue_row, f"dma_trigger {rec.opcode}", rec.issue_start, rec.issue_end,
                       {"opcode": rec.opcode, "queue": rec.row,
                        "nki_source_location": args["nki_source_location"]})
        if rec.ls_start is not None:
            slice_(rec.core, Row.TENSOR, "LoadStationary", rec.ls_start, rec.ls_end,
                   {"opcode": "LDWEIGHTS", "nki_source_location": args["nki_source_location"]})
        slice_(rec.core, row, rec.opcode, rec.start, rec.end, args)
    meta = []
    for core in sorted({c for c, _ in rows.tids}):
        meta.append({"name": "process_name", "ph": "M", "pid": core,
                     "args": {"name": f"NeuronCore {core} ({result.hw.name}) {result.kernel}"}})
    for (core, row), tid in rows.tids.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": core, "tid": tid, "args": {"name": row}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": core, "tid": tid, "args": {"sort_index": tid}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ns",
            "otherData": {"generator": "opennki cost model", "kernel": result.kernel, "target": result.hw.name,
                          "latency_ns": result.latency_ns}}


def write_chrome_trace(result, path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as f:
        json.dump(chrome_trace(result), f, separators=(",", ":"))
    return path


def write_trace(kernel, args, kwargs, path: str, **config) -> str:
    """The service behind `baremetal(save_trace_name=...)`: estimate the call and write its trace at
    `trace_path(path)`; returns the file written."""
    result = estimate(kernel, args, kwargs, target=config.get("target"))
    return write_chrome_trace(result, trace_path(path))
