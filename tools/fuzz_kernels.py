"""Run many generated kernels (both generations, legal and illegal) and print the count of each outcome.

    PYTHONPATH=src python tools/fuzz_kernels.py [-n 5000] [--seed 0] [--timeout 20] [--show 5]

The cases and the outcome classes are those of tests/properties/fuzz_kernels.py (its docstring): a healthy
simulator gives 0 internal, 0 accepted-illegal, 0 wrong and 0 hang. The first few cases of each bad class
are printed with their detail, so a run doubles as a bug report.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from tests.properties.fuzz_kernels import OUTCOMES, Chooser, draw_case, run_case  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="number of generated kernels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    parser.add_argument("--show", type=int, default=5, help="cases printed per bad outcome class")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    counts = collections.Counter()
    by_kind = collections.Counter()
    shown = collections.Counter()
    start = time.perf_counter()
    for k in range(args.n):
        case = draw_case(Chooser(rng=rng))
        outcome, detail = run_case(case, timeout_s=args.timeout)
        counts[outcome] += 1
        by_kind["legal" if case.fault is None else case.fault.kind] += 1
        if outcome != "ok" and shown[outcome] < args.show:
            shown[outcome] += 1
            print(f"[{outcome}] case {k}: {case}\n    {detail}")
    elapsed = time.perf_counter() - start
    print(f"{args.n} generated kernels in {elapsed:.0f} s (seed {args.seed})")
    print("cases: " + ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items())))
    print("outcomes: " + ", ".join(f"{name} {counts[name]}" for name in OUTCOMES))
    return 0 if counts["ok"] == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
