"""Front-door services: `profile` answered by the cost model (spec/entrypoints.md §6). Imports the cost layer
and the trace, report and HTML writers.

NKI's profile writes `<save_neff_name>`, one NTFF per traced execution (`<stem>.ntff` for execution 1,
`<stem>_exec_<n>.ntff` otherwise) and `json_reports/` with one JSON summary per traced execution. Here no
NEFF and no NTFF exist; the same names carry the cost model's artifacts (docs/cost-model.md):

    <stem>[_exec_<n>].trace.json     Chrome/Perfetto trace of the execution      (for <stem>[_exec_<n>].ntff)
    json_reports/<stem>[_exec_<n>].json   JSON summary + per-instruction rows      (neuron-profile summary-json)
    <stem>.html                      self-contained HTML report (timeline, summary, hot spots, hints,
                                     findings)
    <stem>.txt                       plain-text report

The profiled run has the checks on (`estimate(checks=True)`: the race checker on the shape-only run and the
lint of the kernel); what they find goes into the reports (the HTML report's findings section, `findings`
in each JSON summary) instead of being raised. The model is deterministic, so every traced execution has the same contents. Executions traced: every
`profile_nth`-th up to `num_execs` (default `num_execs = profile_nth`), or just execution `profile_nth` when
`num_execs < profile_nth`, as NKI does.
"""

from __future__ import annotations

import json
import os

from opennki.perf.estimate import estimate
from opennki.perf.html import write_html_report
from opennki.perf.report import format_report
from opennki.perf.trace import instruction_args, write_chrome_trace

DEFAULT_TRACE_NAME = "profile.ntff"
JSON_REPORTS = "json_reports"


def traced_executions(profile_nth: int = 1, num_execs: int | None = None) -> list[int]:
    for name, value in (("profile_nth", profile_nth), ("num_execs", num_execs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"profile {name} must be a positive integer, got {value!r}")
    num_execs = profile_nth if num_execs is None else num_execs
    if num_execs < profile_nth:
        return [profile_nth]
    return list(range(profile_nth, num_execs + 1, profile_nth))


def artifact_names(save_trace_name: str = DEFAULT_TRACE_NAME, profile_nth: int = 1,
                   num_execs: int | None = None) -> dict[str, list[str]]:
    """Relative paths of everything a profile writes (module docstring)."""
    stem = os.path.splitext(os.path.basename(save_trace_name))[0]
    names = [stem if n == 1 else f"{stem}_exec_{n}" for n in traced_executions(profile_nth, num_execs)]
    return {"traces": [f"{n}.trace.json" for n in names],
            "json_reports": [os.path.join(JSON_REPORTS, f"{n}.json") for n in names],
            "html": [f"{stem}.html"], "text": [f"{stem}.txt"]}


def json_report(result, execution: int) -> dict:
    """The JSON summary of one execution: `summary` (a list with one dict, as neuron-profile's json has it)
    and `instruction` (one row per instruction, with timestamps, durations, rows and kernel lines)."""
    summary = result.to_dict()
    summary["execution"] = execution
    if result.findings is not None:
        summary["findings"] = [f.to_json() for f in result.findings]
    rows = [{"timestamp": rec.start, "duration": rec.duration_ns, "label": rec.row, "core": rec.core,
             **instruction_args(rec, result.records)} for rec in result.records]
    return {"summary": [summary], "instruction": rows}


def write_profile(result, out_dir: str, *, save_trace_name: str = DEFAULT_TRACE_NAME, profile_nth: int = 1,
                  num_execs: int | None = None, overwrite: bool = False) -> list[str]:
    """Write the profile artifacts of `result` into `out_dir` (module docstring) and return their paths.

    Raises:
        FileExistsError: `overwrite=False` and some artifact already exists.
    """
    out_dir = os.path.abspath(out_dir)
    names = artifact_names(save_trace_name, profile_nth, num_execs)
    paths = [os.path.join(out_dir, n) for group in names.values() for n in group]
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not overwrite:
        raise FileExistsError(f"profile results already exist in {out_dir} ({os.path.basename(existing[0])}"
                              f"{' and more' if len(existing) > 1 else ''}); pass overwrite=True to replace them")
    os.makedirs(os.path.join(out_dir, JSON_REPORTS), exist_ok=True)
    executions = traced_executions(profile_nth, num_execs)
    for name, n in zip(names["traces"], executions):
        write_chrome_trace(result, os.path.join(out_dir, name))
    for name, n in zip(names["json_reports"], executions):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(json_report(result, n), f, indent=1)
    write_html_report(result, os.path.join(out_dir, names["html"][0]))
    with open(os.path.join(out_dir, names["text"][0]), "w") as f:
        f.write(format_report(result) + "\n")
    return paths


def run_profile(kernel, args, kwargs=None, *, working_directory=None, save_neff_name=None,
                save_trace_name: str | None = None, additional_compile_opt=None, overwrite: bool = False,
                profile_nth: int = 1, num_execs: int | None = None, target=None, print_report: bool = False,
                **_ignored):
    """The service behind `nki.profile`: estimate one call and write its profile into `working_directory`.

    Raises:
        ValueError: no working directory ("Please specify working directory"), or bad counts.
        FileExistsError: results exist and `overwrite=False`.
    Returns:
        the CostResult (the kernel object also keeps it as `profile_result` when it can).
    """
    if not working_directory:
        raise ValueError("Please specify working directory")
    trace_name = save_trace_name or DEFAULT_TRACE_NAME
    artifact_names(trace_name, profile_nth, num_execs)          # validates the counts before running
    result = estimate(kernel, args, kwargs, target=target, checks=True)
    write_profile(result, working_directory, save_trace_name=trace_name, profile_nth=profile_nth,
                  num_execs=num_execs, overwrite=overwrite)
    try:
        kernel.profile_result = result
    except AttributeError:
        pass
    if print_report:
        print(format_report(result))
    print(f"Profile results are written to {os.path.abspath(working_directory)}")
    return result


__all__ = ["run_profile", "write_profile", "artifact_names", "traced_executions", "json_report"]
