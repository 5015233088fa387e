"""Locust's own outputs count each LLM request once, and carry vprof's LLM statistics.

Real Locust, headless, against vprof's emulator (this is about Locust's statistics and
files, not the engine): its ``--html`` report and ``--csv`` files, locally and with
``--processes`` (workers report their stats to the master), checked against the run's
records. Plus the unit behind it: one ``request`` event per request.
"""

from __future__ import annotations

import csv
import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from locust_run import import_locust_unpatched, run_headless

from vprof.emulator import Emulator, EmulatorConfig
from vprof.records import read_records

TTFT_MS, ITL_MS = 40.0, 8.0


@pytest.fixture(scope="module")
def emulator():
    emu = Emulator(EmulatorConfig(port=0, ttft_ms=TTFT_MS, itl_ms=ITL_MS)).start()
    try:
        yield emu
    finally:
        emu.stop()


def _locust_report_args(page: str) -> dict:
    """The ``window.templateArgs`` Locust renders its HTML report from."""
    match = re.search(r"window\.templateArgs = (\{.*?\})\n", page)
    assert match, "Locust's report embeds its data"
    return json.loads(match.group(1))


def _llm_table(page: str, kind: str) -> list[dict[str, str]]:
    """One table of the LLM section (``requests`` or ``latency``): a dict per row."""
    section = page[page.index('<section id="vprof-llm"') :]
    table = section[section.index(f"vprof-llm-{kind}") :]
    table = table[: table.index("</table>")]
    head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
    return [
        dict(
            zip(
                head,
                [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)],
                strict=True,
            )
        )
        for row in re.findall(r"<tr>(<td.*?)</tr>", table)
    ]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize("processes", [1, 2], ids=["local", "processes-2"])
def test_html_and_csv_count_each_request_once_and_hold_the_llm_statistics(
    emulator, tmp_path: Path, processes: int
):
    run_dir = tmp_path / "run"
    extra = ["--processes", str(processes)] if processes > 1 else []
    run_headless(
        emulator.url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "8s",
        "--html",
        str(tmp_path / "report-{u}.html"),
        "--csv",
        str(tmp_path / "out"),
        *extra,
    )
    records = read_records(run_dir)
    sent = records[records.status != "cancelled"]  # Locust hears of every request it sent
    ok = records[records.status == "ok"]
    assert len(ok) > 50, records.status.value_counts()

    page = (tmp_path / "report-8.html").read_text(encoding="utf-8")
    # Locust's own part: one entry per request, no TTFT/TPOT entries mixed into Aggregated.
    stats = _locust_report_args(page)["requests_statistics"]
    assert [(s["method"], s["name"]) for s in stats] == [
        ("POST", "/v1/completions"),
        ("", "Aggregated"),
    ]
    total = stats[-1]
    assert total["num_requests"] == len(sent)
    assert total["num_failures"] == int((sent.status != "ok").sum())
    assert total["avg_content_length"] == pytest.approx(ok.completion_tokens.mean())

    # vprof's part: the LLM table over the whole test, from the records.
    counts = {row["Name"]: row for row in _llm_table(page, "requests")}
    assert list(counts) == ["WorkloadUser", "Aggregated"]
    agg = counts["Aggregated"]
    assert _number(agg["Requests"]) == len(records)
    assert _number(agg["Completed"]) == len(ok)
    assert _number(agg["Fails"]) == int(records.status.isin(["error", "timeout"]).sum())
    assert _number(agg["Output tokens"]) == ok.completion_tokens.sum()
    latency = {
        row["Metric"]: row for row in _llm_table(page, "latency") if row["Name"] == "Aggregated"
    }
    assert list(latency) == ["TTFT", "TPOT", "ITL", "E2E"]
    itl = np.concatenate(ok.itl_ms.to_list())
    for metric, values in (
        ("TTFT", ok.ttft_ms),
        ("TPOT", ok.tpot_ms.dropna()),
        ("ITL", itl),
        ("E2E", ok.e2e_ms),
    ):
        assert _number(latency[metric]["values"]) == len(values)
        for p in (50, 90, 95, 99):
            expected = float(np.percentile(values, p))
            # Within the histograms' 1 %, plus the table's two decimals.
            got = _number(latency[metric][f"p{p}"])
            assert got == pytest.approx(expected, rel=0.01, abs=0.006), (metric, p)
    assert _number(latency["TTFT"]["p50"]) >= TTFT_MS * 0.95  # the emulator is never faster

    # ... and its charts' points: every completed request in exactly one interval.
    data = json.loads(re.search(r'id="vprof-llm-data">(.*?)</script>', page).group(1))
    points = data["points"]
    assert sum(p["completed"] for p in points) == len(ok)
    assert sum(p["output_throughput"] > 0 for p in points) >= 2
    assert all(p["median_ttft_ms"] is not None for p in points if p["completed"])
    busy_s = float((records.finished_at - records.sent_at).dropna().sum())
    in_flight_s = sum(
        p["in_flight"]
        * (
            min(p["t"] + data["interval_s"], records.finished_at.max())
            - max(p["t"], records.sent_at.min())
        )
        for p in points
    )
    assert in_flight_s == pytest.approx(busy_s, rel=1e-6)  # request-seconds, all accounted

    # --csv: Locust's stats have no metric rows; the LLM rows sit beside them.
    with open(tmp_path / "out_stats.csv", newline="") as f:
        assert {row["Type"] for row in csv.DictReader(f)} <= {"POST", ""}
    with open(tmp_path / "out_llm_stats.csv", newline="") as f:
        llm_rows = list(csv.DictReader(f))
    assert llm_rows[-1]["name"] == "Aggregated"
    assert int(llm_rows[-1]["requests"]) == len(records)
    assert math.isclose(
        float(llm_rows[-1]["median_ttft_ms"]), float(ok.ttft_ms.median()), rel_tol=0.01
    )


