"""Front-door services: `benchmark` and `profile` without hardware, answered by the cost model.

Imports the cost layer. The dispatch layer's benchmark/profile kernels call `benchmark(kernel, args,
kwargs, **config)`, `profile(kernel, args, kwargs, **config)` and `write_trace(kernel, args, kwargs, path)`;
used as decorators, `benchmark` / `profile` return the front door's kernels. Tools use `estimate_call`
(one call's `CostResult`: `.format()`, `.table_row()` under `CostResult.TABLE_HEADER`, `.to_dict()`) and
`write_profile(result, out_dir)`; `format_report(result)` is the text report.
"""

from opennki.cost.result import CostResult
from opennki.perf.bench import (PERCENTILES, BenchmarkResult, NCLatency, benchmark, estimate_call,
                                run_benchmark)
from opennki.perf.html import html_report, write_html_report
from opennki.perf.profile import artifact_names, profile, run_profile, write_profile
from opennki.perf.report import Hint, format_report, hints, hot_spots
from opennki.perf.trace import chrome_trace, trace_path, write_chrome_trace, write_trace

__all__ = ["benchmark", "profile", "write_trace", "estimate_call", "write_profile", "run_benchmark",
           "run_profile", "NCLatency", "BenchmarkResult", "PERCENTILES", "CostResult", "format_report", "hints",
           "hot_spots", "Hint", "chrome_trace", "write_chrome_trace", "trace_path", "html_report",
           "write_html_report", "artifact_names"]
