"""A replay as vprof's per-request records and ``/metrics`` samples, so the summary code that
reads a measured run reads a predicted one the same way (pure, numpy and pyarrow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vprof.forecast.simulate import CANCELLED, ERROR, NOT_SENT, OK, Replayed, Requests


@dataclass(frozen=True)
class RecordContext:
    """What the records say besides the replay's times: when the run began (wall clock),
    the intended send times (open loop), the endpoint and the prefix groups."""

    epoch_s: float
    open_loop: bool
    scheduled_s: Any = None  # open loop: each request's intended send time (from epoch)
    endpoint: str = "completions"
    prefix_group: Any = None  # the workload's prefix group per request (-1: none)
    expected_prompt_tokens: Any = None


def replay_table(replayed: Replayed, requests: Requests, ctx: RecordContext) -> Any:
    """The records of a replay as an Arrow table with vprof's schema (``records.arrow``)."""
    import numpy as np
    import pyarrow as pa

    from vprof.records.schema import arrow_schema

    status = replayed.status
    keep = status != NOT_SENT
    if ctx.open_loop and ctx.scheduled_s is not None:
        # a request due before the end but never sent (every user busy) is cancelled
        keep = keep | np.isfinite(np.asarray(ctx.scheduled_s, dtype=np.float64))
    idx = np.flatnonzero(keep)
    m = idx.size
    epoch = ctx.epoch_s
    sent = replayed.sent_s[idx] + epoch
    first = replayed.first_s[idx] + epoch
    last = replayed.last_s[idx] + epoch
    st = status[idx].astype(str)
    st[st == NOT_SENT] = CANCELLED
    ok = st == OK
    output = np.maximum(np.asarray(requests.output_tokens, dtype=np.int64)[idx], 1)
    prompt = np.asarray(requests.prompt_tokens, dtype=np.int64)[idx]
    if ctx.open_loop and ctx.scheduled_s is not None:
        scheduled = np.asarray(ctx.scheduled_s, dtype=np.float64)[idx] + epoch
    else:
        scheduled = sent.copy()
    ttft = np.where(ok, (first - sent) * 1000.0, np.nan)
    e2e = np.where(ok, (last - sent) * 1000.0, np.nan)
    many = ok & (output > 1)
    tpot = np.where(many, (e2e - ttft) / np.maximum(output - 1, 1), np.nan)
    lag = np.where(np.isfinite(sent), np.maximum(0.0, (sent - scheduled) * 1000.0), 0.0)
    gaps, offsets = _itl(replayed, idx, output, ok)
    completion = np.where(ok, output, np.where(st == ERROR, 0, -1))
    finished = np.where(np.isfinite(last), last, np.nan)
    error = np.where(st == ERROR, "HTTP 400: longer than the server's max-model-len", "")
    group = (
        np.asarray(ctx.prefix_group, dtype=np.int64)[idx]
        if ctx.prefix_group is not None
        else np.full(m, -1, dtype=np.int64)
    )
    expected = (
        np.asarray(ctx.expected_prompt_tokens, dtype=np.int64)[idx]
        if ctx.expected_prompt_tokens is not None
        else prompt
    )
    columns: dict[str, Any] = {
        "request_id": pa.array([str(i) for i in idx.tolist()], pa.string()),
        "user_class": pa.array(["forecast"] * m, pa.string()),
        "endpoint": pa.array([ctx.endpoint] * m, pa.string()),
        "open_loop": pa.array(np.full(m, ctx.open_loop)),
        "prefix_group": pa.array(group),
        "scheduled_at": pa.array(scheduled),
        "sent_at": pa.array(sent),
        "first_token_at": pa.array(np.where(ok, first, np.nan)),
        "last_token_at": pa.array(np.where(ok, last, np.nan)),
        "finished_at": pa.array(finished),
        "ttft_ms": pa.array(ttft),
        "e2e_ms": pa.array(e2e),
        "tpot_ms": pa.array(tpot),
        "schedule_lag_ms": pa.array(lag),
        "itl_ms": pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(gaps)),
        "prompt_tokens": pa.array(np.where(st == CANCELLED, -1, prompt)),
        "completion_tokens": pa.array(completion),
        "cached_tokens": pa.array(np.where(ok, replayed.cached[idx], -1)),
        "expected_prompt_tokens": pa.array(expected),
        "expected_output_tokens": pa.array(output),
        "status": pa.array(st.tolist(), pa.string()),
        "http_status": pa.array(np.where(ok, 200, np.where(st == ERROR, 400, 0))),
        "error": pa.array(error.tolist(), pa.string()),
    }
    schema = arrow_schema()
    arrays = []
    for f in schema:
        if f.name in columns:
            arrays.append(columns[f.name].cast(f.type))
        else:
            arrays.append(_default_column(f, m))
    return pa.Table.from_arrays(arrays, schema=schema)