# -- the unit: one request event per request ------------------------------------------------


def test_report_fires_one_request_event_per_request():
    from types import SimpleNamespace

    import_locust_unpatched()  # no sockets here
    from locust import User, task
    from locust.env import Environment
    from locust.event import Events

    from vprof.locustfiles.users import LLMUser
    from vprof.records import RequestRecord

    class Idle(User):
        @task
        def nothing(self) -> None:  # never run
            pass

    environment = Environment(user_classes=[Idle], events=Events())
    environment.create_local_runner()
    heard: list[dict] = []
    environment.events.request.add_listener(lambda **kw: heard.append(kw))
    try:
        user = SimpleNamespace(environment=environment)
        ok = RequestRecord(
            request_id="1",
            sent_at=100.0,
            first_token_at=100.05,
            last_token_at=100.2,
            finished_at=100.25,
            completion_tokens=16,
            itl_ms=[10.0] * 15,
        ).finalize()
        bad = RequestRecord(
            request_id="2", sent_at=101.0, finished_at=101.5, status="error", error="HTTP 500: boom"
        )
        LLMUser._report(user, ok, "/v1/chat/completions")  # type: ignore[arg-type]
        LLMUser._report(user, bad, "/v1/chat/completions")  # type: ignore[arg-type]
        stats = environment.runner.stats
    finally:
        environment.runner.quit()
    assert len(heard) == 2  # one per request: no TTFT/TPOT events
    assert set(stats.entries) == {("/v1/chat/completions", "POST")}
    assert (stats.total.num_requests, stats.total.num_failures) == (2, 1)
    entry = stats.get("/v1/chat/completions", "POST")
    assert entry.max_response_time == pytest.approx(500.0)  # the whole stream, in ms
    assert entry.min_response_time == pytest.approx(250.0)
    assert entry.total_content_length == 16  # output tokens, not bytes
    assert "HTTP 500: boom" in str(next(iter(stats.errors.values())).error)


# -- the unit: a shape ends at its end, not at Locust's next once-a-second tick ---------------


def _shape_at(shape, run_time_s: float):
    """A vprof shape ``run_time_s`` into its test, for ``shape`` (a TrafficShape)."""
    import time
    from types import SimpleNamespace

    import_locust_unpatched()
    from vprof.locustfiles.shapes import TrafficShapeBase

    class Shape(TrafficShapeBase):
        pass

    tested = Shape()
    tested._shape, tested._resolved = shape, True
    tested.runner = SimpleNamespace(environment=SimpleNamespace())
    tested.start_time = time.perf_counter() - run_time_s
    return tested


@pytest.mark.parametrize("open_loop", [False, True])
def test_a_shape_whose_end_falls_before_the_next_tick_ends_there(open_loop):
    import time

    from vprof.locustfiles.optiontable import LOCAL_OPEN_LOOP_LEAD_S
    from vprof.traffic.shape import TrafficShape

    kind = {"kind": "open-loop", "rate_rps": 2.0} if open_loop else {"kind": "steady", "users": 3}
    shape = TrafficShape(name="t", duration_s=5.0, warmup_s=1.0, **kind)
    end_s = shape.total_s + (LOCAL_OPEN_LOOP_LEAD_S if open_loop else 0.0)
    assert _shape_at(shape, end_s - 1.5).tick() == shape.users_at(4.0)  # a tick before: on
    tested = _shape_at(shape, end_s - 0.3)
    started = time.perf_counter()
    assert tested.tick() is None  # ends, having waited for its end
    assert time.perf_counter() - started >= 0.29
    assert tested.get_run_time() >= end_s


def test_a_shape_whose_users_change_before_its_end_leaves_the_end_to_the_next_tick():
    import time

    from vprof.traffic.shape import TrafficShape

    ramp = TrafficShape(name="r", kind="ramp", start_users=1, users=50, ramp_s=10, duration_s=10)
    started = time.perf_counter()
    assert _shape_at(ramp, 9.5).tick() == ramp.users_at(9.5)
    assert time.perf_counter() - started < 0.2  # no wait: the users still change
