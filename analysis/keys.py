"""The names of a summary's keys that other stages read: one spelling, owned here.

Latency statistics follow ``vllm bench serve``'s pattern ``<stat>_<metric>_ms`` (``stat_key``
builds them, for the metrics of :class:`Metric`); the fixed keys are members of
:class:`SummaryKey`, a ``StrEnum``, so ``summary[SummaryKey.REQUEST_THROUGHPUT]`` reads the same
entry as ``summary["request_throughput"]`` and JSON keeps plain strings. A summary has no key
declared nowhere here (``tests/test_summary_keys.py`` checks a real one, and that no other
module spells a key as a literal).
"""

from __future__ import annotations

import re
from enum import StrEnum


class SummaryKey(StrEnum):
    # what the run was
    RUN = "run"
    PATH = "path"
    PROFILE = "profile"
    PROFILE_IDENTITY = "profile_identity"
    WORKLOAD = "workload"
    TRAFFIC = "traffic"
    STATE = "state"
    REASON = "reason"
    ALTERNATING = "alternating"  # an alternating run's summary: one summary per side
    SIDES = "sides"
    WORKERS_LOST = "workers_lost"  # Locust workers lost mid-run: who, when, how, records sent
    EARLIER_ATTEMPTS = "earlier_attempts"  # unfinished attempts kept beside the run
    VLLM_VERSION = "vllm_version"
    WARMUP_UNTIL = "warmup_until"
    TOKENIZER = "tokenizer"  # what prompts were built with (run.json's tokenizer, as a label)
    TOKENIZER_IS_STAND_IN = "tokenizer_is_stand_in"  # not the served model's own tokenizer
    OFFERED_LOAD = "offered_load"
    OFFERED_LOAD_UNIT = "offered_load_unit"
    OPEN_LOOP = "open_loop"
    # sessions (conversations, agent chains)
    TURNS_SENT = "turns_sent"
    PER_TURN = "per_turn"
    SENT = "sent"  # in each turn of per_turn: requests of that turn sent
    SESSIONS = "sessions"
    SESSIONS_COMPLETED = "sessions_completed"
    REPLICAS = "replicas"  # servers a run spread its load over (absent: one)
    PER_REPLICA = "per_replica"
    GPUS_PER_REPLICA = "gpus_per_replica"
    METRICS_FROM = "metrics_from"  # older runs over several replicas: /metrics from one only
    RECORDS_NOTE = "records_note"  # a damaged records file: how much of it was readable
    PREDICTED = "predicted"  # a forecast (vprof forecast predict), not a measurement
    FORECAST = "forecast"  # the model it came from, its error, and where it reaches past its runs
    # requests
    REQUESTS = "requests"
    EXCLUDED_WARMUP = "excluded_warmup"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NOT_SENT = "not_sent"
    HELD_BACK = "held_back"
    HELD_BACK_S = "held_back_s"
    IN_FLIGHT_CAP = "in_flight_cap"
    MAX_IN_FLIGHT = "max_in_flight"
    IN_FLIGHT_CAP_REACHED = "in_flight_cap_reached"
    # closed loop: requests in flight and sessions thinking, against the users asked for
    MEAN_IN_FLIGHT = "mean_in_flight"
    MEAN_THINKING = "mean_thinking"
    USERS_ASKED = "users_asked"
    IN_FLIGHT_SHARE = "in_flight_share"
    MEAN_IDLE_BEFORE_MS = "mean_idle_before_ms"
    ERRORS_BY_STATUS = "errors_by_status"
    FAILURES_BY_CAUSE = "failures_by_cause"
    ERROR_RATE = "error_rate"
    UNANSWERED_RATE = "unanswered_rate"
    DURATION = "duration"
    # tokens and throughput
    TOTAL_INPUT_TOKENS = "total_input_tokens"
    TOTAL_OUTPUT_TOKENS = "total_output_tokens"
    REQUESTS_WITHOUT_USAGE = "requests_without_usage"
    REQUEST_THROUGHPUT = "request_throughput"
    ARRIVAL_RATE = "arrival_rate"
    SERVED_RATE = "served_rate"
    OUTPUT_THROUGHPUT = "output_throughput"
    TOTAL_TOKEN_THROUGHPUT = "total_token_throughput"
    MAX_OUTPUT_TOKENS_PER_S = "max_output_tokens_per_s"
    MAX_CONCURRENT_REQUESTS = "max_concurrent_requests"
    PROMPT_TOKEN_MISMATCH_RATE = "prompt_token_mismatch_rate"
    MEAN_PROMPT_TOKEN_EXCESS = "mean_prompt_token_excess"  # beyond the chat template's
    CHAT_TEMPLATE_PROMPT_TOKENS = "chat_template_prompt_tokens"  # per chat request, first turns
    PROMPT_TOKEN_WARNING = "prompt_token_warning"  # the server counted other prompt lengths
    CACHED_TOKEN_SHARE = "cached_token_share"
    # latency statistics read by name elsewhere (every one is a stat_key of a Metric)
    P50_TTFT_MS = "p50_ttft_ms"
    MEDIAN_TTFT_MS = "median_ttft_ms"
    P95_TTFT_MS = "p95_ttft_ms"
    P99_TTFT_MS = "p99_ttft_ms"
    MEDIAN_TTFT_FROM_SCHEDULE_MS = "median_ttft_from_schedule_ms"
    P95_TTFT_FROM_SCHEDULE_MS = "p95_ttft_from_schedule_ms"
    P50_TPOT_MS = "p50_tpot_ms"
    MEDIAN_TPOT_MS = "median_tpot_ms"
    P95_TPOT_MS = "p95_tpot_ms"
    MEDIAN_ITL_MS = "median_itl_ms"
    P95_ITL_MS = "p95_itl_ms"
    P99_ITL_MS = "p99_itl_ms"
    MEDIAN_E2EL_MS = "median_e2el_ms"
    P95_E2EL_MS = "p95_e2el_ms"
    P99_SCHEDULE_LAG_MS = "p99_schedule_lag_ms"
    MAX_SCHEDULE_LAG_MS = "max_schedule_lag_ms"  # not a stat_key: the one largest lag
    # SLO
    SLO = "slo"
    SLO_CHECKS = "slo_checks"
    SLO_MET = "slo_met"
    SLO_BASIS = "slo_basis"
    GOOD_REQUESTS = "good_requests"
    GOOD_REQUEST_FRACTION = "good_request_fraction"
    REQUEST_GOODPUT = "request_goodput"
    # the server, from /metrics
    PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"
    TRACE_IMPLIED_HIT_RATE = "trace_implied_hit_rate"
    NUM_PREEMPTIONS = "num_preemptions"
    MAX_KV_CACHE_USAGE_PERC = "max_kv_cache_usage_perc"
    MAX_NUM_REQUESTS_WAITING = "max_num_requests_waiting"
    MEAN_NUM_REQUESTS_WAITING = "mean_num_requests_waiting"
    MAX_NUM_REQUESTS_RUNNING = "max_num_requests_running"
    METRICS_SAMPLES = "metrics_samples"
    METRICS_SCRAPE_MAX_MS = "metrics_scrape_max_ms"
    METRICS_SCRAPE_MEDIAN_MS = "metrics_scrape_median_ms"
    METRICS_SCRAPE_SHARE = "metrics_scrape_share"
    METRICS_WARNING = "metrics_warning"
    # the load generator
    LOADGEN_CPU = "loadgen_cpu"  # per worker
    LOADGEN_MEAN_CPU_PERCENT = "loadgen_mean_cpu_percent"
    LOADGEN_MAX_CPU_PERCENT = "loadgen_max_cpu_percent"
    LOADGEN_LOOP_LAG_P50_MS = "loadgen_loop_lag_p50_ms"
    LOADGEN_LOOP_LAG_P99_MS = "loadgen_loop_lag_p99_ms"
    LOADGEN_LOOP_LAG_MAX_MS = "loadgen_loop_lag_max_ms"
    LOADGEN_MACHINE_CPU_PERCENT = "loadgen_machine_cpu_percent"
    LOADGEN_STEAL_PERCENT = "loadgen_steal_percent"
    LOADGEN_SATURATED = "loadgen_saturated"
    LOADGEN_STARVED = "loadgen_starved"  # saturated because other processes held its cores
    LOADGEN_VERDICT = "loadgen_verdict"
    CLIENT_LIMITED = "client_limited"  # the load generator, not the server, set the pace
    CLIENT_LIMITED_BY = "client_limited_by"
    # vprof calibrate's certificate for the run's load (bench --calibrate): the client's own
    # error at p99 (TTFT and ITL), and that as a sentence beside the latencies
    CLIENT_ERROR_MS = "client_error_ms"
    CLIENT_ERROR = "client_error"
    # the host's own pace during the run (host.jsonl)
    HOST_PACE_SPREAD_PCT = "host_pace_spread_pct"
    HOST_WORK_MS = "host_work_ms"
    HOST_UNSTEADY = "host_unsteady"
    HOST_CPU_WAIT_PCT = "host_cpu_wait_pct"  # share of the run some task waited for a core
    HOST_IO_STALL_PCT = "host_io_stall_pct"  # share of the run every task was stalled on I/O