def _default_column(f: Any, m: int) -> Any:
    import pyarrow as pa

    from vprof.records.schema import field_default

    value = field_default(f.name)
    if isinstance(value, list):
        return pa.array([[] for _ in range(m)], f.type)
    return pa.array([value] * m, f.type)


def _itl(replayed: Replayed, idx: Any, output: Any, ok: Any) -> tuple[Any, Any]:
    """Inter-token gaps (ms) of the kept requests, flat, and the list offsets."""
    import numpy as np

    counts = np.where(ok, output - 1, 0).astype(np.int64)
    offsets = np.zeros(idx.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    steps = replayed.steps_s
    if total == 0:
        return np.empty(0), offsets
    starts = replayed.first_step[idx]
    within = np.arange(total) - np.repeat(offsets[:-1], counts)
    at = np.repeat(starts, counts) + within
    at = np.clip(at, 0, max(steps.size - 2, 0))
    gaps = (steps[at + 1] - steps[at]) * 1000.0
    for row, i in enumerate(idx.tolist()):
        if i in replayed.segments and counts[row] > 0:
            times = replayed.token_times(i, int(output[row]))
            gaps[offsets[row] : offsets[row + 1]] = np.diff(times) * 1000.0
    return gaps, offsets


def replay_metrics(replayed: Replayed, requests: Requests, epoch_s: float) -> list[dict]:
    """``/metrics`` samples a sampler would have taken of the replayed server: the counters at
    the start and the end, the gauges' peaks in between."""
    import numpy as np

    ok = replayed.status == OK
    finite = replayed.sent_s[np.isfinite(replayed.sent_s)]
    start = epoch_s + (float(finite.min()) if finite.size else 0.0)
    ends = replayed.last_s[np.isfinite(replayed.last_s)]
    end = epoch_s + (float(ends.max()) if ends.size else 0.0)
    output = np.asarray(requests.output_tokens, dtype=np.int64)
    prompt = np.asarray(requests.prompt_tokens, dtype=np.int64)
    zero = {
        "vllm:num_requests_running": 0.0,
        "vllm:num_requests_waiting": 0.0,
        "vllm:kv_cache_usage_perc": 0.0,
        "vllm:num_preemptions_total": 0.0,
        "vllm:prefix_cache_queries_total": 0.0,
        "vllm:prefix_cache_hits_total": 0.0,
        "vllm:prompt_tokens_total": 0.0,
        "vllm:generation_tokens_total": 0.0,
        "vllm:request_success_total": 0.0,
        "vllm:iteration_tokens_total_count": 0.0,
        "vllm:iteration_tokens_total_sum": 0.0,
    }
    peak = {
        **zero,
        "vllm:num_requests_waiting": float(replayed.max_waiting),
        "vllm:kv_cache_usage_perc": float(min(replayed.max_kv_usage, 1.0)),
    }
    totals = {
        **zero,
        "vllm:num_preemptions_total": float(replayed.preemptions),
        "vllm:prefix_cache_queries_total": float(replayed.prefix_queries),
        "vllm:prefix_cache_hits_total": float(replayed.prefix_hits),
        "vllm:prompt_tokens_total": float(prompt[ok].sum()),
        "vllm:generation_tokens_total": float(output[ok].sum()),
        "vllm:request_success_total": float(ok.sum()),
        "vllm:iteration_tokens_total_count": float(replayed.steps),
        "vllm:iteration_tokens_total_sum": float(replayed.step_tokens),
    }
    middle = (start + end) / 2
    return [
        {"t": start, "scrape_s": 0.0, "values": zero},
        {"t": middle, "scrape_s": 0.0, "values": peak},
        {"t": end, "scrape_s": 0.0, "values": totals},
    ]
