"""One run's records → a summary dict with ``vllm bench serve``'s key names, and a timeline.

Definitions follow ``vllm bench serve`` (the README's metric definitions) over the requests
*sent* at or after the warm-up boundary:

- ``completed`` counts status ``ok``; ``failed`` counts ``error`` and ``timeout``; requests
  ``cancelled`` at the end of a test are counted apart and are not errors;
- latencies are over completed requests: TTFT, TPOT (requests with more than one output
  token), ITL (gaps pooled over requests), E2EL; percentiles are numpy ``linear``;
- ``duration`` is first send → last finish; throughputs divide by it;
- ``max_output_tokens_per_s`` counts streamed chunks (as vllm does) in 1-s bins from the
  first completed send; ``max_concurrent_requests`` is the exact peak of [send, last token).

vprof's additions: error rate and statuses, latency from the *schedule* for open-loop runs
(``*_from_schedule_ms``) and schedule lag, SLO checks and goodput, server-side numbers from
``/metrics`` samples, load-generator CPU, cached-token share.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vprof.analysis import gapkernel
from vprof.analysis.columns import Columns, from_records
from vprof.analysis.keys import CAP_HELD, Metric, stat_key
from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.samples import PER_REPLICA_SERVER, host_stats, loadgen_stats, server_stats
from vprof.analysis.slo import Slo, SloTarget, parse_slo
from vprof.analysis.stats import (
    DEFAULT_PERCENTILES,
    BlockQuantiles,
    describe,
    pct_key,
    percentile,
    sorted_within_groups,
)
from vprof.common.cpus import usable_cpus
from vprof.common.errors import RunError
from vprof.common.numbers import check_interval_rows, check_number
from vprof.records.schema import CUT_AT_END, Status

_FAILED = (Status.ERROR.value, Status.TIMEOUT.value)  # statuses that count as failed requests


def summarize(
    records: Any,
    *,
    warmup_until: float | None = None,
    slo: Slo | str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    metrics: Sequence[Mapping[str, Any]] | None = None,
    loadgen: Sequence[Mapping[str, Any]] | None = None,
    host: Sequence[Mapping[str, Any]] | None = None,
    in_flight_cap: int | None = None,
    users: int | None = None,
    measured_s: float | None = None,
    in_flight_s: float | None = None,
) -> dict[str, Any]:
    """Summarise per-request records (a DataFrame from ``read_records`` or an Arrow table).

    ``warmup_until`` (wall-clock seconds) drops requests sent before it; ``slo`` (an
    :class:`Slo` or text such as ``"ttft_p95=500ms"``) adds goodput and SLO checks;
    ``metrics``, ``loadgen`` and ``host`` are the parsed lines of ``metrics.jsonl``,
    ``loadgen.jsonl`` and ``host.jsonl``;
    ``in_flight_cap`` is an open-loop shape's ``max_in_flight``; ``users`` the closed-loop
    users the shape asked for, which the mean in flight is held against; ``measured_s`` the
    time the records were measured over when it is not first send → last answer (one side of
    an alternating run: its slices), which throughputs then divide by, and ``in_flight_s``
    the requests' time in flight within it (the closed loop's mean in flight is their ratio).

    Example:
        >>> summarize(read_records(run_dir), slo="ttft_p95=500ms")["p95_ttft_ms"]  # doctest: +SKIP
    """
    import numpy as np

    cols = records if isinstance(records, Columns) else from_records(records)
    slo = parse_slo(slo) if isinstance(slo, str) else slo
    f = cols.floats
    status = cols.status
    keep, ok, failed = masks(cols, warmup_until)
    itl_slo = [t.percentile for t in (slo.targets if slo else ()) if t.metric == "itl"]
    itl_slo = [q for q in itl_slo if q is not None]
    # the pass over the gaps (most of the work) starts first and may run beside what follows
    itl_pass = _itl(cols, ok, _nanmin(f["sent_at"][ok]), [*percentiles, *itl_slo])
    out: dict[str, Any] = {K.REQUESTS: int(keep.sum()), K.EXCLUDED_WARMUP: int(cols.n - keep.sum())}
    out[K.COMPLETED] = int(ok.sum())
    out[K.FAILED] = int(failed.sum())
    out[K.CANCELLED] = int((keep & status.isin(Status.CANCELLED.value)).sum())
    out[K.NOT_SENT] = int((keep & np.isnan(f["sent_at"])).sum())
    counts = np.bincount(status.codes[keep & ~ok], minlength=len(status.labels))
    out[K.ERRORS_BY_STATUS] = {
        str(v): int(c) for v, c in sorted(zip(status.labels, counts, strict=True)) if c
    }
    out[K.FAILURES_BY_CAUSE] = _causes(cols, failed)
    attempted = out[K.COMPLETED] + out[K.FAILED]
    # error_rate: failed / (completed + failed), as vllm counts it; cancelled and never-sent
    # requests are left out of it and counted by unanswered_rate instead.
    out[K.ERROR_RATE] = out[K.FAILED] / attempted if attempted else math.nan
    out[K.UNANSWERED_RATE] = (
        1.0 - out[K.COMPLETED] / out[K.REQUESTS] if out[K.REQUESTS] else math.nan
    )

    first_send = _nanmin(f["sent_at"][keep])
    ends = np.where(np.isnan(f["finished_at"]), f["last_token_at"], f["finished_at"])
    duration = measured_s if measured_s else _nanmax(ends[keep]) - first_send
    out[K.DURATION] = duration if duration > 0 else math.nan
    out.update(_tokens(cols, ok, out[K.DURATION]))

    ttft = f["ttft_ms"][ok & ~np.isnan(f["ttft_ms"])]
    tpot = f["tpot_ms"][ok & ~np.isnan(f["tpot_ms"])]
    e2el = f["e2e_ms"][ok & ~np.isnan(f["e2e_ms"])]
    out.update(describe(ttft, Metric.TTFT, percentiles))
    out.update(describe(tpot, Metric.TPOT, percentiles))
    # the gap pass's figures take their places now and their values once it is done (at the
    # SLO's checks, which need them, else at the end): the work between runs beside it
    out.update(describe([], Metric.ITL, percentiles))
    out.update(describe(e2el, Metric.E2EL, percentiles))
    out[K.MAX_OUTPUT_TOKENS_PER_S] = math.nan
    itl: BlockQuantiles | None = None

    def gaps_done() -> BlockQuantiles:
        nonlocal itl
        if itl is None:
            itl, token_bins = itl_pass()
            out.update(itl.describe(Metric.ITL, percentiles))
            out[K.MAX_OUTPUT_TOKENS_PER_S] = (
                float(token_bins.max()) if token_bins.size else math.nan
            )
        return itl

    out[K.MAX_CONCURRENT_REQUESTS] = _peak_concurrency(f["sent_at"][ok], f["last_token_at"][ok])

    out[K.OPEN_LOOP] = bool(cols.open_loop[keep].any())
    cut = _cut_at_end(cols, keep)
    if out[K.OPEN_LOOP]:
        out.update(_served_rate(cols, keep & ~cut, ok, measured_s))
        out.update(_from_schedule(cols, keep, ok, percentiles))
        out.update(_held_back(cols, keep, in_flight_cap))
    if slo is not None:
        unanswered = keep & ~ok & ~failed & ~cut  # cancelled (not by the end), never sent
        # the gaps are waited for only by an ITL check: the rest goes on beside their pass
        out.update(_slo(slo, cols, ok, failed | unanswered, gaps_done, out, cut))
    else:
        out[K.REQUEST_GOODPUT] = None  # as vllm bench serve writes it without --goodput
    out.update(_cached_share(cols, ok))
    if metrics:
        out.update(server_stats(metrics, first_send, _nanmax(ends[keep])))
    if loadgen:
        out.update(loadgen_stats(loadgen, first_send, _nanmax(ends[keep])))
    if host:
        out.update(host_stats(host, first_send, _nanmax(ends[keep])))
    out[K.CLIENT_LIMITED_BY] = _client_limits(out)
    if not out[K.OPEN_LOOP]:
        out.update(_in_flight(cols, keep, users, out[K.CLIENT_LIMITED_BY], measured_s, in_flight_s))
    out[K.CLIENT_LIMITED] = bool(out[K.CLIENT_LIMITED_BY])
    out.update(_per_replica(cols, keep, ok, out[K.DURATION]))
    # each replica's own /metrics beside its requests
    for name, stats in (out.pop(PER_REPLICA_SERVER, None) or {}).items():
        if name in out.get(K.PER_REPLICA, {}):
            out[K.PER_REPLICA][name].update(stats)
    out.update(_sessions(cols, keep, ok, percentiles, out[K.OPEN_LOOP]))
    gaps_done()
    return out


def _sessions(
    cols: Columns, keep: Any, ok: Any, percentiles: Sequence[float], open_loop: bool
) -> dict[str, Any]:
    """Conversations and agent chains: requests sent per turn (with latency from the schedule
    per turn, open loop), and each session's end-to-end time, first send to last answer, over
    the sessions that completed (every call answered, through the last) after the warm-up."""
    import numpy as np

    session = cols.ints["conversation_id"]
    mine = keep & (session >= 0)
    if not mine.any():
        return {}
    f = cols.floats
    turn = cols.ints["turn"]
    sent = mine & np.isfinite(f["sent_at"])
    per_turn: dict[str, dict[str, Any]] = {}
    for t in np.unique(turn[mine]):
        at = turn == t
        row: dict[str, Any] = {K.SENT: int((sent & at).sum()), K.COMPLETED: int((ok & at).sum())}
        if open_loop:
            done = ok & at
            ttft = (f["first_token_at"] - f["scheduled_at"])[done] * 1000.0
            lag = f["schedule_lag_ms"][sent & at]
            row.update(describe(ttft[np.isfinite(ttft)], Metric.TTFT_FROM_SCHEDULE, (99,)))
            row.update(describe(lag, Metric.SCHEDULE_LAG, (99,)))
            row[K.HELD_BACK] = int((lag > HELD_BACK_MS).sum())
            row = {k: v for k, v in row.items() if not k.startswith(("std_", "mean_"))}
        per_turn[str(int(t))] = row
    # one row per session: its first send, last answer, whether every call ended well
    ids, inverse = np.unique(session[mine], return_inverse=True)
    n = ids.size
    ends = np.where(np.isnan(f["last_token_at"]), f["finished_at"], f["last_token_at"])[mine]
    first = np.full(n, np.inf)
    np.fmin.at(first, inverse, np.where(np.isnan(f["sent_at"][mine]), np.inf, f["sent_at"][mine]))
    last = np.full(n, -np.inf)
    np.fmax.at(last, inverse, np.where(np.isnan(ends), -np.inf, ends))
    bad = np.zeros(n, dtype=bool)
    np.logical_or.at(bad, inverse, ~ok[mine])
    closed = np.zeros(n, dtype=bool)
    np.logical_or.at(closed, inverse, cols.ints["session_last"][mine] == 1)
    started = np.zeros(n, dtype=bool)
    np.logical_or.at(started, inverse, turn[mine] == 0)  # its first turn is after the warm-up
    complete = closed & ~bad & started
    out: dict[str, Any] = {
        K.TURNS_SENT: {t: row[K.SENT] for t, row in per_turn.items()},
        K.PER_TURN: per_turn,
        K.SESSIONS: int(started.sum()),
    }
    if open_loop:  # only open-loop sessions know where they end
        later = turn > 0  # due a think time after an answer, not at an arrival
        ttft = (f["first_token_at"] - f["scheduled_at"])[ok & later] * 1000.0
        out.update(describe(ttft[np.isfinite(ttft)], Metric.LATER_TTFT_FROM_SCHEDULE, percentiles))
        out.update(describe(f["schedule_lag_ms"][sent & later], Metric.LATER_SCHEDULE_LAG, (99,)))
        out[K.SESSIONS_COMPLETED] = int(complete.sum())
        out.update(describe((last - first)[complete] * 1000.0, Metric.SESSION_E2EL, percentiles))
    return out


def _per_replica(cols: Columns, keep: Any, ok: Any, duration: float) -> dict[str, Any]:
    """With load spread over several servers: each one's requests, rate and TTFT."""
    import numpy as np

    if cols.replicas is None:
        return {}
    names = [r for r in cols.replicas.distinct(keep) if r]
    if len(names) < 2:
        return {}
    f = cols.floats
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = cols.replicas.isin(name)
        done = ok & mine
        ttft = f["ttft_ms"][done & np.isfinite(f["ttft_ms"])]
        out[name] = {
            K.REQUESTS: int((keep & mine).sum()),
            K.COMPLETED: int(done.sum()),
            K.REQUEST_THROUGHPUT: int(done.sum()) / duration if duration > 0 else math.nan,
            **{k: v for k, v in describe(ttft, Metric.TTFT, (95, 99)).items() if "std" not in k},
        }
    return {K.REPLICAS: len(names), K.PER_REPLICA: out}