class Metric(StrEnum):
    """What a latency statistic ``<stat>_<metric>_ms`` describes (milliseconds)."""

    TTFT = "ttft"
    TPOT = "tpot"
    ITL = "itl"
    E2EL = "e2el"
    # open loop: from the intended send time, and how late sends were
    TTFT_FROM_SCHEDULE = "ttft_from_schedule"
    E2EL_FROM_SCHEDULE = "e2el_from_schedule"
    SCHEDULE_LAG = "schedule_lag"
    # sessions: turns after the first (due a think time after an answer), whole sessions
    LATER_TTFT_FROM_SCHEDULE = "later_ttft_from_schedule"
    LATER_SCHEDULE_LAG = "later_schedule_lag"
    SESSION_E2EL = "session_e2el"


def stat_key(stat: str, metric: str) -> str:
    """``stat_key("p95", "ttft")`` → ``"p95_ttft_ms"`` (``stat``: mean, median, std or pNN)."""
    return f"{stat}_{metric}_ms"


_STAT_KEY = re.compile(
    r"^(?P<stat>mean|median|std|p\d+(?:\.\d+)?)_(?P<metric>"
    + "|".join(sorted((re.escape(m) for m in Metric), key=len, reverse=True))
    + r")_ms$"
)


def split_stat_key(key: str) -> tuple[str, Metric] | None:
    """``"p99.9_itl_ms"`` → ``("p99.9", Metric.ITL)``; ``None`` for a key of another kind."""
    match = _STAT_KEY.match(key)
    return (match["stat"], Metric(match["metric"])) if match else None


