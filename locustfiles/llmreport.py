"""The LLM statistics in Locust's own outputs: a section of its HTML report, and a CSV.

Locust's HTML report (``--html``, and the web UI's Download Report) leaves out extended tabs
and offers no template hook, so this module writes an "LLM statistics" section into the
generated page: the table of the LLM tab over the whole test and the LLM charts over time,
drawn offline by the same script as the web UI's charts, with Apache ECharts (vendored in
``vprof.report``'s ``static/``) inline. Locust writes ``--html`` before it fires ``quit``, so
a ``quit`` listener adds the section to the finished file; ``--csv PREFIX`` gains
``PREFIX_llm_stats.csv`` beside Locust's ``PREFIX_stats.csv``.

The figures come from :class:`~vprof.locustfiles.live.LiveStats` and
:class:`~vprof.locustfiles.live.Timeline`, fed with the full-precision records (within 1 %
of the offline summary); Locust's own tables above the section count each request once.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import stat_key
from vprof.locustfiles.live import METRICS, PERCENTILES, LiveStats, Timeline, percentile_key

log = logging.getLogger("vprof")

SECTION_ID = "vprof-llm"
DATA_ID = "vprof-llm-data"
STATIC_DIR = Path(__file__).resolve().parent / "static"
CHARTS_JS = "llm-charts.js"
CHARTS_CSS = "llm-charts.css"
ECHARTS_JS = "echarts.min.js"
_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}

# (row key, column title, decimals); None keeps a value as it is. Whole-test figures: the
# report is read after the test, when the web UI tab's "current" columns mean nothing.
COUNT_COLUMNS: list[tuple[str, str, int | None]] = [
    ("name", "Name", None),
    (K.REQUESTS, "Requests", None),
    (K.COMPLETED, "Completed", None),
    (K.FAILED, "Fails", None),
    (K.CANCELLED, "Cancelled", None),
    (K.REQUEST_THROUGHPUT, "Req/s", 2),
    (K.OUTPUT_THROUGHPUT, "Output tok/s", 1),
    (K.TOTAL_OUTPUT_TOKENS, "Output tokens", None),
]
# The latency table has a row per group and metric: (statistic, column title); each cell is
# the row's ``stat_key(statistic, metric)``, and "count" the row's number of values.
LATENCY_COLUMNS: list[tuple[str, str]] = [
    *[(percentile_key(p), f"p{p}") for p in PERCENTILES],
    ("mean", "mean"),
    ("max", "max"),
    ("count", "values"),
]


def _latency_key(stat: str, metric: str) -> str:
    return f"count_{metric}" if stat == "count" else stat_key(stat, metric)


def static_path(name: str) -> Path:
    """Where a static file of the LLM charts lives (ECharts is ``vprof.report``'s copy)."""
    if name == ECHARTS_JS:
        # Found without importing vprof.report, which would pull the analysis stack in here.
        spec = find_spec("vprof.report")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("vprof.report (which holds the vendored ECharts) is missing")
        return Path(next(iter(spec.submodule_search_locations))) / "static" / ECHARTS_JS
    if name not in (CHARTS_JS, CHARTS_CSS):
        raise FileNotFoundError(name)
    return STATIC_DIR / name


def rows_csv(rows: list[dict[str, Any]]) -> str:
    """All row fields as CSV, Aggregated last; empty cells where a value is missing."""
    buffer = io.StringIO()
    if rows:
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buffer.getvalue()


def timeline_payload(
    timeline: Timeline, now: float | None = None, since: float | None = None
) -> dict[str, Any]:
    """What the charts draw: the interval, a generation that changes on reset, the points."""
    return {
        "interval_s": timeline.interval_s,
        "generation": timeline.generation,
        "points": timeline.points(now=now, since=since),
    }


def _cell(value: Any, decimals: int | None) -> tuple[str, bool]:
    """A table cell's text, and whether it is a number (right-aligned)."""
    if value is None:
        return "–", True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value), False
    if isinstance(value, float) and decimals is None:
        decimals = 2
    if isinstance(value, int) or decimals is None:
        return f"{value:,}", True
    return f"{value:,.{decimals}f}", True


def _table(head: list[str], body: list[list[tuple[str, bool]]], caption: str, kind: str) -> str:
    cells = "".join(f"<th>{html.escape(title)}</th>" for title in head)
    lines = []
    for row in body:
        tds = "".join(
            (
                f'<td class="n">{html.escape(text)}</td>'
                if numeric
                else f"<td>{html.escape(text)}</td>"
            )
            for text, numeric in row
        )
        lines.append(f"<tr>{tds}</tr>")
    return (
        f'<div class="vprof-table-wrap"><table class="vprof-llm-table vprof-llm-{kind}"><caption>'
        f"{html.escape(caption)}</caption><thead><tr>{cells}</tr></thead>"
        f"<tbody>{''.join(lines)}</tbody></table></div>"
    )


