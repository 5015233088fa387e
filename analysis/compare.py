"""Runs side by side: differences from the baseline with bootstrap confidence intervals.

Latency statistics are bootstrapped by resampling *requests* (for ITL, a request brings all
of its gaps: a cluster bootstrap, because gaps within a request are not independent). Each
resample is a vector of per-request counts, so a percentile of the resampled data is read
off the sorted values with cumulative counts: no Python loop per resample.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.analysis.run import Run, display_names, load_run, summarize_loaded

DEFAULT_METRICS: tuple[str, ...] = (
    "median_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p95_tpot_ms",
    "median_itl_ms",
    "p95_itl_ms",
    "p99_itl_ms",
    "p95_e2el_ms",
    "request_throughput",
    "output_throughput",
    "error_rate",
)
_STAT = re.compile(
    r"^(?P<stat>mean|median|std|p\d+(?:\.\d+)?)_(?P<metric>ttft|tpot|itl|e2el|"
    r"ttft_from_schedule|e2el_from_schedule)_ms$"
)
_LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2el": "E2E latency",
    "ttft_from_schedule": "TTFT from schedule",
    "e2el_from_schedule": "E2E latency from schedule",
}
_HIGHER_IS_BETTER = ("throughput", "goodput", "cache_hit")
# The columns a terminal table shows (the verdict says better/worse and significance).
TABLE_COLUMNS = (
    "metric",
    "baseline_value",
    "run",
    "value",
    "diff_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
)
# Cap on requests per run that enter the bootstrap; larger runs use a random subset, which
# only widens the interval (conservative), and keeps `compare` interactive.
MAX_BOOT_REQUESTS = 20_000
_CELLS_PER_CHUNK = 4_000_000


@dataclass(frozen=True)
class _Sample:
    """Per-request values of one latency metric: ``values`` grouped by ``lengths``."""

    values: Any  # sorted ascending
    owner: Any  # request index of each sorted value
    n_requests: int


def compare(
    runs: Sequence[str | Path | Run],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_boot: int = 2000,
    seed: int = 0,
    slo: str | None = None,
) -> Any:
    """Compare runs with the first as baseline; one row per (metric, other run).

    Columns: ``metric``, ``baseline``, ``baseline_value``, ``run``, ``value``, ``diff_pct``,
    ``ci_low_pct``, ``ci_high_pct`` (a bootstrap 95 % interval of the % difference, for
    latency statistics), ``significant``, ``better`` and a plain ``verdict``.

    Example:
        >>> compare(["runs/baseline", "runs/chunked-256"])  # doctest: +SKIP
    """
    import numpy as np
    import pandas as pd

    from vprof.analysis.columns import from_records
    from vprof.analysis.summary import masks

    if len(runs) < 2:
        from vprof.common.errors import RunError

        raise RunError("compare needs at least two runs (the first is the baseline)")
    loaded = [r if isinstance(r, Run) else load_run(r) for r in runs]
    summaries = [summarize_loaded(r, slo=slo) for r in loaded]
    names = display_names(summaries)
    columns = []
    for run in loaded:
        cols = from_records(run.records)
        _, ok, _ = masks(cols, run.warmup_until)
        columns.append((cols, ok))
    boots = _all_bootstraps(columns, metrics, n_boot, seed)
    rows = []
    for metric in metrics:
        base_value = _number(summaries[0].get(metric))
        base_boot = boots[0].get(metric)
        for i in range(1, len(loaded)):
            value = _number(summaries[i].get(metric))
            diff = (value - base_value) / base_value * 100.0 if base_value else math.nan
            low = high = math.nan
            boot = boots[i].get(metric)
            if base_boot is not None and boot is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    diffs = (boot - base_boot) / base_boot * 100.0
                diffs = diffs[np.isfinite(diffs)]
                if diffs.size:
                    low, high = (float(v) for v in np.percentile(diffs, [2.5, 97.5]))
            rows.append(_row(metric, names[0], base_value, names[i], value, diff, low, high))
    return pd.DataFrame(rows)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _sample(cols: Any, ok: Any, metric: str, rng: Any) -> _Sample:
    """The completed requests' values of ``metric``, subsampled to MAX_BOOT_REQUESTS."""
    import numpy as np

    f = cols.floats
    if metric == "itl":
        chosen = np.flatnonzero(ok)
        if chosen.size > MAX_BOOT_REQUESTS:  # subsample before gathering tens of millions of gaps
            subset = np.zeros_like(ok)
            subset[rng.choice(chosen, MAX_BOOT_REQUESTS, replace=False)] = True
            ok = subset
        values, lengths = cols.gaps(ok)
    else:
        per_request = {
            "ttft": f["ttft_ms"],
            "tpot": f["tpot_ms"],
            "e2el": f["e2e_ms"],
            "ttft_from_schedule": (f["first_token_at"] - f["scheduled_at"]) * 1000.0,
            "e2el_from_schedule": (f["last_token_at"] - f["scheduled_at"]) * 1000.0,
        }[metric][ok]
        values = per_request[np.isfinite(per_request)]
        lengths = np.ones(values.size, dtype=np.int64)
    n = lengths.size
    owner = np.repeat(np.arange(n), lengths)
    if n > MAX_BOOT_REQUESTS:
        chosen = np.zeros(n, dtype=bool)
        chosen[rng.choice(n, MAX_BOOT_REQUESTS, replace=False)] = True
        keep = chosen[owner]
        values, owner = values[keep], np.cumsum(chosen)[owner[keep]] - 1
        n = MAX_BOOT_REQUESTS
    order = np.argsort(values, kind="stable")
    return _Sample(values[order], owner[order], n)