# Open loop: a send this much later than its schedule waited for a free user (the in-flight cap,
# or a client that fell behind).
HELD_BACK_MS = 10.0
# Schedule lag (p99, ms) beyond which the client did not deliver the offered load on time.
SCHEDULE_LAG_P99_LIMIT_MS = 100.0


def _causes(cols: Columns, failed: Any) -> dict[str, int]:
    """Failed requests by cause: ``timeout``, ``HTTP 503``, ``ConnectionError``, …; the most
    frequent first, ties in the order each cause first occurs."""
    import numpy as np

    rows = failed.nonzero()[0]
    if not rows.size:
        return {}
    timeout = cols.status.isin(Status.TIMEOUT.value)[rows]
    http = cols.ints["http_status"][rows]
    error = cols.errors.codes[rows] if cols.errors is not None else np.zeros(rows.size, int)
    # one integer per (timeout?, HTTP code, error text); few distinct ones, each named once
    combos = np.stack(
        [timeout, np.where(timeout, 0, http), np.where(timeout | (http >= 400), -1, error)], axis=1
    )
    distinct, first, counts = np.unique(combos, axis=0, return_index=True, return_counts=True)
    causes: dict[str, list[int]] = {}  # cause -> [first row, count]
    for (is_timeout, code, text), at, count in zip(distinct, first, counts, strict=True):
        if is_timeout:
            cause = "timeout"
        elif code >= 400:
            cause = f"HTTP {code}"
        else:
            label = str(cols.errors.labels[text]) if cols.errors is not None else ""
            cause = label.split(":", 1)[0].strip()[:60] or "error"
        seen = causes.setdefault(cause, [int(at), 0])
        seen[0], seen[1] = min(seen[0], int(at)), seen[1] + int(count)
    ordered = sorted(causes.items(), key=lambda kv: (-kv[1][1], kv[1][0]))
    return {cause: count for cause, (_, count) in ordered}


