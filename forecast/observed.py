"""Measured runs as a fit sees them: the request stream they sent, what each request got, the
server's rules and counters, and which configuration they belong to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import ForecastError
from vprof.forecast.rules import ConfigKey, SchedulerRules, config_key, rules_from_run
from vprof.forecast.simulate import Replay, Requests, simulate
from vprof.forecast.stalls import RunStalls, find_stalls, token_times
from vprof.forecast.stepcost import StepCost

ITERATIONS = "vllm:iteration_tokens_total_count"  # steps the engine took (a histogram's count)
ITERATION_TOKENS = "vllm:iteration_tokens_total_sum"
# What the server counted between two samples, for the fit's per-interval rows
PROMPT_TOKENS = "vllm:prompt_tokens_total"  # counted when a prompt's first token comes
CACHED_TOKENS = "vllm:prompt_tokens_cached_total"
GENERATED = "vllm:generation_tokens_total"
FIRST_TOKENS = "vllm:time_to_first_token_seconds_count"
PREFILL_TIME = "vllm:request_prefill_time_seconds_sum"  # first scheduled → first token
PREFILLED = "vllm:request_prefill_time_seconds_count"  # counted when a request finishes
PREFILL_COMPUTED = "vllm:request_prefill_kv_computed_tokens_sum"
INTERVAL_COUNTERS = (
    ITERATIONS,
    PROMPT_TOKENS,
    CACHED_TOKENS,
    GENERATED,
    FIRST_TOKENS,
    PREFILL_TIME,
    PREFILLED,
    PREFILL_COMPUTED,
)


@dataclass(frozen=True)
class ServerIntervals:
    """What the server counted between consecutive ``/metrics`` samples (numpy arrays, one
    value per interval; times in seconds from the run's time 0)."""

    start_s: Any
    end_s: Any
    steps: Any  # engine steps that gave some request a token
    prefill_tokens: Any  # prompt tokens computed (after the prefix cache), by first token
    decode_tokens: Any  # tokens decoded: generated less the first tokens
    prefill_time_s: Any  # the prefill time of the requests that finished
    prefilled: Any  # how many requests finished (the prefill time's count)
    prefill_computed: Any  # their computed prompt tokens

    @property
    def n(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class Observed:
    """One measured run, ready to be replayed with the requests it really sent."""

    name: str
    path: Path
    key: ConfigKey
    rules: SchedulerRules
    meta: Mapping[str, Any]
    summary: Mapping[str, Any]
    requests: Requests
    client: Replay
    epoch_s: float  # wall clock of the run's time 0
    warmup_s: float  # requests sent before this (from time 0) are not summarised
    measured: Mapping[str, Any]  # per request: ttft_ms, tpot_ms, ok (NaN where not measured)
    server: Mapping[str, float] = field(default_factory=dict)  # counter deltas from /metrics
    intervals: ServerIntervals | None = None  # the same, per sample interval (None: not kept)
    open_loop: bool = False
    chat_extra_tokens: float | None = None  # chat: tokens the template adds to the content
    idle_ms: float | None = None  # closed loop: a user's pause between answer and next send
    stalls: RunStalls | None = None  # the server's stalls, from the tokens' times
    # per request (as ``requests``): its tokens' times in seconds from time 0, as the client
    # saw them (empty when it was not answered; None: the records hold no ``itl_ms``)
    token_s: tuple[Any, ...] | None = None
    # per request: when the schedule meant to send it (from time 0; its send where none)
    scheduled_s: Any = None
    locust: Mapping[str, Any] = field(default_factory=dict)  # what locust.json says

    @property
    def workload_name(self) -> str:
        workload = self.meta.get("workload")
        if isinstance(workload, Mapping):
            return str(workload.get("name") or "?")
        return str(workload or "?")

    @property
    def traffic(self) -> Mapping[str, Any]:
        traffic = self.meta.get("traffic")
        return traffic if isinstance(traffic, Mapping) else {}


def load_observed(path: str | Path) -> Observed:
    """Read a run folder for fitting; :class:`ForecastError` (naming the file and key) when it
    cannot be used: no records, no KV cache size, or not a run at all."""
    import numpy as np

    from vprof.analysis.run import load_run, summarize_loaded
    from vprof.records.rundir import RunDir

    run = load_run(path)
    meta = run.meta
    rules, why = rules_from_run(meta)
    if rules is None:
        raise ForecastError(
            why,
            path=str(RunDir(run.path).run_json),
            key="server.kv_cache_tokens",
            hint="runs that vprof launched keep it; for a server given with --url, fit needs "
            "its cache config from /metrics",
        )
    cols = run.columns
    f = cols.floats
    sent = f["sent_at"]
    has_sent = np.isfinite(sent)
    if not has_sent.any():
        raise ForecastError(
            "no request of this run was sent", path=str(RunDir(run.path).records), key="sent_at"
        )
    scheduled = np.where(np.isfinite(f["scheduled_at"]), f["scheduled_at"], sent)
    epoch = float(np.nanmin(np.where(has_sent, scheduled, np.nan)))
    prompt = cols.ints["prompt_tokens"]
    expected = cols.ints["expected_prompt_tokens"]
    prompt = np.where(prompt > 0, prompt, np.maximum(expected, 1))
    output = cols.ints["completion_tokens"]
    expected_out = _expected_output(run.records, output)
    ok = cols.status.isin("ok")
    output = np.where(ok & (output > 0), output, expected_out)
    keep = has_sent  # every request sent loaded the server, warm-up ones included
    idx = np.flatnonzero(keep)
    cached = cols.ints["cached_tokens"][idx]
    requests = Requests(
        prompt_tokens=prompt[idx],
        output_tokens=np.maximum(output[idx], 1),
        known_hit=np.where(cached >= 0, cached, 0),
    )
    warmup_until = run.warmup_until
    warmup_s = (warmup_until - epoch) if warmup_until is not None else 0.0
    measured = {
        "ttft_ms": f["ttft_ms"][idx],
        "tpot_ms": f["tpot_ms"][idx],
        "e2e_ms": f["e2e_ms"][idx],
        "first_s": f["first_token_at"][idx] - epoch,
        "last_s": f["last_token_at"][idx] - epoch,
        "ok": ok[idx],
        "after_warmup": (sent[idx] - epoch) >= warmup_s,
    }
    summary = summarize_loaded(run)
    chat = (cols.ints["expected_prompt_tokens"] > 0) & (cols.ints["prompt_tokens"] > 0) & ok
    endpoint = str((meta.get("workload") or {}).get("endpoint") or "")
    extra = None
    if endpoint == "chat" and chat.any():
        diff = cols.ints["prompt_tokens"][chat] - cols.ints["expected_prompt_tokens"][chat]
        extra = float(np.median(diff))
    if (cached < 0).all():
        requests = _replayed_hits(
            requests,
            cols.ints["prefix_group"][idx],
            meta,
            rules,
            Replay(sent[idx] - epoch),
            lead=extra or 0.0,
            step_ms=float(np.nanmedian(f["tpot_ms"])) if np.isfinite(f["tpot_ms"]).any() else 1.0,
        )
    idle = f["idle_before_ms"][np.isfinite(f["idle_before_ms"])]
    per = _token_times(run.records, f["first_token_at"] - epoch)
    answered = None
    if per is not None:
        none = np.empty(0)
        answered = [
            t if good and np.isfinite(t).all() else none for t, good in zip(per, ok, strict=True)
        ]
    return Observed(
        name=run.name,
        path=run.path,
        key=config_key(meta),
        rules=rules,
        meta=meta,
        summary=summary,
        requests=requests,
        client=Replay(sent[idx] - epoch),
        epoch_s=epoch,
        warmup_s=max(warmup_s, 0.0),
        measured=measured,
        server=_server_counters(run.metrics),
        intervals=server_intervals(run.metrics, epoch),
        open_loop=bool(summary.get(K.OPEN_LOOP)),
        chat_extra_tokens=extra,
        idle_ms=float(np.median(idle)) if idle.size else None,
        stalls=find_stalls([t for t in answered if t.size]) if answered is not None else None,
        token_s=tuple(answered[i] for i in idx) if answered is not None else None,
        scheduled_s=scheduled[idx] - epoch,
        locust=dict(run.locust or {}),
    )


def _replayed_hits(
    requests: Requests,
    groups: Any,
    meta: Mapping[str, Any],
    rules: SchedulerRules,
    client: Replay,
    *,
    lead: float,
    step_ms: float,
) -> Requests:
    """``requests`` with each one's prefix-cache hit from a replay of the cache, for a server
    that reported none (vLLM gives ``cached_tokens`` only when asked to) while the records
    say which shared prefix each request began with: without it a fit would take every shared
    prefix as computed again, and price the prompts' tokens and steps on that. The replay
    steps at the run's median inter-token time; the hits are whole blocks of the workload's
    prefix (plus the chat template's ``lead`` tokens) that an earlier request had computed."""
    import numpy as np

    prefix = (meta.get("workload") or {}).get("prefix") or {}
    length = prefix.get("length_tokens") if isinstance(prefix, Mapping) else None
    shared = groups >= 0
    if not rules.prefix_caching or not isinstance(length, (int, float)) or not shared.any():
        return requests
    keyed = replace(
        requests,
        prefix_key=groups,
        prefix_tokens=np.where(shared, int(length + lead), 0),
        known_hit=None,
    )
    replayed = simulate(keyed, client, rules, StepCost(max(step_ms, 0.1), 0.0, 0.0))
    return replace(requests, known_hit=np.asarray(replayed.cached, dtype=np.int64))


def _token_times(records: Any, first_s: Any) -> list[Any] | None:
    """Every record's token times (from its first token's time and ``itl_ms``; None without
    that column)."""
    import numpy as np

    from vprof.records.arrays import list_block

    if "itl_ms" not in records.column_names:
        return None
    blocks = [list_block(chunk) for chunk in records.column("itl_ms").chunks]
    if not blocks:
        return None
    gaps = np.concatenate([b[0] for b in blocks])
    lengths = np.concatenate([b[1] for b in blocks])
    return token_times(first_s, gaps, lengths)


def _expected_output(records: Any, fallback: Any) -> Any:
    import numpy as np

    if "expected_output_tokens" in records.column_names:
        values = records.column("expected_output_tokens").to_numpy(zero_copy_only=False)
        values = np.nan_to_num(values.astype(np.float64), nan=-1).astype(np.int64)
        return np.where(values > 0, values, np.maximum(fallback, 1))
    return np.maximum(fallback, 1)


def _server_counters(samples: tuple[Mapping[str, Any], ...]) -> dict[str, float]:
    """What the server counted over the run: steps and the tokens they held (first to last
    sample; one server only — with several replicas the steps are not one engine's)."""
    timed = sorted((s for s in samples if "t" in s), key=lambda s: float(s["t"]))
    if len(timed) < 2 or any(s.get("replica") for s in timed):
        return {}
    first, last = timed[0].get("values") or {}, timed[-1].get("values") or {}
    out: dict[str, float] = {}
    for name, key in ((ITERATIONS, "steps"), (ITERATION_TOKENS, "step_tokens")):
        if name in first and name in last:
            out[key] = max(float(last[name]) - float(first[name]), 0.0)
    out["span_s"] = float(timed[-1]["t"]) - float(timed[0]["t"])
    return out


def server_intervals(
    samples: tuple[Mapping[str, Any], ...], epoch_s: float = 0.0
) -> ServerIntervals | None:
    """The counters' growth between consecutive samples of one server; None when a sample
    lacks one of them or holds a value that is not a finite, non-negative number (an older
    vLLM, a server given by URL without them), or there are several replicas. An interval in
    which a counter went down (the server restarted) is left out."""
    import numpy as np

    timed = sorted((s for s in samples if "t" in s), key=lambda s: float(s["t"]))
    if len(timed) < 2 or any(s.get("replica") for s in timed):
        return None
    table = np.empty((len(timed), len(INTERVAL_COUNTERS) + 1))
    for row, sample in enumerate(timed):
        values = sample.get("values") or {}
        for col, name in enumerate(INTERVAL_COUNTERS):
            value = values.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            table[row, col] = float(value)
        table[row, -1] = float(sample["t"]) - epoch_s
    if not np.isfinite(table).all() or (table[:, :-1] < 0).any():
        return None
    delta = np.diff(table, axis=0)
    keep = (delta > 0)[:, -1] & (delta[:, :-1] >= 0).all(axis=1)
    if not keep.any():
        return None
    d = {name: delta[keep, col] for col, name in enumerate(INTERVAL_COUNTERS)}
    computed = d[PROMPT_TOKENS] - d[CACHED_TOKENS]
    decoded = d[GENERATED] - d[FIRST_TOKENS]
    return ServerIntervals(
        start_s=table[:-1, -1][keep],
        end_s=table[1:, -1][keep],
        steps=d[ITERATIONS],
        prefill_tokens=np.maximum(computed, 0.0),
        decode_tokens=np.maximum(decoded, 0.0),
        prefill_time_s=d[PREFILL_TIME],
        prefilled=d[PREFILLED],
        prefill_computed=d[PREFILL_COMPUTED],
    )
