"""Estimate steps: Python bytecodes executed per instruction by a shape-only estimate, by layer and function.

CPU time on a shared machine moves by 10-20% from run to run, more than most single changes to the issue path
or the cost model save; the count of bytecodes executed does not move (set PYTHONHASHSEED=0 for the last few
digits). Counted with `sys.settrace` opcode events, so the run is slow: the default size is 1/64 of the speed
targets' (sim_speed.py's estimates), which has the same instructions per loop body.

Run: `.venv/bin/python benchmarks/estimate_steps.py [M K N] [--target trn2] [--top 25] [--lines f,g]`. Prints, for
the tiled and the blocked matmul (examples/), the bytecodes per instruction in the cost model (`opennki/cost/`)
and in everything else (the kernel's Python, the language layer, the simulator, its events), then the functions
that execute the most, and with `--lines` those of the named functions by source line (where within a function
the steps go: a branch taken by most instructions, a loop that meets more items than expected). Not a test:
nothing here asserts a count.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys

from opennki.perf.estimate import estimate
from opennki.sim import ShapeSpec

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from examples.blocked_matmul import blocked_matmul  # noqa: E402  (the bundled example kernels)
from examples.tiled_matmul import tiled_matmul  # noqa: E402

COST_DIR = str(pathlib.Path(estimate.__code__.co_filename).resolve().parents[1] / "cost")


def count_steps(kernel, args, target: str, lines=frozenset()) -> tuple[int, collections.Counter, collections.Counter]:
    """(instructions, bytecodes executed per (file, function), and per (file, function, line) of the functions
    named in `lines`) of one estimate, after a warm-up estimate."""
    estimate(kernel, args, target=target, keep_instructions=False)
    steps: collections.Counter = collections.Counter()
    by_line: collections.Counter = collections.Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        if event == "opcode":
            code = frame.f_code
            steps[(code.co_filename, code.co_name)] += 1
            if code.co_name in lines:
                by_line[(code.co_filename, code.co_name, frame.f_lineno)] += 1
        return tracer

    sys.settrace(tracer)
    try:
        result = estimate(kernel, args, target=target, keep_instructions=False)
    finally:
        sys.settrace(None)
    return len(result.records), steps, by_line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="*", type=int, default=[1024, 2048, 2048], help="M K N")
    p.add_argument("--target", default="trn2")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--lines", default="", help="functions (names, comma-separated) to count by source line")
    a = p.parse_args()
    lines = frozenset(filter(None, a.lines.split(",")))
    M, K, N = a.sizes
    args = (ShapeSpec((K, M), "bfloat16"), ShapeSpec((K, N), "bfloat16"))
    for name, kernel in (("tiled", tiled_matmul), ("blocked", blocked_matmul)):
        n, steps, by_line = count_steps(kernel, args, a.target, lines)
        cost = sum(v for (f, _), v in steps.items() if f.startswith(COST_DIR))
        rest = sum(steps.values()) - cost
        print(f"{name} matmul {M} x {K} x {N} bf16 on {a.target}: {n} instructions; bytecodes per instruction: "
              f"{(cost + rest) / n:.0f} = {rest / n:.0f} simulator and the rest + {cost / n:.0f} cost model")
        for (f, fn), v in steps.most_common(a.top):
            print(f"  {v / n:7.1f}  {pathlib.Path(f).name}:{fn}")
        source = {}
        for (f, fn, line), v in sorted(by_line.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
            text = source.setdefault(f, pathlib.Path(f).read_text().splitlines())
            where = f"{pathlib.Path(f).name}:{fn}:{line}"
            print(f"  {v / n:7.1f}  {where:32s} {text[line - 1].strip()[:90] if line else ''}")


if __name__ == "__main__":
    main()
