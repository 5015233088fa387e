"""The LLM tabs in Locust's web UI: live TTFT, TPOT, ITL and E2E percentiles, tokens/s, charts.

Uses Locust's documented extension points, no React of our own: ``extended_tabs`` and
``extended_tables`` in the template arguments describe the tables, and an ``after_request``
hook adds their rows as ``extended_stats`` to the ``/stats/requests`` JSON the UI polls every
two seconds. The rows come from a :class:`~vprof.locustfiles.live.LiveStats` fed by the record
collector (``vprof.locustfiles.collect.subscribe``), so they are computed from vprof's
full-precision records, not from Locust's rounded response-time buckets.

The LLM tab also shows charts over time (TTFT, TPOT and ITL percentiles, output tokens/s,
requests in flight) from a :class:`~vprof.locustfiles.live.Timeline` fed the same way. Locust
offers no hook for a tab's content, so the main page gains two scripts (``static/llm-charts.js``
and the vendored Apache ECharts) that draw under the LLM tab's table while it is open, polling
``/stats/llm/timeline``. Locust's Download Report gains the LLM section of
:mod:`vprof.locustfiles.llmreport`.

Routes (under ``--web-base-path`` and ``--web-login`` like Locust's own):

- ``/stats/llm``: the rows as JSON;
- ``/stats/llm/csv``: the rows as CSV (also linked from the Download Data tab);
- ``/stats/llm/timeline?since=EPOCH_S``: the charts' points, from ``since`` on;
- ``/vprof/static/NAME``: the charts' script, stylesheet and ECharts.
"""

from __future__ import annotations

import json
import math
from typing import Any

from vprof.analysis.keys import Metric, stat_key
from vprof.analysis.keys import SummaryKey as K
from vprof.locustfiles import llmreport
from vprof.locustfiles.live import PERCENTILES, LiveStats, Timeline, percentile_key

TAB_KEY = "llm"
RECENT_TAB_KEY = "llm-recent"
MAX_ROWS = 500  # Locust truncates its own tables here so the UI stays responsive
_ATTR = "vprof_live_stats"  # where install() keeps (LiveStats, Timeline) on the Environment
# The live charts under the LLM tab; relative, so they follow --web-base-path like Locust's
# own assets. The charts script draws nothing until the LLM tab is open.
_CHART_TAGS = (
    f'<link rel="stylesheet" href="./vprof/static/{llmreport.CHARTS_CSS}">\n'
    f'<script src="./vprof/static/{llmreport.ECHARTS_JS}" defer></script>\n'
    f'<script src="./vprof/static/{llmreport.CHARTS_JS}" defer></script>\n'
)

# (row key, column title, decimals); None keeps a column's value as it is.
_COUNT_COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("name", "Name", None),
    (K.REQUESTS, "Requests", None),
    (K.FAILED, "Fails", None),
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
            key = prefix + stat_key(percentile_key(p), metric)
            columns.append((key, f"{title} p{p} ms", decimals))
    for p in (50, 99):
        columns.append((prefix + stat_key(percentile_key(p), Metric.E2EL), f"E2E p{p} ms", 0))
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


def _locust_base_path(app: Any) -> str:
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "locust.request_stats":
            return rule.rule.removesuffix("/stats/requests")
    return ""


def _tracked(environment: Any) -> tuple[LiveStats, Timeline] | None:
    return getattr(environment, _ATTR, None)


def _track(environment: Any, live: LiveStats, timeline: Timeline) -> None:
    """Keep ``live`` and ``timeline`` on ``environment`` and reset them with Locust's stats."""
    if _tracked(environment) is not None:
        return
    setattr(environment, _ATTR, (live, timeline))

    def reset(**_kw: Any) -> None:
        live.reset()
        timeline.reset()

    events = environment.events
    events.reset_stats.add_listener(reset)
    events.test_start.add_listener(reset)

    def on_spawning_complete(**_kw: Any) -> None:
        if environment.reset_stats:  # mirror Locust's --reset-stats
            reset()

    events.spawning_complete.add_listener(on_spawning_complete)