def _held_back(cols: Columns, keep: Any, cap: int | None) -> dict[str, Any]:
    """Open loop: arrivals sent late because no user was free, and whether the cap was hit."""
    import numpy as np

    f = cols.floats
    sent = keep & np.isfinite(f["sent_at"])
    lag = f["schedule_lag_ms"][sent]
    held = lag[lag > HELD_BACK_MS]
    ends = np.where(np.isnan(f["finished_at"]), f["last_token_at"], f["finished_at"])
    peak = _peak_concurrency(f["sent_at"][sent], ends[sent])
    return {
        K.HELD_BACK: int(held.size),
        K.HELD_BACK_S: float(held.sum()) / 1000.0,
        K.IN_FLIGHT_CAP: cap,
        K.MAX_IN_FLIGHT: peak,
        # the cap held arrivals back only when it was reached and sends came late
        K.IN_FLIGHT_CAP_REACHED: bool(cap and peak >= cap and held.size),
    }


# Closed loop: a mean in flight below this share of the users asked for means users sat idle
# between one answer and their next request, and the server saw less load than was asked for.
# A session's think time is not idleness: it counts beside the requests in flight.
IN_FLIGHT_SHARE_LIMIT = 0.97


def _in_flight(
    cols: Columns,
    keep: Any,
    users: int | None,
    reasons: list[str],
    measured_s: float | None = None,
    in_flight_s: float | None = None,
) -> dict:
    """Closed loop: requests in flight on average over the measured window — from the first
    send after the warm-up to the last send, while every user was sending — and sessions
    thinking (from a user's last answer to the next step's intended send time), against the
    ``users`` asked for; appends the verdict to ``reasons`` when they fall short of them.
    Measured in windows (``measured_s``: one side of alternating slices), the mean in flight
    is ``in_flight_s``, the time requests spent in flight inside the windows, over their
    length."""
    import numpy as np

    f = cols.floats
    sent = f["sent_at"]
    ends = np.where(np.isnan(f["finished_at"]), f["last_token_at"], f["finished_at"])
    t0, t1 = _nanmin(sent[keep]), _nanmax(sent[keep])
    good = np.isfinite(sent) & np.isfinite(ends)  # warm-up requests still in flight count too
    if measured_s:
        # time in flight inside the windows: a request sent near a window's end runs past it,
        # and one sent in the warm-up is in flight at its start; whole durations counted the
        # first and missed the second (a side's mean came out 4.5 of 4 users)
        mean = in_flight_s / measured_s if in_flight_s is not None else math.nan
    else:
        mean = _mean_overlap(sent[good], ends[good], t0, t1)
    # a think time runs from the user's last answer (its send less the idle before it) for
    # as long as the session thought, or until the send if that came first (older files: 0)
    idle_s = f["idle_before_ms"] / 1000.0
    think_s = np.nan_to_num(f["think_ms"], nan=0.0) / 1000.0
    thought = np.isfinite(idle_s) & np.isfinite(sent) & (think_s > 0)
    previous = (sent - idle_s)[thought]
    thinking = _mean_overlap(previous, previous + np.minimum(think_s, idle_s)[thought], t0, t1)
    cut_off, longest = _cut_off_thinking(cols, ends, think_s, t1)
    thinking += _mean_overlap(cut_off, cut_off + longest, t0, t1)
    idle = f["idle_before_ms"][keep & np.isfinite(f["idle_before_ms"])]
    out: dict[str, Any] = {
        K.MEAN_IN_FLIGHT: mean,
        K.MEAN_THINKING: thinking,
        K.USERS_ASKED: users,
        K.IN_FLIGHT_SHARE: mean / users if users else None,
        K.MEAN_IDLE_BEFORE_MS: float(idle.mean()) if idle.size else math.nan,
    }
    if users and mean + thinking < IN_FLIGHT_SHARE_LIMIT * users:  # NaN (no sends): no verdict
        also = f" and {thinking:.2f} sessions thinking" if thinking > 0 else ""
        kept = (
            f"the closed loop kept {mean:.2f} requests in flight on average{also}, of the "
            f"{users} users asked for (below {IN_FLIGHT_SHARE_LIMIT:g})"
        )
        failed = int((keep & cols.status.isin(*_FAILED)).sum())
        if failed:  # a user waits after a failure before it tries again (locustfiles.users)
            reasons.append(f"{BACKED_OFF}: {failed} failed, and {kept}")
        else:
            reasons.append(f"{kept}: the server saw less load")
    return out


def _cut_off_thinking(cols: Columns, ends: Any, think_s: Any, t1: float) -> tuple[Any, float]:
    """The answers after which sessions were still thinking when the run stopped, and the
    longest think time: a think is read from the send that follows it, and the stop killed
    those sends (spread over some tens of ms: another user's send can still slip in, and that
    one is ``t1``). A conversation counts when its last record was answered at most two think
    times before ``t1`` and has a lower turn than the run's conversations reach (one that ended
    sends its user's next conversation at once, so it would show)."""
    import numpy as np

    conversation, turn = cols.ints["conversation_id"], cols.ints["turn"]
    answered = (conversation >= 0) & np.isfinite(ends) & cols.status.isin(Status.OK.value)
    longest = float(think_s.max()) if think_s.size else 0.0
    if not answered.any() or not longest > 0:
        return np.empty(0), 0.0
    # only the answers near the end are sorted: a conversation's later turns end later still
    rows = np.flatnonzero(answered & (ends > t1 - 2 * longest))
    if not rows.size:
        return np.empty(0), longest
    rows = rows[np.lexsort((turn[rows], conversation[rows]))]
    last = rows[np.append(conversation[rows][1:] != conversation[rows][:-1], True)]
    cut = (turn[last] < turn[answered].max()) & (ends[last] < t1)
    return ends[last][cut], longest


def _mean_overlap(starts: Any, ends: Any, t0: float, t1: float) -> float:
    """How many of the intervals [starts, ends) were open on average over [t0, t1]."""
    import numpy as np

    if not t1 > t0:
        return math.nan
    overlap = np.minimum(ends, t1) - np.maximum(starts, t0)
    return float(np.clip(overlap, 0, None).sum() / (t1 - t0))


# A closed loop short of its users because the server failed requests: each user waits before
# it tries again after a failure, so the server saw less load, by its own doing, not the client's.
BACKED_OFF = "the server failed requests and their users waited before trying again"

# The one limit that leaves a run's medians usable: its loop woke late only now and then
# (lag p50 well under a millisecond), so its tails carry the stalls and its medians do not.
HELD_BACK = "other processes on this machine held its cores"


