"""A replay as vprof's per-request records and ``/metrics`` samples, so the summary code that
reads a measured run reads a predicted one the same way (pure, numpy and pyarrow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vprof.forecast.simulate import CANCELLED, ERROR, NOT_SENT, OK, Replayed, Requests

# A predicted run's /metrics are sampled as often as a bench's sampler samples a real server's
# (its default interval in runs/sampler.py, which this floor does not import).
SAMPLE_S = 5.0


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
    """``/metrics`` samples a sampler would have taken of the replayed server, every
    ``SAMPLE_S``: the counters vLLM keeps as they stood at each sample, the gauges' peaks on the
    middle one."""
    import numpy as np

    finite = replayed.sent_s[np.isfinite(replayed.sent_s)]
    start = float(finite.min()) if finite.size else 0.0
    ends = replayed.last_s[np.isfinite(replayed.last_s)]
    end = max(float(ends.max()) if ends.size else 0.0, start)
    times = sorted({start, end, (start + end) / 2, *np.arange(start, end, SAMPLE_S).tolist()})
    middle = (start + end) / 2
    out = []
    for t in times:
        values = _counters_at(replayed, requests, t)
        if t == end:
            values["vllm:num_preemptions_total"] = float(replayed.preemptions)
        if t == middle:
            values["vllm:num_requests_waiting"] = float(replayed.max_waiting)
            values["vllm:kv_cache_usage_perc"] = float(min(replayed.max_kv_usage, 1.0))
        out.append({"t": epoch_s + t, "scrape_s": 0.0, "values": values})
    return out


def _counters_at(replayed: Replayed, requests: Requests, t: float) -> dict[str, float]:
    """The counters of the replayed server at ``t`` (seconds from the replay's start), counted
    as vLLM counts them: prompt tokens when a prompt's first token comes, an iteration for
    each step that gave some request a token, the per-request histograms when it finishes."""
    import numpy as np

    ok = replayed.status == OK
    prompt = np.asarray(requests.prompt_tokens, dtype=np.float64)
    output = np.maximum(np.asarray(requests.output_tokens, dtype=np.float64), 1)
    cached = np.asarray(replayed.cached, dtype=np.float64)
    first = np.isfinite(replayed.first_s) & (replayed.first_s <= t)
    done = ok & np.isfinite(replayed.last_s) & (replayed.last_s <= t)
    steps_done = int(np.searchsorted(replayed.steps_s, t, side="right"))
    decodes = replayed.step_decodes[:steps_done] if replayed.step_decodes is not None else None
    if decodes is not None:
        firsts = np.bincount(
            replayed.first_step[first & (replayed.first_step >= 0)], minlength=steps_done
        )[:steps_done]
        iterations = float(np.count_nonzero(decodes + firsts))
        decoded = float(decodes.sum())
    else:  # a replay that kept no steps' detail: every step counted, tokens from the requests
        iterations = float(steps_done)
        decoded = float((output[done] - 1).sum())
    computed = float((prompt[first] - cached[first]).sum())
    generated = decoded + float(first.sum())
    scheduled = replayed.scheduled_s if replayed.scheduled_s is not None else replayed.first_s
    return {
        "vllm:num_requests_running": 0.0,
        "vllm:num_requests_waiting": 0.0,
        "vllm:kv_cache_usage_perc": 0.0,
        "vllm:num_preemptions_total": 0.0,
        "vllm:prefix_cache_queries_total": float(prompt[first].sum()),
        "vllm:prefix_cache_hits_total": float(cached[first].sum()),
        "vllm:prompt_tokens_total": float(prompt[first].sum()),
        "vllm:prompt_tokens_cached_total": float(cached[first].sum()),
        "vllm:generation_tokens_total": generated,
        "vllm:request_success_total": float(done.sum()),
        "vllm:iteration_tokens_total_count": iterations,
        "vllm:iteration_tokens_total_sum": computed + generated,
        "vllm:time_to_first_token_seconds_count": float(first.sum()),
        "vllm:request_prefill_time_seconds_count": float(done.sum()),
        "vllm:request_prefill_time_seconds_sum": float(
            (replayed.first_s[done] - scheduled[done]).sum()
        ),
        "vllm:request_prefill_kv_computed_tokens_count": float(done.sum()),
        "vllm:request_prefill_kv_computed_tokens_sum": float((prompt[done] - cached[done]).sum()),
        "vllm:request_decode_time_seconds_sum": float(
            (replayed.last_s[done] - replayed.first_s[done]).sum()
        ),
    }
