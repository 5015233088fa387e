"""Server ``/metrics`` samples, load-generator CPU samples and the host's pace, reduced to a
few numbers.

All arrive as lists of small dicts (one per line of ``metrics.jsonl`` / ``loadgen.jsonl`` /
``host.jsonl``);
they are short (one sample every few seconds), so plain Python is the right tool here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vprof.analysis.keys import SATURATED_FIX
from vprof.analysis.keys import SummaryKey as K
from vprof.records.schema import LOOP_LAG_BUCKETS_MS

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"

# A load generator busier than this cannot keep time: its latencies include its own queueing.
SATURATED_CPU_PERCENT = 90.0
# Event-loop lag (ms, p99 over a sample) above which a Locust process's timestamps are late by
# more than the measurement can tolerate.
LAG_P99_LIMIT_MS = 10.0
# A lagging loop below this share of a core, which waited for one longer than it ran, was held
# back by other processes rather than by its own work.
STARVED_CPU_PERCENT = 50.0
SAMPLE_S = 2.0  # how much time one health sample covers (the Locust side's sampling interval)


def _value(values: Mapping[str, Any], name: str) -> float | None:
    """A metric's value, summing labelled series (``name{engine="0"}``) when present."""
    if name in values:
        return float(values[name])
    labelled = [float(v) for k, v in values.items() if k.startswith(name + "{")]
    return sum(labelled) if labelled else None


