"""The report's data → one self-contained HTML page (tables in HTML, charts drawn by ECharts).

Everything the page needs is inline: the stylesheet, Apache ECharts (vendored in
``static/``, see ``static/VENDORED.md``), the drawing script and the data itself, as JSON in
``<script type="application/json" id="vprof-data">``. A Content-Security-Policy forbids every
request, so the page works offline and a test can prove it makes none.
"""

from __future__ import annotations

import json
import math
import re
from importlib.resources import files
from typing import Any

from vprof.analysis.keys import REPLICA_TABLE_KEYS, stat_key
from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.run import replica_rows

SECTIONS = (
    ("overview", "Runs"),
    ("capacity", "Capacity"),
    ("cost", "Cost"),
    ("distributions", "Distributions"),
    ("timelines", "Timelines"),
    ("sweeps", "Sweeps"),
    ("comparisons", "Comparisons"),
    ("provenance", "Provenance"),
)
OVERVIEW_COLUMNS = (
    K.RUN,
    K.PROFILE,
    K.WORKLOAD,
    K.TRAFFIC,
    K.STATE,
    K.COMPLETED,
    K.FAILED,
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.P95_TTFT_MS,
    K.P95_TPOT_MS,
    K.P95_ITL_MS,
    stat_key("p95", "e2el"),
    K.CLIENT_ERROR,
    K.SLO_MET,
    K.LOADGEN_MAX_CPU_PERCENT,
)
PLAN_COLUMNS = (
    "profile",
    "replicas",
    "sustainable_rps",
    "max_measured_rps",
    "binding",
    "levels",
    "basis",
)
EVIDENCE_COLUMNS = ("profile", "run", "rps", "state", "slo", "checks")
COST_COLUMNS = (
    "profile",
    "gpus_per_replica",
    "parallelism",
    "replica_cost_per_hour",
    "sustainable_rps",
    "output_tokens_per_request",
    "cost_per_million_output_tokens",
    "replicas",
    "plan_cost_per_hour",
    "plan_cost_per_million_output_tokens",
)
COMPARE_COLUMNS = (
    "metric",
    "baseline_value",
    "run",
    "value",
    "diff_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
)
PERCENTILES = ("50", "90", "95", "99", "99.9")
_LABELS = {
    K.REQUEST_THROUGHPUT: "req/s",
    K.OUTPUT_THROUGHPUT: "output tok/s",
    "sustainable_rps": "sustainable req/s",
    "max_measured_rps": "max measured req/s",
    "rps": "req/s",
    K.LOADGEN_MAX_CPU_PERCENT: "load gen. peak CPU %",
    "diff_pct": "diff %",
    "ci_low_pct": "CI low %",
    "ci_high_pct": "CI high %",
    K.GPUS_PER_REPLICA: "GPUs per replica",
    "replica_cost_per_hour": "per replica-hour",
    "output_tokens_per_request": "output tokens per request",
    "cost_per_million_output_tokens": "per 1M output tokens",
    "plan_cost_per_hour": "plan per hour",
    "plan_cost_per_million_output_tokens": "plan per 1M output tokens",
}


def _static(name: str) -> str:
    return (files("vprof.report") / "static" / name).read_text(encoding="utf-8")


def num(value: Any) -> str:
    """A table cell: numbers to a readable precision, None as a dash, booleans as yes/no."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value in ("inf", "-inf"):
        return "∞" if value == "inf" else "−∞"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.1f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def plain(value: Any) -> str:
    """A value as its file holds it (provenance): numbers unrounded, booleans as yes/no."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return num(value) if isinstance(value, bool) or value is None else str(value)


def _label(column: str) -> str:
    return _LABELS.get(column, column.replace("_", " "))


