"""Request-level bootstrap of latency statistics within one run (request noise only).

Resampling *requests* (for ITL a request brings all of its gaps: a cluster bootstrap, because
gaps within a request are not independent). Each resample is a vector of per-request counts,
so a percentile of the resampled data is read off the sorted values with cumulative counts:
no Python loop per resample. Such an interval says how much one run's statistic would move
with other requests from the same run; it says nothing of how another run would come out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vprof.analysis.keys import stat_key

STAT = re.compile(
    r"^(?P<stat>mean|median|std|p\d+(?:\.\d+)?)_(?P<metric>ttft|tpot|itl|e2el|"
    r"ttft_from_schedule|e2el_from_schedule)_ms$"
)
# Cap on requests per run that enter the bootstrap; larger runs use a random subset, which
# only widens the interval (conservative), and keeps `compare` interactive.
MAX_BOOT_REQUESTS = 20_000
# Likewise for pooled inter-token gaps: requests are drawn until about this many gaps are in.
MAX_BOOT_GAPS = 25_000
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
        gaps_each = max(1.0, _mean_gaps(cols, ok))
        most = min(MAX_BOOT_REQUESTS, max(100, int(MAX_BOOT_GAPS / gaps_each)))
        if chosen.size > most:  # subsample before gathering tens of millions of gaps
            subset = np.zeros_like(ok)
            subset[rng.choice(chosen, most, replace=False)] = True
            ok = subset
        values, lengths = cols.gaps(ok)
        n = lengths.size
        owner = np.repeat(np.arange(n), lengths)
    else:
        per_request = {  # only the metric asked for is computed
            "ttft": lambda: f["ttft_ms"],
            "tpot": lambda: f["tpot_ms"],
            "e2el": lambda: f["e2e_ms"],
            "ttft_from_schedule": lambda: (f["first_token_at"] - f["scheduled_at"]) * 1000.0,
            "e2el_from_schedule": lambda: (f["last_token_at"] - f["scheduled_at"]) * 1000.0,
        }[metric]()[ok]
        values = per_request[np.isfinite(per_request)]
        if values.size > MAX_BOOT_REQUESTS:
            chosen = np.zeros(values.size, dtype=bool)
            chosen[rng.choice(values.size, MAX_BOOT_REQUESTS, replace=False)] = True
            values = values[chosen]
        n = values.size
        owner = np.arange(n)  # one value per request
    # Equal values may come in any order (a resample's percentile among them is their value,
    # its cumulative counts either side of them the same): no stable sort, a third the time.
    order = np.argsort(values)
    return _Sample(values[order], owner[order], n)


def _mean_gaps(cols: Any, mask: Any) -> float:
    """Mean gaps per selected request, from the blocks' lengths (no gap is copied)."""
    count = int(mask.sum())
    return cols.gap_count(mask) / count if count else 0.0


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
                boots[stat_key(stat, family)] = values[stat]
        out.append(boots)
    return out


# Sized by precision: resamples drawn first, and the most ever drawn.
PILOT_N_BOOT = 200
MAX_SIZED_N_BOOT = 20_000
# The Monte-Carlo standard error of a bootstrap's 2.5 % (or 97.5 %) quantile from n resamples
# is sqrt(p (1 − p) / n) / density there; for a normal spread s that is Z_SE · s / √n.
Z_SE = math.sqrt(0.025 * 0.975) / (math.exp(-(1.959964**2) / 2) / math.sqrt(2 * math.pi))


