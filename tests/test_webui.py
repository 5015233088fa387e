"""The LLM tabs in Locust's web UI, driven in-process through Flask's test client."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sys

import pytest

if "locust" not in sys.modules:
    # Earlier test modules in a full session have imported ssl (requests, aiohttp), and gevent
    # patching ssl after that recurses forever (locust.md §6.1). These tests need no patching:
    # they use Flask's test client, no sockets. Restore the variable at once so the Locust
    # subprocesses other tests start are patched as usual.
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        import locust  # noqa: F401
    finally:
        del os.environ["LOCUST_SKIP_MONKEY_PATCH"]

from locust import User, task  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.event import Events  # noqa: E402

from vprof.locustfiles import webui  # noqa: E402
from vprof.locustfiles.live import LiveStats  # noqa: E402
from vprof.records import RequestRecord  # noqa: E402

T0 = 1_800_000_000.0


class _IdleUser(User):
    @task
    def nothing(self) -> None:  # never run: these tests start no users
        pass


def _record(i: int, ttft_ms: float, gap_ms: float, status: str = "ok") -> dict:
    rec = RequestRecord(request_id=str(i), user_class="ChatUser", sent_at=T0 + i, status=status)
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
        report = client.get("/locust/stats/requests").get_json()
        assert {t["key"] for t in report["extended_stats"]} == set(webui.TABLES)
    finally:
        environment.runner.quit()
