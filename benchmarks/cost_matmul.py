"""Cost-model speed: how long the estimate of a 4096 x 8192 x 8192 bf16 tiled matmul takes (target: < 30 s
on a 2-core machine), split into the simulator running shape-only and the cost model's share.

Run: `.venv/bin/python benchmarks/cost_matmul.py [M K N] [--target trn2] [--profile]`. Prints wall times,
instruction counts and the estimate; `--profile` adds the top functions by own time (cProfile) so hot spots
in the simulator and in the cost model can be told apart. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import cProfile
import pstats
import time

from opennki.perf.estimate import estimate
from opennki.sim import ShapeSpec, SimOptions
from opennki.kernels.base import run_kernel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from examples.tiled_matmul import tiled_matmul  # noqa: E402  (the bundled example kernel)


class _Ignore:
    def on_event(self, event) -> None:
        pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="*", type=int, default=[4096, 8192, 8192], help="M K N")
    p.add_argument("--target", default="trn2")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    M, K, N = a.sizes
    args = (ShapeSpec((K, M), "bfloat16"), ShapeSpec((K, N), "bfloat16"))

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
