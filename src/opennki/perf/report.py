"""Front-door services: the plain-text profile report and the anti-pattern hints. Imports the cost layer's
result types and the trace's region format.

`hints(result)` returns findings as data (`Hint`: kind, message, kernel lines); `critical_dependencies(result)`
the dependences that gate the critical path; `format_report(result)` is the human-readable text: totals,
per-engine utilisation, the top hot spots by kernel line (busy time and time on the critical path, with the
source text), the dependences that make the critical path, the hints and the checks' findings.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass

from opennki.cost.result import DEPENDENCE_NAMES, Row, format_bytes, format_time, location_key
from opennki.perf.trace import describe_region

SMALL_DMA_BYTES = 2048          # hardware.md §6.3: >= 2 KiB per partition recommended, 4 KiB saturates
STALL_SHARE = 0.05              # stalls / inefficient DMAs worth a hint: 5% of the latency
IDLE_PE_UTILIZATION = 0.5


@dataclass(frozen=True)
class Hint:
    """One anti-pattern the model saw: `kind` is small_dma, fp32_matmul, buffer_reuse, idle_tensor_engine,
    psum_spill or sbuf_spill."""

    kind: str
    message: str
    lines: tuple[str, ...] = ()


def hints(result) -> list[Hint]:
    result.finish()
    out = []
    small = sorted(result.small_dmas.items(), key=lambda kv: -kv[1][4])
    if small and sum(v[4] for _, v in small) > STALL_SHARE * result.total_ns:
        count = sum(v[0] for _, v in small)
        worst = min(v[2] for _, v in small)
        piece = min(v[3] for _, v in small)
        out.append(Hint("small_dma", (
            f"{count} of {result.dma_count} DMA transfers are small or fragmented (pieces down to {piece:.0f} "
            f"bytes; a stream of them gets {100 * worst:.0f}% of the DMA bandwidth). Transfers need at least "
            f"{SMALL_DMA_BYTES} contiguous bytes per partition (4 KiB to saturate): widen tiles along the free "
            "dimension, load contiguous rows, or coalesce several tiles into one transfer."),
            tuple(line for line, _ in small[:5])))
    if result.fp32_matmuls:
        out.append(Hint("fp32_matmul", (
            f"{result.fp32_matmuls} of {result.matmuls} matmuls take fp32 operands, which run at 1/4 of the "
            "bf16 rate on the Tensor Engine. Cast the operands to bfloat16 (PSUM still accumulates in fp32).")))
    reuse = [(line, v) for line, v in result.stalls.items() if v[2] & {"war", "waw", "reuse"}]
    stalled = sum(v[0] for _, v in reuse)
    if result.total_ns and stalled > STALL_SHARE * result.total_ns:
        reuse.sort(key=lambda kv: -kv[1][0])
        out.append(Hint("buffer_reuse", (
            f"Instructions waited {format_time(stalled)} in total for earlier readers or writers of the buffer "
            "they overwrite (write-after-read / write-after-write on a reused buffer), which serialises loop "
            "iterations. Allocate the buffer inside the loop (or alternate between two buffers) so "
            "consecutive iterations can overlap."), tuple(line for line, _ in reuse[:5])))
    if result.matmuls and result.utilization(Row.TENSOR_MATRIX) < IDLE_PE_UTILIZATION:
        busiest = max(result.critical_by_row.items(), key=lambda kv: kv[1], default=("?", 0.0))[0]
        out.append(Hint("idle_tensor_engine", (
            f"The Tensor Engine is busy only {100 * result.utilization(Row.TENSOR_MATRIX):.0f}% of the time; "
            f"the critical path runs mostly on {busiest}. Feed it faster: larger DMA transfers, more buffers "
            "in flight, keeping reused operands in SBUF, or moving work off the bottleneck engine.")))
    out += _spill_hint(result, "psum", "PSUM tiles were spilled to SBUF", "each a Vector Engine copy. Keep fewer "
                       "PSUM tiles live at once (PSUM holds 8 banks of 2 KiB per partition): copy results out to "
                       "SBUF as soon as they are complete.")
    out += _spill_hint(result, "sbuf", "SBUF tiles were spilled to HBM", "each a DMA of the whole tile. Keep "
                       "fewer tiles live at once: consume each tile soon after loading it, or tile the work so "
                       "its working set fits SBUF.")
    return out


@dataclass(frozen=True)
class CriticalDependence:
    """A dependence on the critical path, summed over its occurrences: `line`'s `opcode` waited for
    `pred_line`'s `pred_opcode` (`kind`: flow / anti / output / reuse) through `region`."""

    line: str
    opcode: str
    pred_line: str
    pred_opcode: str
    kind: str
    region: str
    count: int
    stall_ns: float