def _cell_class(value: Any, column: str = "") -> str:
    if isinstance(value, bool):
        return ("met" if value else "missed") if column == K.SLO_MET else ""
    if value == "missed":
        return "missed"
    if isinstance(value, (int, float)) or value in ("inf", "-inf"):
        return "n"
    return ""


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("vprof.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["num"] = num
    env.filters["plain"] = plain
    env.filters["label"] = _label
    env.filters["cell_class"] = _cell_class
    return env


def _bytecode_cache() -> Any:
    """Jinja's cache of compiled templates in a folder of the user's own under the system temp
    dir (None when there is none to be had): compiling the report's templates took 0.1 s of
    every ``vprof report``, loading them from the cache a few ms. An entry is used only while
    its template's source is unchanged."""
    import jinja2

    class Cache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: Any) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass  # a cache that cannot be written to only leaves the next report slower

    try:
        return Cache()
    except (OSError, RuntimeError):  # no temp dir of this user's own
        return None


def _script_json(data: dict[str, Any]) -> str:
    """JSON that cannot end its <script> element early (every ``<`` is escaped)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _view(data: dict[str, Any]) -> dict[str, Any]:
    """What the template shows besides the data: table rows and a few facts about them."""
    runs = data["runs"]
    overview = [{**run["summary"], K.RUN: run["label"]} for run in runs]
    columns = [c for c in OVERVIEW_COLUMNS if any(row.get(c) is not None for row in overview)]
    capacity = data["capacity"]
    levels = [lv for p in capacity["profiles"] for lv in p["levels"]]
    units = sorted({str(lv[K.OFFERED_LOAD_UNIT]) for lv in levels if lv.get(K.OFFERED_LOAD_UNIT)})
    by_id = {run["id"]: run for run in runs}
    percentile_rows = []
    for group in data["distribution_groups"]:
        rows = []
        for run_id in group["run_ids"]:
            run = by_id[run_id]
            for metric, dist in run["distributions"].items():
                row = {"run": run["label"], "metric": metric, "values": dist["n"]}
                row |= {f"p{q}": dist["percentiles"].get(q) for q in PERCENTILES}
                rows.append(row)
        percentile_rows.append(rows)
    replicas = replica_rows([run["label"] for run in runs], [run["summary"] for run in runs])
    plan = capacity.get("plan")
    plan_columns = [c for c in PLAN_COLUMNS if plan and any(c in r for r in plan["rows"])]
    return {
        "sections": SECTIONS,
        "overview": overview,
        "overview_columns": columns,
        "offered_units": units,
        "any_offered": bool(units),
        "single_levels": bool(capacity["profiles"])
        and all(len(p["levels"]) < 2 for p in capacity["profiles"]),
        "replica_rows": replicas,
        "replica_columns": ("run", "replica", *REPLICA_TABLE_KEYS),
        "plan_columns": plan_columns,
        "evidence_columns": EVIDENCE_COLUMNS,
        "cost_columns": COST_COLUMNS,
        "compare_columns": COMPARE_COLUMNS,
        "percentile_rows": percentile_rows,
        "percentile_columns": ["run", "metric", "values", *(f"p{q}" for q in PERCENTILES)],
        "any_sampled": any(
            d["drawn_from"] < d["n"] for run in runs for d in run["distributions"].values()
        ),
        "runs_by_id": by_id,
    }


def render(data: dict[str, Any]) -> str:
    """The HTML page for ``data`` (``vprof.report.build.build_data``'s output)."""
    from markupsafe import Markup

    echarts_js = _static("echarts.min.js")
    version = re.search(r'version:"(\d+\.\d+\.\d+)"', echarts_js)
    template = _environment().get_template("report.html.j2")
    return template.render(
        data=data,
        css=Markup(_static("report.css")),
        report_js=Markup(_static("report.js")),
        echarts_js=Markup(echarts_js),
        echarts_version=version.group(1) if version else "",
        echarts_notice=_static("echarts.NOTICE").replace("--", "- -"),
        data_json=Markup(_script_json(data)),
        **_view(data),
    )
