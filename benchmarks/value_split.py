"""Value split: where the CPU time of the tiled matmul's value run goes, against NumPy doing the kernel's own tiles.

sim_speed.py gives one figure for the 2048^3 tiled matmul (x NumPy's one matmul). This splits it: the data steps
that wait in `Machine.later` (a load's copy, `_assign`; a matmul's operand widening, product and add,
`_usual_product`), timed one by one with the thread's CPU clock while the kernel runs as usual; the Python front end
alone, the same run with those steps dropped (every instruction is checked, placed and issued, no tile is copied or
multiplied: the values are garbage and are not looked at); and sim_speed.py's `numpy_tiled`, the kernel's tiles in
NumPy (the floor of any simulator that computes the kernel's instructions). When the data steps take what the
NumPy tiles take, what the full run takes beyond that is the front end, and a change to the data path can only
win by doing less than NumPy's tiles do.

Run: `.venv/bin/python benchmarks/value_split.py [--size 2048] [--dtype bfloat16] [--rounds 4]`, with
OPENBLAS_NUM_THREADS=1 as sim_speed.py. Each figure is the best of `--rounds` runs, the kinds of run alternated
(the host is shared). The data steps' clock reads add some microseconds per step. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import time

import ml_dtypes
import numpy as np

from opennki.instructions import tensor_engine
from opennki.machine import machine

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sim_speed import matmul_tiled, numpy_tiled  # noqa: E402  (the kernel and its NumPy tiles, as sim_speed times them)

DATA_STEPS = (machine._assign, tensor_engine._usual_product)


class Split:
    """Runs of the kernel with the data steps timed (`drop` False) or dropped (`drop` True): `Machine.defer` takes
    each step wrapped in a clock reading of its own, or not at all."""

    def __init__(self):
        self.step_cpu = collections.Counter()
        self.steps = collections.Counter()
        self.drop = False
        self._wrapped = {}

    def install(self) -> None:
        split, defer = self, machine.Machine.defer

        def split_defer(self, step, args, nbytes) -> None:
            if step in DATA_STEPS:
                if split.drop:
                    return
                step = split._wrapped.get(step) or split._wrap(step)
            defer(self, step, args, nbytes)

        machine.Machine.defer = split_defer

    def _wrap(self, step):
        name, clock = step.__name__, time.thread_time

        def timed(*args) -> None:
            t0 = clock()
            step(*args)
            self.step_cpu[name] += clock() - t0
            self.steps[name] += 1

        timed.operands = step.operands      # what it does with its arrays (`machine._forward` reads it)
        self._wrapped[step] = timed
        return timed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    n = args.size
    rng = np.random.default_rng(0)
    dtype = ml_dtypes.bfloat16 if args.dtype == "bfloat16" else np.float32
    lhsT = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    rhs = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    split = Split()
    split.install()
    matmul_tiled(lhsT, rhs)
    best = collections.defaultdict(lambda: float("inf"))
    steps_best, counts = {}, {}
    for _ in range(args.rounds):
        split.drop = False
        split.step_cpu.clear()
        split.steps.clear()
        t0 = time.process_time()
        matmul_tiled(lhsT, rhs)
        full = time.process_time() - t0
        if full < best["full"]:
            best["full"], steps_best, counts = full, dict(split.step_cpu), dict(split.steps)
        split.drop = True
        t0 = time.process_time()
        matmul_tiled(lhsT, rhs)
        best["front end alone"] = min(best["front end alone"], time.process_time() - t0)
        t0 = time.process_time()
        numpy_tiled(lhsT, rhs)
        best["numpy tiles"] = min(best["numpy tiles"], time.process_time() - t0)
        t0 = time.process_time()
        (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(dtype)
        best["numpy"] = min(best["numpy"], time.process_time() - t0)
    ref = best["numpy"]
    ksteps = (n // 128) * (n // 512) * (n // 128)
    print(f"tiled {n}^3 {args.dtype}, best of {args.rounds} (CPU s, x NumPy's one matmul + casts, us per k-step)")
    for name in ("full", "front end alone", "numpy tiles", "numpy"):
        print(f"  {name:34s} {best[name]:7.4f} s {best[name] / ref:6.2f}x {1e6 * best[name] / ksteps:8.1f}")
    data = sum(steps_best.values())
    print(f"  {'data steps (in the full run)':34s} {data:7.4f} s {data / ref:6.2f}x {1e6 * data / ksteps:8.1f}")
    for name, cpu in sorted(steps_best.items(), key=lambda kv: -kv[1]):
        print(f"    {name:32s} {cpu:7.4f} s {counts[name]:6d} steps {1e6 * cpu / counts[name]:8.1f} us each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
