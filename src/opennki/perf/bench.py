"""Front-door services: `benchmark` answered by the cost model (spec/entrypoints.md §5). Imports the cost
layer and the estimate driver; the decorator forms (`nki.benchmark`) belong to the front doors.

There is no device: one shape-only estimate gives the latency of an execution, and `iters` synthetic
samples around it stand in for the measured runs (the cost model is deterministic, so the spread is a fixed
shape: up to +1% with most samples near the estimate, as real latency distributions have a tail). The
percentiles are taken by nearest rank over those samples, so they exist and are monotone for any
`iters >= 1`; fewer iterations only make them coarser (with `iters=1` all eight are equal). `warmup`
executions are not measured (they are validated and otherwise have no effect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from opennki.perf.estimate import estimate
from opennki.cost.result import CostResult

PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)
JITTER_SPREAD = 0.01          # the slowest synthetic sample is 1% above the estimate


class NCLatency:
    """Latency samples of a benchmark, in microseconds (NKI's `benchmark_result.nc_latency`)."""

    def __init__(self, samples_us):
        self.samples_us = sorted(float(s) for s in samples_us)
        if not self.samples_us:
            raise ValueError("NCLatency needs at least one sample")

    def _rank(self, p: float) -> float:
        xs = self.samples_us
        k = max(1, math.ceil(p / 100.0 * len(xs)))
        return xs[min(k, len(xs)) - 1]

    def get_latency_percentile(self, p) -> float:
        """The p-th percentile latency in microseconds, for p in {0, 1, 10, 25, 50, 90, 99, 100}."""
        if p not in PERCENTILES:
            raise ValueError(f"latency percentile {p!r} is not available; NCLatency has {list(PERCENTILES)}")
        return self._rank(p)

    def summary(self) -> dict:
        """The five-number summary (min, 25th, median, 75th, max) in microseconds."""
        return {"min": self.samples_us[0], "p25": self._rank(25), "p50": self._rank(50), "p75": self._rank(75),
                "max": self.samples_us[-1]}

    def console_block(self) -> str:
        """What NKI prints after a benchmark: a header, `NCLatency:`, one line per percentile."""
        lines = ["Latency results are:", "NCLatency:"]
        lines += [f"p{p} = {_us(self.get_latency_percentile(p))}us" for p in PERCENTILES]
        return "\n".join(lines)

    def __str__(self) -> str:
        s = self.summary()
        return (f"NCLatency(min={_us(s['min'])}us, p25={_us(s['p25'])}us, p50={_us(s['p50'])}us, "
                f"p75={_us(s['p75'])}us, max={_us(s['max'])}us, n={len(self.samples_us)})")

    __repr__ = __str__


def _us(x: float) -> str:
    """Whole microseconds as NKI prints them; two decimals below 100 us, where whole ones say little."""
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"


@dataclass
class BenchmarkResult:
    """`kernel.benchmark_result`: `nc_latency` as NKI has it, plus the cost model's `estimate`."""

    nc_latency: NCLatency
    estimate: CostResult
    warmup: int
    iters: int

    def __str__(self) -> str:
        return f"{self.nc_latency}\n{self.estimate.format()}"


def synthetic_samples(latency_us: float, iters: int) -> list[float]:
    """`iters` deterministic samples from `latency_us` to `latency_us * (1 + JITTER_SPREAD)`, skewed low."""
    if iters == 1:
        return [latency_us]
    return [latency_us * (1.0 + JITTER_SPREAD * (i / (iters - 1)) ** 3) for i in range(iters)]


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"benchmark {name} must be an integer >= {minimum}, got {value!r}")
    return value


def run_benchmark(kernel, args, kwargs=None, *, warmup: int = 10, iters: int = 100, target=None,
                  save_trace_name: str | None = None, echo: bool = True, **_ignored) -> BenchmarkResult:
    """The service behind `nki.benchmark`: estimate one call, build the samples, print NKI's block.

    Args:
        kernel: what to call (function, jit kernel, gridded kernel, dispatch TraceKernel).
        warmup / iters: NKI's counts (iters >= 1, warmup >= 0).
        target: trn1/trn2/trn3; default the kernel's, else `$NEURON_PLATFORM_TARGET_OVERRIDE`, else trn3.
        save_trace_name: also write the timeline as a Chrome/Perfetto trace (`X.ntff` -> `X.trace.json`).
        echo: print the console block (NKI does).
        Other NKI options (`save_neff_name`, `additional_compile_opt`) are accepted and have no effect: there
        is no compiler and no NEFF.
    """
    warmup = _count("warmup", warmup, 0)
    iters = _count("iters", iters, 1)
    result = estimate(kernel, args, kwargs, target=target, keep_instructions=bool(save_trace_name))
    latency = NCLatency(synthetic_samples(result.latency_ns / 1000.0, iters))
    if save_trace_name:
        from opennki.perf.trace import write_chrome_trace, trace_path
        write_chrome_trace(result, trace_path(save_trace_name))
    if echo:
        print(latency.console_block())
    return BenchmarkResult(latency, result, warmup, iters)


def estimate_call(fn, args=(), kwargs=None, *, grid=None, target=None, keep_instructions: bool = True,
                  checks: bool = False) -> CostResult:
    """The estimate of one kernel call, for tools (`opennki benchmark SCRIPT` prints `.table_row()` of
    each under `CostResult.TABLE_HEADER`; `opennki profile` passes it, with `checks=True`, to
    `write_profile`)."""
    return estimate(fn, args, kwargs, grid=grid, target=target, keep_instructions=keep_instructions,
                    checks=checks)
