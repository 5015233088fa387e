"""Capacity and cost: each profile's load levels, ``analysis.plan``'s answer, and its price.

A profile's *levels* are its runs (as ``vprof plan`` groups them). The plan's numbers are
``Plan.rows()`` and ``Plan.evidence_rows()`` exactly as ``vprof plan --format json`` prints
them; costs multiply them by GPUs per replica (tensor × pipeline × data parallel sizes of
the profile as it ran) and the price of a GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import split_stat_key
from vprof.common.errors import ProfileError, ReportError
from vprof.report.options import ReportOptions

LATENCY_METRICS = ("ttft", "tpot", "e2el")
# What each load level carries from its summary (plus every percentile of the metrics drawn).
_LEVEL_KEYS = (
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.TOTAL_OUTPUT_TOKENS,
    K.COMPLETED,
    K.ERROR_RATE,
    K.STATE,
    K.OFFERED_LOAD,
    K.OFFERED_LOAD_UNIT,
    K.SLO_MET,
    K.LOADGEN_SATURATED,
)


def _stats(summary: dict[str, Any], metric: str) -> dict[str, Any]:
    """The metric's median and percentiles (``p95_ttft_ms``; not ``p95_session_e2el_ms``)."""
    out = {}
    for key, value in summary.items():
        split = split_stat_key(key)
        if split is not None and split[1] == metric and split[0] not in ("mean", "std"):
            out[key] = value
    return out


