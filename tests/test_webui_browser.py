"""The real Locust web UI in headless Chromium: start a test from the form, watch the LLM tab fill.

With 8 users: the LLM table and its charts fill, Locust's header RPS matches the request rate
of the run's records with two workers (each request is counted once; one process's counts
are test_locust_outputs'), the Statistics tab has no metric rows,
and the downloaded report carries the LLM section with its charts.

Runs ``vprof emulate`` and ``locust -f locustfiles/locustfile.py`` as subprocesses (the web UI
exactly as a user starts it) and drives Debian's chromium through chromedriver. The emulator is
enough here: this test is about the UI and the record feed, not about the engine.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from chromium import chromium_missing, headless_chromium

from vprof.records import read_records

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
LOCUSTFILE = REPO / "locustfiles" / "locustfile.py"
BIN = Path(sys.executable).parent
# This helper's port range is 18400-18499; the unit tests use none.
EMULATOR_PORT = int(os.environ.get("VPROF_WEBUI_TEST_EMULATOR_PORT", "18420"))
WEB_PORT = int(os.environ.get("VPROF_WEBUI_TEST_WEB_PORT", "18421"))
MASTER_PORT = int(os.environ.get("VPROF_WEBUI_TEST_MASTER_PORT", "18422"))
EMULATED_TTFT_MS = 40.0
EMULATED_ITL_MS = 8.0
WORKLOAD = "tiny-smoke"  # 64 tokens in, exactly 16 out
USERS = 8
CHARTS = ("ttft", "tpot", "itl", "output_throughput", "requests", "in_flight")


def _wait_http(url: str, deadline_s: float, proc: subprocess.Popen, log: Path) -> None:
    """Poll ``url`` until it answers 200, failing early if ``proc`` died."""
    deadline = time.monotonic() + deadline_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"{proc.args[:3]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError as exc:
            last_error = exc
        time.sleep(0.2)
    pytest.fail(
        f"{url} did not answer within {deadline_s} s ({last_error}):\n{log.read_text()[-3000:]}"
    )


def _stats_report(web_url: str) -> dict:
    with urllib.request.urlopen(f"{web_url}/stats/requests", timeout=5) as response:
        return json.load(response)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (Locust shuts down cleanly; SIGINT would not do: a process started from a
    pytest-xdist worker inherits SIGINT ignored), then SIGKILL to the process group we
    started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything left in its group (forked workers)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@pytest.fixture
def locust_web(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The emulator and a Locust web UI in front of it; yields the UI's URL. Parametrised
    indirectly by each test: ``local``, one Locust process; ``processes-2``, ``--processes 2``,
    so the UI is the master's and every record reaches the LLM tab from a worker.
    """
    if reason := chromium_missing():
        pytest.skip(reason)
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        emu_log = tmp_path / "emulator.log"
        emulator = subprocess.Popen(
            [
                str(BIN / "vprof"),
                "emulate",
                "--port",
                str(EMULATOR_PORT),
                "--ttft-ms",
                str(EMULATED_TTFT_MS),
                "--itl-ms",
                str(EMULATED_ITL_MS),
            ],
            stdout=emu_log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        procs.append(emulator)
        emulator_url = f"http://127.0.0.1:{EMULATOR_PORT}"
        _wait_http(f"{emulator_url}/v1/models", 60, emulator, emu_log)

        workers = 2 if request.param == "processes-2" else 0
        extra: list[str] = []
        if workers:
            # Children connect to --master-port; keep both inside this helper's port range.
            port = str(MASTER_PORT)
            extra = ["--processes", str(workers), "--master-bind-port", port, "--master-port", port]
        locust_log = tmp_path / "locust.log"
        locust = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(LOCUSTFILE),
                "-H",
                emulator_url,
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(WEB_PORT),
                "--run-dir",
                str(tmp_path / "run"),
                *extra,
            ],
            stdout=locust_log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,  # its forked workers share the group _stop() kills
        )
        procs.append(locust)
        web_url = f"http://127.0.0.1:{WEB_PORT}"
        _wait_http(f"{web_url}/stats/requests", 120, locust, locust_log)
        if workers:
            _poll(
                f"{workers} workers to connect",
                60,
                lambda: _stats_report(web_url).get("worker_count") == workers,
            )
        yield web_url
    finally:
        for proc in reversed(procs):
            _stop(proc)