def _all_bootstraps(
    columns: list[tuple[Any, Any]], metrics: Sequence[str], n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Bootstrap distributions per run for every latency statistic in ``metrics``.

    Statistics of one metric (median, p95, p99 of ITL, say) share each run's resamples.
    """
    import numpy as np

    families: dict[str, list[str]] = {}
    for metric in metrics:
        match = _STAT.match(metric)
        if match and n_boot > 0:
            families.setdefault(match["metric"], []).append(match["stat"])
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for cols, ok in columns:
        boots: dict[str, Any] = {}
        for family, stats in families.items():
            values = _bootstrap(_sample(cols, ok, family, rng), stats, n_boot, rng)
            for stat in stats:
                boots[f"{stat}_{family}_ms"] = values[stat]
        out.append(boots)
    return out


def _bootstrap(sample: _Sample, stats: Sequence[str], n_boot: int, rng: Any) -> dict[str, Any]:
    """``n_boot`` values of each of ``stats`` over request-level resamples of ``sample``.

    A resample is a vector of per-request counts; each sorted value then carries its
    request's count, and a percentile of the resampled data is read off the cumulative
    counts, so no resample is ever materialised or sorted.
    """
    import numpy as np

    n, size = sample.n_requests, sample.values.size
    out = {stat: np.full(n_boot, np.nan) for stat in stats}
    if n == 0 or size == 0:
        return out
    chunk = max(1, min(n_boot, _CELLS_PER_CHUNK // max(size, n)))
    v = sample.values
    quantiles = {
        stat: 50.0 if stat == "median" else float(stat[1:])
        for stat in stats
        if stat == "median" or stat.startswith("p")
    }
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        draws = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n).astype(np.int32)
        weights = counts[:, sample.owner]  # (b, size): copies of each sorted value
        totals = weights.sum(axis=1, dtype=np.int64)
        if "mean" in stats or "std" in stats:
            mean = weights @ v / totals
            if "mean" in stats:
                out["mean"][start : start + b] = mean
            if "std" in stats:
                var = weights @ (v * v) / totals - mean**2
                out["std"][start : start + b] = np.sqrt(np.maximum(var, 0.0))
        if not quantiles:
            continue
        cum = np.cumsum(weights, axis=1, out=weights)  # in place: weights are not needed again
        for stat, q in quantiles.items():
            # numpy "linear": position h = q/100·(N−1) in the resampled, sorted data.
            h = q / 100.0 * (totals - 1)
            lower = np.floor(h)
            frac = h - lower
            upper = np.minimum(lower + 1, totals - 1)
            a = np.empty(b)
            c = np.empty(b)
            for row in range(b):  # one binary search per row; the heavy work is vectorised
                j = np.searchsorted(cum[row], (lower[row], upper[row]), side="right")
                a[row], c[row] = v[np.minimum(j, size - 1)]
            diff = c - a
            out[stat][start : start + b] = np.where(
                frac >= 0.5, c - diff * (1 - frac), a + diff * frac
            )
    return out


def _label(metric: str) -> str:
    match = _STAT.match(metric)
    if not match:
        return metric.replace("_", " ")
    stat = match["stat"]
    return f"{stat if stat != 'median' else 'median'} {_LABELS[match['metric']]}"


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _row(
    metric: str, base: str, base_value: float, name: str, value: float, diff: float,
    low: float, high: float,
) -> dict[str, Any]:  # fmt: skip
    label = _label(metric)
    has_ci = not math.isnan(low)
    significant = has_ci and (low > 0 or high < 0)
    higher_better = any(word in metric for word in _HIGHER_IS_BETTER)
    better = ""
    if base_value == value:
        verdict, diff = f"{label}: identical", 0.0
    elif math.isnan(diff):
        missing = name if math.isnan(value) else f"baseline {base}"
        verdict = f"{label}: not comparable ({missing} has no value, or the baseline is 0)"
    elif has_ci and not significant:
        interval = f"[{low:+.1f} %, {high:+.1f} %]"
        verdict = f"{label}: no significant difference ({diff:+.1f} % {interval})"
    else:
        direction = "lowers" if diff < 0 else "raises"
        verdict = f"{name} {direction} {label} by {_fmt(abs(diff))} %"
        if has_ci:
            a, b = sorted((abs(low), abs(high)))
            verdict += f" [{_fmt(a)} %, {_fmt(b)} %]"
        elif diff != 0:
            verdict += " (one measurement each, no interval)"
        else:
            verdict = f"{label}: identical"
        if diff != 0 and (significant or not has_ci):
            better = "better" if (diff > 0) == higher_better else "worse"
    return {
        "metric": metric,
        "baseline": base,
        "baseline_value": base_value,
        "run": name,
        "value": value,
        "diff_pct": diff,
        "ci_low_pct": low,
        "ci_high_pct": high,
        "significant": significant,
        "better": better,
        "verdict": verdict,
    }
