"""The LLM tabs in Locust's web UI: live TTFT, TPOT, ITL and E2E percentiles and tokens/s.

Uses Locust's documented extension points, no React of our own: ``extended_tabs`` and
``extended_tables`` in the template arguments describe the tables, and an ``after_request``
hook adds their rows as ``extended_stats`` to the ``/stats/requests`` JSON the UI polls every
two seconds. The rows come from a :class:`~vprof.locustfiles.live.LiveStats` fed by the record
collector (``vprof.locustfiles.collect.subscribe``), so they are computed from vprof's
full-precision records, not from Locust's rounded response-time buckets.

Routes (under ``--web-base-path`` and ``--web-login`` like Locust's own):

- ``/stats/llm``: the rows as JSON;
- ``/stats/llm/csv``: the rows as CSV (also linked from the Download Data tab).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from vprof.locustfiles.live import PERCENTILES, LiveStats, percentile_key

TAB_KEY = "llm"
RECENT_TAB_KEY = "llm-recent"
MAX_ROWS = 500  # Locust truncates its own tables here so the UI stays responsive
_ATTR = "vprof_live_stats"  # where install() keeps its LiveStats on the Environment

# (row key, column title, decimals); None keeps a column's value as it is.
_COUNT_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("name", "Name", None),
    ("requests", "Requests", None),
    ("failed", "Fails", None),
    ("current_request_throughput", "Req/s", 2),
    ("current_output_throughput", "Output tok/s", 1),
)
_RECENT_COUNT_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("name", "Name", None),
    ("current_requests", "Requests", None),
    ("current_failed", "Fails", None),
    ("current_request_throughput", "Req/s", 2),
    ("current_output_throughput", "Output tok/s", 1),
)
_LATENCY_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("ttft", "TTFT", 1),
    ("tpot", "TPOT", 2),
    ("itl", "ITL", 2),
)


def _percentile_columns(prefix: str) -> list[tuple[str, str, int]]:
    columns = []
    for metric, title, decimals in _LATENCY_COLUMNS:
        for p in PERCENTILES:
            key = f"{prefix}{percentile_key(p)}_{metric}_ms"
            columns.append((key, f"{title} p{p} ms", decimals))
    for p in (50, 99):
        columns.append((f"{prefix}{percentile_key(p)}_e2el_ms", f"E2E p{p} ms", 0))
    return columns


# "LLM": cumulative percentiles since the test (or stats) started, like Locust's Statistics
# tab; "LLM (last 10 s)": the same columns over the recent window, like its charts.
TABLES: dict[str, tuple[str, list[tuple[str, str, int | None]]]] = {
    TAB_KEY: ("LLM", [*_COUNT_COLUMNS, *_percentile_columns("")]),
    RECENT_TAB_KEY: (
        "LLM (last 10 s)",
        [*_RECENT_COUNT_COLUMNS, *_percentile_columns("current_")],
    ),
}


def template_args() -> dict[str, Any]:
    """The ``extended_*`` template arguments describing the LLM tabs and the CSV link."""
    return {
        "extended_tabs": [{"title": title, "key": key} for key, (title, _) in TABLES.items()],
        "extended_tables": [
            {"key": key, "structure": [{"key": k, "title": t} for k, t, _ in columns]}
            for key, (_, columns) in TABLES.items()
        ],
        # Relative, so it follows --web-base-path as Locust's own download links do.
        "extended_csv_files": [{"href": "./stats/llm/csv", "title": "Download LLM statistics CSV"}],
    }


def extended_stats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for each LLM table, rounded for display (``None`` stays empty, not 0)."""
    shown = rows[-MAX_ROWS:]  # keep Aggregated, which is last
    out = []
    for key, (_, columns) in TABLES.items():
        data = []
        for row in shown:
            cells = {}
            for k, _, decimals in columns:
                value = row.get(k)
                if decimals is not None and isinstance(value, float):
                    value = round(value, decimals) if decimals else round(value)
                cells[k] = value
            data.append(cells)
        out.append({"key": key, "data": data})
    return out


def rows_csv(rows: list[dict[str, Any]]) -> str:
    """All row fields as CSV, Aggregated last; empty cells where a value is missing."""
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def _locust_base_path(app: Any) -> str:
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "locust.request_stats":
            return rule.rule.removesuffix("/stats/requests")
    return ""


def install(environment: Any) -> LiveStats | None:
    """Add the LLM tabs to ``environment``'s web UI and feed them from the record collector.

    Call it from an ``init`` listener. Does nothing (returns None) where there is no web UI
    or on a worker, whose records go to the master; calling it twice returns the same
    LiveStats. Live figures reset with Locust's stats (the Reset button, ``--reset-stats``
    after spawning, and a new test start).
    """
    web_ui = getattr(environment, "web_ui", None)
    if web_ui is None:
        return None
    from locust.runners import WorkerRunner

    if isinstance(environment.runner, WorkerRunner):
        return None
    existing = getattr(environment, _ATTR, None)
    if existing is not None:
        return existing

    from vprof.locustfiles.collect import subscribe

    live = attach(environment, LiveStats())
    subscribe(environment, live.add)
    return live


def attach(environment: Any, live: LiveStats) -> LiveStats:
    """Show ``live`` in ``environment.web_ui`` (tabs, rows, routes, resets); feed it yourself.

    :func:`install` is this plus the subscription to the record collector.
    """
    from flask import Response, jsonify, request

    web_ui = environment.web_ui
    setattr(environment, _ATTR, live)

    events = environment.events
    events.reset_stats.add_listener(live.reset)
    events.test_start.add_listener(lambda **_kw: live.reset())

    def on_spawning_complete(**_kw: Any) -> None:
        if environment.reset_stats:  # mirror Locust's --reset-stats
            live.reset()

    events.spawning_complete.add_listener(on_spawning_complete)

    # Locust merges its own keys over these on every render, so they survive.
    web_ui.template_args.update(template_args())
    app = web_ui.app

    @app.after_request
    def add_llm_rows(response: Response) -> Response:
        # Match the view, not the path, so --web-base-path needs no special case.
        if request.endpoint != "locust.request_stats" or response.status_code != 200:
            return response
        report = json.loads(response.get_data())
        report["extended_stats"] = extended_stats(live.rows())
        response.set_data(json.dumps(report))
        return response

    # Serve beside Locust's own routes, which sit under --web-base-path when one is given.
    base_path = _locust_base_path(app)

    @app.route(f"{base_path}/stats/llm")
    @web_ui.auth_required_if_enabled
    def llm_stats() -> Response:
        return jsonify(live.rows())

    @app.route(f"{base_path}/stats/llm/csv")
    @web_ui.auth_required_if_enabled
    def llm_stats_csv() -> Response:
        response = Response(rows_csv(live.rows()), mimetype="text/csv")
        response.headers["Content-Disposition"] = "attachment; filename=vprof_llm_stats.csv"
        return response

    return live


__all__ = ["TABLES", "attach", "extended_stats", "install", "rows_csv", "template_args"]
