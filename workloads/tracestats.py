"""What a trace holds before it is replayed: rate over time, length percentiles, prefix sharing.

The prefix-cache hit rate a trace implies is computed as a prefix cache would see it: block k
of a request hits when an earlier request had the same ids at positions 0..k (a cache keeps
prefixes, not loose blocks), in arrival order, with unlimited capacity. It is the figure to set
beside the server's measured hit rate after a replay. Pure standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.numbers import check_interval_rows
from vprof.workloads.trace import Trace, TraceRequest

PERCENTILES = (50.0, 90.0, 99.0)
_NICE_BUCKETS_S = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


@dataclass(frozen=True)
class PrefixSharing:
    """How much of a trace's prompts an unlimited prefix cache would serve from earlier ones."""

    blocks: int  # block positions over all requests (one per id in prefix_blocks)
    distinct_blocks: int  # distinct prefixes of blocks: what the cache ends up holding
    block_hits: int  # blocks whose whole prefix an earlier request had
    prompt_tokens: int
    cached_tokens: int  # prompt tokens covered by those hits
    requests_with_hits: int

    @property
    def block_hit_rate(self) -> float:
        """Blocks already seen / blocks (nan for a trace without block ids)."""
        return self.block_hits / self.blocks if self.blocks else math.nan

    @property
    def token_hit_rate(self) -> float:
        """Cached prompt tokens / prompt tokens: comparable with the server's hit rate."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else math.nan

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["block_hit_rate"] = self.block_hit_rate
        out["token_hit_rate"] = self.token_hit_rate
        return out


def implied_cached_tokens(requests: Sequence[TraceRequest], block_size: int) -> list[int]:
    """Per request, the prompt tokens an unlimited prefix cache would hold for it when it
    arrives (in order): the figure to set beside the server's ``cached_tokens``."""
    per_request, _ = _walk(requests, block_size)
    return [cached for _, _, cached in per_request]


def prefix_sharing(requests: Sequence[TraceRequest], block_size: int) -> PrefixSharing:
    """The prefix-cache hits ``requests`` imply, taken in order with unlimited capacity.

    Block k of a request of P prompt tokens covers tokens [k·B, min((k+1)·B, P)); a hit on a
    last, partial block counts the tokens an earlier request had in it, at most.
    """
    blocks = hits = cached = with_hits = 0
    per_request, distinct = _walk(requests, block_size)
    for n_blocks, n_hits, n_cached in per_request:
        blocks += n_blocks
        hits += n_hits
        cached += n_cached
        with_hits += n_hits > 0
    return PrefixSharing(
        blocks=blocks,
        distinct_blocks=distinct,
        block_hits=hits,
        prompt_tokens=sum(r.prompt_tokens for r in requests),
        cached_tokens=cached,
        requests_with_hits=with_hits,
    )


