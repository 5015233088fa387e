"""Server ``/metrics`` samples and load-generator CPU samples, reduced to a few numbers.

Both arrive as lists of small dicts (one per line of ``metrics.jsonl`` / ``loadgen.jsonl``);
they are short (one sample every few seconds), so plain Python is the right tool here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"

# A load generator busier than this cannot keep time: its latencies include its own queueing.
SATURATED_CPU_PERCENT = 90.0


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
    """
    ordered = sorted((s for s in samples if "t" in s), key=lambda s: float(s["t"]))
    if not ordered:
        return {"metrics_samples": 0}
    lo = -math.inf if start_s is None or math.isnan(start_s) else start_s
    hi = math.inf if end_s is None or math.isnan(end_s) else end_s
    before = [s for s in ordered if float(s["t"]) <= lo]
    window = [s for s in ordered if lo <= float(s["t"]) <= hi] or ordered
    first = before[-1] if before else window[0]
    last = window[-1]
    out: dict[str, Any] = {"metrics_samples": len(window)}

    def delta(name: str) -> float | None:
        a, b = _value(first.get("values", {}), name), _value(last.get("values", {}), name)
        # A restarted server resets its counters; a negative delta would be nonsense.
        return None if a is None or b is None else max(b - a, 0.0)

    hits, queries = delta(HITS), delta(QUERIES)
    out["prefix_cache_hit_rate"] = (hits / queries) if hits is not None and queries else None
    preemptions = delta(PREEMPTIONS)
    out["num_preemptions"] = int(preemptions) if preemptions is not None else None
    for key, name, reduce in (
        ("max_kv_cache_usage_perc", KV_USAGE, max),
        ("max_num_requests_waiting", WAITING, max),
        ("mean_num_requests_waiting", WAITING, _mean),
        ("max_num_requests_running", RUNNING, max),
    ):
        seen = [v for s in window if (v := _value(s.get("values", {}), name)) is not None]
        out[key] = reduce(seen) if seen else None
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def loadgen_stats(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean and max CPU per load-generator process, and whether any was saturated.

    A process counts as saturated when more than a quarter of its samples exceed 90 %:
    one busy moment is normal, a generator pinned at 100 % delays sends and reads.
    """
    by_worker: dict[str, list[float]] = {}
    for sample in samples:
        if sample.get("cpu_percent") is None:
            continue
        by_worker.setdefault(str(sample.get("worker", "")), []).append(float(sample["cpu_percent"]))
    if not by_worker:
        return {}
    per_worker = {
        worker: {
            "mean_cpu_percent": _mean(values),
            "max_cpu_percent": max(values),
            "saturated": sum(v > SATURATED_CPU_PERCENT for v in values) > len(values) / 4,
        }
        for worker, values in sorted(by_worker.items())
    }
    busy = [w for w, s in per_worker.items() if s["saturated"]]
    peak = max(s["max_cpu_percent"] for s in per_worker.values())
    if busy:
        verdict = (
            f"load generator saturated ({', '.join(busy)} above {SATURATED_CPU_PERCENT:g} % CPU "
            "for over a quarter of the run): latencies may be client-bound; add Locust workers"
        )
    else:
        verdict = f"load generator healthy (peak {peak:.0f} % CPU per process)"
    return {
        "loadgen_cpu": per_worker,
        "loadgen_mean_cpu_percent": _mean([s["mean_cpu_percent"] for s in per_worker.values()]),
        "loadgen_max_cpu_percent": peak,
        "loadgen_saturated": bool(busy),
        "loadgen_verdict": verdict,
    }
