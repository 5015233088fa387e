"""A report of real runs (CPU build, real Locust): a two-profile alternating bench and a load
sweep, opened in headless Chromium — no console error, no request, every section — and its
numbers read back from the page equal summary.json and `vprof plan`.

Set ``VPROF_SCREENSHOTS=DIR`` to keep a PNG of each section.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LOAD_SWEEP_SLO as SLO
from test_report import embedded
from test_report_browser import _capture, _poll, _requests, _shots, chromium  # noqa: F401

from vprof.report import write_report
from vprof.report.html import SECTIONS

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def test_a_report_of_real_runs_opens_offline_with_every_section(
    ab_bench,
    load_sweep,
    chromium,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    from selenium.webdriver.common.by import By

    out = tmp_path / "report.html"
    write_report([ab_bench.out, load_sweep], out, slo=SLO, target_rps=20, gpu_hour_price=2.5)
    data = embedded(out)
    for run in data["runs"]:  # the page's numbers are the run folders' own summaries
        folder, _, side = run["summary"]["path"].partition("#")  # an alternating run's side
        summary = json.loads((Path(folder) / "summary.json").read_text())
        if side:
            (summary,) = [s for s in summary["sides"] if s["profile"] == side]
        for key in ("completed", "median_ttft_ms", "p95_ttft_ms", "p99_itl_ms"):
            assert run["summary"][key] == pytest.approx(summary[key], rel=1e-9), key
    plan = subprocess.run(
        [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "plan",
            str(ab_bench.out),
            str(load_sweep),
            "--rps",
            "20",
            "--slo",
            SLO,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stderr
    assert data["capacity"]["plan"]["rows"] == json.loads(plan.stdout)
    assert data["comparisons"] and data["sweeps"]

    driver = chromium
    driver.get(out.as_uri())
    _poll(
        "the charts",
        60,
        lambda: driver.execute_script("return document.documentElement.dataset.chartsDrawn"),
    )
    assert driver.get_log("browser") == []
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    page = out.as_uri()
    requests = _requests(driver)
    assert [url for doc, url in requests if doc == page and url != page] == []
    assert [url for _, url in requests if url.split(":")[0] in ("http", "https", "ws", "wss")] == []
    shots = _shots(tmp_path)
    for section, title in SECTIONS:
        element = driver.find_element(By.ID, section)
        assert element.find_element(By.TAG_NAME, "h2").text == title and element.is_displayed()
        _capture(driver, element, shots / f"real-{section}.png")
    print(f"screenshots: {shots}")
