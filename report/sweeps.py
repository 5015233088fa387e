"""Ladders: each sweep's rungs, its recommendation and the runs behind them.

A sweep folder's ``sweep.json`` says what was climbed and what was recommended. Without one,
a profile measured at two or more offered loads is read as a load ladder, and its answer is
the capacity plan's (with ``--slo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vprof.report.inputs import Sweep

# The columns a ladder's table leads with; others follow in the manifest's order.
_LEAD = ("rung", "offered_load", "offered_load_unit", "state", "request_throughput",
         "output_throughput", "median_ttft_ms", "p95_ttft_ms", "p95_tpot_ms", "p95_itl_ms",
         "num_preemptions", "max_kv_cache_usage_perc", "failed", "oom", "note")  # fmt: skip


def from_manifests(
    sweeps: Sequence[Sweep], run_ids: dict[Path, str], summaries: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """One entry per sweep manifest. A row whose run folder was read gains ``run_id`` and,
    from that run's summary, the load it offered and whether it met the report's SLO."""
    out = []
    for sweep in sweeps:
        rows = []
        for row in sweep.rows:
            row = dict(row)
            if row.get("run"):
                found = run_ids.get((sweep.path / row["run"]).resolve())
                row["run_id"] = found
                if found is None:
                    row["note"] = ((row.get("note") or "") + " (run folder not found)").strip()
                else:
                    summary = summaries[found]
                    for key in ("offered_load", "offered_load_unit", "slo_met"):
                        if row.get(key) is None and summary.get(key) is not None:
                            row[key] = summary[key]
            rows.append(row)
        units = {r.get("offered_load_unit") for r in rows if r.get("offered_load") is not None}
        out.append(
            {
                "source": "manifest",
                "path": str(sweep.path),
                "kind": sweep.kind,
                "profile": sweep.profile,
                "columns": _columns(rows),
                "rows": rows,
                "recommendation": sweep.recommendation,
                "x": "offered_load" if sweep.kind == "load" else "rung",
                "unit": units.pop() if len(units) == 1 else None,
            }
        )
    return out


def from_load_levels(capacity_data: dict[str, Any], covered: set[str]) -> list[dict[str, Any]]:
    """Load ladders read from offered loads, for profiles no manifest already covers."""
    plan = capacity_data.get("plan")
    out = []
    for entry in capacity_data["profiles"]:
        levels = [lv for lv in entry["levels"] if lv.get("offered_load") is not None]
        loads = {(lv["offered_load"], lv.get("offered_load_unit")) for lv in levels}
        if len(loads) < 2 or not entry.get("offered_unit"):
            continue
        if all(lv["run_id"] in covered for lv in levels):
            continue
        rows = [
            {
                "rung": f"{lv['offered_load']:g} {lv.get('offered_load_unit') or ''}".strip(),
                "run": lv["run"],
                "run_id": lv["run_id"],
                "offered_load": lv["offered_load"],
                "state": lv.get("state"),
                "request_throughput": lv.get("request_throughput"),
                "output_throughput": lv.get("output_throughput"),
                "median_ttft_ms": lv.get("median_ttft_ms"),
                "p95_ttft_ms": lv.get("p95_ttft_ms"),
                "p95_tpot_ms": lv.get("p95_tpot_ms"),
                "error_rate": lv.get("error_rate"),
                "slo_met": lv.get("slo_met"),
            }
            for lv in levels
        ]
        if plan is None:
            recommendation = (
                "Give --slo to find the highest level that meets it (and --rps for replicas)."
            )
        else:
            recommendation = entry.get("message") or (
                f"{entry['profile']}: sustainable {entry['sustainable_rps']:.2f} req/s per "
                f"replica ({entry['binding']} binds); {entry['basis']}"
                if entry.get("sustainable_rps") is not None
                else f"{entry['profile']}: {entry['basis']}"
            )
        out.append(
            {
                "source": "offered load",
                "path": None,
                "kind": "load",
                "profile": entry["profile"],
                "columns": _columns(rows),
                "rows": rows,
                "recommendation": recommendation,
                "x": "offered_load",
                "unit": entry.get("offered_unit"),
            }
        )
    return out


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    present = list(dict.fromkeys(k for row in rows for k in row))
    hidden = {"run_id"}
    lead = [k for k in _LEAD if k in present]
    return lead + [k for k in present if k not in lead and k not in hidden]