def install(environment: Any) -> LiveStats | None:
    """The LLM statistics of a master or local runner, fed from the record collector.

    Call it from an ``init`` listener. Shows them in the web UI (tabs, charts, routes, and
    the LLM section of Download Report) when there is one, and adds them to ``--html`` and
    beside ``--csv`` at the end (:mod:`vprof.locustfiles.llmreport`). Does nothing (returns
    None) on a worker, whose records go to the master, and where neither a web UI nor
    ``--html``/``--csv`` would show them; calling it twice returns the same
    LiveStats. Live figures reset with Locust's stats (the Reset button, ``--reset-stats``
    after spawning, and a new test start).
    """
    from locust.runners import WorkerRunner

    if isinstance(environment.runner, WorkerRunner):
        return None
    existing = _tracked(environment)
    if existing is not None:
        return existing[0]
    has_web_ui = getattr(environment, "web_ui", None) is not None
    if not has_web_ui and not llmreport.wanted(environment):
        return None  # headless without --html or --csv: nobody would look (vprof bench)

    from vprof.locustfiles.collect import subscribe

    live, timeline = LiveStats(), Timeline()
    _track(environment, live, timeline)
    subscribe(environment, live.add)
    subscribe(environment, timeline.add)
    if has_web_ui:
        attach(environment, live, timeline)
    llmreport.install(environment, live, timeline)
    return live


def attach(environment: Any, live: LiveStats, timeline: Timeline | None = None) -> LiveStats:
    """Show ``live`` (and ``timeline``'s charts) in ``environment.web_ui``; feed them yourself.

    Adds the tabs, the rows in ``/stats/requests``, the routes, the charts' scripts on the
    main page and the LLM section of ``/stats/report``, and resets both with Locust's stats.
    :func:`install` is this plus the subscription to the record collector.
    """
    from flask import Response, abort, jsonify, request, send_file

    timeline = timeline if timeline is not None else Timeline()
    _track(environment, live, timeline)
    web_ui = environment.web_ui
    # Locust merges its own keys over these on every render, so they survive.
    web_ui.template_args.update(template_args())
    app = web_ui.app

    @app.after_request
    def add_llm_parts(response: Response) -> Response:
        # Match the view, not the path, so --web-base-path needs no special case.
        if response.status_code != 200 or response.direct_passthrough:
            return response
        if request.endpoint == "locust.request_stats":
            report = json.loads(response.get_data())
            report["extended_stats"] = extended_stats(live.rows())
            response.set_data(json.dumps(report))
        elif request.endpoint == "locust.index" and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            at = page.rfind("</body>")
            if at >= 0:
                response.set_data(page[:at] + _CHART_TAGS + page[at:])
        elif request.endpoint == "locust.stats_report" and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            response.set_data(llmreport.add_section(page, llmreport.section(live, timeline)))
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
        response = Response(llmreport.rows_csv(live.rows()), mimetype="text/csv")
        response.headers["Content-Disposition"] = "attachment; filename=vprof_llm_stats.csv"
        return response

    @app.route(f"{base_path}/stats/llm/timeline")
    @web_ui.auth_required_if_enabled
    def llm_timeline() -> Response:
        since = request.args.get("since")
        try:
            since_s = float(since) if since else None
        except ValueError:
            since_s = None
        if since_s is not None and not math.isfinite(since_s):
            since_s = None
        if since is not None and since_s is None:
            return Response(f"since must be a finite number of seconds, not {since!r}\n", 400)
        return jsonify(llmreport.timeline_payload(timeline, since=since_s))

    @app.route(f"{base_path}/vprof/static/<name>")
    @web_ui.auth_required_if_enabled
    def llm_static(name: str) -> Response:
        try:
            path = llmreport.static_path(name)
        except FileNotFoundError:
            abort(404)
        return send_file(path, max_age=3600)

    return live


__all__ = ["TABLES", "attach", "extended_stats", "install", "template_args"]
