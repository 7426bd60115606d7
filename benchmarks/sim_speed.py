"""Simulator speed: the figures of the speed targets, measured in one run, as one table (no timed tests).

1. Overhead per instruction: a chain of small [128, 64] adds against the same NumPy operations.
2. Tiled 2048^3 matmul (examples/tiled_matmul.py): fp32 against NumPy's matmul; bf16 inputs against NumPy's
   fp32 matmul plus the casts (inputs to fp32, result to bf16). Beside each, NumPy doing the kernel's own tiled
   math (`numpy_tiled`, whose result the simulator's equals bit for bit) against the same single matmul: the
   floor of any simulator that computes the kernel's 128 x 128 x 512 products one by one.
3. Shape-only cost estimates of 4096 x 8192 x 8192 bf16: the tiled matmul, and the blocked matmul in the
   style of the matmul tutorial's fully optimised kernel (examples/blocked_matmul.py). CPU seconds of the
   simulator plus the cost model (the machine may be shared; wall seconds are printed too).
4. Peak RSS of a simulation (the fp32 tiled matmul, in a fresh process) against its bound:
   2 x (the kernel's HBM bytes + one SBUF and PSUM image) + the interpreter (the peak before the launch).
5. With --corpus DIR --mirrors DIR, instead of the rest: the nki-samples flash-attention forward and backward
   simulation suites run through the conformance corpus runner with the interpreter running this script (its
   installed opennki: `make`'s .venv holds this checkout): CPU seconds of the whole run, the suites' NumPy
   references and input generation included, and its wall seconds; and, from the pytest plugin's
   `--nki-durations`, the CPU seconds inside opennki's kernel launches (the simulator's share; the rest is the
   suites' own code). A saved figure is kept until measured again.

Ratios are taken side by side in this run, in CPU seconds (the machine may be shared with other work, which
stretches wall time but not CPU time): the best of several repeats of each side, with one BLAS thread on both
sides (a BLAS pool spinning between the simulator's many small matmuls would bill CPU time no one uses). Results:
benchmarks/results/sim_speed.json keeps the figures "before" (the simulator when the targets were set) and
"after"; `--save after` (or before) writes this run's figures there. The table shows this run next to both.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")             # before NumPy starts its BLAS (module docstring)

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import opennki.legacy as nki  # noqa: E402
import opennki.legacy.language as nl  # noqa: E402
from opennki.hw import get_target  # noqa: E402
from opennki.sim import ShapeSpec  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from examples.blocked_matmul import blocked_matmul  # noqa: E402  (the bundled example kernels)
from examples.tiled_matmul import tiled_matmul  # noqa: E402

RESULTS = pathlib.Path(__file__).parent / "results" / "sim_speed.json"
CHAIN = 2000
ESTIMATE_SIZE = (4096, 8192, 8192)        # M, K, N

# figure -> (label, unit, target: the figure should be at most this)
FIGURES = {
    "small_us_per_instruction": ("overhead per small instruction", "us", 10.0),
    "small_x_numpy": ("small instructions x NumPy", "x", 5.0),
    "matmul_fp32_x_numpy": ("tiled 2048^3 fp32 x NumPy matmul", "x", 1.5),
    "matmul_fp32_numpy_tiles_x_numpy": ("  NumPy doing its tiles, x the same", "x", None),
    "matmul_bf16_x_numpy": ("tiled 2048^3 bf16 x NumPy fp32 + casts", "x", 2.0),
    "matmul_bf16_numpy_tiles_x_numpy": ("  NumPy doing its tiles, x the same", "x", None),
    "estimate_tiled_cpu_s": ("estimate 4096x8192x8192 bf16 tiled", "s CPU", 3.0),
    "estimate_tiled_wall_s": ("  the same, wall", "s", None),
    "estimate_tiled_instructions": ("  instructions", "", None),
    "estimate_blocked_cpu_s": ("estimate ... blocked (tutorial style)", "s CPU", 2.0),
    "estimate_blocked_wall_s": ("  the same, wall", "s", None),
    "estimate_blocked_instructions": ("  instructions", "", None),
    "peak_rss_mib": ("peak RSS, 2048^3 fp32 matmul", "MiB", None),
    "rss_bound_mib": ("  its bound", "MiB", None),
    "flash_attn_cpu_s": ("flash-attention fwd + bwd suites", "s CPU", 120.0),
    "flash_attn_wall_s": ("  the same, wall", "s", None),
    "flash_attn_launch_cpu_s": ("  of the CPU s: in opennki's launches", "s CPU", None),
}


@nki.jit
def add_chain(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.load(a)
    for _ in nl.sequential_range(CHAIN):
        acc[...] = nl.add(acc, 1.0)
    nl.store(out, value=acc)
    return out


matmul_tiled = nki.jit(tiled_matmul)


def best_of(fn, repeat=3) -> float:
    """The least CPU seconds (all threads of this process) of `repeat` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def small_instructions(rng) -> dict:
    a = rng.standard_normal((128, 64), dtype=np.float32)

    def numpy_chain():
        acc = a.copy()
        for _ in range(CHAIN):
            acc = acc + np.float32(1.0)
        return acc

    t_sim, t_np = best_of(lambda: add_chain(a), 5), best_of(numpy_chain, 5)
    return {"small_us_per_instruction": 1e6 * (t_sim - t_np) / (CHAIN + 2), "small_x_numpy": t_sim / t_np}


