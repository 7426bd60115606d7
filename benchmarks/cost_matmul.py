"""Cost-model speed: how long the estimate of a 4096 x 8192 x 8192 bf16 tiled matmul takes (target: < 30 s
on a 2-core machine), split into the simulator running shape-only and the cost model's share.

Run: `.venv/bin/python benchmarks/cost_matmul.py [M K N] [--target trn2] [--profile]`. Prints wall times,
instruction counts and the estimate; `--profile` adds the top functions by own time (cProfile) so hot spots
in the simulator and in the cost model can be told apart. Not a test: nothing here asserts a time.

`--replay R [--switch module.NAME]` times the cost model alone instead: the events of one shape-only run are
kept, then placed by a fresh CostModel R times (CPU seconds, best and median); with `--switch` (a module-level
switch such as `opennki.cost.scheduler.SITE_SOURCES`) it alternates True and False in the same process, an A/B
of a fast path and its plain path on the same events, which the noise of a shared machine hides less than
separate whole estimates do (the events stay in memory for all the placements, so the caches see more data
than in an estimate, where each event is placed soon after it is made).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pathlib
import statistics
import sys
import cProfile
import pstats
import time

from opennki.cost.scheduler import CostModel
from opennki.perf.estimate import estimate
from opennki.sim import ShapeSpec, SimOptions
from opennki.kernels.base import run_kernel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from examples.tiled_matmul import tiled_matmul  # noqa: E402  (the bundled example kernel)


class _Ignore:
    def on_event(self, event) -> None:
        pass


class _Keep:
    """A listener keeping every event but loops' (which the cost model does not take either)."""

    loop_events = False

    def __init__(self):
        self.events: list = []

    def on_event(self, event) -> None:
        self.events.append(event)


def replay(args, target: str, repeat: int, switch: str | None) -> None:
    """The cost model alone on one run's events, `repeat` times (per value of `switch`, alternating)."""
    keep = _Keep()
    run_kernel(tiled_matmul, args, target=target, options=SimOptions(target=target, shape_only=True),
               listeners=[keep])
    module, name = switch.rsplit(".", 1) if switch else (None, None)
    module = importlib.import_module(module) if module else None
    kept = getattr(module, name) if module else None
    values = (True, False) if module else (kept,)
    times: dict = {v: [] for v in values}
    totals = set()
    try:
        for i in range(repeat):
            for value in (values if i % 2 == 0 else values[::-1]):
                if module:
                    setattr(module, name, value)
                gc.collect()
                model = CostModel(target, keep_instructions=False)
                c0 = time.process_time()
                for event in keep.events:
                    model.on_event(event)
                result = model.result()
                times[value].append(time.process_time() - c0)
                totals.add(result.total_ns)
    finally:
        if module:
            setattr(module, name, kept)
    instructions = result.placed
    for value, ts in times.items():
        label = f"{switch} = {value}" if module else "cost model"
        print(f"  {label}: best {min(ts):.3f} s CPU, median {statistics.median(ts):.3f} s "
              f"({1e6 * min(ts) / instructions:.2f} us per instruction, {instructions} instructions)")
    if len(totals) != 1:
        raise AssertionError(f"the placements disagree: {sorted(totals)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="*", type=int, default=[4096, 8192, 8192], help="M K N")
    p.add_argument("--target", default="trn2")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--replay", type=int, default=0, help="place one run's events this many times")
    p.add_argument("--switch", default=None, help="with --replay: module.NAME, alternated True / False")
    a = p.parse_args()
    M, K, N = a.sizes
    args = (ShapeSpec((K, M), "bfloat16"), ShapeSpec((K, N), "bfloat16"))
    if a.replay:
        print(f"{M} x {K} x {N} bf16 tiled matmul on {a.target}: the cost model placing one run's events")
        replay(args, a.target, a.replay, a.switch)
        return

    t0, c0 = time.perf_counter(), time.process_time()
    run_kernel(tiled_matmul, args, target=a.target, options=SimOptions(target=a.target, shape_only=True))
    sim_s, sim_cpu = time.perf_counter() - t0, time.process_time() - c0

    c0 = time.process_time()        # the same with a listener that ignores everything: event construction
    run_kernel(tiled_matmul, args, target=a.target, options=SimOptions(target=a.target, shape_only=True),
               listeners=[_Ignore()])
    events_cpu = time.process_time() - c0 - sim_cpu

    profiler = cProfile.Profile() if a.profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = estimate(tiled_matmul, args, target=a.target, keep_instructions=False)
    if profiler:
        profiler.disable()
    total_s, total_cpu = time.perf_counter() - t0, time.process_time() - c0

    # CPU seconds are the figure to compare: wall time includes whatever else the machine runs
    print(f"{M} x {K} x {N} bf16 tiled matmul on {a.target}: {len(result.records)} instructions")
    print(f"  simulator alone (shape-only, no listener):  {sim_cpu:6.2f} s CPU  ({sim_s:6.2f} s wall)")
    print(f"  estimate (simulator + events + cost model): {total_cpu:6.2f} s CPU  ({total_s:6.2f} s wall)"
          "   target < 30 s")
    print(f"    of which building the simulator's events: {events_cpu:6.2f} s CPU")
    print(f"    of which the cost model:                  {total_cpu - sim_cpu - events_cpu:6.2f} s CPU")
    print(result.format())
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
