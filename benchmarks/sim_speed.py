"""Simulator speed, as ratios measured in one run (no timed tests; see benchmarks/README.md).

1. Overhead per instruction: a kernel of many small instructions (a chain of [128, 64] adds) against the same
   NumPy operations on arrays of the same size.
2. A tiled 2048 x 2048 x 2048 fp32 matmul kernel (PSUM accumulation, affine_range) against NumPy's matmul.

Prints a table and, with --save, writes the figures to benchmarks/results/sim_speed.json; with a previous
file present it also prints the change against it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

import opennki.legacy as nki
import opennki.legacy.language as nl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from examples.tiled_matmul import tiled_matmul  # noqa: E402  (the bundled example kernel)

RESULTS = pathlib.Path(__file__).parent / "results" / "sim_speed.json"
CHAIN = 2000


@nki.jit
def add_chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(CHAIN):
        acc[...] = nl.add(acc, 1.0)
    nl.store(out, value=acc)
    return out


matmul_tiled = nki.jit(tiled_matmul)


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure() -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64), dtype=np.float32)

    def numpy_chain():
        acc = a.copy()
        for _ in range(CHAIN):
            acc = acc + np.float32(1.0)
        return acc

    t_sim = best_of(lambda: add_chain(a))
    t_np = best_of(numpy_chain)
    instructions = CHAIN + 2
    lhsT = rng.standard_normal((2048, 2048), dtype=np.float32)
    rhs = rng.standard_normal((2048, 2048), dtype=np.float32)
    t_mm = best_of(lambda: matmul_tiled(lhsT, rhs), repeat=1)
    t_mm_np = best_of(lambda: lhsT.T @ rhs)
    return {
        "small_instructions": CHAIN + 2,
        "sim_seconds": t_sim,
        "numpy_seconds": t_np,
        "overhead_us_per_instruction": 1e6 * (t_sim - t_np) / instructions,
        "overhead_ratio": t_sim / t_np,
        "matmul_2048_sim_seconds": t_mm,
        "matmul_2048_numpy_seconds": t_mm_np,
        "matmul_2048_ratio": t_mm / t_mm_np,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="write the figures to " + str(RESULTS))
    args = parser.parse_args(argv)
    now = measure()
    before = json.loads(RESULTS.read_text()) if RESULTS.exists() else None
    print(f"{'figure':36} {'now':>12} {'before':>12}")
    for key, value in now.items():
        old = f"{before[key]:12.4g}" if before and key in before else f"{'-':>12}"
        print(f"{key:36} {value:12.4g} {old}")
    if args.save:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(now, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