def _band(summary: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """A predicted level's step-time band (``forecast.pace``): [low, high] of each of the
    metrics' statistics the curves draw."""
    ranges = ((summary.get(K.FORECAST) or {}).get("pace") or {}).get("range") or {}
    drawn = {key for metric in metrics for key in _stats(summary, metric)}
    return {key: value for key, value in ranges.items() if key in drawn}


def _level(run_id: str | None, summary: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    """One load level as the curves draw it."""
    from vprof.analysis.plan import level_rate

    level = {"run_id": run_id, "run": summary.get(K.RUN)}
    level |= {k: summary.get(k) for k in _LEVEL_KEYS}
    level["rate"] = level_rate(summary)  # the plan's x: sustainable rates are on its scale
    for metric in metrics:
        level |= _stats(summary, metric)
    return level


def capacity(
    run_ids: Sequence[str],
    summaries: Sequence[dict[str, Any]],
    options: ReportOptions,
    predicted: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Levels per profile for the curves, and the plan when an SLO was given; ``predicted``
    curves (``report.forecast``: a model's summaries over the measured rates) are drawn
    beside them."""
    from vprof.analysis import plan
    from vprof.analysis.plan import plan_labels
    from vprof.analysis.run import json_safe

    metrics = list(LATENCY_METRICS)
    slo = options.slo
    if slo is not None and any(t.metric == "itl" for t in slo.targets):
        metrics.append("itl")
    by_profile: dict[str, list[dict[str, Any]]] = {}
    labels = plan_labels(summaries)
    for run_id, summary, label in zip(run_ids, summaries, labels, strict=True):
        by_profile.setdefault(label, []).append(_level(run_id, summary, metrics))
    out: dict[str, Any] = {"metrics": metrics, "profiles": [], "plan": None, "why": None}
    out["predicted"] = []
    for curve in predicted:
        drawn = {k: v for k, v in curve.items() if k != "summaries"}
        drawn["levels"] = json_safe(
            [_level(None, s, metrics) | {"band": _band(s, metrics)} for s in curve["summaries"]]
        )
        out["predicted"].append(drawn)
    result = None
    if (
        slo is not None
        and not any(t.percentile is not None for t in slo.targets)
        and (slo.max_error_rate is None)
    ):
        # goodput thresholds only (ttft=500ms): the summaries count good requests, but a plan
        # needs a distribution target to interpolate on
        out["why"] = f"{slo} has no percentile target (such as ttft_p95=500ms), so no plan"
    elif slo is not None:
        measured = [
            float(s[K.REQUEST_THROUGHPUT])
            for s in summaries
            if _positive(s.get(K.REQUEST_THROUGHPUT))
        ]
        # Without --rps the sustainable rate and binding constraint still hold (they do not
        # depend on the target); replicas are then left out.
        target = options.target_rps or (max(measured) if measured else 1.0)
        result = plan(list(summaries), target_rps=target, slo=slo, headroom=options.headroom)
        rows = json_safe(result.rows())
        if options.target_rps is None:
            for row in rows:
                row.pop("replicas", None)
                row.pop("plan", None)
        out["plan"] = {
            "target_rps": options.target_rps,
            "slo": str(slo),
            "headroom": options.headroom,
            "thresholds": [
                {
                    "key": t.key,
                    "metric": t.metric,
                    "percentile": t.percentile,
                    "threshold_ms": t.threshold_ms,
                }
                for t in slo.targets
            ],
            "max_error_rate": slo.max_error_rate,
            "rows": rows,
            "evidence": json_safe(result.evidence_rows()),
            "notes": {p.profile: list(p.notes) for p in result.profiles},
        }
    order = {p.profile: [lv.run for lv in p.levels] for p in result.profiles} if result else {}
    for profile, levels in by_profile.items():
        if profile in order:
            rank = {name: i for i, name in enumerate(order[profile])}
            levels.sort(key=lambda lv: rank.get(lv["run"], len(rank)))
        else:
            levels.sort(key=_load_order)
        entry: dict[str, Any] = {"profile": profile, "levels": json_safe(levels)}
        units = {lv.get(K.OFFERED_LOAD_UNIT) for lv in levels}
        entry["offered_unit"] = units.pop() if len(units) == 1 else None
        if result is not None:
            (answer,) = [p for p in result.profiles if p.profile == profile]
            entry["sustainable_rps"] = answer.sustainable_rps
            entry["binding"] = answer.binding
            entry["basis"] = answer.basis
            entry["replicas"] = answer.replicas if options.target_rps else None
            entry["message"] = answer.message if options.target_rps else None
        out["profiles"].append(json_safe(entry))
    return out


def _load_order(level: dict[str, Any]) -> tuple[float, float]:
    offered, rps = level.get(K.OFFERED_LOAD), level.get(K.REQUEST_THROUGHPUT)
    return (
        float(offered) if isinstance(offered, (int, float)) and _positive(offered) else math.inf,
        float(rps) if isinstance(rps, (int, float)) and _positive(rps) else math.inf,
    )


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def gpus_per_replica(meta: dict[str, Any], where: str) -> tuple[int, str]:
    """GPUs one server of this profile uses (tensor × pipeline × data parallel), and how known.

    ``meta`` is a run's ``run.json``; ``where`` its path, for errors.
    """
    from vprof.analysis.run import gpus_per_server_of

    profile = meta.get("profile")
    try:
        found = gpus_per_server_of(profile) if isinstance(profile, dict) else None
    except ProfileError as exc:
        raise ReportError(exc.message, path=where, key=f"profile.engine_args.{exc.key}") from None
    return found or (1, "engine arguments unknown: 1 GPU assumed")


def cost(
    capacity_data: dict[str, Any],
    metas: dict[str, tuple[dict[str, Any], str]],
    options: ReportOptions,
    *,
    measured_on_gpus: bool | None,
) -> dict[str, Any]:
    """Cost per hour of the plan and per million output tokens at the sustainable rate.

    ``metas`` maps each profile to one of its runs' ``run.json`` and that file's path.
    """
    if options.gpu_hour_price is None:
        return {"why": "give --gpu-hour-price (the price of one GPU-hour) to see costs"}
    if capacity_data.get("plan") is None:
        return {"why": "costs need the plan's sustainable rate: give --slo (and --rps)"}
    price = options.gpu_hour_price
    rows = []
    for entry in capacity_data["profiles"]:
        profile = entry["profile"]
        meta, where = metas[profile]
        gpus, how = gpus_per_replica(meta, where)
        out_tokens = sum(lv.get(K.TOTAL_OUTPUT_TOKENS) or 0 for lv in entry["levels"])
        completed = sum(lv.get(K.COMPLETED) or 0 for lv in entry["levels"])
        tokens_per_request = out_tokens / completed if completed else None
        sustainable = entry.get("sustainable_rps")
        replicas = entry.get("replicas")
        row: dict[str, Any] = {
            "profile": profile,
            "gpus_per_replica": gpus,
            "parallelism": how,
            "gpu_hour_price": price,
            "replica_cost_per_hour": gpus * price,
            "output_tokens_per_request": tokens_per_request,
            "sustainable_rps": sustainable,
            "replicas": replicas,
            "plan_cost_per_hour": replicas * gpus * price if replicas else None,
            "cost_per_million_output_tokens": None,
            "plan_cost_per_million_output_tokens": None,
        }
        if _positive(sustainable) and tokens_per_request:
            tokens_per_hour = sustainable * tokens_per_request * 3600.0
            row["cost_per_million_output_tokens"] = gpus * price / tokens_per_hour * 1e6
        if replicas and options.target_rps and tokens_per_request:
            tokens_per_hour = options.target_rps * tokens_per_request * 3600.0
            row["plan_cost_per_million_output_tokens"] = (
                replicas * gpus * price / tokens_per_hour * 1e6
            )
        rows.append(row)
    notes = []
    if measured_on_gpus is False:
        notes.append(
            "measured without GPUs (the CPU build): the rates are this machine's, so these "
            "costs illustrate the arithmetic rather than price a GPU deployment"
        )
    elif measured_on_gpus is None:
        notes.append("the runs do not record their hardware; check the rates came from GPUs")
    if options.target_rps is None:
        notes.append("give --rps for the plan's replicas and its cost per hour")
    return {"rows": rows, "notes": notes, "gpu_hour_price": price}
