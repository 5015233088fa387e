"""The LLM tabs in Locust's web UI, driven in-process through Flask's test client."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import time

import pytest
from locust_run import import_locust_unpatched

import_locust_unpatched()  # Flask's test client: no sockets, so no patching

from locust import User, task  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.event import Events  # noqa: E402

from vprof.locustfiles import webui  # noqa: E402
from vprof.locustfiles.live import LiveStats, Timeline  # noqa: E402
from vprof.records import RequestRecord  # noqa: E402

T0 = 1_800_000_000.0


class _IdleUser(User):
    @task
    def nothing(self) -> None:  # never run: these tests start no users
        pass


def _record(i: int, ttft_ms: float, gap_ms: float, status: str = "ok", t0: float = T0) -> dict:
    rec = RequestRecord(request_id=str(i), user_class="ChatUser", sent_at=t0 + i, status=status)
    if status == "ok":
        rec.first_token_at = rec.sent_at + ttft_ms / 1000
        rec.itl_ms = [gap_ms] * 9
        rec.last_token_at = rec.first_token_at + 9 * gap_ms / 1000
        rec.finished_at = rec.last_token_at
        rec.completion_tokens = 10
        rec.finalize()
    return rec.to_dict()


@pytest.fixture
def env(monkeypatch):
    # Locust's page rendering re-parses sys.argv for the start form's extra options.
    monkeypatch.setattr("sys.argv", ["locust"])
    environment = Environment(user_classes=[_IdleUser], events=Events(), host="http://x")
    environment.create_local_runner()
    environment.create_web_ui("127.0.0.1", 0, delayed_start=True)  # never listens
    yield environment
    environment.runner.quit()


@pytest.fixture
def live(env):
    return webui.attach(env, LiveStats())


def test_stats_requests_carries_llm_rows_for_both_tabs(env, live):
    live.add([_record(i, ttft_ms=40.0 + i, gap_ms=7.25) for i in range(20)])
    live.add([_record(99, 0, 0, status="error")])
    report = env.web_ui.app.test_client().get("/stats/requests").get_json()
    assert "stats" in report  # Locust's own payload is intact
    tables = {t["key"]: t["data"] for t in report["extended_stats"]}
    assert set(tables) == {webui.TAB_KEY, webui.RECENT_TAB_KEY}
    chat, total = tables[webui.TAB_KEY]
    assert (chat["name"], total["name"]) == ("ChatUser", "Aggregated")
    assert total["requests"] == 21 and total["failed"] == 1
    assert total["median_ttft_ms"] == pytest.approx(49.5, rel=0.01)
    assert total["median_itl_ms"] == pytest.approx(7.25, abs=0.01)  # 2 decimals, not Locust's 7
    assert total["median_tpot_ms"] == pytest.approx(7.25, abs=0.01)
    # Every column the table declares is present in every row.
    for key, (_, columns) in webui.TABLES.items():
        for row in tables[key]:
            assert set(row) == {k for k, _, _ in columns}


def test_template_args_declare_the_tabs_on_the_main_page(env, live):
    client = env.web_ui.app.test_client()
    html = client.get("/").get_data(as_text=True)
    match = re.search(r"window\.templateArgs = (\{.*?\})\s*\n", html)
    assert match, "the page embeds its template arguments"
    args = json.loads(match.group(1))
    assert {"title": "LLM", "key": "llm"} in args["extended_tabs"]
    (table,) = [t for t in args["extended_tables"] if t["key"] == "llm"]
    titles = [c["title"] for c in table["structure"]]
    assert "TTFT p99 ms" in titles and "ITL p50 ms" in titles and "Output tok/s" in titles
    assert args["extended_csv_files"][0]["href"] == "./stats/llm/csv"


def test_csv_and_json_routes_hold_every_field(env, live):
    live.add([_record(i, ttft_ms=30.0, gap_ms=5.0) for i in range(5)])
    client = env.web_ui.app.test_client()
    response = client.get("/stats/llm/csv")
    assert response.mimetype == "text/csv"
    assert "attachment" in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert [r["name"] for r in rows] == ["ChatUser", "Aggregated"]
    assert float(rows[-1]["p95_itl_ms"]) == pytest.approx(5.0, rel=0.01)
    assert rows[-1]["count_itl"] == "45"
    as_json = client.get("/stats/llm").get_json()
    assert as_json[-1]["p99_ttft_ms"] == pytest.approx(30.0, rel=0.01)


def test_empty_values_stay_empty_not_zero(env, live):
    report = env.web_ui.app.test_client().get("/stats/requests").get_json()
    (total,) = {t["key"]: t["data"] for t in report["extended_stats"]}[webui.TAB_KEY]
    assert total["requests"] == 0
    assert total["median_ttft_ms"] is None  # the UI renders null as blank


def test_reset_button_and_new_test_start_reset_live_stats(env, live):
    client = env.web_ui.app.test_client()
    live.add([_record(i, 30.0, 5.0) for i in range(3)])
    assert client.post("/stats/reset").status_code == 200
    assert live.requests == 0
    live.add([_record(i, 30.0, 5.0) for i in range(3)])
    env.events.test_start.fire(environment=env)
    assert live.requests == 0


def test_reset_stats_option_resets_after_spawning(env, live):
    live.add([_record(1, 30.0, 5.0)])
    env.events.spawning_complete.fire(user_count=1)
    assert live.requests == 1  # --reset-stats not given
    env.reset_stats = True
    env.events.spawning_complete.fire(user_count=1)
    assert live.requests == 0


def test_install_skips_processes_without_a_web_ui():
    environment = Environment(user_classes=[_IdleUser], events=Events())
    environment.create_local_runner()
    try:
        assert webui.install(environment) is None
    finally:
        environment.runner.quit()


def test_extended_stats_keeps_aggregated_when_truncating():
    live = LiveStats()
    live.add([{**_record(i, 10.0, 1.0), "user_class": f"U{i:04d}"} for i in range(600)])
    (table, _) = webui.extended_stats(live.rows(now=T0 + 700))
    assert len(table["data"]) == webui.MAX_ROWS
    assert table["data"][-1]["name"] == "Aggregated"


def test_routes_follow_web_base_path(monkeypatch):
    monkeypatch.setattr("sys.argv", ["locust"])
    environment = Environment(user_classes=[_IdleUser], events=Events())
    environment.create_local_runner()
    environment.create_web_ui("127.0.0.1", 0, web_base_path="/locust", delayed_start=True)
    try:
        live = webui.attach(environment, LiveStats())
        live.add([_record(1, 30.0, 5.0)])
        client = environment.web_ui.app.test_client()
        assert client.get("/locust/stats/llm").get_json()[-1]["requests"] == 1
        assert client.get("/locust/stats/llm/csv").status_code == 200
        assert client.get("/locust/stats/llm/timeline").get_json()["points"] == []
        assert client.get("/locust/vprof/static/llm-charts.js").status_code == 200
        assert "./vprof/static/llm-charts.js" in client.get("/locust/").get_data(as_text=True)
        report = client.get("/locust/stats/requests").get_json()
        assert {t["key"] for t in report["extended_stats"]} == set(webui.TABLES)
    finally:
        environment.runner.quit()


# -- the LLM charts and the LLM section of Locust's report ----------------------------------


@pytest.fixture
def charts(env):
    live, timeline = LiveStats(), Timeline(interval_s=5.0, lag_s=2.0)
    webui.attach(env, live, timeline)
    return live, timeline


def test_timeline_route_serves_points_from_since_and_refuses_a_bad_since(env, charts):
    _, timeline = charts
    t0 = math.floor(time.time() / 5) * 5 - 100  # the route asks the clock what has ended
    timeline.add([_record(i, ttft_ms=40.0, gap_ms=7.0, t0=t0) for i in range(30)])
    client = env.web_ui.app.test_client()
    whole = client.get("/stats/llm/timeline").get_json()
    assert whole["interval_s"] == 5.0 and whole["generation"] == timeline.generation
    ts = [p["t"] for p in whole["points"]]
    assert ts == [t0 + 5 * k for k in range(6)]
    assert whole["points"][0]["median_ttft_ms"] == pytest.approx(40.0, rel=0.01)
    recent = client.get(f"/stats/llm/timeline?since={t0 + 20}").get_json()
    assert [p["t"] for p in recent["points"]] == [t for t in ts if t >= t0 + 20]
    for bad in ("soon", "nan", "inf"):
        response = client.get(f"/stats/llm/timeline?since={bad}")
        assert response.status_code == 400 and b"finite number" in response.data


def test_main_page_loads_the_chart_scripts_which_are_served_offline(env, charts):
    client = env.web_ui.app.test_client()
    page = client.get("/").get_data(as_text=True)
    assert page.index("window.templateArgs") < page.index("./vprof/static/llm-charts.js")
    assert "./vprof/static/echarts.min.js" in page and "./vprof/static/llm-charts.css" in page
    assert "http" not in page[page.index("./vprof/static/llm-charts.css") - 40 :]  # no CDN
    script = client.get("/vprof/static/llm-charts.js")
    assert script.status_code == 200 and "javascript" in script.mimetype
    assert b"/stats/llm/timeline" in script.data
    echarts = client.get("/vprof/static/echarts.min.js")
    assert echarts.status_code == 200 and b'version:"6.' in echarts.data
    for name in ("live.py", "..%2Fwebui.py", "nope.js"):
        assert client.get(f"/vprof/static/{name}").status_code == 404


def test_download_report_carries_the_llm_section_after_locusts_own(env, charts):
    live, timeline = charts
    t0 = time.time() - 13  # the last records end a second ago: the report still shows them
    records = [_record(i * 0.5, ttft_ms=40.0 + i % 5, gap_ms=7.0, t0=t0) for i in range(25)]
    live.add(records)
    timeline.add(records)
    page = env.web_ui.app.test_client().get("/stats/report").get_data(as_text=True)
    assert page.index('<div id="root">') < page.index('id="vprof-llm"') < page.rindex("</body>")
    section = page[page.index('id="vprof-llm"') :]
    assert "<caption>Requests</caption>" in section and "<caption>Latency (ms)</caption>" in section
    assert "<td>Aggregated</td><td>ITL</td>" in section and "<th>p99</th>" in section
    data = json.loads(re.search(r'id="vprof-llm-data">(.*?)</script>', section).group(1))
    assert sum(p["completed"] for p in data["points"]) == 25  # every interval, test over
    assert "window.templateArgs" in page  # Locust's report is intact


def test_reset_clears_the_charts_too(env, charts):
    _, timeline = charts
    timeline.add([_record(i, 30.0, 5.0) for i in range(3)])
    generation = timeline.generation
    assert env.web_ui.app.test_client().post("/stats/reset").status_code == 200
    assert timeline.points(now=T0 + 100) == [] and timeline.generation == generation + 1


def test_headless_html_and_csv_get_the_llm_statistics_at_quit(tmp_path):
    from locust.html import get_html_report

    from argparse import Namespace

    from vprof.locustfiles import collect

    html_file, prefix = tmp_path / "report.html", tmp_path / "out"
    environment = Environment(user_classes=[_IdleUser], events=Events())
    environment.parsed_options = Namespace(html_file=str(html_file), csv_prefix=str(prefix))
    environment.create_local_runner()
    try:
        live = webui.install(environment)  # headless: no web UI, but --html and --csv
        assert live is not None and webui.install(environment) is live
        records = [_record(i, ttft_ms=50.0, gap_ms=6.0) for i in range(12)]
        collect.collector(environment).add(records)  # as the collector hands records on
        assert live.requests == 12
        html_file.write_text(get_html_report(environment), encoding="utf-8")  # Locust's part
        environment.events.quit.fire(exit_code=0)
    finally:
        environment.runner.quit()
    page = html_file.read_text(encoding="utf-8")
    assert page.count('id="vprof-llm"') == 1 and "window.templateArgs" in page
    counts = re.search(r"<tr><td>Aggregated</td>(.*?)</tr>", page).group(1)
    assert counts.startswith('<td class="n">12</td>')  # requests
    ttft = re.search(r"<tr><td>Aggregated</td><td>TTFT</td>(.*?)</tr>", page).group(1)
    assert ttft.startswith('<td class="n">50.00</td>')  # p50
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out_llm_stats.csv").read_text())))
    assert rows[-1]["name"] == "Aggregated" and rows[-1]["requests"] == "12"
    assert float(rows[-1]["median_itl_ms"]) == pytest.approx(6.0, rel=0.01)


def test_headless_without_html_or_csv_keeps_no_live_statistics():
    from argparse import Namespace

    environment = Environment(user_classes=[_IdleUser], events=Events())
    environment.parsed_options = Namespace(html_file=None, csv_prefix=None)
    environment.create_local_runner()
    try:
        assert webui.install(environment) is None  # vprof bench: no cost in the load generator
    finally:
        environment.runner.quit()