def sized_bootstraps(
    columns: list[tuple[Any, Any]],
    metrics: Sequence[str],
    precision_pct: float,
    seed: int,
) -> tuple[list[dict[str, Any]], int]:
    """As :func:`all_bootstraps`, with as many resamples as the precision asked for needs.

    ``precision_pct``: the Monte-Carlo standard error allowed on each end of the 95 %
    interval of every run's difference from the first (in percentage points). A pilot of
    :data:`PILOT_N_BOOT` resamples measures the spread s of each difference; the count is
    then (Z_SE · s / precision)², at least the pilot and at most :data:`MAX_SIZED_N_BOOT`,
    and the further resamples are drawn from the same requests. Returns the distributions
    and the count drawn.
    """
    import numpy as np

    families: dict[str, list[str]] = {}
    for metric in metrics:
        match = STAT.match(metric)
        if match:
            families.setdefault(match["metric"], []).append(match["stat"])
    rng = np.random.default_rng(seed)
    samples = [{f: _sample(cols, ok, f, rng) for f in families} for cols, ok in columns]

    def draw(n: int) -> list[dict[str, Any]]:
        out = []
        for per_family in samples:
            boots: dict[str, Any] = {}
            for family, stats in families.items():
                values = _bootstrap(per_family[family], stats, n, rng)
                boots |= {stat_key(stat, family): values[stat] for stat in stats}
            out.append(boots)
        return out

    pilot = draw(PILOT_N_BOOT)
    need = PILOT_N_BOOT
    for metric in pilot[0] if pilot else ():
        base = pilot[0][metric]
        for other in pilot[1:]:
            with np.errstate(divide="ignore", invalid="ignore"):
                diffs = (other[metric] - base) / base * 100.0
            diffs = diffs[np.isfinite(diffs)]
            if diffs.size < 2:
                continue
            low, high = np.percentile(diffs, [15.865, 84.135])  # ± one s of a normal
            spread = (high - low) / 2.0
            need = max(need, math.ceil((Z_SE * spread / precision_pct) ** 2))
    need = min(need, MAX_SIZED_N_BOOT)
    if need > PILOT_N_BOOT:
        more = draw(need - PILOT_N_BOOT)
        pilot = [
            {k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(pilot, more, strict=True)
        ]
    return pilot, need


def _bootstrap(sample: _Sample, stats: Sequence[str], n_boot: int, rng: Any) -> dict[str, Any]:
    """``n_boot`` values of each of ``stats`` over request-level resamples of ``sample``.

    A resample is a vector of per-request counts; each sorted value then carries its
    request's count, and a percentile of the resampled data is read off the cumulative
    counts, so no resample is ever materialised or sorted. The counts are only accumulated
    over a window of sorted values around each percentile (where a resample's percentile
    can fall: see :func:`_windows`), from the counts below it; a resample whose percentile
    falls outside its window is computed over all values.
    """
    import numpy as np

    n, size = sample.n_requests, sample.values.size
    out = {stat: np.full(n_boot, np.nan) for stat in stats}
    if n == 0 or size == 0:
        return out
    if size == n and not {"mean", "std"} & set(stats):
        return _order_statistics(sample.values, stats, n_boot, rng)
    # Resamples are drawn in the chunks they always were, so a seed gives the same draws.
    chunk = max(1, min(n_boot, _CELLS_PER_CHUNK // max(size, n)))
    v = sample.values
    quantiles = {
        stat: 50.0 if stat == "median" else float(stat[1:])
        for stat in stats
        if stat == "median" or stat.startswith("p")
    }
    per_request = np.bincount(sample.owner, minlength=n)  # values each request brings
    sums = np.bincount(sample.owner, weights=v, minlength=n)
    squares = np.bincount(sample.owner, weights=v * v, minlength=n)
    windows = _windows(sample, quantiles.values())
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        draws = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
        totals = counts @ per_request
        if "mean" in stats or "std" in stats:
            mean = counts @ sums / totals
            if "mean" in stats:
                out["mean"][start : start + b] = mean
            if "std" in stats:
                var = counts @ squares / totals - mean**2
                out["std"][start : start + b] = np.sqrt(np.maximum(var, 0.0))
        for stat, q in quantiles.items():
            # numpy "linear": position h = q/100·(N−1) in the resampled, sorted data.
            h = q / 100.0 * (totals - 1)
            lower = np.floor(h)
            frac = h - lower
            upper = np.minimum(lower + 1, totals - 1)
            lo_at, hi_at = _window_ranks(sample, counts, windows[q], lower, upper)
            a, c = v[lo_at], v[hi_at]
            diff = c - a
            out[stat][start : start + b] = np.where(
                frac >= 0.5, c - diff * (1 - frac), a + diff * frac
            )
    return out


def _windows(sample: _Sample, qs: Any) -> dict[float, tuple[int, int, Any]]:
    """Per percentile, the sorted values a resample's percentile almost surely falls among:
    (first, end, each request's count of values before ``first``).

    A resample's count of values below the p-th sorted value moves, from the count it
    had, by a sum over requests of (copies − 1) × (that request's values below it − its
    share); copies are about Poisson(1), so its standard deviation is the root of the
    summed squares. Eight of those either side (and some slack) leave out a resample
    about once in 10¹⁵; one left out is computed over all values, so this only costs time.
    """
    import numpy as np

    n, size = sample.n_requests, sample.values.size
    per_request = np.bincount(sample.owner, minlength=n)
    out = {}
    for q in qs:
        at = int(q / 100.0 * (size - 1))
        below = np.bincount(sample.owner[:at], minlength=n)
        spread = math.sqrt(float(((below - per_request * (at / size)) ** 2).sum()))
        margin = int(8 * spread) + 16 + int(per_request.max())
        first, end = max(0, at - margin), min(size, at + margin + 1)
        out[q] = (first, end, np.bincount(sample.owner[:first], minlength=n))
    return out


def _window_ranks(
    sample: _Sample, counts: Any, window: tuple[int, int, Any], lower: Any, upper: Any
) -> tuple[Any, Any]:
    """Per resample, the indices of the sorted values at positions ``lower`` and ``upper``
    of the resampled data (``searchsorted(cum, position, "right")`` on its cumulative counts)."""
    import numpy as np

    first, end, below_first = window
    size = sample.values.size
    b = counts.shape[0]
    base = counts @ below_first  # per resample: values before the window
    cum = np.cumsum(counts[:, sample.owner[first:end]], axis=1)
    cum += base[:, None]
    inside = (base <= lower) & (upper < cum[:, -1]) if end > first else np.zeros(b, dtype=bool)
    lo_at = first + _count_at_most(cum, lower)
    hi_at = first + _count_at_most(cum, upper)
    outside = np.flatnonzero(~inside)
    if outside.size:  # the whole cumulative counts of those resamples
        full = np.cumsum(counts[outside][:, sample.owner], axis=1)
        lo_at[outside] = _count_at_most(full, lower[outside])
        hi_at[outside] = _count_at_most(full, upper[outside])
    return np.minimum(lo_at, size - 1), np.minimum(hi_at, size - 1)


def _count_at_most(cum: Any, positions: Any) -> Any:
    """Per row of ascending ``cum``: how many of its values are ≤ ``positions[row]``
    (``searchsorted(cum[row], positions[row], "right")``)."""
    return (cum <= positions[:, None]).sum(axis=1, dtype=int)


def _order_statistics(values: Any, stats: Sequence[str], n_boot: int, rng: Any) -> dict[str, Any]:
    """Percentiles of resamples of one value per request, without resampling.

    In a resample of n draws (with replacement) from n sorted values, the r-th smallest draw
    is ``values[ceil(n·U) − 1]`` where U is the r-th smallest of n uniforms, which is
    Beta(r, n − r + 1); the next one is U + (1 − U)·Beta(1, n − r). So each resample's
    numpy-"linear" percentile costs two beta draws instead of a pass over n values; the
    distribution is exactly the bootstrap's.
    """
    import numpy as np

    n = values.size
    out = {}
    for stat in stats:
        q = 50.0 if stat == "median" else float(stat[1:])
        h = q / 100.0 * (n - 1)
        lower = int(math.floor(h))
        frac = h - lower
        r = lower + 1  # 1-based rank of the lower order statistic
        u = rng.beta(r, n - r + 1, size=n_boot)
        u_next = u + (1.0 - u) * rng.beta(1, n - r, size=n_boot) if r < n else u
        a = values[np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)]
        c = values[np.clip(np.ceil(u_next * n).astype(np.int64) - 1, 0, n - 1)]
        diff = c - a
        out[stat] = np.where(frac >= 0.5, c - diff * (1 - frac), a + diff * frac)
    return out
