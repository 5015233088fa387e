"""A report in headless Chromium: it opens from a file with no console error and no request,
every section is there with its charts drawn, it prints, and each section is photographed.

Set ``VPROF_SCREENSHOTS=DIR`` to keep the screenshots (one PNG per section, a print-media
PNG and the printed PDF); otherwise they go to the test's temporary folder.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import chromium_missing, headless_chromium
from test_report_data import write_bench, write_sweep

from vprof.report import write_report
from vprof.report.html import SECTIONS

pytestmark = pytest.mark.browser


@pytest.fixture
def chromium() -> Iterator[object]:
    """Headless Chromium that keeps console and network logs."""
    if reason := chromium_missing():
        pytest.skip(reason)
    with headless_chromium("1400,1000", logs=True) as driver:
        yield driver


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-profile bench at three rates and a batched-tokens sweep with its manifest."""
    root = tmp_path_factory.mktemp("report-browser")
    bench = write_bench(root / "bench")
    sweep = write_sweep(root / "sweep")
    out = root / "report.html"
    write_report(
        [bench, sweep],
        out,
        slo="ttft_p95=400ms,tpot_p95=60ms",
        target_rps=20,
        gpu_hour_price=2.5,
        n_boot=200,
    )
    return out


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("VPROF_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _poll(what: str, deadline_s: float, probe):
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {deadline_s} s waiting for {what} (last: {last!r})")


def _capture(driver, element, path: Path) -> None:
    """A PNG of ``element`` whole, even where it is taller than the window."""
    x, y, width, height = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return [r.left + scrollX, r.top + scrollY, r.width, r.height];",
        element,
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": x, "y": y, "width": width, "height": min(height, 6000), "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def _requests(driver) -> list[tuple[str, str]]:
    """(requesting document, URL) of every request in Chrome's DevTools log."""
    out = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            params = message["params"]
            out.append((params.get("documentURL", ""), params["request"]["url"]))
    return out


def test_report_opens_offline_draws_every_section_and_prints(report_file, chromium, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver = chromium
    shots = _shots(tmp_path)
    driver.get(report_file.as_uri())
    drawn = int(
        _poll(
            "the charts",
            60,
            lambda: driver.execute_script("return document.documentElement.dataset.chartsDrawn"),
        )
    )

    # No console message at all (a blocked request would be a CSP error here), and the page
    # fetched nothing: no resource entries, no request but the file itself.
    console = driver.get_log("browser")
    assert console == [], console
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    page = report_file.as_uri()
    requests = _requests(driver)
    assert (page, page) in requests  # the log is there, and saw the page itself
    assert [url for doc, url in requests if doc == page and url != page] == []
    assert [url for _, url in requests if url.split(":")[0] in ("http", "https", "ws", "wss")] == []

    charts = driver.find_elements(By.CSS_SELECTOR, ".chart[data-chart]")
    with_svg = [c for c in charts if c.find_elements(By.CSS_SELECTOR, "svg")]
    explained = [c for c in charts if c.find_elements(By.CSS_SELECTOR, ".empty")]
    assert len(with_svg) == drawn and len(with_svg) + len(explained) == len(charts)
    assert all("could not be drawn" not in c.text for c in explained)
    kinds = {c.get_attribute("data-chart") for c in with_svg}
    assert kinds == {"throughput", "latency", "cdf", "timeline", "sweep", "compare"}

    for section, title in SECTIONS:
        element = driver.find_element(By.ID, section)
        assert element.find_element(By.TAG_NAME, "h2").text == title
        assert element.is_displayed()
        _capture(driver, element, shots / f"{section}.png")
    print(f"screenshots: {shots}")

    # Hover: the capacity chart answers with a tooltip naming a rate and latencies.
    latency = driver.find_element(By.CSS_SELECTOR, '.chart[data-chart="latency"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", latency)
    ActionChains(driver).move_to_element(latency).perform()
    tooltip = _poll(
        "a tooltip",
        10,
        lambda: [
            d.text
            for d in latency.find_elements(By.CSS_SELECTOR, "div")
            if "req/s" in d.text and "ms" in d.text
        ],
    )
    assert tooltip

    # The log-axis switches: each flips its section's latency axes, and back.
    axis_types = (
        "return [...document.querySelectorAll('[data-log-group=' + arguments[0] + ']')]"
        ".filter(el => el.vprofChart).map(el => { const o = el.vprofChart.getOption();"
        " return (el.dataset.chart === 'cdf' ? o.xAxis : o.yAxis)[0].type; });"
    )
    for group in ("capacity", "distributions"):
        button = driver.find_element(By.CSS_SELECTOR, f'[data-toggle-log="{group}"]')
        assert set(driver.execute_script(axis_types, group)) == {"value"}
        driver.execute_script("arguments[0].click()", button)
        assert set(driver.execute_script(axis_types, group)) == {"log"}
        driver.execute_script("arguments[0].click()", button)
        assert set(driver.execute_script(axis_types, group)) == {"value"}
    assert driver.get_log("browser") == []

    # Print: the print stylesheet applies and the page prints to PDF without an error.
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    _poll(
        "the charts redrawn at the print size",
        10,
        lambda: driver.execute_script(
            "const el = document.querySelector('.chart[data-chart=latency]');"
            "return Math.abs(el.querySelector('svg').getBoundingClientRect().height"
            " - el.clientHeight) < 2 && el.clientHeight < 300;"
        ),
    )
    _capture(driver, driver.find_element(By.ID, "capacity"), shots / "capacity-print.png")
    assert not driver.find_element(By.ID, "toc").is_displayed()
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    pdf = driver.execute_cdp_cmd("Page.printToPDF", {"printBackground": False})
    (shots / "report.pdf").write_bytes(base64.b64decode(pdf["data"]))
    assert (shots / "report.pdf").read_bytes().startswith(b"%PDF")
    assert driver.get_log("browser") == []
