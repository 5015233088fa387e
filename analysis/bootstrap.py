"""Request-level bootstrap of latency statistics within one run (request noise only).

Resampling *requests* (for ITL a request brings all of its gaps: a cluster bootstrap, because
gaps within a request are not independent). Each resample is a vector of per-request counts,
so a percentile of the resampled data is read off the sorted values with cumulative counts:
no Python loop per resample. Such an interval says how much one run's statistic would move
with other requests from the same run; it says nothing of how another run would come out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

STAT = re.compile(
    r"^(?P<stat>mean|median|std|p\d+(?:\.\d+)?)_(?P<metric>ttft|tpot|itl|e2el|"
    r"ttft_from_schedule|e2el_from_schedule)_ms$"
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


def all_bootstraps(
    columns: list[tuple[Any, Any]], metrics: Sequence[str], n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Bootstrap distributions per run for every latency statistic in ``metrics``.

    Statistics of one metric (median, p95, p99 of ITL, say) share each run's resamples.
    """
    import numpy as np

    families: dict[str, list[str]] = {}
    for metric in metrics:
        match = STAT.match(metric)
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
