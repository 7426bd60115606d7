"""The HTML profile report renders in headless Chromium without console errors and without the network."""

import os
import re
import shutil
import subprocess

import pytest

from opennki.perf.estimate import estimate
from opennki.perf import html_report
from tests.cost import kernels as K
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