def _client_limits(out: Mapping[str, Any]) -> list[str]:
    """Why the load generator, not the server, may have set the pace (empty: it did not)."""
    reasons = []
    if out.get(K.LOADGEN_STARVED):
        reasons.append(HELD_BACK)
    elif out.get(K.LOADGEN_SATURATED):
        reasons.append("its event loop fell behind")
    # A handful of late sends (a short run's first second; a few arrivals the in-flight cap
    # held for moments while the server's own queue peaked) is not a client that held back the
    # load it was asked for: a plan then judged the server by its SLO, not by the client.
    late = out.get(K.HELD_BACK, 0) >= max(5, 0.01 * out.get(K.REQUESTS, 0))
    if out.get(K.IN_FLIGHT_CAP_REACHED) and late:
        reasons.append(
            f"{CAP_HELD} ({out[K.IN_FLIGHT_CAP]}) was reached: {out.get(K.HELD_BACK, 0)} "
            f"arrivals waited {out.get(K.HELD_BACK_S, 0.0):.1f} s in all for a free user"
        )
    lag = out.get(K.P99_SCHEDULE_LAG_MS)
    if isinstance(lag, (int, float)) and lag > SCHEDULE_LAG_P99_LIMIT_MS and late:
        reasons.append(f"schedule lag p99 {lag:.0f} ms > {SCHEDULE_LAG_P99_LIMIT_MS:g} ms")
    return reasons


def masks(cols: Columns, warmup_until: float | None) -> tuple[Any, Any, Any]:
    """(kept, completed, failed) boolean masks: kept = sent at/after ``warmup_until``.

    A request never sent (no ``sent_at``) is placed by its scheduled time.
    """
    import numpy as np

    f = cols.floats
    started_at = np.where(np.isnan(f["sent_at"]), f["scheduled_at"], f["sent_at"])
    keep = np.ones(cols.n, dtype=bool)
    if warmup_until is not None:
        keep &= ~(started_at < warmup_until)
    return keep, keep & cols.status.isin(Status.OK.value), keep & cols.status.isin(*_FAILED)


def _nanmin(x: Any) -> float:
    import numpy as np

    x = x[~np.isnan(x)]
    return float(x.min()) if x.size else math.nan


def _nanmax(x: Any) -> float:
    import numpy as np

    x = x[~np.isnan(x)]
    return float(x.max()) if x.size else math.nan


def _tokens(cols: Columns, ok: Any, duration: float) -> dict[str, Any]:
    import numpy as np

    prompt = cols.ints["prompt_tokens"][ok]
    expected = cols.ints["expected_prompt_tokens"][ok]
    output = cols.ints["completion_tokens"][ok]
    # The server's usage is the truth; without it fall back to what the workload asked for.
    input_tokens = np.where(prompt >= 0, prompt, np.maximum(expected, 0))
    total_in, total_out = int(input_tokens.sum()), int(np.maximum(output, 0).sum())
    per_s = (lambda v: v / duration) if duration > 0 else (lambda v: math.nan)
    counted = (cols.ints["prompt_tokens"] >= 0) & (cols.ints["expected_prompt_tokens"] >= 0)
    return {
        **_prompt_token_excess(cols, ok & counted),
        K.TOTAL_INPUT_TOKENS: total_in,
        K.TOTAL_OUTPUT_TOKENS: total_out,
        K.REQUESTS_WITHOUT_USAGE: int(((prompt < 0) | (output < 0)).sum()),
        K.REQUEST_THROUGHPUT: per_s(int(ok.sum())),
        K.OUTPUT_THROUGHPUT: per_s(total_out),
        K.TOTAL_TOKEN_THROUGHPUT: per_s(total_in + total_out),
    }


def _prompt_token_excess(cols: Columns, judged: Any) -> dict[str, Any]:
    """How the server's prompt counts compare with the plan's, the chat template set apart.

    Prompts are built to exact lengths with the model's tokenizer, so for completions any
    difference is a mismatch. A chat request's count also holds the chat template's tokens,
    which depend only on the messages' roles and number: among first turns of the same shape
    (with or without the shared system prompt) the most common excess is the template's, and
    a request that differs from it is a mismatch. Later turns carry the server's own replies,
    whose tokens can merge with the template's at the joins; they are not judged.
    """
    import numpy as np

    prompt, expected = cols.ints["prompt_tokens"], cols.ints["expected_prompt_tokens"]
    excess = (prompt - expected).astype(float)
    chat = judged & cols.endpoints.isin("chat") if cols.endpoints is not None else judged & False
    first_chat = chat & (cols.ints["turn"] <= 0)
    template = np.zeros(cols.n)
    for shared in (True, False):
        group = first_chat & ((cols.ints["prefix_group"] >= 0) == shared)
        if group.any():
            template[group] = _most_common(excess[group])
    judged = judged & ~(chat & ~first_chat)
    beyond = (excess - template)[judged]
    return {
        K.PROMPT_TOKEN_MISMATCH_RATE: float((beyond != 0).mean()) if beyond.size else None,
        K.MEAN_PROMPT_TOKEN_EXCESS: float(beyond.mean()) if beyond.size else None,
        K.CHAT_TEMPLATE_PROMPT_TOKENS: (
            float(template[first_chat].mean()) if first_chat.any() else None
        ),
    }


def _most_common(values: Any) -> float:
    """The most common of ``values`` (the smallest of those tied), as ``np.unique`` counts:
    whole token counts, so a count per value in their range when it is short, no sort."""
    import numpy as np

    low, high = float(values.min()), float(values.max())
    whole = high - low < _COUNTED_RANGE and bool((values == np.round(values)).all())
    if not whole:
        found, counts = np.unique(values, return_counts=True)
        return float(found[np.argmax(counts)])
    counts = np.bincount((values - low).astype(np.int64))
    return low + float(np.argmax(counts))


_COUNTED_RANGE = 1 << 20  # values apart at most this far are counted in a table


