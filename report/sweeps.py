"""Ladders: each sweep's rungs, its recommendation and the runs behind them.

A sweep folder's ``sweep.json`` says what was climbed and what was recommended. Without one,
a profile measured at two or more offered loads is read as a load ladder, and its answer is
the capacity plan's (with ``--slo``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.report.inputs import Sweep

# The columns a ladder's table leads with; others follow in the manifest's order.
_LEAD = (
    "rung",
    K.OFFERED_LOAD,
    K.OFFERED_LOAD_UNIT,
    "state",
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    K.P95_TPOT_MS,
    K.P95_ITL_MS,
    K.NUM_PREEMPTIONS,
    K.MAX_KV_CACHE_USAGE_PERC,
    K.FAILED,
    "oom",
    "note",
)
# What a ladder read from offered loads shows of each level's summary.
_LEVEL_COLUMNS = (
    K.STATE,
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    K.P95_TPOT_MS,
    K.ERROR_RATE,
    K.SLO_MET,
)


def plan_answer(
    capacity_data: dict[str, Any], profile: str, run_ids: Sequence[str | None] = ()
) -> str | None:
    """What the capacity plan says for ``profile``, or for the plan that holds the runs
    ``run_ids`` (a profile that ran several workloads is planned once per workload; None
    without a plan or without either)."""
    if capacity_data.get("plan") is None:
        return None
    mine = {r for r in run_ids if r}
    entry = next((p for p in capacity_data["profiles"] if p["profile"] == profile), None) or next(
        (
            p
            for p in capacity_data["profiles"]
            if mine & {lv.get("run_id") for lv in p.get("levels") or ()}
        ),
        None,
    )
    if entry is None:
        return None
    profile = str(entry["profile"])
    if entry.get("message"):
        return str(entry["message"])
    if entry.get("sustainable_rps") is not None:
        return (
            f"{profile}: sustainable {entry['sustainable_rps']:.2f} req/s per replica "
            f"({entry['binding']} binds); {entry['basis']}"
        )
    return f"{profile}: {entry['basis']}"


def from_manifests(
    sweeps: Sequence[Sweep],
    run_ids: dict[Path, str],
    summaries: dict[str, dict[str, Any]],
    capacity_data: dict[str, Any],
) -> list[dict[str, Any]]:
    """One entry per sweep manifest. A row whose run folder was read gains ``run_id`` and,
    from that run's summary, the load it offered and whether it met the report's SLO. A load
    sweep recommends nothing itself (its answer is a plan): the plan's answer stands in."""
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
                    for key in (K.OFFERED_LOAD, K.OFFERED_LOAD_UNIT, K.SLO_MET):
                        if row.get(key) is None and summary.get(key) is not None:
                            row[key] = summary[key]
            rows.append(row)
        units = {r.get(K.OFFERED_LOAD_UNIT) for r in rows if r.get(K.OFFERED_LOAD) is not None}
        recommendation = sweep.recommendation
        if not recommendation and sweep.kind == "load":
            ids = [r.get("run_id") for r in rows]
            recommendation = plan_answer(capacity_data, sweep.profile, ids) or _NO_PLAN
        out.append(
            {
                "source": "manifest",
                "path": str(sweep.path),
                "kind": sweep.kind,
                "profile": sweep.profile,
                "columns": _columns(rows),
                "rows": rows,
                "recommendation": recommendation,
                "x": K.OFFERED_LOAD if sweep.kind == "load" else "rung",
                "unit": units.pop() if len(units) == 1 else None,
            }
        )
    return out


_NO_PLAN = "Give --slo to find the highest level that meets it (and --rps for replicas)."


def from_load_levels(capacity_data: dict[str, Any], covered: set[str]) -> list[dict[str, Any]]:
    """Load ladders read from offered loads, for profiles no manifest already covers."""
    out = []
    for entry in capacity_data["profiles"]:
        levels = [lv for lv in entry["levels"] if lv.get(K.OFFERED_LOAD) is not None]
        loads = {(lv[K.OFFERED_LOAD], lv.get(K.OFFERED_LOAD_UNIT)) for lv in levels}
        if len(loads) < 2 or not entry.get("offered_unit"):
            continue
        if all(lv["run_id"] in covered for lv in levels):
            continue
        rows = [
            {
                "rung": f"{lv[K.OFFERED_LOAD]:g} {lv.get(K.OFFERED_LOAD_UNIT) or ''}".strip(),
                "run": lv["run"],
                "run_id": lv["run_id"],
                K.OFFERED_LOAD: lv[K.OFFERED_LOAD],
                **{key: lv.get(key) for key in _LEVEL_COLUMNS},
            }
            for lv in levels
        ]
        out.append(
            {
                "source": "offered load",
                "path": None,
                "kind": "load",
                "profile": entry["profile"],
                "columns": _columns(rows),
                "rows": rows,
                "recommendation": plan_answer(capacity_data, entry["profile"]) or _NO_PLAN,
                "x": K.OFFERED_LOAD,
                "unit": entry.get("offered_unit"),
            }
        )
    return out


def _columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    present = list(dict.fromkeys(k for row in rows for k in row))
    hidden = {"run_id", "client_limit"}  # the recommendation says why a rung was left out
    lead = [k for k in _LEAD if k in present]
    return lead + [k for k in present if k not in lead and k not in hidden]