def critical_dependencies(result, top: int = 3) -> list[CriticalDependence]:
    """The dependences that gate instructions on the critical path, by the time they made it wait."""
    result.finish()
    groups: dict[tuple, list] = {}
    for rec in result.critical_path:
        edge = next(((kind, i) for p, kind, i in rec.deps if p == rec.pred), None)
        if rec.stall_kind is None or edge is None:
            continue                     # not gated, or gated by its engine / DMA engines, not a dependence
        pred = result.records[rec.pred]
        kind, i = edge
        region = describe_region(rec.event.operands[i]) if rec.event is not None else ""
        key = (location_key(rec.location), rec.opcode, location_key(pred.location), pred.opcode,
               DEPENDENCE_NAMES.get(kind, kind), region)
        g = groups.setdefault(key, [0, 0.0])
        g[0] += 1
        g[1] += rec.stall_ns
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:top]
    return [CriticalDependence(*key, count, stall) for key, (count, stall) in ranked]


def hot_spots(result, top: int = 10) -> list[tuple[str, float, float, int, str]]:
    """(kernel line, busy ns, critical-path ns, instructions, opcodes) of the `top` lines, by critical-path
    time then busy time."""
    result.finish()
    rows = []
    for line, (busy, count, _stall, opcodes) in result.lines.items():
        rows.append((line, busy, result.critical_by_line.get(line, 0.0), count, ", ".join(sorted(opcodes))))
    rows.sort(key=lambda r: (-r[2], -r[1]))
    return rows[:top]


def _sources(result, lines) -> dict[str, str]:
    """The source text of kernel lines (`file.py:N` keys), from the first record of each."""
    wanted, out = set(lines), {}
    for rec in result.records:
        if rec.location is None:
            continue
        key = location_key(rec.location)
        if key in wanted and key not in out:
            out[key] = linecache.getline(rec.location.filename, rec.location.lineno).strip()
            if len(out) == len(wanted):
                break
    return out


def format_report(result, top: int = 10) -> str:
    """The plain-text report (module docstring)."""
    result.finish()
    out = [result.format(), "", "Engine utilisation:"]
    for row in Row.ENGINES:
        busy = result.engine_busy_ns(row)
        if busy:
            bar = "#" * int(round(40 * min(1.0, result.utilization(row))))
            out.append(f"  {row:<13} {100 * result.utilization(row):5.1f}%  {bar}")
    if result.dma_count:
        bar = "#" * int(round(40 * min(1.0, result.dma_utilization)))
        out.append(f"  {'DMA engines':<13} {100 * result.dma_utilization:5.1f}%  {bar}")
    out += ["", f"Hot spots (top {top} kernel lines by time on the critical path, then busy time):",
            f"  {'line':<28} {'critical':>11} {'busy':>11} {'instr':>7}  opcodes"]
    spots = hot_spots(result, top)
    sources = _sources(result, [s[0] for s in spots])
    for line, busy, critical, count, opcodes in spots:
        out.append(f"  {line:<28} {format_time(critical):>11} {format_time(busy):>11} {count:>7}  {opcodes}")
        src = sources.get(line)
        if src:
            out.append(f"      {src}")
    deps = critical_dependencies(result)
    if deps:
        out += ["", f"Critical path: {format_time(result.total_ns)} over {len(result.critical_path)} instructions; "
                    "the dependences that make it:"]
        for d in deps:
            out.append(f"  {d.line} {d.opcode} waits for {d.pred_line} {d.pred_opcode}: {d.kind} dependence"
                       f"{' on ' + d.region if d.region else ''} ({d.count}x, {format_time(d.stall_ns)} of waiting)")
    found = hints(result)
    out += ["", "Hints:" if found else "Hints: none (no known anti-pattern seen)."]
    for h in found:
        where = f" [{', '.join(h.lines)}]" if h.lines else ""
        out.append(f"  - {h.kind}: {h.message}{where}")
    out += ["", f"DMA: {result.dma_count} transfers, {format_bytes(result.dma_bytes)}; "
                f"HBM read {format_bytes(result.hbm_read_bytes)}, write {format_bytes(result.hbm_write_bytes)}"]
    out += ["", *_findings_section(result.findings)]
    return "\n".join(out)


def _findings_section(findings) -> list[str]:
    """The checks' findings (`CostResult.findings`, set when the estimate ran with `checks=True`, as profiles
    do), each as `Finding.format` gives it: kind, rule, message, lines, regions, iterations or programs, why
    it matters and the fix."""
    if findings is None:
        return ["Findings: the checks did not run with this estimate."]
    if not findings:
        return ["Findings: none (the race checker and the lint found nothing)."]
    out = [f"Findings ({len(findings)}):"]
    for f in findings:
        out += ["  " + line for line in f.format().splitlines()]
    return out


def _spill_hint(result, memory: str, what: str, advice: str) -> list:
    """The `<memory>_spill` hint when the kernel oversubscribed that memory: how many tiles went out and came
    back (`<memory>_spill` / `<memory>_reload` events), the lines that caused it, and what to do."""
    spills = result.opcode_counts.get(f"{memory}_spill", 0)
    if not spills:
        return []
    lines = tuple(line for line, v in result.lines.items() if f"{memory}_spill" in v[3])
    reloads = result.opcode_counts.get(f"{memory}_reload", 0)
    return [Hint(f"{memory}_spill", (f"{memory.upper()} was oversubscribed: {spills} {what} and {reloads} brought "
                                     f"back, {advice}"), lines[:5])]