def _walk(
    requests: Sequence[TraceRequest], block_size: int
) -> tuple[list[tuple[int, int, int]], int]:
    """(blocks, block hits, cached tokens) of each request in turn, and the number of
    distinct prefixes of blocks."""
    # Each distinct prefix of blocks gets a node: (parent node, block id) -> node. The longest
    # piece of the block that any request has sent so far is what a cache could hold of it.
    nodes: dict[tuple[int, int], int] = {}
    held_tokens: list[int] = []
    out = []
    for request in requests:
        prompt = request.prompt_tokens
        parent = -1
        blocks = hits = cached = 0
        chain_intact = True
        for k, block_id in enumerate(request.prefix_blocks):
            tokens = min((k + 1) * block_size, prompt) - k * block_size
            if tokens <= 0:
                break
            blocks += 1
            key = (parent, block_id)
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = len(held_tokens)
                held_tokens.append(0)
                chain_intact = False  # a cache matches a prefix: nothing after a miss hits
            elif chain_intact:
                hits += 1
                cached += min(tokens, held_tokens[node])
                chain_intact = tokens <= held_tokens[node]
            held_tokens[node] = max(held_tokens[node], tokens)
            parent = node
        out.append((blocks, hits, cached))
    return out, len(held_tokens)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of already sorted values, interpolated linearly (numpy's
    default method, as vprof's summaries use)."""
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(position)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = position - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def distribution_row(name: str, values: Sequence[float]) -> dict[str, Any]:
    """min, mean, the percentiles and max of ``values`` as one table row."""
    ordered = sorted(values)
    row: dict[str, Any] = {"quantity": name, "count": len(ordered)}
    if not ordered:
        return row
    row["min"] = ordered[0]
    row["mean"] = sum(ordered) / len(ordered)
    for q in PERCENTILES:
        row[f"p{q:g}"] = percentile(ordered, q)
    row["max"] = ordered[-1]
    return row


def nice_bucket_s(duration_s: float, buckets: int = 15) -> float:
    """A round interval that cuts ``duration_s`` into about ``buckets`` pieces."""
    target = duration_s / buckets if duration_s > 0 else 1.0
    hour = _NICE_BUCKETS_S[-1]
    return next((b for b in _NICE_BUCKETS_S if b >= target), math.ceil(target / hour) * hour)


def rate_over_time(
    offsets_s: Sequence[float], prompt_tokens: Sequence[int], bucket_s: float
) -> list[dict[str, Any]]:
    """Arrivals per interval of ``bucket_s`` replayed seconds (empty intervals included);
    more than ``MAX_INTERVAL_ROWS`` of them are refused before any is made."""
    if bucket_s <= 0 or not math.isfinite(bucket_s):
        raise ValueError("bucket_s must be a positive number")
    if not offsets_s:
        return []
    check_interval_rows(
        offsets_s[-1], bucket_s, over="this replay", error=WorkloadError, key="--bucket-s"
    )
    n_buckets = int(offsets_s[-1] // bucket_s) + 1
    counts = [0] * n_buckets
    tokens = [0] * n_buckets
    for t, p in zip(offsets_s, prompt_tokens, strict=True):
        i = min(int(t // bucket_s), n_buckets - 1)
        counts[i] += 1
        tokens[i] += p
    return [
        {
            "t_s": round(i * bucket_s, 6),
            "requests": counts[i],
            "rate_rps": counts[i] / bucket_s,
            "prompt_tokens_per_s": tokens[i] / bucket_s,
        }
        for i in range(n_buckets)
    ]


def trace_stats(trace: Trace, bucket_s: float | None = None) -> dict[str, Any]:
    """Everything ``vprof trace stats`` shows: ``summary`` (a flat dict), ``lengths`` (rows of
    percentiles) and ``rate`` (rows of arrivals per interval, in replayed time)."""
    requests = trace.requests
    spec = trace.spec
    offsets = trace.offsets_s()
    duration_s = offsets[-1] if offsets else 0.0
    gaps_ms = [(b - a) * 1000.0 for a, b in zip(offsets, offsets[1:], strict=False)]
    sharing = prefix_sharing(requests, spec.block_size)
    sessions = {r.session_id for r in requests if r.session_id is not None}
    bucket = bucket_s if bucket_s is not None else nice_bucket_s(duration_s)
    rate = rate_over_time(offsets, [r.prompt_tokens for r in requests], bucket)
    summary: dict[str, Any] = {
        "file": spec.file,
        "format": trace.format,
        "block_size": spec.block_size,
        "rows_read": trace.rows_read,
        "requests": len(requests),
        "time_scale": spec.time_scale,
        "trace_span_s": duration_s * spec.time_scale,
        "replay_duration_s": duration_s,
        "mean_rate_rps": (len(requests) - 1) / duration_s if duration_s > 0 else math.nan,
        "peak_rate_rps": max((row["rate_rps"] for row in rate), default=math.nan),
        "rate_bucket_s": bucket,
        "sessions": len(sessions),
        "prompt_tokens": sharing.prompt_tokens,
        "output_tokens": sum(r.output_tokens for r in requests),
        "max_request_tokens": trace.max_request_tokens(),
        "requests_with_blocks": sum(1 for r in requests if r.prefix_blocks),
        "blocks": sharing.blocks,
        "distinct_blocks": sharing.distinct_blocks,
        "implied_block_hit_rate": sharing.block_hit_rate,
        "implied_token_hit_rate": sharing.token_hit_rate,
        "requests_with_hits": sharing.requests_with_hits,
    }
    lengths = [
        distribution_row("prompt_tokens", [r.prompt_tokens for r in requests]),
        distribution_row("output_tokens", [r.output_tokens for r in requests]),
        distribution_row("blocks_per_request", [len(r.prefix_blocks) for r in requests]),
        distribution_row("inter_arrival_ms", gaps_ms),
    ]
    return {"summary": summary, "lengths": lengths, "rate": rate}
