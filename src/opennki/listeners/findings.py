"""Listeners layer: findings, the records every check produces (races, uninitialised reads, lint rules).

Imports errors and events only. A finding is data: what kind of bug, which rule, the kernel lines involved,
the memory regions, the loop iterations or programs, and two sentences for the user: why it matters on
hardware and how to fix it. `format_findings` turns a list of them into text, `to_json` into plain values
(the `opennki check --json` output and the profile's HTML report).

Findings of the launches run while a `collecting()` block is open go to its list instead of being raised
(`opennki check`, the pytest plugin's `--nki-check`); outside one, the simulator raises the first finding
of a launch as an error (`Finding.error()`). The block is looked up when a launch starts, on the caller's
thread (cooperating programs run on threads of their own).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from dataclasses import dataclass, field

from opennki.errors import KernelError, OpenNKIError, RaceError, SourceLocation, UninitializedReadError
from opennki.events import Region


class FindingKind(enum.Enum):
    """What a finding is about."""

    RACE = "race"                       # two unordered accesses to the same bytes, one a write
    UNINITIALIZED = "uninitialized"     # a read of an element never written
    DIVERGENCE = "divergence"           # cores or programs that do not meet at the same exchange
    LINT = "lint"                       # a tracing rule of the NKI compiler, found in the kernel's source


_ERRORS = {FindingKind.RACE: RaceError, FindingKind.UNINITIALIZED: UninitializedReadError,
           FindingKind.DIVERGENCE: KernelError, FindingKind.LINT: KernelError}


@dataclass(frozen=True, eq=False)
class Finding:
    """One bug a check found.

    Fields:
        kind: FindingKind.
        rule: a short stable name of the rule (`affine_loop_carried_raw`, `uninitialized_read`,
            `err_dynamic_control_flow_not_supported`, ...); NKI's error code where it has one.
        message: what happened, with tensor names and element counts.
        lines: the kernel lines involved (both accesses of a race, the reading line and the creation site of
            an uninitialised read, the offending statement of a lint finding).
        regions: the memory regions involved (physical addresses from the allocator), if any.
        iterations: for loop-carried hazards, the two iterations of the affine loop.
        programs: the SPMD programs / cores involved.
        why: why it matters on hardware.
        fix: how to fix it.
    """

    kind: FindingKind
    rule: str
    message: str
    lines: tuple[SourceLocation, ...] = ()
    regions: tuple[Region, ...] = ()
    iterations: tuple = ()
    programs: tuple = ()
    why: str = ""
    fix: str = ""
    kernel: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        """Findings with the same key report the same bug (the same rule at the same lines)."""
        return (self.kind, self.rule, tuple((loc.filename, loc.lineno) for loc in self.lines))

    def error(self) -> OpenNKIError:
        """The finding as the error the simulator raises outside a `collecting()` block."""
        return _ERRORS[self.kind](self.message + (f"; {self.why}" if self.why else ""), code=self.rule,
                                  hint=self.fix or None, location=self.lines[0] if self.lines else None)

    def to_json(self) -> dict:
        return {
            "kind": self.kind.value, "rule": self.rule, "message": self.message, "kernel": self.kernel,
            "lines": [{"file": loc.filename, "line": loc.lineno, "function": loc.function, "source": loc.source}
                      for loc in self.lines],
            "regions": [{"memory": r.kind.value, "partitions": [r.partition_start, r.partition_start
                                                                + r.partition_count],
                         "bytes": [r.byte_start, r.byte_end]} for r in self.regions],
            "iterations": [list(i) if isinstance(i, tuple) else i for i in self.iterations],
            "programs": [list(p) if isinstance(p, tuple) else p for p in self.programs],
            "why": self.why, "fix": self.fix,
        }

    def format(self) -> str:
        head = f"{self.kind.value}: [{self.rule}] {self.message}"
        parts = [head]
        for loc in self.lines:
            source = loc.source
            parts.append(f"  at {loc.function} ({loc.filename}:{loc.lineno})" + (f"\n      {source}" if source else ""))
        if self.regions:
            parts.append("  regions: " + "; ".join(
                f"{r.kind.value} partitions {r.partition_start}-{r.partition_start + r.partition_count} "
                f"bytes {r.byte_start}-{r.byte_end}" for r in self.regions))
        if self.iterations:
            parts.append("  iterations: " + ", ".join(str(i) for i in self.iterations))
        if any(self.programs):          # () is the one program of a launch without a grid
            parts.append("  programs: " + ", ".join(str(list(p)) for p in self.programs))
        if self.why:
            parts.append(f"  why: {self.why}")
        if self.fix:
            parts.append(f"  fix: {self.fix}")
        return "\n".join(parts)


def format_findings(findings) -> str:
    """Text for a list of findings (one paragraph each), or a line saying there are none."""
    findings = list(findings)
    if not findings:
        return "no findings"
    return "\n\n".join(f.format() for f in findings) + f"\n\n{len(findings)} finding(s)"


def unique(findings) -> list[Finding]:
    """The findings, each bug (`Finding.key`) once, in first-seen order."""
    seen, out = set(), []
    for f in findings:
        if f.key not in seen:
            seen.add(f.key)
            out.append(f)
    return out


# -- collecting ---------------------------------------------------------------------------------------------

_collector: contextvars.ContextVar["list[Finding] | None"] = contextvars.ContextVar("opennki_findings",
                                                                                    default=None)


class Collected(list):
    """The findings of a `collecting()` block, in order; `kernels` maps each kernel function launched in the
    block to (generation, options), for checks that read kernels rather than runs (the lint). With
    `all_checks`, every launch in the block runs with the race checker and uninitialised-read tracking on,
    whatever its options say (`opennki check`, `--nki-check`)."""

    def __init__(self, *args, all_checks: bool = False):
        super().__init__(*args)
        self.kernels: dict = {}
        self.all_checks = all_checks


@contextlib.contextmanager
def collecting(into: Collected | None = None):
    """Within the block, launches hand their findings to the yielded list instead of raising them."""
    found = Collected() if into is None else into
    token = _collector.set(found)
    try:
        yield found
    finally:
        _collector.reset(token)


def collector() -> "Collected | None":
    """The list of the innermost open `collecting()` block, or None."""
    return _collector.get()


def launched(fn, generation, options) -> None:
    """A launch of kernel function `fn` began: remembered by the open `collecting()` block, if any."""
    found = _collector.get()
    if found is not None:
        fn = getattr(fn, "__wrapped__", fn)
        found.kernels.setdefault(fn, (generation, options))


def report(findings) -> None:
    """Hand a launch's findings on: to the open `collecting()` list, else raise the first one."""
    findings = unique(findings)
    if not findings:
        return
    found = _collector.get()
    if found is not None:
        found.extend(findings)
        return
    raise findings[0].error()


def with_kernel(f: Finding, kernel: str) -> Finding:
    """The finding with the kernel's name filled in (if it has none)."""
    if f.kernel:
        return f
    return Finding(f.kind, f.rule, f.message, f.lines, f.regions, f.iterations, f.programs, f.why, f.fix,
                   kernel, f.extra)


__all__ = ["Collected", "Finding", "FindingKind", "collecting", "launched", "collector", "format_findings", "report", "unique",
           "with_kernel"]
