"""Two opennki source trees on the tiled 2048^3 matmul alone: the simulator's own CPU time, without a NumPy
denominator.

sim_speed.py's matmul figures are ratios to NumPy's matmul, whose own time moves from run to run on a shared
machine; comparing two versions of the simulator through them mixes that noise in (at stop 31 the bf16 ratio read
1.70x -> 1.86x while the kernel itself got faster in every pair). This script times only the kernel
(examples/tiled_matmul.py, fp32 and bf16, sim_speed.py's inputs and jit), in fresh processes that alternate the two
trees A and B (PYTHONPATH), each the best of --repeat runs, and prints the medians and how many pairs each side won.

Run: `.venv/bin/python benchmarks/kernel_ab.py A_SRC B_SRC [--pairs 6] [--repeat 4]`, e.g. a worktree of the
previous release's src against this checkout's src. One BLAS thread on both sides, as sim_speed.py sets.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def child(repeat: int) -> None:
    """In a fresh process: the best CPU seconds of `repeat` runs of each dtype, printed as one line."""
    import ml_dtypes
    import numpy as np

    sys.path.insert(0, str(HERE))
    from sim_speed import matmul_tiled      # (its import puts examples/ on the path)

    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((2048, 2048), dtype=np.float32)
    rhs = rng.standard_normal((2048, 2048), dtype=np.float32)
    bests = []
    for a, b in ((lhsT, rhs), (lhsT.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16))):
        times = []
        for _ in range(repeat):
            t0 = time.process_time()
            matmul_tiled(a, b)
            times.append(time.process_time() - t0)
        bests.append(min(times))
    print(*bests)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a_src")
    parser.add_argument("b_src")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.repeat)
        return 0
    sides = {"A": args.a_src, "B": args.b_src}
    best: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    for i in range(args.pairs):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            env = dict(os.environ, PYTHONPATH=str(pathlib.Path(sides[name]).resolve()), OPENBLAS_NUM_THREADS="1")
            out = subprocess.run([sys.executable, __file__, "x", "x", "--child", "--repeat", str(args.repeat)],
                                 env=env, check=True, capture_output=True, text=True, cwd="/")
            fp32, bf16 = map(float, out.stdout.split()[-2:])
            best[name].append((fp32, bf16))
            print(f"pair {i}: {name} fp32 {fp32:.4f} s, bf16 {bf16:.4f} s", flush=True)
    for k, dtype in enumerate(("fp32", "bf16")):
        a = [t[k] for t in best["A"]]
        b = [t[k] for t in best["B"]]
        won = sum(y < x for x, y in zip(a, b))
        print(f"{dtype}: A median {statistics.median(a):.4f} s, B median {statistics.median(b):.4f} s; "
              f"B faster in {won} of {len(a)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