@pytest.fixture
def browser() -> Iterator[object]:
    if reason := chromium_missing():
        pytest.skip(reason)
    with headless_chromium("1600,900") as driver:
        yield driver


def _poll(what: str, deadline_s: float, probe):
    """Call ``probe`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as exc:  # the page re-renders under us; try again
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {deadline_s} s waiting for {what} (last: {last!r})")


def _table(driver, selector: str = "table") -> list[dict[str, str]]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f"{selector} tr")
    if not rows:
        return []
    header = [cell.text for cell in rows[0].find_elements(By.CSS_SELECTOR, "th,td")]
    return [
        dict(zip(header, [c.text for c in row.find_elements(By.CSS_SELECTOR, "td")], strict=False))
        for row in rows[1:]
    ]


def _open_tab(driver, title: str) -> None:
    from selenium.webdriver.common.by import By

    def find():
        # The tab bar upper-cases titles with CSS, so compare case-insensitively.
        tabs = driver.find_elements(By.CSS_SELECTOR, "[role=tab]")
        return [t for t in tabs if t.text.strip().lower() == title.lower()]

    _poll(f"the {title!r} tab", 30, find)[0].click()


def _number(text: str | None) -> float | None:
    try:
        return float(text.replace(",", "")) if text else None
    except ValueError:
        return None


def _charts_drawn(driver, min_points: int) -> dict[str, int] | None:
    """{chart: intervals drawn} once every LLM chart holds ``min_points`` with values."""
    from selenium.webdriver.common.by import By

    drawn = {
        el.get_attribute("data-chart"): int(el.get_attribute("data-points") or 0)
        for el in driver.find_elements(By.CSS_SELECTOR, ".vprof-llm-chart")
        if el.get_attribute("data-filled") == "true"
    }
    if set(drawn) != set(CHARTS) or min(drawn.values()) < min_points:
        return None
    return drawn


def _header_rps_samples(driver, duration_s: float) -> list[tuple[float, float]]:
    """(wall-clock time, RPS) read from Locust's header every half second."""
    from selenium.webdriver.common.by import By

    samples = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        cell = driver.find_element(By.XPATH, "//*[text()='RPS']/following-sibling::*[1]")
        value = _number(cell.text)
        if value is not None:
            samples.append((time.time(), value))
        time.sleep(0.5)
    assert samples, "Locust's header shows an RPS"
    return samples


def _screenshots(driver, page: Path, element_id: str, element: Path, height_px: int = 1500) -> None:
    """The page in a window tall enough for the charts under the table, and one element.

    Locust's page scrolls inside its own container, so a tall window is the way to get the
    whole tab into one picture.
    """
    from selenium.webdriver.common.by import By

    driver.set_window_size(1600, height_px)
    time.sleep(0.5)  # the charts follow the resize on their next frame
    driver.save_screenshot(str(page))
    driver.find_element(By.ID, element_id).screenshot(str(element))
    driver.set_window_size(1600, 900)


def _check_header_rate(samples: list[tuple[float, float]], records, heard) -> None:
    """Each header reading against the records' rate over the windows it rests on."""
    finished = heard.finished_at.to_numpy()
    start = math.floor(records.sent_at.min())  # as Locust's window starts at the test's
    lows, highs = [], []
    for t, _ in samples:
        rates = []
        for end in range(math.floor(t - 4) - 2, math.floor(t) - 1):
            lo = max(end - 10, start)
            rates.append(float(((finished >= lo) & (finished < end)).sum()) / (end - lo))
        lows.append(min(rates))
        highs.append(max(rates))
    header_rps = float(np.median([rps for _, rps in samples]))
    low, high = float(np.median(lows)), float(np.median(highs))
    print(
        f"header RPS {header_rps:.2f} (median of {len(samples)} readings) vs records "
        f"{low:.2f}-{high:.2f} req/s over the windows the readings rest on"
    )
    # Each worker sends the master its counts every 3 s, and the window ends 2 s before the
    # newest request any worker reported: the other worker's last seconds may not have come
    # in yet (more when the machine is busy). 3 s of one worker of two is 15 % of the window
    # short, and a report delivered late on a busy machine a little more (a fresh-clone run:
    # 5.2 against 6.15-6.85 req/s, 15.4 % short); up to 4 s (20 %) passes. A request counted
    # twice (or not at all) is far outside either bound.
    assert 0.80 * low <= header_rps <= 1.03 * high, (header_rps, low, high)