def numpy_tiled(lhsT, rhs):
    """The tiled kernel's math in NumPy (examples/tiled_matmul.py): per 128 x 512 output tile an fp32
    accumulator, per k-step copies of the two input tiles (the loads), widened to fp32, their product added in,
    then the tile stored in the output dtype. The simulator's result is bit for bit this one's (checked in
    `tiled_matmuls`), so its time is the floor for any simulator that computes the kernel's instructions."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = np.empty((M, N), lhsT.dtype)
    for m in range(M // 128):
        for n in range(N // 512):
            acc = np.zeros((128, 512), np.float32)
            for k in range(K // 128):
                a = lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128].copy()
                b = rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512].copy()
                acc += np.asarray(a, np.float32).T @ np.asarray(b, np.float32)
            out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512] = acc.astype(out.dtype)
    return out


def tiled_matmuls(rng) -> dict:
    lhsT = rng.standard_normal((2048, 2048), dtype=np.float32)
    rhs = rng.standard_normal((2048, 2048), dtype=np.float32)
    a16, b16 = lhsT.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16)
    for a, b in ((lhsT, rhs), (a16, b16)):
        if not np.array_equal(numpy_tiled(a, b).view(np.uint8), matmul_tiled(a, b).view(np.uint8)):
            raise AssertionError("the simulator's tiled matmul is not bit for bit NumPy's tiled math")
    t_fp32 = best_of(lambda: matmul_tiled(lhsT, rhs), 2)
    t_np = best_of(lambda: lhsT.T @ rhs)
    t_tiled = best_of(lambda: numpy_tiled(lhsT, rhs), 2)
    t_bf16 = best_of(lambda: matmul_tiled(a16, b16), 2)
    t_np16 = best_of(lambda: (a16.astype(np.float32).T @ b16.astype(np.float32)).astype(ml_dtypes.bfloat16))
    t_tiled16 = best_of(lambda: numpy_tiled(a16, b16), 2)
    return {"matmul_fp32_x_numpy": t_fp32 / t_np, "matmul_fp32_numpy_tiles_x_numpy": t_tiled / t_np,
            "matmul_bf16_x_numpy": t_bf16 / t_np16, "matmul_bf16_numpy_tiles_x_numpy": t_tiled16 / t_np16}


def estimates() -> dict:
    from opennki.perf.estimate import estimate

    M, K, N = ESTIMATE_SIZE
    args = (ShapeSpec((K, M), "bfloat16"), ShapeSpec((K, N), "bfloat16"))
    out = {}
    for name, kernel in (("tiled", tiled_matmul), ("blocked", blocked_matmul)):
        t0, c0 = time.perf_counter(), time.process_time()
        result = estimate(kernel, args, target="trn2", keep_instructions=False)
        out[f"estimate_{name}_cpu_s"] = time.process_time() - c0
        out[f"estimate_{name}_wall_s"] = time.perf_counter() - t0
        out[f"estimate_{name}_instructions"] = len(result.records)
    return out


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB: Linux's VmHWM, the high-water mark of this program's own memory
    (ru_maxrss is not: after fork and exec it starts from the parent's RSS at the fork, so the figure
    measured in the child depended on what the benchmark's parent process held), else ru_maxrss."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss_child() -> None:
    """In a fresh process: the peak RSS before and after the fp32 2048^3 matmul launch, in KiB."""
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((2048, 2048), dtype=np.float32)
    rhs = rng.standard_normal((2048, 2048), dtype=np.float32)
    before = peak_rss_kib()
    matmul_tiled(lhsT, rhs)
    after = peak_rss_kib()
    print(json.dumps({"before_kib": before, "after_kib": after}))


def peak_rss() -> dict:
    out = subprocess.run([sys.executable, __file__, "--rss-child"], check=True, capture_output=True, text=True)
    kib = json.loads(out.stdout.strip().splitlines()[-1])
    mem = get_target("trn2").memory
    hbm = 3 * 2048 * 2048 * 4                                  # lhsT, rhs, result
    images = mem.partitions * (mem.sbuf_bytes_per_partition + mem.psum_banks * mem.psum_bank_bytes)
    return {"peak_rss_mib": kib["after_kib"] / 1024,
            "rss_bound_mib": (2 * (hbm + images)) / 2**20 + kib["before_kib"] / 1024}


def flash_attention(corpus: pathlib.Path, mirrors: pathlib.Path) -> dict:
    """Both simulation suites through the corpus runner (module docstring, item 5)."""
    with tempfile.TemporaryDirectory() as logs:
        cmd = [sys.executable, str(corpus / "run_corpus.py"), "--python", sys.executable, "--mirrors", str(mirrors),
               "--jobs", "1", "--timeout", "3600", "--logs", logs, "--filter", "flash_attn_fwd:simulation",
               "--filter", "flash_attn_bwd:simulation"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True,
                             env={**os.environ, "PYTEST_ADDOPTS": "--nki-durations 0"})
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        launches = sum(float(m) for log in pathlib.Path(logs).glob("*.log")
                       for m in LAUNCH_TOTAL.findall(log.read_text(encoding="utf-8")))
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-300:]
    print(f"flash-attention suites: {last}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"flash_attn_cpu_s": cpu, "flash_attn_wall_s": wall, "flash_attn_launch_cpu_s": launches}


# the pytest plugin's --nki-durations total line
LAUNCH_TOTAL = re.compile(r"^opennki: \d+ tests, [\d.]+ s CPU, of which ([\d.]+) s", re.M)


def measure(args) -> dict:
    if args.corpus and args.mirrors:
        return flash_attention(args.corpus, args.mirrors)
    rng = np.random.default_rng(0)
    now = {}
    now.update(small_instructions(rng))
    now.update(tiled_matmuls(rng))
    now.update(estimates())
    now.update(peak_rss())
    return now


def cell(value) -> str:
    if value is None:
        return f"{'-':>10}"
    return f"{value:10.0f}" if value >= 1000 else f"{value:10.3g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", choices=("before", "after"), help="write this run's figures to " + str(RESULTS))
    parser.add_argument("--corpus", type=pathlib.Path, help="the conformance corpus folder (run_corpus.py)")
    parser.add_argument("--mirrors", type=pathlib.Path, help="its git mirrors folder")
    parser.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child()
        return 0
    now = measure(args)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    before, after = saved.get("before", {}), saved.get("after", {})
    print(f"{'figure':40} {'unit':>6} {'this run':>10} {'before':>10} {'after':>10} {'target':>10}")
    for key, (label, unit, target) in FIGURES.items():
        print(f"{label:40} {unit:>6} {cell(now.get(key))} {cell(before.get(key))} {cell(after.get(key))} "
              f"{cell(target)}")
    if args.save:
        kept = saved.get(args.save, {})
        saved[args.save] = {**kept, **now}          # figures not measured this run (flash attention) are kept
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