def is_declared(key: str) -> bool:
    """Whether ``key`` is a summary key declared here: a member of :class:`SummaryKey` or a
    statistic of a :class:`Metric`."""
    return key in _FIXED or split_stat_key(key) is not None


_FIXED = frozenset(SummaryKey)


def _stats(metric: str, *stats: str) -> tuple[str, ...]:
    return tuple(stat_key(stat, metric) for stat in stats)


K = SummaryKey
# The figures a user picks settings on: what precision, --precision and a forecast's error
# judge by default.
HEADLINE_KEYS: tuple[str, ...] = (
    K.REQUEST_THROUGHPUT,
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    K.MEDIAN_TPOT_MS,
)
# The rows a summary table shows, in order (JSON output has every key).
SUMMARY_TABLE_KEYS: tuple[str, ...] = (
    K.PROFILE,
    K.TRAFFIC,
    K.STATE,
    K.PREDICTED,
    K.OPEN_LOOP,
    K.REPLICAS,
    K.REQUESTS,
    K.COMPLETED,
    K.FAILED,
    K.FAILURES_BY_CAUSE,
    K.CANCELLED,
    K.NOT_SENT,
    K.HELD_BACK,
    K.HELD_BACK_S,
    K.ERROR_RATE,
    K.UNANSWERED_RATE,
    K.DURATION,
    K.REQUEST_THROUGHPUT,
    K.ARRIVAL_RATE,
    K.SERVED_RATE,
    K.OUTPUT_THROUGHPUT,
    K.TOTAL_TOKEN_THROUGHPUT,
    K.REQUEST_GOODPUT,
    *_stats("ttft", "mean", "median", "p90", "p95", "p99", "p99.9"),
    *_stats("tpot", "mean", "median", "p95", "p99"),
    *_stats("itl", "mean", "median", "p95", "p99", "p99.9"),
    *_stats("e2el", "mean", "median", "p95", "p99"),
    K.CLIENT_ERROR,
    *_stats("ttft_from_schedule", "p95", "p99"),
    *_stats("schedule_lag", "p99"),
    K.TURNS_SENT,
    *_stats("later_ttft_from_schedule", "median", "p99"),
    *_stats("later_schedule_lag", "p99"),
    K.SESSIONS,
    K.SESSIONS_COMPLETED,
    *_stats("session_e2el", "median", "p95", "p99"),
    K.MAX_OUTPUT_TOKENS_PER_S,
    K.MAX_CONCURRENT_REQUESTS,
    K.PREFIX_CACHE_HIT_RATE,
    K.TRACE_IMPLIED_HIT_RATE,
    K.CACHED_TOKEN_SHARE,
    K.PROMPT_TOKEN_MISMATCH_RATE,
    K.MEAN_PROMPT_TOKEN_EXCESS,
    K.CHAT_TEMPLATE_PROMPT_TOKENS,
    K.TOKENIZER_IS_STAND_IN,
    K.NUM_PREEMPTIONS,
    K.MAX_KV_CACHE_USAGE_PERC,
    K.MAX_NUM_REQUESTS_WAITING,
    K.METRICS_FROM,
    K.METRICS_SCRAPE_MAX_MS,
    K.METRICS_WARNING,
    K.LOADGEN_MAX_CPU_PERCENT,
    K.LOADGEN_LOOP_LAG_P99_MS,
    K.LOADGEN_VERDICT,
    K.CLIENT_LIMITED,
    K.CLIENT_LIMITED_BY,
    K.HOST_PACE_SPREAD_PCT,
    K.HOST_UNSTEADY,
    K.SLO,
    K.SLO_BASIS,
    K.SLO_MET,
)
# Rows of the table shown only when some run has something to say there (not zero or empty).
SHOWN_WHEN_NONZERO = frozenset(
    {
        K.FAILURES_BY_CAUSE,
        K.CANCELLED,
        K.NOT_SENT,
        K.HELD_BACK,
        K.HELD_BACK_S,
        K.UNANSWERED_RATE,
        K.CLIENT_LIMITED_BY,
        K.METRICS_WARNING,
        K.METRICS_FROM,
        K.MEAN_PROMPT_TOKEN_EXCESS,
        K.TOKENIZER_IS_STAND_IN,
        K.HOST_UNSTEADY,
        K.PREDICTED,
        K.CLIENT_ERROR,
    }
)
# The columns of the per-replica table (after run and replica), from a summary's per_replica.
REPLICA_TABLE_KEYS: tuple[str, ...] = (
    K.REQUESTS,
    K.COMPLETED,
    K.REQUEST_THROUGHPUT,
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    "p99_ttft_ms",
    K.NUM_PREEMPTIONS,
    K.MAX_KV_CACHE_USAGE_PERC,
    K.PREFIX_CACHE_HIT_RATE,
)