@pytest.mark.parametrize("locust_web", ["processes-2"], indirect=True)
def test_llm_tab_fills_with_live_percentiles(locust_web, browser, tmp_path):
    """With two workers, where the header's rate is read against the records': a rate, so the
    test waits for quiet cores (``QUIET``); one process is test_webui_local_browser's."""
    check_llm_tab(locust_web, browser, tmp_path, rate_read=True)


def check_llm_tab(locust_web: str, driver, tmp_path: Path, *, rate_read: bool) -> None:
    """Start a test from the form and check every LLM view against the run's records; with
    ``rate_read``, also Locust's header RPS against the records' rate."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def fill(name: str, value: str) -> None:
        field = driver.find_element(By.NAME, name)
        # React keeps its own value: select-all and type, as a person would.
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(Keys.DELETE)
        field.send_keys(value)

    driver.get(locust_web + "/")
    _poll("the start form", 30, lambda: driver.find_elements(By.NAME, "userCount"))
    fill("userCount", str(USERS))
    fill("spawnRate", str(USERS))
    driver.find_element(By.XPATH, "//button[contains(., 'Custom parameters')]").click()
    # H3b registers these with include_in_web_ui; Locust renders them as named inputs.
    _poll(
        "--workload and --traffic in the start form's custom parameters",
        10,
        lambda: (
            {"workload", "traffic"}
            <= {f.get_attribute("name") for f in driver.find_elements(By.CSS_SELECTOR, "input")}
        ),
    )
    names = [f.get_attribute("name") for f in driver.find_elements(By.CSS_SELECTOR, "input")]
    print("start form inputs:", names)
    fill("workload", WORKLOAD)
    driver.find_element(By.XPATH, "//button[@type='submit']").click()
    started_at = time.time()

    _open_tab(driver, "LLM")

    def filled() -> dict[str, str] | None:
        rows = {row.get("Name"): row for row in _table(driver)}
        total = rows.get("Aggregated")
        if not total or not (_number(total.get("Requests")) or 0) >= 10:
            return None
        needed = ("TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "ITL p50 ms", "ITL p99 ms")
        needed += ("Output tok/s",)  # needs a whole second of traffic behind the 2 s lag
        if any(not _number(total.get(col)) for col in needed):
            return None
        return total

    total = _poll("the LLM table to show TTFT/TPOT/ITL percentiles", 120, filled)
    print("LLM tab, Aggregated:", total)

    # The charts under the table fill from the timeline: every chart, a line of two intervals.
    charts = _poll("the LLM charts to draw two intervals", 90, lambda: _charts_drawn(driver, 2))
    print("LLM charts (intervals drawn):", charts)
    _screenshots(driver, tmp_path / "llm_tab.png", "vprof-llm-charts", tmp_path / "llm_charts.png")
    print(f"screenshots: {tmp_path / 'llm_tab.png'}, {tmp_path / 'llm_charts.png'}")

    # Locust's header RPS counts each request once: it matches the records' rate. Read it
    # once Locust's 10 s window (ending 2 s before the last request) has left the one-second
    # ramp-up behind. Read with workers (their stats reach the header through the master);
    # one process's are Locust's own statistics, whose counts test_locust_outputs checks.
    samples: list[tuple[float, float]] = []
    if rate_read:
        _poll("14 s of test", 30, lambda: time.time() >= started_at + 14)
        samples = _header_rps_samples(driver, duration_s=6.0)

    # The emulator cannot be faster than configured; measured values are at least that.
    assert _number(total["TTFT p50 ms"]) >= EMULATED_TTFT_MS * 0.95
    assert _number(total["ITL p50 ms"]) >= EMULATED_ITL_MS * 0.9
    assert _number(total["TPOT p50 ms"]) >= EMULATED_ITL_MS * 0.9
    assert _number(total["Output tok/s"]) > 0
    assert _number(total["Fails"]) == 0

    # The Statistics tab holds one entry per endpoint: no TTFT/TPOT rows in Aggregated.
    _open_tab(driver, "Statistics")
    stats_rows = _poll("the Statistics table", 30, lambda: _table(driver))
    assert sorted(r.get("Name") for r in stats_rows) == ["/v1/completions", "Aggregated"]
    assert {r.get("Type") for r in stats_rows} == {"POST", ""}

    # The other LLM tab shows the recent window from the same feed.
    _open_tab(driver, "LLM (last 10 s)")
    _poll(
        "the recent-window table",
        30,
        lambda: any(
            r.get("Name") == "Aggregated" and _number(r.get("ITL p50 ms")) for r in _table(driver)
        ),
    )
    driver.save_screenshot(str(tmp_path / "llm_recent_tab.png"))

    # The CSV download holds the same statistics at full precision.
    with urllib.request.urlopen(locust_web + "/stats/llm/csv", timeout=5) as response:
        text = response.read().decode()
    header, *lines = text.strip().splitlines()
    assert "p99_itl_ms" in header.split(",")
    assert lines[-1].startswith("Aggregated,")

    # Stop the test; every record the run folder holds was counted in the live table too.
    stop = urllib.request.Request(locust_web + "/stop", method="POST")
    urllib.request.urlopen(stop, timeout=5).close()

    def counts_agree() -> tuple[int, int] | None:
        from vprof.records import read_records

        with urllib.request.urlopen(locust_web + "/stats/llm", timeout=5) as response:
            live_total = json.load(response)[-1]
        on_disk = len(read_records(tmp_path / "run"))
        if live_total["requests"] == on_disk > 0:
            return live_total["requests"], on_disk
        return None

    live_count, disk_count = _poll("live and on-disk record counts to agree", 60, counts_agree)
    print(f"records: {disk_count} on disk, {live_count} in the LLM tab")

    records = read_records(tmp_path / "run")
    heard = records[records.status != "cancelled"]  # what Locust was told of
    # Locust's current RPS averages the 10 whole seconds that ended 2 s before its last
    # request (by the second each answer was logged), and the header shows a value polled
    # every 2 s and cached for 2 s: a reading at t rests on a window ending 2-6 s before t.
    # Each reading is held against the records' rate over every such window (comparing it
    # with one span around all readings once missed by 5.3 % while the load's rate moved).
    if rate_read:
        _check_header_rate(samples, records, heard)
    # And Locust's Aggregated count is the requests', once each (workers report late).
    _poll(
        "Locust's request count to equal the records'",
        30,
        lambda: _stats_report(locust_web)["stats"][-1]["num_requests"] == len(heard),
    )

    # Live percentiles agree with numpy over the run's own records (the offline summary's way).
    with urllib.request.urlopen(locust_web + "/stats/llm", timeout=5) as response:
        live_total = json.load(response)[-1]
    ok = read_records(tmp_path / "run").query("status == 'ok'")
    series = {
        "ttft": ok["ttft_ms"].dropna(),
        "tpot": ok["tpot_ms"].dropna(),
        "itl": np.concatenate(ok["itl_ms"].to_list()),
    }
    for metric, values in series.items():
        for key, p in (("median", 50), ("p90", 90), ("p99", 99)):
            expected = float(np.percentile(values, p))
            got = live_total[f"{key}_{metric}_ms"]
            assert got == pytest.approx(expected, rel=0.01), (metric, key, got, expected)

    # The workload typed into the start form is the one that ran (the default is another).
    info = json.loads((tmp_path / "run" / "locust.json").read_text())
    assert info["workload"]["name"] == WORKLOAD

    # No script of ours complained on the main page.
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]

    # Locust's Download Report gains the LLM section, its charts drawn offline.
    driver.get(locust_web + "/stats/report")
    section = _poll("the report's LLM section", 30, lambda: driver.find_element(By.ID, "vprof-llm"))
    report_charts = _poll("the report's LLM charts", 30, lambda: _charts_drawn(driver, 3))
    print("report LLM charts (intervals drawn):", report_charts)
    rows = {r.get("Name"): r for r in _table(driver, "#vprof-llm table.vprof-llm-requests")}
    assert _number(rows["Aggregated"]["Requests"]) == len(records)
    driver.execute_script("arguments[0].scrollIntoView()", section)
    _screenshots(
        driver, tmp_path / "report.png", "vprof-llm", tmp_path / "report_llm_section.png", 2400
    )
    # Locust's own report page asks for its favicon at ../../assets (absent when served
    # here); nothing else may fail.
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert all("favicon" in e["message"] for e in errors), errors
