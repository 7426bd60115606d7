"""Front door: the `opennki` command (also `python -m opennki`).

Imports compat, the dispatch layer's call observers and the cost-model services (looked up when used).

    opennki run [--force] SCRIPT [ARGS...]
        Run an unmodified NKI script: `neuronxcc.nki...` and `nki...` import as opennki (see
        opennki.compat; a real installation is used instead unless --force).
    opennki benchmark [--force] [--target T] SCRIPT [ARGS...]
        Run the script and print, for every NKI kernel call it makes, the cost model's latency estimate.
    opennki profile [--force] [--target T] SCRIPT [ARGS...] --out DIR
        Run the script and write one profile per NKI kernel call into DIR/<nnn>_<kernel>/.
    opennki check [--force] [--target T] [--json] SCRIPT [ARGS...]
        Run the script with every check on (races, uninitialised reads, the compiler-rule lint of each
        kernel launched; opennki.checks) and print the findings; exit status 1 if there are any.

The script runs exactly as `python SCRIPT ARGS...` would (`__name__ == "__main__"`, `sys.argv`, its folder
first on `sys.path`); its kernels run on the simulator as usual, and the benchmark / profile commands observe
each top-level kernel call (`opennki.kernels.observe_calls`) and hand its shapes to the cost model, so the
script needs no change. `--target` sets `NEURON_PLATFORM_TARGET_OVERRIDE` for the run.
"""

from __future__ import annotations

import argparse
import functools
import os
import runpy
import sys
from pathlib import Path

from opennki import compat
from opennki.environment import put
from opennki.hw import TARGET_ENV, get_target

COMMANDS = {
    "run": "run a script with neuronxcc.nki / nki imported as opennki",
    "benchmark": "run a script and print the estimated latency of every kernel call",
    "profile": "run a script and write a profile of every kernel call into --out DIR",
    "check": "run a script with every check on and print the findings",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opennki", description="Run NKI kernels and scripts on opennki.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--force", action="store_true",
                       help="use opennki even where a real neuronxcc / nki is installed")
        if name != "run":
            p.add_argument("--target", help="NeuronCore target (trn1, trn2, trn3); default: "
                                             f"${TARGET_ENV} or trn3")
        if name == "profile":
            p.add_argument("--out", help="directory for the profiles (may also follow the script's arguments)")
        if name == "check":
            p.add_argument("--json", action="store_true", help="print the findings as JSON")
        p.add_argument("script", help="the Python script to run")
        p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return parser


def _trailing_out(args: list[str]) -> tuple[list[str], str | None]:
    """Split a trailing `--out DIR` / `--out=DIR` off the script's arguments."""
    if len(args) >= 2 and args[-2] == "--out":
        return args[:-2], args[-1]
    if args and args[-1].startswith("--out="):
        return args[:-1], args[-1].split("=", 1)[1]
    return args, None


def run_script(script: str, args=()) -> int:
    """Run `script` as `__main__` with `args` (module docstring); returns its exit status."""
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        print(f"opennki: no such script: {script}", file=sys.stderr)
        return 2
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0


class CallReporter:
    """Estimates every observed kernel call with the cost model and keeps one row per call.

    `estimate(kernel, args, kwargs)` defaults to `opennki.perf.estimate_call`; `after(index, call, result)`
    runs after each estimate (the profile command writes the profile there).
    """

    def __init__(self, estimate=None, after=None):
        self.estimate = estimate
        self.after = after
        self.rows: list[tuple] = []

    def __call__(self, call) -> None:
        index = len(self.rows) + 1
        args, kwargs = call.shape_args()
        try:
            estimate = self.estimate
            if estimate is None:
                from opennki.perf import estimate_call as estimate
            result = estimate(call.kernel, args, kwargs)
            if self.after is not None:
                self.after(index, call, result)
        except Exception as e:        # one failed estimate must not stop the user's script
            result = e
        self.rows.append((index, call.name, result))


def _error_text(error: Exception) -> str:
    return f"error: {type(error).__name__}: {(str(error).splitlines() or [''])[0]}"


def format_benchmark(rows, script: str) -> str:
    """The table `opennki benchmark` prints: one row per kernel call (`CostResult.table_row()`)."""
    lines = [f"opennki benchmark: {len(rows)} kernel call(s) in {script} (cost-model estimates)"]
    header = next((r.TABLE_HEADER for _, _, r in rows if hasattr(r, "TABLE_HEADER")), None)
    if header:
        lines.append(f"{'#':>3}  {header}")
    for index, name, result in rows:
        text = _error_text(result) if isinstance(result, Exception) else result.table_row()
        lines.append(f"{index:>3}  {text if not isinstance(result, Exception) else f'{name:<28} {text}'}")
    return "\n".join(lines)


def _run_observed(reporter, script, args) -> int:
    from opennki.kernels import observe_calls
    with observe_calls(reporter):
        return run_script(script, args)


def _write_profile_into(out: Path):
    def write(index, call, result):
        from opennki.perf import write_profile
        directory = out / f"{index:03d}_{call.name}"
        write_profile(result, str(directory), overwrite=True)
        print(f"Profile results are written to {directory}")
    return write


def check_script(script: str, args=(), *, as_json: bool = False) -> int:
    """`opennki check`: run the script under `opennki.checks.checking()` and print what was found. An error
    that stops the script is printed after the findings made before it."""
    import json
    from opennki.checks import checking, format_findings
    status, error = 0, None
    with checking() as found:
        try:
            status = run_script(script, args)
        except Exception as e:      # the script failed: report it with what was found before
            error = e
    if as_json:
        print(json.dumps({"script": script, "findings": [f.to_json() for f in found],
                          "error": None if error is None else _error_text(error)}, indent=2))
    else:
        print(f"opennki check: {script}")
        print(format_findings(found))
        if error is not None:
            print(f"the script stopped with an {_error_text(error)}")
    if error is not None:
        return 2
    return 1 if found else status


def main(argv=None) -> int:
    options = _parser().parse_args(argv)
    args = list(options.args)
    if options.args and options.args[0] == "--":
        args = args[1:]
    if options.command == "profile" and options.out is None:
        args, options.out = _trailing_out(args)
        if options.out is None:
            print("opennki profile: --out DIR is required", file=sys.stderr)
            return 2
    if getattr(options, "target", None):
        get_target(options.target)                        # validate before running anything
        put("target", options.target)                       # for the script and what it starts
    was_installed = compat.installed()
    compat.install(force=options.force)
    try:
        if options.command == "run":
            return run_script(options.script, args)
        if options.command == "check":
            return check_script(options.script, args, as_json=options.json)
        if options.command == "benchmark":
            reporter = CallReporter()
            try:
                return _run_observed(reporter, options.script, args)
            finally:
                print(format_benchmark(reporter.rows, options.script))
        out = Path(options.out)
        from opennki.perf import estimate_call
        reporter = CallReporter(estimate=functools.partial(estimate_call, checks=True),
                                after=_write_profile_into(out))
        try:
            return _run_observed(reporter, options.script, args)
        finally:
            for index, name, result in reporter.rows:
                if isinstance(result, Exception):
                    print(f"opennki profile: call {index} ({name}): {_error_text(result)}", file=sys.stderr)
            print(f"opennki profile: {len(reporter.rows)} kernel call(s) profiled into {out}")
    finally:
        if not was_installed:
            compat.uninstall()


if __name__ == "__main__":
    sys.exit(main())