def _itl(
    cols: Columns, mask: Any, t0: float, percentiles: Sequence[float]
) -> Callable[[], tuple[BlockQuantiles, Any]]:
    """Pooled-gap statistics of the ``mask``ed requests, and their chunks per 1-s bin.

    One streaming pass over the gap blocks (two when the sample's guess of where the
    percentiles lie missed; see :class:`BlockQuantiles`) in steps of about a cache's worth;
    no copy of all the gaps is ever made, and the pages of the records file each step has
    read are handed back as it goes. A large pass starts at once in a helper thread, piece by
    piece, while the caller goes on; the returned function takes the pieces left itself, waits
    for the helper's last, and returns the planned quantile state and the bins from ``t0``.
    """
    import numpy as np

    from vprof.records.store import release_file_of

    end = _nanmax(cols.floats["last_token_at"][mask])
    first = cols.floats["first_token_at"]  # read here, before any thread uses it
    n_bins = int(math.ceil(end - t0)) + 2 if not math.isnan(end - t0) else 0
    bins = np.zeros(n_bins, dtype=np.int64)
    quantiles = BlockQuantiles()
    if not cols.itl_blocks:  # no gaps recorded: every request is its first chunk only
        rel = first[mask] - t0
        if n_bins:
            _bin_chunks(bins, np.empty(0), np.zeros(rel.size, dtype=np.int64), rel)
        quantiles.plan(percentiles)
        return lambda: (quantiles, bins)
    wanted = [50.0, *percentiles]
    quantiles.guess(_gap_sample(cols), wanted)
    compiled = gapkernel.load()
    first_s = first - t0 if compiled is not None else None

    local = threading.local()
    states: list[tuple[BlockQuantiles, Any]] = []  # one per thread, added to piece by piece

    def one_part(part: tuple[int, int]) -> tuple[BlockQuantiles, Any]:
        if not hasattr(local, "state"):
            local.state = quantiles.spawn(), np.zeros(n_bins, dtype=np.int64)
            # small blocks are gathered here, and their running sums made where they lie
            local.workspace = np.empty(2 * _GROUP_VALUES + _RunningSum.WIDTH)
            states.append(local.state)
        mine, counts = local.state
        if compiled is not None:
            _compiled_part(compiled, cols, mask, first_s, part, mine, counts, local.workspace)
            return local.state
        for gaps, lengths, first_s_of in _gap_groups(
            cols, mask, t0, part=part, buffer=local.workspace
        ):
            mine.add(gaps)
            if n_bins:
                _bin_chunks(counts, gaps, lengths, first_s_of, local.workspace)
        return local.state

    def finish(done: list[tuple[BlockQuantiles, Any]]) -> tuple[BlockQuantiles, Any]:
        for part_quantiles, part_bins in done:
            quantiles.merge(part_quantiles)
            bins[:] += part_bins
        if quantiles.plan(wanted):  # the sample's guess missed a rank: one more pass
            for gaps, _, _ in _gap_groups(cols, mask, t0):
                quantiles.collect(gaps)
        # the pass mapped pages beside each block it handed back (offsets, read-ahead)
        release_file_of(cols.itl_blocks[0][0])
        return quantiles, bins

    if not _threaded(cols):
        return lambda: finish([one_part((0, len(cols.itl_blocks)))])
    # numpy lets go of the GIL in its loops: a helper thread takes one piece after another
    # beside the caller, and the caller takes the pieces left once its own work is done, so
    # two threads share two cores and end together (a helper per core beside the caller would
    # be three threads on two cores, each slowed by the others while the caller works)
    from concurrent.futures import ThreadPoolExecutor

    pieces = iter(_pieces(cols))
    taking = threading.Lock()

    def take_pieces() -> None:
        while True:
            with taking:
                piece = next(pieces, None)
            if piece is None:
                return
            one_part(piece)

    pool = ThreadPoolExecutor(1, thread_name_prefix="vprof-gaps")
    helper = pool.submit(take_pieces)
    pool.shutdown(wait=False)  # its thread ends once the pieces are all taken

    def done() -> tuple[BlockQuantiles, Any]:
        take_pieces()
        helper.result()
        return finish(states)

    return done


def _compiled_part(
    gap_pass: gapkernel.GapPass,
    cols: Columns,
    mask: Any,
    first_s: Any,
    part: tuple[int, int],
    quantiles: BlockQuantiles,
    bins: Any,
    workspace: Any,
) -> None:
    """The gap blocks in the range ``part`` through the compiled pass (:mod:`gapkernel`): what
    :func:`_gap_groups` into ``quantiles.add`` and :func:`_bin_chunks` give, in one pass per
    block (``first_s``: every request's first chunk, s from the bins' start). The pages of the
    records file are handed back as the blocks are used."""
    import numpy as np

    from vprof.records.store import Releaser

    lo, hi = part
    row = sum(lengths.size for _, lengths in cols.itl_blocks[:lo])
    counts, wanted, shift = quantiles.buckets()
    sums, state = np.zeros(2), np.array([0, int(quantiles.fallback)], dtype=np.int64)
    kept: list[Any] = []
    pages = Releaser()
    for values, lengths in cols.itl_blocks[lo:hi]:
        k = lengths.size
        room = workspace[: values.size] if workspace.size >= values.size else np.empty(values.size)
        rows = slice(row, row + k)
        found = gap_pass(
            values,
            lengths,
            first_s[rows],
            mask[rows],
            wanted,
            counts,
            shift,
            bins,
            room,
            sums,
            state,
        )
        if found:
            kept.append(room[:found].copy())
        row += k
        pages.add(values)
    pages.close()
    quantiles.added(int(state[0]), float(sums[0]), float(sums[1]), kept, bool(state[1]))


# Above this many gaps, with two CPUs to run on, a helper thread shares their pass with the
# caller. Counts add up exactly; the sums behind the mean and std are added in another order
# (float rounding).
_THREADED_GAPS = 8_000_000


def _threaded(cols: Columns) -> bool:
    """Whether a helper thread shares the pass over the gaps (see ``_THREADED_GAPS``): not
    for a summary in another thread than the main one, which is one of several made at once
    (a report summarises two runs at a time, one a core)."""
    return (
        usable_cpus() >= 2
        and threading.current_thread() is threading.main_thread()
        and len(cols.itl_blocks) >= 2
        and sum(v.size for v, _ in cols.itl_blocks) >= _THREADED_GAPS
    )


def _pieces(cols: Columns) -> list[tuple[int, int]]:
    """The gap blocks cut into ranges of about ``_PIECE_GAPS`` gaps each."""
    pieces: list[tuple[int, int]] = []
    start, size, last = 0, 0, len(cols.itl_blocks) - 1
    for b, (values, _) in enumerate(cols.itl_blocks):
        size += values.size
        if size >= _PIECE_GAPS or b == last:
            pieces.append((start, b + 1))
            start, size = b + 1, 0
    return pieces


# Gaps per piece of a threaded pass: a fiftieth of a second's work or so, so that the thread
# done last ends at most that much after the other.
_PIECE_GAPS = 2_000_000


_SAMPLE_VALUES = 200_000  # gaps in the sample that guesses where the percentiles lie
_SAMPLE_SLICE = 256  # taken in slices this long, so the sample touches few pages


