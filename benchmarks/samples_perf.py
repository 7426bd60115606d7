"""The nki-samples perf tests: each case's shape-only estimate against its hardware latency threshold.

AWS's nki-samples repository (test/unit/test_*.py) has `*_perf` tests that call `nki.benchmark` on a kernel
and assert that a latency percentile is at most a threshold measured on hardware. This script runs those
tests, unmodified, under opennki's pytest plugin on a target (default trn2, where the thresholds were
measured) and prints, per case, the threshold, the estimate, their ratio, the roofline and the rows that
carry the estimate (busy time per engine row and the critical path by row). Nothing of the repository is
stored here: give it a checkout (`--samples DIR`) or a git directory and commit (`--git-dir DIR --commit C`),
whose test/ and src/ trees are copied to a temporary folder.

The model is never fitted to these timings (docs/cost-model.md); the table is a check, not a target.

    python benchmarks/samples_perf.py --git-dir MIRROR.git --commit 0898a77 [-k adaptive] [--detail]

A case's threshold is its `latency` (or `max_p99_latency`) parameter as written in the test; some tests
allow a further 5% in their assert. The flash-attention forward cases are skipped unless `--all` is given:
their shape-only runs take minutes to an hour, and their thresholds, compared with microseconds, are 3e9
to 8.7e10 (hours to a day, for kernels whose roofline is milliseconds; docs/cost-model.md reads them).
"""

from __future__ import annotations

import argparse
import builtins
import functools
import os
import pathlib
import subprocess
import sys
import tempfile

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

TEST_FILES = ["test_SD_attention_small_head.py", "test_allocated_SD_attention_small_head.py",
              "test_adaptive_avg_pool2d.py", "test_double_row_matmul.py", "test_flash_attn_bwd.py",
              "test_flash_attn_fwd.py", "test_resize_nearest.py", "test_rmsnorm_qkv.py",
              "test_select_and_scatter.py"]
THRESHOLD_PARAMS = ("latency", "max_p99_latency")


class Recorder:
    """A pytest plugin: the estimate each perf test's benchmark call made, and the test's threshold."""

    def __init__(self, detail: bool):
        self.rows: list[tuple[str, float | None, object]] = []
        self.detail = detail
        self._last = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        import opennki.perf.bench as bench
        self._last = None
        module = getattr(item, "module", None)
        if hasattr(module, "get_target_string"):
            # the double-row test asks the machine's DMI product name for its target (and calls an unimported
            # warnings.warn when there is none): answer with the target measured here
            module.get_target_string = lambda: os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"]
        if not hasattr(bench, "_samples_perf_estimate"):
            bench._samples_perf_estimate = bench.estimate

            def recording(*args, **kwargs):
                result = bench._samples_perf_estimate(*args, **kwargs)
                self._last = result
                return result
            bench.estimate = recording

    def pytest_runtest_teardown(self, item):
        params = getattr(getattr(item, "callspec", None), "params", {})
        threshold = next((params[p] for p in THRESHOLD_PARAMS if p in params), None)
        self.rows.append((item.name, threshold, self._last))
        if self._last is not None:
            print_case(item.name, threshold, self._last, self.detail)


def print_case(name, threshold, result, detail):
    """The case's figures, to the real stdout (pytest captures the kernel's own benchmark printout)."""
    from opennki.cost.result import Row
    print = functools.partial(builtins.print, file=sys.__stdout__, flush=True)   # noqa: A001
    us = result.latency_ns / 1000
    ratio = f"{us / threshold:6.2f}x" if threshold else "     -"
    rf = result.roofline
    busy = {row: result.engine_busy_ns(row) / 1000 for row in Row.ENGINES if result.engine_busy_ns(row)}
    top = ", ".join(f"{r} {v:.0f}" for r, v in sorted(busy.items(), key=lambda kv: -kv[1])[:4])
    print(f"\n## {name}: threshold {threshold} us, estimate {us:.1f} us ({ratio}), roofline "
          f"{rf.bound_ns / 1000:.1f} us ({rf.bound}); busy us: {top}", flush=True)
    if detail:
        print(result.format())
        crit = sorted(result.critical_by_row.items(), key=lambda kv: -kv[1])
        print("  critical path by row (us): " + ", ".join(f"{r} {v / 1000:.1f}" for r, v in crit))
        for line, ns in sorted(result.critical_by_line.items(), key=lambda kv: -kv[1])[:5]:
            print(f"    {ns / 1000:9.1f} us  {line}")


def lay_out(args, root: pathlib.Path) -> pathlib.Path:
    if args.samples:
        return pathlib.Path(args.samples)
    archive = subprocess.run(["git", f"--git-dir={args.git_dir}", "archive", args.commit, "test/unit", "src"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", help="an nki-samples checkout")
    ap.add_argument("--git-dir", help="an nki-samples git directory (with --commit)")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("-k", default=None, help="pytest -k expression on top of 'perf'")
    ap.add_argument("--detail", action="store_true", help="engine rows and the critical path per case")
    ap.add_argument("--all", action="store_true", help="include the flash-attention forward cases")
    args = ap.parse_args()
    if not (args.samples or args.git_dir):
        ap.error("give --samples or --git-dir")
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target
    with tempfile.TemporaryDirectory() as tmp:
        root = lay_out(args, pathlib.Path(tmp))
        unit = root / "test" / "unit"
        sys.path.insert(0, str(root / "src"))
        files = [f for f in TEST_FILES if args.all or f != "test_flash_attn_fwd.py"]
        expr = "perf" if not args.k else f"perf and ({args.k})"
        rec = Recorder(args.detail)
        os.chdir(unit)
        pytest.main(["-p", "opennki.pytest_plugin", "-p", "no:cacheprovider", "-q", "--runxfail",
                     "--capture=sys",
                     "-k", expr, *files], plugins=[rec])
    print(f"\n{'case':<80} {'threshold':>10} {'estimate':>10} {'ratio':>7} {'roofline':>9}")
    inside = 0
    for name, threshold, result in rec.rows:
        if result is None:
            print(f"{name:<80} {threshold!s:>10} {'(no run)':>10}")
            continue
        us = result.latency_ns / 1000
        ratio = us / threshold if threshold else float("nan")
        inside += 0.6 <= ratio <= 1.1
        print(f"{name:<80} {threshold:>10.1f} {us:>10.1f} {ratio:>6.2f}x {result.roofline.bound_ns / 1000:>9.1f}")
    print(f"\n{inside} of {len(rec.rows)} within 0.6-1.1x of their thresholds ({args.target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
