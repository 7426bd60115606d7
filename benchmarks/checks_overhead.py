"""What the checks cost: each bundled example, and a loop-heavy kernel, simulated plainly and with every
check on (`opennki.checks.checking()`: race checker, element-level uninitialised-read tracking, and the lint
of each kernel at the end; the cores of an LNC=2 kernel and of a legacy grid over two cores run
interleaved either way), in CPU seconds (best of several repeats, one BLAS thread). The ratio `x` is the
simulation with the checks over the plain one; the lint, a one-time static pass per kernel, is timed on
its own and left out of it. The target is at most 2x. With the checks off nothing is attached, so the
plain figure is the simulator's own.

    python benchmarks/checks_overhead.py [--repeats N] [--save]

`--save` writes the figures to benchmarks/results/checks_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import opennki as nki_new  # noqa: E402
import opennki.isa as nisa_new  # noqa: E402
import opennki.language as nl_new  # noqa: E402
import opennki.legacy as nki  # noqa: E402
import opennki.legacy.language as nl  # noqa: E402
from opennki.checks import checking, lint  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import run_demo  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results" / "checks_overhead.json"
TARGET_X = 2.0


@nki.jit
def many_iterations(x):
    """256 affine iterations, each loading its own row block, updating an outer accumulator and storing its
    own slice of an outer SBUF tile: the race checker's worst common case (many accesses to tensors that
    outlive the iterations)."""
    out = nl.ndarray((128, 256 * 8), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 8), dtype=nl.float32)
    keep = nl.ndarray((128, 256 * 8), dtype=nl.float32)
    for i in nl.affine_range(256):
        t = nl.load(x[:, nl.ds(i * 8, 8)])
        acc += t
        keep[:, nl.ds(i * 8, 8)] = nl.exp(t)
    nl.store(out, value=keep)
    return out


@nki_new.jit
def two_cores(x):
    """LNC=2: each core scales its half in 64 steps into shared scratch, a barrier, then each reads the other
    core's half; the cores run interleaved instruction by instruction (SimOptions.interleave_seed)."""
    half = x.shape[0] // 2
    rank = nl_new.program_id(0)
    other = 1 - rank
    scratch = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
    out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
    t = nl_new.ndarray((half, 8), dtype=x.dtype, buffer=nl_new.sbuf)
    for j in range(64):
        nisa_new.dma_copy(dst=t, src=x[rank * half:(rank + 1) * half, nl_new.ds(j * 8, 8)])
        nisa_new.tensor_scalar(dst=t, data=t, op0=nl_new.multiply, operand0=2.0)
        nisa_new.dma_copy(dst=scratch[rank * half:(rank + 1) * half, nl_new.ds(j * 8, 8)], src=t)
    nisa_new.core_barrier(scratch, (0, 1))
    for j in range(64):
        nisa_new.dma_copy(dst=t, src=scratch[other * half:(other + 1) * half, nl_new.ds(j * 8, 8)])
        nisa_new.dma_copy(dst=out[rank * half:(rank + 1) * half, nl_new.ds(j * 8, 8)], src=t)
    return out


@nki.jit
def grid_over_cores(x):
    """A legacy grid of eight programs over two cores (`nl.nc(2) * 4`: four programs per core, the cores
    interleaved): each program scales its own rows of x in 32 column blocks into shared HBM, so the race
    checker compares every program's accesses with the other programs'."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    for j in nl.affine_range(32):
        t = nl.load(x[i, :, nl.ds(j * 8, 8)])
        nl.store(out[i, :, nl.ds(j * 8, 8)], value=nl.multiply(t, 2.0))
    return out


def _cpu(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _with_checks(fn):
    def run():
        with checking() as found:
            fn()
        assert not found, found
    return run


def measure(repeats: int) -> dict:
    cases = {}
    for example in run_demo.load_examples():
        args = example["make_inputs"](np.random.default_rng(0))
        cases[example["name"]] = (example["kernel"], lambda ex=example, a=args: ex["kernel"](*a))
    x = np.random.default_rng(0).standard_normal((128, 256 * 8)).astype(np.float32)
    cases["many_iterations"] = (many_iterations, lambda: many_iterations(x))
    y = np.random.default_rng(0).standard_normal((128, 64 * 8)).astype(np.float32)
    cases["two_cores"] = (two_cores, lambda: two_cores[2](y))
    z = np.random.default_rng(0).standard_normal((8, 128, 32 * 8)).astype(np.float32)
    grid = nki.jit(grid_over_cores, platform_target="trn2")[nl.nc(2) * 4]
    cases["grid_over_cores"] = (grid_over_cores, lambda: grid(z))
    rows = {}
    for name, (kernel, fn) in cases.items():
        fn()                                  # warm caches (imports, traces) outside the timing
        plain = _cpu(fn, repeats)
        checked = _cpu(_with_checks(fn), repeats)
        lint_s = _cpu(lambda: lint(kernel), repeats)     # once per kernel, not per simulation
        rows[name] = {"plain_cpu_s": round(plain, 4), "checked_cpu_s": round(checked, 4),
                      "lint_cpu_s": round(lint_s, 4), "x": round((checked - lint_s) / plain, 2)}
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--save", action="store_true")
    options = ap.parse_args(argv)
    rows = measure(options.repeats)
    print(f"{'kernel':20} {'plain s CPU':>12} {'checked s CPU':>14} {'of it lint':>11} {'x':>6}"
          f"  (x: the simulation with checks over without; target <= {TARGET_X}x)")
    for name, row in rows.items():
        print(f"{name:20} {row['plain_cpu_s']:>12.4f} {row['checked_cpu_s']:>14.4f} {row['lint_cpu_s']:>11.4f} "
              f"{row['x']:>6.2f}")
    if options.save:
        RESULTS.write_text(json.dumps({"target_x": TARGET_X, "figures": rows}, indent=2) + "\n")
    return 0 if all(row["x"] <= TARGET_X for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