def _gap_sample(cols: Columns) -> Any:
    """About ``_SAMPLE_VALUES`` gaps from all over the run, in short contiguous slices."""
    import numpy as np

    total = sum(v.size for v, _ in cols.itl_blocks)
    if total <= _SAMPLE_VALUES:
        return np.concatenate([v for v, _ in cols.itl_blocks])
    parts = []
    for values, _ in cols.itl_blocks:
        want = values.size * _SAMPLE_VALUES // total
        slices = -(-want // _SAMPLE_SLICE)
        if not slices:
            continue
        length = want // slices
        # evenly spaced starts, first and last at the block's ends (plain integers: a numpy
        # call per block cost more than the slices, over a thousand blocks)
        room = values.size - length
        for k in range(slices):
            start = room * k // (slices - 1) if slices > 1 else 0
            parts.append(values[start : start + length])
    return np.concatenate(parts) if parts else np.empty(0)


# Gaps per step: a few MB, so the passes of one step after its first read from cache.
_GROUP_VALUES = 1 << 18


def _gap_groups(
    cols: Columns,
    mask: Any,
    t0: float,
    part: tuple[int, int] | None = None,
    buffer: Any = None,
):
    """Yield (gaps, per-request lengths, first-chunk s from ``t0``) of the ``mask``ed
    requests, in steps of whole requests of about ``_GROUP_VALUES`` gaps (of the gap blocks in
    the range ``part``, else all).

    A block of whole requests is yielded as it is (a view of the records file), a larger one
    in pieces, smaller ones gathered at the start of ``buffer`` (a float array of at least a
    step's length, else one made here): each yielded array is valid until the next step, and the
    caller may overwrite gathered gaps. The pages of the records file are released once their
    blocks have been used.
    """
    import numpy as np

    from vprof.records.store import Releaser

    first = cols.floats["first_token_at"]
    lo, hi = part if part is not None else (0, len(cols.itl_blocks))
    size = _GROUP_VALUES  # read at each call: tests set smaller steps
    buffer = np.empty(size) if buffer is None else buffer
    pos, row = 0, sum(lengths.size for _, lengths in cols.itl_blocks[:lo])
    pending: list[tuple[Any, Any]] = []  # (lengths, first) of what the buffer holds
    pages = Releaser()  # the blocks used, their pages handed back a few MB at a time

    def flush() -> Any:
        out = (
            buffer[:pos],
            np.concatenate([p[0] for p in pending]),
            np.concatenate([p[1] for p in pending]) - t0,
        )
        pending.clear()
        return out

    for values, block_lengths in cols.itl_blocks[lo:hi]:
        k = block_lengths.size
        m = mask[row : row + k]
        ft = first[row : row + k]
        row += k
        if m.all():
            lengths, gaps = block_lengths, values
        else:
            lengths, ft = block_lengths[m], ft[m]
            # Failed requests usually streamed no gaps: then every gap is kept, no compress.
            n = int(lengths.sum())
            gaps = values if n == values.size else values[np.repeat(m, block_lengths)]
        if gaps.size >= size // 4:
            if pending:
                yield flush()
                pos = 0
            if gaps.size <= 2 * size:
                yield gaps, lengths, ft - t0
            else:  # in pieces of whole requests
                ends = np.cumsum(lengths)
                cuts = np.searchsorted(ends, np.arange(size, int(ends[-1]), size), side="right")
                edges = [0, *(int(c) for c in np.unique(cuts)), lengths.size]
                for a, b in zip(edges[:-1], edges[1:], strict=False):
                    if b <= a:
                        continue
                    lo = int(ends[a - 1]) if a else 0
                    yield gaps[lo : int(ends[b - 1])], lengths[a:b], ft[a:b] - t0
        else:
            if pos + gaps.size > size and pending:
                yield flush()
                pos = 0
            buffer[pos : pos + gaps.size] = gaps
            pos += gaps.size
            pending.append((lengths, ft))
        pages.add(values)  # used
    pages.close()
    if pending:
        yield flush()


def _bin_chunks(bins: Any, gaps: Any, lengths: Any, first_s: Any, workspace: Any = None) -> None:
    """Add each request's chunks to 1-s ``bins`` (chunk j at first + Σ its first j gaps).

    Instead of materialising a time per chunk, count per request the chunks before each
    whole second it spans, with one search per (request, second) in the running sum of
    gaps (:class:`_RunningSum`, built in ``workspace`` when given), which rises
    monotonically because gaps are never negative.
    """
    import numpy as np

    ends = np.cumsum(lengths)
    starts = ends - lengths
    running = _RunningSum(gaps, workspace)
    # the running sum up to each request's last gap; the one before it is its base (its
    # requests' gaps follow one another)
    upto_end = np.zeros(lengths.size)
    some = ends > 0
    upto_end[some] = running.at(ends[some] - 1)
    base = np.concatenate([[0.0], upto_end[:-1]])
    span_ms = upto_end - base
    good = np.isfinite(first_s)
    if not good.all():
        lengths, first_s, base, span_ms, starts = (
            a[good] for a in (lengths, first_s, base, span_ms, starts)
        )
    if not lengths.size:
        return
    lo = np.floor(first_s).astype(np.int64)
    spans = np.floor(first_s + span_ms / 1000.0).astype(np.int64) - lo  # whole seconds crossed
    # A request's bins lo … lo + spans get its chunks: the last bin all of them, each bin
    # before it (one search each) minus the chunks before its start, and plus in the next
    # bin the chunks before its end (the first chunk and the gaps that end earlier).
    last = np.clip(lo + spans, 0, bins.size - 1)
    added = np.bincount(last, weights=lengths + 1, minlength=bins.size)
    r = np.repeat(np.arange(lengths.size), spans)
    if r.size:
        bin_idx = lo[r] + (np.arange(r.size) - np.repeat(np.cumsum(spans) - spans, spans))
        target = (bin_idx + 1 - first_s[r]) * 1000.0 + base[r]
        upto = 1 + np.clip(running.count_below(target) - starts[r], 0, lengths[r])
        size = bins.size
        added += np.bincount(np.clip(bin_idx, 0, size - 1), weights=upto, minlength=size)
        added -= np.bincount(np.clip(bin_idx + 1, 0, size - 1), weights=upto, minlength=size)
    bins += added.astype(np.int64)


class _RunningSum:
    """The running sum of non-negative ``values`` without a sequential pass over all of them.

    A cumulative sum adds one value after another (a few ns each, the slow part of binning
    tens of millions of gaps). Here the values sit in rows of :attr:`WIDTH`: the running sum
    along each row is a few vectorised column additions, and only the row totals are summed
    one after another. The sum up to position p is then (sum of the rows before) + (p's
    running sum in its row): the plain cumulative sum to within float rounding (a chunk
    would have to fall within a nanosecond of a whole second to be binned otherwise), and
    rising monotonically as that does, so a search in it is exact.

    The rows are laid in ``workspace`` (a float array, reused from step to step: a fresh one
    of a few MB each time costs its page faults) when it is large enough; values that already
    lie at its start are summed where they lie, overwritten.

    Eight columns (a row per cache line) took ~5 % less of the 1M benchmark's gap pass than
    sixteen: seven passes instead of fifteen and one halving step less per search, while the
    row ends, one value in eight, still add up one by one quickly.
    """

    WIDTH = 8

    def __init__(self, values: Any, workspace: Any = None) -> None:
        import numpy as np

        self.n = values.size
        w = self.WIDTH
        n_rows = -(-self.n // w)
        if workspace is None or workspace.size < n_rows * w:
            workspace = np.empty(n_rows * w)
        flat = workspace[: n_rows * w]
        if not _starts_at(values, workspace):
            flat[: self.n] = values  # else they lie there already (gathered by _gap_groups)
        flat[self.n :] = 0.0
        rows = flat.reshape(n_rows, w)
        for c in range(1, w):
            np.add(rows[:, c], rows[:, c - 1], out=rows[:, c])
        self.rows = rows
        self.ends = np.cumsum(rows[:, w - 1])  # the sum up to each row's end
        self.before = np.concatenate([[0.0], self.ends[:-1]])  # ... and up to its start

    def at(self, positions: Any) -> Any:
        """The sum of the values up to and including each position."""
        return self.before[positions // self.WIDTH] + self.rows.ravel()[positions]

    def count_below(self, targets: Any) -> Any:
        """Per target, how many positions hold a sum below it (``searchsorted(…, "left")`` in
        the running sum): the rows whose end is below it, then a halving search in the next."""
        import numpy as np

        w = self.WIDTH
        row = np.searchsorted(self.ends, targets, side="left")
        inside = np.minimum(row, max(self.ends.size - 1, 0))
        start = self.before[inside] if self.ends.size else np.zeros(0)
        flat = self.rows.ravel()
        at = inside * w
        step = w // 2
        while step and self.ends.size:
            at += step * (start + flat[at + (step - 1)] < targets)
            step //= 2
        return np.minimum(np.where(row < self.ends.size, at, row * w), self.n)


def _starts_at(values: Any, workspace: Any) -> bool:
    """Whether the array ``values`` begins at the first element of ``workspace``."""
    return bool(values.__array_interface__["data"][0] == workspace.__array_interface__["data"][0])


def _served_rate(
    cols: Columns, keep: Any, ok: Any, measured_s: float | None = None
) -> dict[str, float]:
    """Open loop: the rate requests arrived at over the measured window ((N − 1) / the span
    of their N intended send times) and the rate they were answered at (that times the share
    answered) — what the capacity plan reads. ``request_throughput`` (vllm bench serve's)
    divides by the time to the last answer instead, so a level reads low by about the last
    answers' latency over its length (30 s of 5 s answers: 14 %)."""
    import numpy as np

    scheduled = cols.floats["scheduled_at"][keep]
    scheduled = scheduled[np.isfinite(scheduled)]
    span = float(scheduled.max() - scheduled.min()) if scheduled.size >= 2 else 0.0
    if measured_s:  # measured in windows (alternating slices): arrivals over their length
        return {
            K.ARRIVAL_RATE: scheduled.size / measured_s,
            K.SERVED_RATE: int(ok.sum()) / measured_s,
        }
    if not span > 0:
        return {K.ARRIVAL_RATE: math.nan, K.SERVED_RATE: math.nan}
    arrival = (scheduled.size - 1) / span
    return {K.ARRIVAL_RATE: arrival, K.SERVED_RATE: arrival * int(ok.sum()) / int(keep.sum())}


def _peak_concurrency(starts: Any, ends: Any) -> int:
    """Exact peak of overlapping [start, end) intervals (a sweep line via sorted arrays)."""
    import numpy as np

    good = np.isfinite(starts) & np.isfinite(ends)
    if not good.any():
        return 0
    # Timsort ("stable") runs in near-linear time on sends, which arrive almost in order;
    # ends, shuffled by their latencies, sort faster with numpy's default (the same values).
    s, e = np.sort(starts[good], kind="stable"), np.sort(ends[good])

    # At the i-th start at most i + 1 have started; exactly so at the last of equal starts,
    # where the peak over them is taken: the maximum is the exact peak.
    def active(i: Any) -> Any:
        return i + 1 - np.searchsorted(e, s[i], side="right")

    # A search per start is most of the work. In a block of starts [a, b) none is above
    # b − (ends by s[a]): only the blocks whose bound beats the best block start are searched.
    block = _PEAK_BLOCK
    firsts = np.arange(0, s.size, block)
    best = int(active(firsts).max())
    bound = np.minimum(firsts + block, s.size) - np.searchsorted(e, s[firsts], side="right")
    open_blocks = firsts[bound > best]
    if open_blocks.size * 4 > firsts.size:  # a steady load: every block may hold the peak
        return int(active(np.arange(s.size)).max())
    if open_blocks.size:
        rows = (open_blocks[:, None] + np.arange(block)).ravel()
        best = max(best, int(active(rows[rows < s.size]).max()))
    return best


# Starts per block in the search for the peak (a bound per block, then its starts one by one).
_PEAK_BLOCK = 8


def _from_schedule(cols: Columns, keep: Any, ok: Any, percentiles: Sequence[float]) -> dict:
    """Latency measured from the intended send time, and how late sends were."""
    import numpy as np

    f = cols.floats
    out: dict[str, Any] = {}
    ttft = (f["first_token_at"] - f["scheduled_at"])[ok] * 1000.0
    e2el = (f["last_token_at"] - f["scheduled_at"])[ok] * 1000.0
    out.update(describe(ttft[np.isfinite(ttft)], Metric.TTFT_FROM_SCHEDULE, percentiles))
    out.update(describe(e2el[np.isfinite(e2el)], Metric.E2EL_FROM_SCHEDULE, percentiles))
    lag = f["schedule_lag_ms"][keep & np.isfinite(f["sent_at"])]
    out.update(describe(lag, Metric.SCHEDULE_LAG, percentiles))
    out[K.MAX_SCHEDULE_LAG_MS] = float(lag.max()) if lag.size else math.nan
    return out


def _request_values(target: SloTarget, cols: Columns, from_schedule: bool) -> Any:
    """Per-request values for a threshold (TPOT of a ≤1-token request counts as 0); open-loop
    TTFT and E2E from the intended send time, so a client that held a request back cannot
    hide the wait (coordinated omission)."""
    import numpy as np

    f = cols.floats
    if target.metric in ("ttft", "e2el"):
        at = f["first_token_at"] if target.metric == "ttft" else f["last_token_at"]
        start = f["scheduled_at"] if from_schedule else f["sent_at"]
        return (at - start) * 1000.0
    return np.where(np.isnan(f["tpot_ms"]), 0.0, f["tpot_ms"])


def _cut_at_end(cols: Columns, keep: Any) -> Any:
    """Requests cut off in flight because the test ended (a ladder's level that did not wait
    for its last answers): their outcome is unknown, only that they took longer than their
    age at the cut."""
    import numpy as np

    cancelled = keep & cols.status.isin(Status.CANCELLED.value)
    if not cancelled.any() or cols.errors is None:
        return np.zeros(cols.n, dtype=bool)
    return cancelled & cols.errors.isin(CUT_AT_END) & np.isfinite(cols.floats["sent_at"])


def _censored(target: SloTarget, cols: Columns, cut: Any, from_schedule: bool) -> Any:
    """What requests cut off at the end say about a percentile check: a TTFT that had come is
    known; a TTFT or E2E latency not in yet when the request was older than the threshold
    certainly missed it (infinitely slow); the rest are unknown and left out (TPOT too)."""
    import numpy as np

    if target.metric not in ("ttft", "e2el") or not cut.any():
        return np.empty(0)
    f = cols.floats
    start = f["scheduled_at"] if from_schedule else f["sent_at"]
    age_ms = (f["finished_at"] - start)[cut] * 1000.0
    known = np.empty(0)
    if target.metric == "ttft":
        ttft = (f["first_token_at"] - start)[cut] * 1000.0
        known, age_ms = ttft[np.isfinite(ttft)], age_ms[~np.isfinite(ttft)]
    missed = int((age_ms > target.threshold_ms).sum())
    return np.concatenate([known, np.full(missed, np.inf)])


def _slo(
    slo: Slo,
    cols: Columns,
    ok: Any,
    failed: Any,
    itl: Callable[[], BlockQuantiles],
    summary: dict,
    cut: Any = None,
) -> dict:
    """Goodput (requests/s meeting every per-request threshold) and percentile checks.

    When the SLO has no ``errors=`` entry, percentile checks count every request that got no
    full answer (failed, cancelled, never sent) as infinitely slow, so an SLO cannot be met by
    dropping requests; requests ``cut`` off at the test's end count as :func:`_censored`
    says. With ``errors=`` the failures are judged by that entry and percentiles are over
    completed requests. Open-loop runs are judged from the intended send time. ``itl`` gives
    the pooled gaps' quantiles once their pass is done (called only for an ITL check).
    """
    import numpy as np

    from_schedule = bool(summary.get(K.OPEN_LOOP))
    good = ok.copy()
    for target in slo.targets:
        if target.metric != "itl":  # vllm's goodput has no per-request ITL either
            good &= _request_values(target, cols, from_schedule) <= target.threshold_ms
    unbounded = int(failed.sum()) if slo.max_error_rate is None else 0
    checks = []
    for target in slo.targets:
        if target.percentile is None:
            continue
        if target.metric == "itl":
            value = itl().percentile(target.percentile)
        else:
            base = _request_values(target, cols, from_schedule)
            if target.metric == "tpot":  # vllm's TPOT distribution: requests with >1 token
                base = cols.floats["tpot_ms"]
            censored = (
                _censored(target, cols, cut, from_schedule)
                if cut is not None and slo.max_error_rate is None
                else np.empty(0)
            )
            sample = np.concatenate(
                [base[ok & ~np.isnan(base)], censored, np.full(unbounded, np.inf)]
            )
            value = percentile(sample, target.percentile)
        check = {
            "key": target.key,
            "threshold_ms": target.threshold_ms,
            "value_ms": value,
            "met": bool(value <= target.threshold_ms),
        }
        if unbounded and target.metric != "itl":
            check["unanswered_counted_as_unbounded"] = unbounded
        checks.append(check)
    if slo.max_error_rate is not None:
        rate = summary[K.ERROR_RATE]
        checks.append(
            {
                "key": "errors",
                "threshold": slo.max_error_rate,
                "value": rate,
                "met": bool(rate <= slo.max_error_rate) if not math.isnan(rate) else False,
            }
        )
    duration = summary[K.DURATION]
    n_good = int(good.sum())
    scheduled = summary[K.REQUESTS]  # every scheduled request: good ones are a share of them
    return {
        K.SLO: str(slo),
        K.SLO_BASIS: (
            "open loop: TTFT and E2E from the intended send time"
            if from_schedule
            else "from the send"
        ),
        K.GOOD_REQUESTS: n_good,
        K.GOOD_REQUEST_FRACTION: n_good / scheduled if scheduled else math.nan,
        K.REQUEST_GOODPUT: n_good / duration if duration > 0 else math.nan,
        K.SLO_CHECKS: checks,
        K.SLO_MET: all(c["met"] for c in checks) if checks else None,
    }


def _cached_share(cols: Columns, ok: Any) -> dict[str, Any]:
    cached = cols.ints["cached_tokens"][ok]
    prompt = cols.ints["prompt_tokens"][ok]
    reported = (cached >= 0) & (prompt > 0)
    denominator = int(prompt[reported].sum())
    share = int(cached[reported].sum()) / denominator if denominator else None
    return {K.CACHED_TOKEN_SHARE: share}


# The per-interval figures of a timeline beside its counts (the report draws the same ones).
TIMELINE_SERIES = (
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.P50_TTFT_MS,
    K.P95_TTFT_MS,
    K.P50_TPOT_MS,
    K.P95_TPOT_MS,
)


def timeline(records: Any, interval_s: float = 5.0) -> Any:
    """Per-interval activity (a DataFrame): requests started and finished, throughput, and
    p50/p95 TTFT and TPOT of the requests *sent* in each interval.

    ``t_s`` is the interval's start in seconds from the first send.
    """
    import pandas as pd

    series = timeline_series(records, interval_s)
    if series is None:
        return pd.DataFrame(columns=list(TIMELINE_COLUMNS))
    return pd.DataFrame(series)[list(TIMELINE_COLUMNS)]


TIMELINE_COLUMNS = ("t_s", "started", "finished", K.FAILED, *TIMELINE_SERIES)


def timeline_series(records: Any, interval_s: float = 5.0) -> dict[str, Any] | None:
    """:func:`timeline`'s columns as numpy arrays, without pandas (None: nothing was sent)."""
    import numpy as np

    check_number(interval_s, above=0, error=RunError, key="--interval")
    cols = records if isinstance(records, Columns) else from_records(records)
    f = cols.floats
    started_at = np.where(np.isnan(f["sent_at"]), f["scheduled_at"], f["sent_at"])
    t0 = _nanmin(started_at)
    if math.isnan(t0):
        return None
    ends = np.where(np.isnan(f["finished_at"]), f["last_token_at"], f["finished_at"])
    ok = cols.status.isin(Status.OK.value)
    start_bin = np.floor((started_at - t0) / interval_s)
    end_bin = np.floor((ends - t0) / interval_s)
    span_s = float(np.nanmax(np.concatenate([started_at, ends]))) - t0
    check_interval_rows(
        span_s,
        interval_s,
        over="this run",
        rows_of="timeline rows",
        error=RunError,
        key="--interval",
    )
    n_bins = int(np.nanmax(np.concatenate([start_bin, end_bin]))) + 1

    def count(bins: Any, mask: Any, weights: Any = None) -> Any:
        good = mask & np.isfinite(bins)
        w = None if weights is None else weights[good]
        return np.bincount(bins[good].astype(np.int64), weights=w, minlength=n_bins)[:n_bins]

    output = np.maximum(cols.ints["completion_tokens"], 0).astype(np.float64)
    frame = {
        "t_s": np.arange(n_bins) * interval_s,
        "started": count(start_bin, np.ones(cols.n, dtype=bool)),
        "finished": count(end_bin, ok),
        K.FAILED: count(end_bin, cols.status.isin(*_FAILED)),
    }
    frame[K.REQUEST_THROUGHPUT] = frame["finished"] / interval_s
    frame[K.OUTPUT_THROUGHPUT] = count(end_bin, ok, output) / interval_s
    for metric in (Metric.TTFT, Metric.TPOT):
        for q, values in _binned_quantiles(start_bin[ok], f[f"{metric}_ms"][ok], n_bins).items():
            frame[stat_key(pct_key(q), metric)] = values
    return frame


def _binned_quantiles(bins: Any, values: Any, n_bins: int, qs: Sequence[int] = (50, 95)) -> dict:
    """Per bin, the ``qs`` percentiles of the non-NaN ``values`` there (NaN: none), exactly as
    pandas' ``groupby(bins).quantile`` interpolates, with one sort for all bins."""
    import numpy as np

    good = ~np.isnan(bins) & ~np.isnan(values)
    v, edges = sorted_within_groups(bins[good].astype(np.int64), values[good], n_bins)
    starts = edges[:-1]
    counts = np.diff(edges)
    has = counts > 0
    out = {}
    for q in qs:
        position = (q / 100.0) * (counts[has] - 1).astype(np.float64)
        at = starts[has] + position.astype(np.int64)
        frac = position % 1
        low = v[at]
        high = v[np.minimum(at + 1, v.size - 1)]
        column = np.full(n_bins, np.nan)
        column[has] = np.where(frac == 0.0, low, low + (high - low) * frac)
        out[q] = column
    return out
