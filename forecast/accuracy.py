"""Predicted against measured: per run and metric, the error, and the medians a model keeps."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vprof.analysis.keys import SummaryKey as K

# What a check compares (summary keys); open-loop runs add the latency from the schedule.
CHECK_METRICS = (
    K.REQUEST_THROUGHPUT,
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    K.P99_TTFT_MS,
    K.MEDIAN_TPOT_MS,
    K.P95_TPOT_MS,
    K.MEDIAN_ITL_MS,
    K.MEDIAN_E2EL_MS,
    K.P95_E2EL_MS,
)
OPEN_LOOP_METRICS = (K.SERVED_RATE, K.MEDIAN_TTFT_FROM_SCHEDULE_MS, K.P95_TTFT_FROM_SCHEDULE_MS)


def finite_value(summary: Mapping[str, Any], key: str) -> float | None:
    """A summary's number at ``key``, or None where it is missing, not a number or not
    finite."""
    value = summary.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def compare_summaries(
    run: str,
    measured: Mapping[str, Any],
    predicted: Mapping[str, Any],
    own_stalls: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per metric both summaries have: measured, predicted, error in % of measured;
    with the range of the stalls' draws when the prediction has one (``predict(spread=
    True)``): ``draws_low``, ``draws_high`` and whether the measured value lies within; the
    same of the step-time band (``predict(pace=True)``): ``pace_low``, ``pace_high``,
    ``within_pace``; and with ``own_stalls`` (the run replayed as it ran, its own stalls
    where they happened: ``predict(own=…)``) its value and error: ``own_stalls``,
    ``own_stalls_error_pct``."""
    keys = list(CHECK_METRICS)
    if measured.get(K.OPEN_LOOP):
        keys += OPEN_LOOP_METRICS
    forecast = predicted.get(K.FORECAST) or {}
    spread = forecast.get("spread") or {}
    paced = (forecast.get("pace") or {}).get("range") or {}
    rows = []
    for key in keys:
        m, p = finite_value(measured, key), finite_value(predicted, key)
        if m is None or p is None:
            continue
        error = (p - m) / m * 100.0 if m else None
        row = {"run": run, "metric": key, "measured": m, "predicted": p, "error_pct": error}
        if key in spread:
            low, high = spread[key]
            row.update(draws_low=low, draws_high=high, within_draws=low <= m <= high)
        if key in paced:
            low, high = paced[key]
            row.update(pace_low=low, pace_high=high, within_pace=low <= m <= high)
        own = finite_value(own_stalls, key) if own_stalls is not None else None
        if own is not None:
            row.update(own_stalls=own, own_stalls_error_pct=(own - m) / m * 100.0 if m else None)
        rows.append(row)
    return rows


def error_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The median absolute error per metric over the runs (``median_abs_pct``; with the runs'
    own stalls, ``median_abs_pct_own_stalls``, where the rows have it) and the rows
    themselves."""
    import numpy as np

    def medians(field: str) -> dict[str, float]:
        by_metric: dict[str, list[float]] = {}
        for row in rows:
            if row.get(field) is not None:
                by_metric.setdefault(str(row["metric"]), []).append(abs(float(row[field])))
        return {k: float(np.median(v)) for k, v in by_metric.items()}

    report: dict[str, Any] = {
        "runs": len({row["run"] for row in rows}),
        "median_abs_pct": medians("error_pct"),
    }
    if own := medians("own_stalls_error_pct"):
        report["median_abs_pct_own_stalls"] = own
    # per metric, the share of runs whose measured value lay within the draws, the band
    for name in ("within_draws", "within_pace"):
        within: dict[str, list[bool]] = {}
        for row in rows:
            if name in row:
                within.setdefault(str(row["metric"]), []).append(bool(row[name]))
        if within:
            report[name] = {k: sum(v) / len(v) for k, v in within.items()}
    report["rows"] = [dict(r) for r in rows]
    return report
