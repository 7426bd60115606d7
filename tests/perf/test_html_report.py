"""The HTML profile report renders in headless Chromium without console errors and without the network."""

import os
import re
import shutil
import subprocess

import pytest

from opennki.perf.estimate import estimate
from opennki.perf import html_report
from tests.cost import kernels as K
from tests.checks.test_races import _prefix_sum      # the race checker's loop-carried RAW kernel
from tests.cost.helpers import spec

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
                  "--v=0", "--dump-dom"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("Chromium is missing in CI (.ci/run installs it from the distribution's packages)")
    pytest.skip("Chromium is not installed (CI installs it; apt-get install chromium)")


def render(tmp_path, page: str) -> tuple[str, str]:
    path = tmp_path / "report.html"
    path.write_text(page)
    browser = chromium()
    proc = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           path.as_uri()], capture_output=True, text=True, timeout=120)
    return proc.stdout, proc.stderr


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def test_html_report_renders_without_console_errors(tmp_path):
    r = estimate(K.softmax_rows, (spec((512, 512)),), target="trn2")
    page = html_report(r)
    assert "http://" not in page and "https://" not in page          # self-contained
    dom, stderr = render(tmp_path, page)
    assert console_messages(stderr) == []
    assert re.search(r'<body[^>]*data-rendered="ok"', dom), dom[:500]
    assert "softmax_rows on trn2" in dom and "kernels.py:" in dom    # summary and hot-spot tables filled


def test_the_console_check_catches_script_errors(tmp_path):
    _, stderr = render(tmp_path, "<!DOCTYPE html><html><body><script>missingFunction();</script></body></html>")
    assert any("missingFunction" in line for line in console_messages(stderr))


def _finding_boxes(dom: str) -> list[str]:
    return re.findall(r'<div class="finding">(.*?)</div></div>', dom, flags=re.S)


@pytest.mark.parametrize("parallel", [True, False])
def test_the_profile_html_report_lists_the_checks_findings(parallel, tmp_path, rng):
    import inspect
    import json

    import numpy as np

    import opennki.legacy as nki
    import opennki.legacy.language as nl

    kernel = _prefix_sum(nl.affine_range if parallel else nl.sequential_range)
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    nki.profile(working_directory=str(tmp_path / "out"), save_trace_name="p.ntff")(kernel)(x)
    page = (tmp_path / "out" / "p.html").read_text()
    dom, stderr = render(tmp_path, page)
    assert console_messages(stderr) == []
    assert re.search(r'<body[^>]*data-rendered="ok"', dom)
    summary = json.loads((tmp_path / "out" / "json_reports" / "p.json").read_text())["summary"][0]
    boxes = _finding_boxes(dom)
    if not parallel:
        assert boxes == [] and "none: the race checker and the lint found nothing" in dom
        assert summary["findings"] == []
        return
    lines, start = inspect.getsourcelines(kernel)
    read = start + next(i for i, s in enumerate(lines) if "nl.add(prev" in s)
    assert len(boxes) == 1 and [f["rule"] for f in summary["findings"]] == ["affine_loop_carried_raw"]
    box = boxes[0]
    assert "race [affine_loop_carried_raw] in prefix_sum" in box
    assert box.count(f"test_races.py:{read}") == 2          # both iterations' accesses are that line
    assert "regions: sbuf partitions 0-16 bytes" in box
    assert re.search(r"iterations: [123], [123]", box)
    assert "why: NKI&#39;s compiler treats affine_range iterations as independent" in box or \
        "why: NKI's compiler treats affine_range iterations as independent" in box
    assert "fix: use nl.sequential_range for this loop" in box


def test_an_estimate_without_checks_says_so(tmp_path):
    r = estimate(K.softmax_rows, (spec((512, 512)),), target="trn2")
    dom, _ = render(tmp_path, html_report(r))
    assert "The checks did not run with this estimate." in dom


def test_a_checked_estimate_inside_a_checking_block_reports_its_findings_there_too():
    import opennki.legacy.language as nl
    from opennki.checks import checking

    with checking() as found:          # what `opennki check` runs a script in (`opennki profile` estimates so)
        r = estimate(_prefix_sum(nl.affine_range), (spec((4, 16, 8)),), checks=True)
    assert [f.rule for f in r.findings] == ["affine_loop_carried_raw"]
    assert [f.rule for f in found] == ["affine_loop_carried_raw"]