def server_stats(
    samples: Sequence[Mapping[str, Any]], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """Prefix-cache hit rate, preemptions, peak KV use and queue length over [start, end].

    Counters are differenced from the last sample at or before ``start_s`` (so the window
    is covered) to the last sample at or before ``end_s``; gauges are read inside the window.
    Samples of several replicas (their ``replica``) are reduced per replica, then counted for
    the deployment: counters and mean queues add up, peaks are the busiest replica's; the
    replicas' own figures are under ``per_replica_server``.
    """
    lo = -math.inf if start_s is None or math.isnan(start_s) else start_s
    hi = math.inf if end_s is None or math.isnan(end_s) else end_s
    timed = [s for s in samples if "t" in s]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for sample in timed:
        groups.setdefault(str(sample.get("replica") or ""), []).append(sample)
    if not groups:
        return {K.METRICS_SAMPLES: 0}
    reduced = {name: _one_server(group, lo, hi) for name, group in groups.items()}
    if len(reduced) == 1:
        ((out, _),) = reduced.values()
    else:
        out = _deployment(reduced)
    out.update(_scrape_stats(sorted(timed, key=lambda s: float(s["t"])), lo, hi))
    return out


def _deployment(
    reduced: Mapping[str, tuple[dict[str, Any], tuple[float | None, float | None]]],
) -> dict[str, Any]:
    """Several replicas' figures (and hits and queries) as the deployment's: counters and mean
    queues add up, peaks are the busiest replica's; each one's own under ``per_replica_server``."""
    per = {name: figures for name, (figures, _) in reduced.items()}
    out: dict[str, Any] = {K.METRICS_SAMPLES: sum(p[K.METRICS_SAMPLES] for p in per.values())}
    for key in (K.NUM_PREEMPTIONS, K.MEAN_NUM_REQUESTS_WAITING):
        out[key] = _total(p[key] for p in per.values())
    for key in (K.MAX_KV_CACHE_USAGE_PERC, K.MAX_NUM_REQUESTS_WAITING, K.MAX_NUM_REQUESTS_RUNNING):
        seen = [p[key] for p in per.values() if p[key] is not None]
        out[key] = max(seen) if seen else None
    hits = _total(h for _, (h, _) in reduced.values())
    out[K.PREFIX_CACHE_HIT_RATE] = _hit_rate(hits, _total(q for _, (_, q) in reduced.values()))
    out[PER_REPLICA_SERVER] = {
        name: {k: p[k] for k in REPLICA_SERVER_KEYS} for name, p in per.items()
    }
    return out


def _total(values: Iterable[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def deployment_samples(samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Samples of several replicas (each line naming its ``replica`` and ``pass``) merged into
    one per pass, in time order: values add up across the replicas (counters, requests running
    and waiting), except KV-cache use, the busiest replica's; a pass is timed by its last line.
    Samples of one server come back as they are, in time order."""
    ordered = sorted((s for s in samples if "t" in s), key=lambda s: float(s["t"]))
    if not any(s.get("replica") for s in ordered):
        return [dict(s) for s in ordered]
    passes: dict[Any, dict[str, Any]] = {}
    for sample in ordered:
        merged = passes.setdefault(sample.get("pass"), {"t": sample["t"], "values": {}})
        merged["t"] = sample["t"]
        for name, value in (sample.get("values") or {}).items():
            known = merged["values"].get(name)
            if known is None:
                merged["values"][name] = value
            else:
                merged["values"][name] = max(known, value) if name == KV_USAGE else known + value
    return sorted(passes.values(), key=lambda s: float(s["t"]))


# What the summary shows of each replica's own /metrics beside its requests.
# Each replica's own figures, handed to the summary under this key, which files them under its
# per_replica rows (not a summary key: it is taken out again).
PER_REPLICA_SERVER = "per_replica_server"
REPLICA_SERVER_KEYS = (K.NUM_PREEMPTIONS, K.MAX_KV_CACHE_USAGE_PERC, K.PREFIX_CACHE_HIT_RATE)


def _one_server(
    samples: Sequence[Mapping[str, Any]], lo: float, hi: float
) -> tuple[dict[str, Any], tuple[float | None, float | None]]:
    """One server's figures over [lo, hi], and its prefix-cache hits and queries (for a
    deployment's hit rate)."""
    ordered = sorted(samples, key=lambda s: float(s["t"]))
    before = [s for s in ordered if float(s["t"]) <= lo]
    window = [s for s in ordered if lo <= float(s["t"]) <= hi] or ordered
    first = before[-1] if before else window[0]
    last = window[-1]
    out: dict[str, Any] = {K.METRICS_SAMPLES: len(window)}

    def delta(name: str) -> float | None:
        a, b = _value(first.get("values", {}), name), _value(last.get("values", {}), name)
        # A restarted server resets its counters; a negative delta would be nonsense.
        return None if a is None or b is None else max(b - a, 0.0)

    hits, queries = delta(HITS), delta(QUERIES)
    out[K.PREFIX_CACHE_HIT_RATE] = _hit_rate(hits, queries)
    preemptions = delta(PREEMPTIONS)
    out[K.NUM_PREEMPTIONS] = int(preemptions) if preemptions is not None else None
    for key, name, reduce in (
        (K.MAX_KV_CACHE_USAGE_PERC, KV_USAGE, max),
        (K.MAX_NUM_REQUESTS_WAITING, WAITING, max),
        (K.MEAN_NUM_REQUESTS_WAITING, WAITING, _mean),
        (K.MAX_NUM_REQUESTS_RUNNING, RUNNING, max),
    ):
        seen = [v for s in window if (v := _value(s.get("values", {}), name)) is not None]
        out[key] = reduce(seen) if seen else None
    return out, (hits, queries)


def _hit_rate(hits: float | None, queries: float | None) -> float | None:
    return hits / queries if hits is not None and queries else None


# A scrape that takes longer stalls vLLM's API server long enough to show in latencies.
SLOW_SCRAPE_MS = 100.0


def _scrape_stats(samples: Sequence[Mapping[str, Any]], lo: float, hi: float) -> dict[str, Any]:
    """How long /metrics scrapes took during the run, and a warning when they could matter."""
    took = [
        float(s["scrape_s"]) * 1000.0
        for s in samples
        if isinstance(s.get("scrape_s"), (int, float)) and lo <= float(s["t"]) <= hi
    ]
    if not took:
        return {}
    span_s = hi - lo if math.isfinite(hi - lo) and hi > lo else math.nan
    share = sum(took) / 1000.0 / span_s if span_s == span_s and span_s > 0 else None
    worst = max(took)
    out: dict[str, Any] = {
        K.METRICS_SCRAPE_MAX_MS: worst,
        K.METRICS_SCRAPE_MEDIAN_MS: sorted(took)[len(took) // 2],
        K.METRICS_SCRAPE_SHARE: share,
    }
    if worst > SLOW_SCRAPE_MS:
        out[K.METRICS_WARNING] = (
            f"a /metrics scrape took {worst:.0f} ms (limit {SLOW_SCRAPE_MS:g} ms): vLLM's API "
            "server stalls while it renders one, so latencies near then include it; raise "
            "--metrics-interval or use --no-metrics"
        )
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _in_window(samples: Sequence[Mapping[str, Any]], lo: float, hi: float) -> list:
    """Samples that describe [lo, hi]: a sample covers the ``SAMPLE_S`` before its time, so
    one that began before the first send (tokenizers and prompts being built) is left out."""
    timed = [s for s in samples if isinstance(s.get("t"), (int, float))]
    if not timed:  # files without times: every sample counts
        return list(samples)
    out = []
    for sample in timed:
        # Samples written before lag was measured are points in time, not intervals.
        covers = SAMPLE_S if sample.get("loop_probes") is not None else 0.0
        if lo + covers <= float(sample["t"]) <= hi + covers:
            out.append(sample)
    return out


def _pooled_quantile(histograms: list[list[int]], q: float) -> float | None:
    """A quantile of the pooled lag histograms: the upper edge of its bucket (conservative)."""
    if not histograms:
        return None
    counts = [sum(column) for column in zip(*histograms, strict=False)]
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, count in enumerate(counts):
        seen += count
        if seen >= rank:
            return LOOP_LAG_BUCKETS_MS[i] if i < len(LOOP_LAG_BUCKETS_MS) else math.inf
    return math.inf


def loadgen_stats(
    samples: Sequence[Mapping[str, Any]], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """The load generator's health over [start, end]: event-loop lag, CPU, and a verdict.

    The verdict rests on event-loop lag: a process counts as overloaded when its lag p99
    exceeded ``LAG_P99_LIMIT_MS`` in more than a quarter of its samples (one busy moment is
    normal; a loop that keeps waking late stamps every chunk late). Files written before lag
    was measured fall back to CPU: a process above 90 % for over a quarter of its samples.
    """
    lo = -math.inf if start_s is None or math.isnan(start_s) else start_s
    hi = math.inf if end_s is None or math.isnan(end_s) else end_s
    by_worker: dict[str, list[Mapping[str, Any]]] = {}
    for sample in _in_window(samples, lo, hi):
        if sample.get("cpu_percent") is not None or sample.get("loop_probes"):
            by_worker.setdefault(str(sample.get("worker", "")), []).append(sample)
    if not by_worker:
        return {}
    per_worker = {worker: worker_health(rows) for worker, rows in sorted(by_worker.items())}
    has_lag = any(w["loop_lag_p99_ms"] is not None for w in per_worker.values())
    busy = [w for w, h in per_worker.items() if (h["lagging"] if has_lag else h["cpu_bound"])]
    peak = max(h["max_cpu_percent"] for h in per_worker.values())
    everything = [s for rows in by_worker.values() for s in rows]
    histograms = [s["loop_lag_histogram"] for s in everything if s.get("loop_lag_histogram")]
    p99 = _pooled_quantile(histograms, 0.99)
    machine = [float(v) for s in everything if (v := s.get("machine_cpu_percent")) is not None]
    steal = [float(v) for s in everything if (v := s.get("steal_percent")) is not None]
    fix = f"its latencies include its own delay; {SATURATED_FIX}"
    starved = has_lag and bool(busy) and all(per_worker[w]["starved"] for w in busy)
    if starved:
        worst = max(per_worker[w]["typical_lag_p99_ms"] or 0.0 for w in busy)
        waited = max(per_worker[w]["mean_wait_percent"] or 0.0 for w in busy)
        own = max(per_worker[w]["mean_cpu_percent"] for w in busy)
        verdict = (
            f"load generator held back by this machine: event-loop lag p99 {worst:.1f} ms > "
            f"{LAG_P99_LIMIT_MS:g} ms in {', '.join(busy)} for over a quarter of the run while "
            f"it used {own:.0f} % of a core and waited {waited:.0f} % of the time for one: other "
            "processes (a server on the same cores?) held them; its latencies include that "
            "delay; give it cores of its own (another machine, or a server that leaves one free)"
        )
    elif has_lag and busy:
        worst = max(per_worker[w]["typical_lag_p99_ms"] or 0.0 for w in busy)
        verdict = (
            f"load generator overloaded: event-loop lag p99 {worst:.1f} ms > "
            f"{LAG_P99_LIMIT_MS:g} ms in {', '.join(busy)} for over a quarter of the run; {fix}"
        )
    elif has_lag:
        verdict = (
            f"load generator healthy: event-loop lag p99 ≤ {p99:g} ms (limit "
            f"{LAG_P99_LIMIT_MS:g} ms); main loop at most {peak:.0f} % of a core"
        )
    elif busy:
        verdict = (
            f"load generator saturated ({', '.join(busy)} above {SATURATED_CPU_PERCENT:g} % CPU "
            f"for over a quarter of the run); {fix}"
        )
    else:
        verdict = f"load generator healthy (peak {peak:.0f} % CPU per process; no lag measured)"
    if has_lag and (pause := longest_pause(per_worker)):
        verdict += f"; {pause}"
    return {
        K.LOADGEN_CPU: per_worker,
        K.LOADGEN_MEAN_CPU_PERCENT: _mean([h["mean_cpu_percent"] for h in per_worker.values()]),
        K.LOADGEN_MAX_CPU_PERCENT: peak,
        K.LOADGEN_LOOP_LAG_P50_MS: _pooled_quantile(histograms, 0.5),
        K.LOADGEN_LOOP_LAG_P99_MS: p99,
        K.LOADGEN_LOOP_LAG_MAX_MS: max(
            (h["max_lag_ms"] for h in per_worker.values() if h["max_lag_ms"] is not None),
            default=None,
        ),
        K.LOADGEN_MACHINE_CPU_PERCENT: _mean(machine) if machine else None,
        K.LOADGEN_STEAL_PERCENT: _mean(steal) if steal else None,
        K.LOADGEN_SATURATED: bool(busy),
        K.LOADGEN_STARVED: starved,
        K.LOADGEN_VERDICT: verdict,
    }


# Known pauses of a Locust process's loop that the health samples time (locustfiles.health).
PAUSE_CAUSES = {"gc": "garbage collection", "ship": "handing records on"}


def longest_pause(per_worker: Mapping[str, Mapping[str, Any]]) -> str:
    """The longest event-loop pause of any process, where, and the known pause that may
    explain it (``""`` for samples that do not time pauses: files written before they did)."""
    timed = {w: h for w, h in per_worker.items() if h.get("pauses") and h["max_lag_ms"]}
    if not timed:
        return ""
    worker = max(timed, key=lambda w: timed[w]["max_lag_ms"])
    health = timed[worker]
    kind, ms = max(health["pauses"].items(), key=lambda kv: kv[1])
    cause = f" ({PAUSE_CAUSES[kind]} took up to {ms:.1f} ms)" if ms >= 1.0 else ""
    return f"longest loop pause {health['max_lag_ms']:.1f} ms in {worker}{cause}"


def held_back(cpu_percent: float, wait_percent: float | None) -> bool:
    """Whether a lagging Locust process was held back by other processes on the machine: it
    waited for a core longer than it ran, at under half of one, so its own work did not make
    it late (``wait_percent`` None: not recorded, so not known)."""
    return (
        wait_percent is not None
        and wait_percent > cpu_percent
        and cpu_percent < STARVED_CPU_PERCENT
    )


def worker_health(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One Locust process's health over its samples: CPU, waiting for a core, event-loop lag,
    and the verdicts on them (``starved``: held back by other processes; ``lagging``)."""
    # CPU is the main thread's share of one core; older files held the whole process's.
    cpu = [min(float(r["cpu_percent"]), 100.0) for r in rows if r.get("cpu_percent") is not None]
    p99s = [float(r["loop_lag_p99_ms"]) for r in rows if r.get("loop_probes")]
    maxes = [float(r["loop_lag_max_ms"]) for r in rows if r.get("loop_probes")]
    over = sum(v > LAG_P99_LIMIT_MS for v in p99s)
    waits = [float(r["wait_percent"]) for r in rows if r.get("wait_percent") is not None]
    mean_cpu = _mean(cpu) if cpu else 0.0
    mean_wait = _mean(waits) if waits else None
    # the longest stretch of each known pause (newer files time them: locustfiles.health)
    pauses = {
        kind: max(float(r[f"{kind}_max_ms"]) for r in rows if r.get(f"{kind}_max_ms") is not None)
        for kind in PAUSE_CAUSES
        if any(r.get(f"{kind}_max_ms") is not None for r in rows)
    }
    # Late in more than a quarter of the samples, and in more than one: a single late sample
    # (a short run's first seconds, a collector flush) is not a client that keeps falling behind.
    return {
        "mean_cpu_percent": mean_cpu,
        "mean_wait_percent": mean_wait,
        "starved": held_back(mean_cpu, mean_wait),
        "max_cpu_percent": max(cpu) if cpu else 0.0,
        "cpu_bound": sum(v > SATURATED_CPU_PERCENT for v in cpu) > len(cpu) / 4 if cpu else False,
        "loop_lag_p99_ms": max(p99s) if p99s else None,
        "typical_lag_p99_ms": sorted(p99s)[len(p99s) // 2] if p99s else None,
        "max_lag_ms": max(maxes) if maxes else None,
        **({"pauses": pauses} if pauses else {}),
        "lagging_share": over / len(p99s) if p99s else 0.0,
        "lagging": over > max(1.0, len(p99s) / 4),
    }


# A run whose host pace (the probe's CPU time for fixed work) spread more than this between
# its 10th and 90th percentile was measured on an unsteady host.
HOST_SPREAD_LIMIT_PCT = 20.0
_HOST_MIN_SAMPLES = 5


def host_stats(
    samples: Sequence[Mapping[str, Any]], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """The host's pace over [start, end] from ``host.jsonl``: the median CPU time of the
    probe's fixed work, how far it spread (90th over 10th percentile, in %), and whether
    that makes the host unsteady. Empty with too few samples."""
    import numpy as np

    lo = start_s if start_s is not None and math.isfinite(start_s) else -math.inf
    hi = end_s if end_s is not None and math.isfinite(end_s) else math.inf
    work = np.array([float(s["work_ms"]) for s in samples if lo <= float(s["t"]) <= hi])
    work = work[np.isfinite(work) & (work > 0)]
    if work.size < _HOST_MIN_SAMPLES:
        return {}
    p10, p50, p90 = np.percentile(work, [10, 50, 90])
    spread = (p90 / p10 - 1.0) * 100.0
    inside = [s for s in samples if lo <= float(s["t"]) <= hi]
    return {
        K.HOST_WORK_MS: float(p50),
        K.HOST_PACE_SPREAD_PCT: float(spread),
        K.HOST_UNSTEADY: bool(spread > HOST_SPREAD_LIMIT_PCT),
        K.HOST_CPU_WAIT_PCT: _stall_share(inside, "cpu_some_us"),
        K.HOST_IO_STALL_PCT: _stall_share(inside, "io_full_us"),
    }


def _stall_share(samples: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The share (%) of the samples' span the kernel's running stall total ``key`` grew by:
    for ``cpu_some_us`` the time some task waited for a core, for ``io_full_us`` the time
    every task was stalled on I/O. ``None`` where the host does not report it."""
    timed = sorted((float(s["t"]), float(s[key])) for s in samples if key in s)
    if len(timed) < 2 or timed[-1][0] <= timed[0][0]:
        return None
    (t0, total0), (t1, total1) = timed[0], timed[-1]
    return max(0.0, (total1 - total0) / 1e6 / (t1 - t0) * 100.0)