# What to do about a load generator other processes held back, one whose own loop fell behind,
# and a client-limited run when it is not known which (its loadgen_verdict says).
STARVED_FIX = "give the load generator cores of its own"
SATURATED_FIX = "use --processes N (one per spare core) or fewer users"
CLIENT_FIX = (
    "use --processes or fewer users, or, when other processes held its cores, "
    "give the load generator cores of its own"
)


CAP_HELD = "the in-flight cap"  # how a summary's reason says the cap held arrivals back
BOTTLENECK = "the load generator was the bottleneck"


def client_limit(summary: dict) -> tuple[str, str]:
    """Why a client-limited run's load was not the load asked for, and what to do: other
    processes held the client's cores, its own loop fell behind, or the traffic's in-flight
    cap held arrivals back — the server kept that many requests out, past what it answers in
    time at that rate, which no change to the client fixes."""
    if summary.get(SummaryKey.LOADGEN_STARVED):
        return BOTTLENECK, STARVED_FIX
    if summary.get(SummaryKey.LOADGEN_SATURATED):
        return BOTTLENECK, SATURATED_FIX
    if any(str(r).startswith(CAP_HELD) for r in summary.get(SummaryKey.CLIENT_LIMITED_BY) or ()):
        return (
            f"the server kept the traffic's in-flight cap ({summary.get(SummaryKey.IN_FLIGHT_CAP)})"
            " full",
            "the rate is past what it answers in time; raise max_in_flight to measure the queue "
            "it builds there",
        )
    return BOTTLENECK, CLIENT_FIX
