"""Front-door services: `benchmark` and `profile` without hardware, answered by the cost model.

Imports the dispatch and cost layers. The dispatch layer's benchmark/profile kernels call the services the
front door gives them (`SERVICES`): `run_benchmark(kernel, args, kwargs, **config)`, `run_profile(kernel,
args, kwargs, **config)` and `write_trace(kernel, args, kwargs, path)`; the decorators (`nki.benchmark`,
`nki.profile`) are the front doors' own. Tools use `estimate_call`
(one call's `CostResult`: `.format()`, `.table_row()` under `CostResult.TABLE_HEADER`, `.to_dict()`) and
`write_profile(result, out_dir)`; `format_report(result)` is the text report.
"""

from opennki.cost.result import CostResult
from opennki.perf.bench import PERCENTILES, BenchmarkResult, NCLatency, estimate_call, run_benchmark
from opennki.perf.html import html_report, write_html_report
from opennki.perf.profile import artifact_names, run_profile, write_profile
from opennki.perf.report import Hint, format_report, hints, hot_spots
from opennki.perf.trace import chrome_trace, trace_path, write_chrome_trace, write_trace

# what the dispatch layer's benchmark, profile and baremetal kernels call (plugged in by the front door)
SERVICES = {"benchmark": run_benchmark, "profile": run_profile, "write_trace": write_trace}

__all__ = ["SERVICES", "write_trace", "estimate_call", "write_profile", "run_benchmark",
           "run_profile", "NCLatency", "BenchmarkResult", "PERCENTILES", "CostResult", "format_report", "hints",
           "hot_spots", "Hint", "chrome_trace", "write_chrome_trace", "trace_path", "html_report",
           "write_html_report", "artifact_names"]