def _tables(rows: list[dict[str, Any]]) -> str:
    """Requests per group, then latency percentiles (ms) per group and metric."""
    counts = _table(
        [title for _, title, _ in COUNT_COLUMNS],
        [[_cell(row.get(key), dec) for key, _, dec in COUNT_COLUMNS] for row in rows],
        "Requests",
        "requests",
    )
    latency_rows = []
    for row in rows:
        for _, metric in METRICS:
            cells = [_cell(row.get("name"), None), _cell(_TITLES[metric], None)]
            cells += [_cell(row.get(_latency_key(stat, metric)), 2) for stat, _ in LATENCY_COLUMNS]
            latency_rows.append(cells)
    latency = _table(
        ["Name", "Metric", *[title for _, title in LATENCY_COLUMNS]],
        latency_rows,
        "Latency (ms)",
        "latency",
    )
    return counts + "\n" + latency


def _script_json(data: Any) -> str:
    # Inside <script>, "</" could end the element early; JSON allows "<\/" for "</".
    return json.dumps(data, allow_nan=False).replace("</", "<\\/")


def section(
    live: LiveStats, timeline: Timeline, *, records_path: str = "", now: float | None = None
) -> str:
    """The "LLM statistics" section: the table, the charts, their data and their scripts."""
    now = time.time() if now is None else now
    rows = live.rows(now=now)
    # Every interval up to now: the test is over, nothing is still on its way.
    payload = timeline_payload(timeline, now=now + timeline.lag_s + timeline.interval_s)
    source = f" (records: <code>{html.escape(records_path)}</code>)" if records_path else ""
    percentiles = ", ".join(f"p{p}" for p in PERCENTILES)
    parts = [
        f'<section id="{SECTION_ID}" class="vprof-llm vprof-report">',
        "<h2>LLM statistics</h2>",
        '<p class="vprof-note">Computed by vprof from its full-precision per-request records'
        f"{source}, within 1 % of the offline summary: TTFT, TPOT, ITL and E2E at {percentiles}"
        " over the whole test; Req/s and Output tok/s count completed requests. Locust's tables"
        " above count each request once, with its whole stream's duration.</p>",
        _tables(rows),
        '<p class="vprof-note">Over time: each point covers the requests that finished in its '
        f"{timeline.interval_s:g} s interval; requests in flight is the mean over the interval."
        "</p>",
        '<div id="vprof-llm-charts" class="vprof-llm-charts"></div>',
        f'<script type="application/json" id="{DATA_ID}">{_script_json(payload)}</script>',
        f"<style>{static_path(CHARTS_CSS).read_text(encoding='utf-8')}</style>",
        f"<script>{static_path(ECHARTS_JS).read_text(encoding='utf-8')}</script>",
        f"<script>{static_path(CHARTS_JS).read_text(encoding='utf-8')}</script>",
        "</section>",
    ]
    return "\n".join(parts)


def add_section(report_html: str, llm_section: str) -> str:
    """Locust's report page with ``llm_section`` after Locust's own content."""
    at = report_html.rfind("</body>")
    if at < 0:
        return report_html + llm_section
    return report_html[:at] + llm_section + "\n" + report_html[at:]


def wanted(environment: Any) -> bool:
    """Whether this Locust process writes ``--html`` or ``--csv`` files at the end."""
    options = getattr(environment, "parsed_options", None)
    return bool(getattr(options, "html_file", None) or getattr(options, "csv_prefix", None))


def install(environment: Any, live: LiveStats, timeline: Timeline) -> None:
    """At the end of the test, add the LLM section to ``--html`` and write the LLM CSV."""
    if not wanted(environment):
        return
    options = environment.parsed_options

    def on_quit(**_kw: Any) -> None:
        records = _records_path(environment)
        html_file = getattr(options, "html_file", None)  # {u}/{r}/{t} already filled in
        if html_file and Path(html_file).is_file():
            path = Path(html_file)
            text = add_section(
                path.read_text(encoding="utf-8"), section(live, timeline, records_path=records)
            )
            path.write_text(text, encoding="utf-8")
            log.info("vprof: added the LLM statistics to %s", path)
        prefix = getattr(options, "csv_prefix", None)
        if prefix:
            out = Path(f"{prefix}_llm_stats.csv")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(rows_csv(live.rows()), encoding="utf-8")

    environment.events.quit.add_listener(on_quit)


def _records_path(environment: Any) -> str:
    from vprof.locustfiles.collect import collector

    col = collector(environment)
    run_dir = getattr(col, "run_dir", None)
    return str(run_dir.records) if run_dir is not None else ""


__all__ = [
    "COUNT_COLUMNS",
    "LATENCY_COLUMNS",
    "add_section",
    "install",
    "rows_csv",
    "section",
    "timeline_payload",
]
