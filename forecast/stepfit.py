"""Fitting a step-time model to measured runs (numpy and SciPy's least squares).

Two stages. First a linear estimate. While a request decodes, each of its steps produces one of
its tokens, so the time from its first to its last token is the sum of ``output − 1`` steps,
and what those steps held is known from the other requests: the tokens they decoded meanwhile
(and their context), the prompts whose first token came meanwhile (their uncached tokens and
attention). Non-negative least squares over every request gives the step constant and the
decode costs; prompts are a small part of what those steps held, so the cost per prefill token
is taken, where the server counted it, from the server's own prefill times
(``vllm:request_prefill_time_seconds``, first scheduled → first token): between two
``/metrics`` samples, the requests that finished spent that long in the steps that computed
their prompts, and the steps' constant and decodes (from the windows) leave the prompt tokens'
share. The two are solved in turn until they agree. Where the records hold every token's time (vprof
writes ``itl_ms``), the steps themselves are measured instead: each gap between two tokens of a
decoding request is one step, and what it held is seen in the other requests' tokens (the
decodes that got a token in it, the prompts whose chunks it computed: the last where the
prompt's first token came, the earlier ones in the steps just before). The steps that computed
prompts (each counted once), less the constant and decodes the windows give, price the prompts
(per token, and by the same BIC rule per prompt or per chunk and per attention pair). The
decode-only steps also show whether the cost per decode flattens with the batch (decodes^γ)
and whether it grows with the context the decodes read (a step's decodes read contexts of
their own lengths, so varied prompts tell that cost from the batch's), both judged together by
the same rule; if
either joins, the constant and the decode costs are fitted on those steps, a window's decodes
summing steps of different batches. The server's prefill
times span more than the prompt's own steps (the README's forecast section has the
measurement), so they are not used then. The token times also bound each request's front
end: the engine takes in new requests between steps, so a request whose prompt's first chunk
ran in a step reached the engine during the step before it, and its front end's delay lies
between the end of the step before that one and that step's end (as the client saw both);
the middle of that range (its median over the requests) places each request's arrival at the
engine, and the steps a request arrived in, less what the fitted step gives them, say what an
arrival costs the engine's step (per request and per prompt token, by the same BIC rule; the
README's forecast section has the measurement); the same delays, request by request, say
whether the front end's delay grows with the requests the client had in flight at the send
and with the prompt (by the same rule). Then the replay itself is fitted: each run
is replayed with the requests it really sent (their send times, lengths and cached tokens), and
the front end's delay, the steps' jitter and (without the server's prefill times) the
coefficients the data can tell apart are moved until the replayed TTFT, TPOT and E2E
quantiles match the measured ones (in log, with a soft L1 loss so one saturated run cannot
pull the rest) and the number of steps matches what the server counted
(``vllm:iteration_tokens_total``), when it was sampled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import ForecastError
from vprof.forecast.observed import Observed, ServerIntervals
from vprof.forecast.simulate import OK, simulate
from vprof.forecast.stalls import StallProcess
from vprof.forecast.stepcost import COEFFICIENTS, StepCost

TTFT_QUANTILES = (10, 50, 90, 95)
TPOT_QUANTILES = (10, 50, 90)
E2E_QUANTILES = (50,)
MATCHED = (("ttft_ms", TTFT_QUANTILES), ("tpot_ms", TPOT_QUANTILES), ("e2e_ms", E2E_QUANTILES))
MAX_EVALUATIONS = 120  # replays of every run the calibration may spend
JITTERS = (0.0, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2)  # the jitters the calibration tries
SOFT = 0.1  # the calibration's residuals count fully up to this, then less (soft L1)
EVIDENCE = 10.0  # BIC points a context or attention term must win by to join the model
# Prefill-time intervals are used while the steps hold at most this share of the token budget,
# so a prompt's chunks are its own tokens over what the decodes leave of the budget
LIGHT_LOAD = 0.5
VARIED = 0.25  # prompts vary enough to show a per-token front-end cost (std / mean)
# A client sees one step's tokens within about a millisecond of each other: a token up to this
# long (or a quarter of the run's median inter-token gap, if less) after another request's
# token belongs to the step that gave that one
TOKEN_SPREAD_S = 1e-3
SEED = 0
REPLAYS = 3  # seeds a calibration's replay of a run pools
FRONT_END = ("frontend_ms", "frontend_ms_per_1k_prompt")  # solved on each replay


@dataclass(frozen=True)
class Fitted:
    cost: StepCost
    linear: StepCost  # the first stage's estimate
    active: tuple[str, ...]  # the coefficients the data could tell apart
    evaluations: int
    residual: float  # the calibration's final cost (smaller is better)


def linear_estimate(
    runs: Sequence[Observed], say: Callable[[str], None] = lambda _: None
) -> tuple[StepCost, tuple[str, ...]]:
    """The first stage: step coefficients from decode windows and, where the records hold
    token times, the steps that computed prompts (else, where the server counted them, its
    prefill times; see the module's text), and which coefficients the data can tell apart (the
    ones the calibration may move).

    The constant, per-prefill-token and per-decode terms are always fitted; the context and
    attention terms join only when they explain the windows clearly better (BIC lower by
    more than ``EVIDENCE``): with one prompt length, per-token and per-pair costs are the same
    column and a fit could put the cost on either. The cost per prefill chunk joins the same
    way, on the steps that computed prompts, and the context term may also join on the
    decode-only steps (:func:`_decode_terms`). A step fitted with the steps or the server's
    prefill times is kept as it is, the calibration moving only the front end and the
    jitter: on runs of one workload the replay's latency quantiles cannot tell the prefill
    tokens' cost from the front end's delay, and move the decode cost where the tails of a
    few slow seconds pull it (the README's forecast section has the measurement)."""
    import numpy as np

    rows, ys = [], []
    for o in runs:
        a, y = _decode_windows(o)
        if a.size:
            rows.append(a)
            ys.append(y)
    if not rows:
        raise ForecastError(
            "no request of these runs decoded more than one token: nothing to fit a step on",
            key="RUNS",
            hint="fit on runs whose requests ask for two or more output tokens",
        )
    a = np.vstack(rows)
    y = np.concatenate(ys)
    prefill, source = _prefill_evidence(runs)
    # the terms of the prompts' steps are judged on the steps, where they show; the rest on
    # the windows
    by_steps = prefill is not None and source == "steps"
    best: tuple[float, tuple[int, ...], Any] | None = None
    for extra in ((), (3,)) if by_steps else ((), (3,), (4,), (3, 4)):
        columns = (0, 1, 2, *extra)
        if prefill is None:
            x, sse, _ = (*_nnls(a[:, columns], y), 0.0)
        else:
            x, sse, _ = _alternate(a, y, *prefill, columns)
        n = y.size
        bic = n * math.log(max(sse, 1e-12) / n) + len(columns) * math.log(n)
        if best is None or bic < best[0] - (EVIDENCE if extra else 0.0):
            best = (bic, columns, x)
    assert best is not None
    _, columns, x = best
    gamma = 1.0
    if by_steps:
        assert prefill is not None
        gamma, context, alone = _decode_terms(runs, say)
        if context and 3 not in columns:
            columns = (*columns, 3)
        if gamma != 1.0 or context:
            # a window's decodes sum steps of different batches: the bent cost is fitted on
            # the decode-only steps themselves (each counted once; the context term as the
            # windows or those steps chose), and so are the prompts'
            a_s, y_s, w_s = alone
            root = np.sqrt(w_s)
            a = _bend(a_s, gamma) * root[:, None]
            y = y_s * root
            prefill = (_bend(prefill[0], gamma), prefill[1], prefill[2])
        steps = float(prefill[2].sum())  # each prompt's step counted once
        chosen: tuple[float, tuple[int, ...], Any] | None = None
        plain = 0.0
        # per prompt before per chunk: where most prompts are one chunk the two are one
        # column, and per chunk must then win by the rule's margin (held-out prompts of
        # several chunks favoured per prompt: the README's forecast section has the
        # measurement)
        for extra in ((), (4,), (PROMPTS,), (CHUNKS,), (4, PROMPTS), (4, CHUNKS)):
            x_extra, _, sse = _alternate(a, y, *prefill, (*columns, *extra))
            bic = steps * math.log(max(sse, 1e-12) / steps) + len(extra) * math.log(steps)
            if not extra:
                plain = bic
            else:
                names = " and ".join(COLUMNS[c] for c in extra)
                say(f"{names} on {steps:.0f} prompts' steps: BIC {bic - plain:+.1f}")
            if chosen is None or bic < chosen[0] - (EVIDENCE if extra else 0.0):
                chosen = (bic, (*columns, *extra), x_extra)
        assert chosen is not None
        _, columns, x = chosen
    values = [0.0] * len(COLUMNS)
    for column, value in zip(columns, x, strict=True):
        values[column] = float(value)
    cost = StepCost(*values[:PROMPTS], decode_exponent=gamma, prefill_prompt_ms=values[PROMPTS])
    if prefill is not None:
        say(
            f"prefill token cost from the {source}: {cost.prefill_token_ms * 1e3:.3g} µs"
            + (f" + {cost.prefill_chunk_ms:.3g} ms per chunk" if CHUNKS in columns else "")
            + (f" + {cost.prefill_prompt_ms:.3g} ms per prompt" if PROMPTS in columns else "")
        )
    fronts: list[float] = []
    for o in runs:
        fronts.extend(_frontend_residuals(o, cost))
    front = float(np.percentile(fronts, 25)) if fronts else 0.0
    if by_steps:
        arrival = _arrival_cost(runs, cost, say)
        if arrival is not None:
            front, per_request, per_1k = arrival
            cost = dataclasses.replace(
                cost, arrival_ms=per_request, arrival_ms_per_1k_prompt=per_1k
            )
    # with the prefill measured the step is fixed here; the replay adds the front end
    active = ([COEFFICIENTS[c] for c in columns] if prefill is None else []) + ["frontend_ms"]
    law = _frontend_law(runs, say) if by_steps else None
    if law is not None:
        front, per_1k, per_in_flight = law
        cost = dataclasses.replace(
            cost, frontend_ms_per_1k_prompt=per_1k, frontend_ms_per_in_flight=per_in_flight
        )
    else:
        prompts = np.concatenate([o.requests.prompt_tokens for o in runs]).astype(np.float64)
        if prompts.size and np.std(prompts) > VARIED * np.mean(prompts):
            active.append("frontend_ms_per_1k_prompt")  # only varied prompts can show it
    return dataclasses.replace(cost, frontend_ms=max(front, 0.0)), tuple(active)


CHUNKS = 5  # the column of prefill chunks (after those of :func:`_decode_windows`)
PROMPTS = 6  # the column of prompts whose last chunk the step computed
COLUMNS = (*COEFFICIENTS[:PROMPTS], "prefill_prompt_ms")  # the step rows' columns, by name
EXPONENTS = (0.9, 0.8, 0.7, 0.6, 0.5)  # γ the fit may choose for the cost per decode


def _bend(rows: Any, gamma: float) -> Any:
    """Step rows (:func:`_step_gaps`) with the decodes column raised to ``gamma``."""
    out = rows.copy()
    out[:, 2] = out[:, 2] ** gamma
    return out


def _decode_terms(
    runs: Sequence[Observed], say: Callable[[str], None]
) -> tuple[float, bool, tuple[Any, Any, Any]]:
    """γ for a cost per decode that flattens with the batch (decode_seq · decodes^γ), and
    whether the decodes' context costs too, judged together on the decode-only steps seen in
    the token times (each counted once) by the BIC rule: the best γ of ``EXPONENTS`` and the
    context term each join only if they beat the model without them by ``EVIDENCE``. A
    step's decodes read contexts of their own lengths, so where prompts vary the context
    tokens are a column of their own even at one batch size. Returns γ (1.0 if none joins),
    whether the context term joins, and those steps (rows, times, weights)."""
    import numpy as np

    parts = [_step_gaps(o) for o in runs]
    a = np.vstack([p[0][p[0][:, 1] == 0] for p in parts])
    y = np.concatenate([p[1][p[0][:, 1] == 0] for p in parts])
    w = np.concatenate([p[2][p[0][:, 1] == 0] for p in parts])
    if y.size < 10:
        return 1.0, False, (a, y, w)
    n = float(w.sum())
    root = np.sqrt(w)

    def bic(gamma: float, context: bool) -> float:
        x = np.column_stack([a[:, 0], a[:, 2] ** gamma, *([a[:, 3]] if context else [])])
        _, sse = _nnls(x * root[:, None], y * root)
        terms = x.shape[1] + (gamma != 1.0)
        return n * math.log(max(sse, 1e-12) / n) + terms * math.log(n)

    scores = {(g, c): bic(g, c) for g in (1.0, *EXPONENTS) for c in (False, True)}

    def best(context: bool) -> float:
        """γ with or without the context term: bent only where that wins by ``EVIDENCE``."""
        gamma = min(EXPONENTS, key=lambda g: scores[g, context])
        return gamma if scores[gamma, context] < scores[1.0, context] - EVIDENCE else 1.0

    gamma, gamma_c = best(False), best(True)
    bent = min(EXPONENTS, key=lambda g: scores[g, False])
    gain = scores[gamma_c, True] - scores[gamma, False]
    say(
        f"decode cost ∝ decodes^{bent:g} on {n:.0f} decode-only steps: "
        f"BIC {scores[bent, False] - scores[1.0, False]:+.1f}; and per context token "
        f"(decodes^{gamma_c:g}): BIC {gain:+.1f}"
    )
    if gain < -EVIDENCE:
        return gamma_c, True, (a, y, w)
    return gamma, False, (a, y, w)


PREFILL_COLUMNS = (1, 4, CHUNKS, PROMPTS)  # what the prefill evidence fits; the windows the rest


def _prefill_evidence(runs: Sequence[Observed]) -> tuple[tuple[Any, Any, Any] | None, str]:
    """What prices the prompts: the steps that computed them, seen in the token times (rows,
    times, weights), when every run has token times; else the server's prefill times per
    sample interval; else nothing (the windows alone)."""
    import numpy as np

    if all(o.token_s is not None for o in runs):
        parts = [_step_gaps(o) for o in runs]
        parts = [(b[m], yb[m], wb[m]) for b, yb, wb in parts if (m := b[:, CHUNKS] > 0).any()]
        if parts:
            stacked = tuple(np.concatenate([p[k] for p in parts]) for k in range(3))
            return (stacked[0], stacked[1], stacked[2]), "steps"
    intervals = [_prefill_rows(o) for o in runs]
    intervals = [(b, yb) for b, yb in intervals if b.size]
    if intervals:
        b = np.vstack([p[0] for p in intervals])
        # no chunk or prompt column: never fitted on these
        b = np.column_stack([b, np.zeros((len(b), 2))])
        yb = np.concatenate([p[1] for p in intervals])
        return (b, yb, np.ones_like(yb)), "server's prefill times"
    return None, ""


def _alternate(
    a: Any, y: Any, b: Any, yb: Any, wb: Any, columns: Sequence[int], rounds: int = 100
) -> tuple[Any, float, float]:
    """Decode windows ``a`` (for every column but the prefill's) and prefill evidence ``b``
    weighted by ``wb`` (for the prefill token's and chunk's) solved in turn until they agree:
    (coefficients in ``columns``' order, the windows' sum of squared errors, the prefill
    evidence's weighted one)."""
    import numpy as np

    others = [c for c in columns if c not in PREFILL_COLUMNS]
    mine = [c for c in columns if c in PREFILL_COLUMNS]
    root = np.sqrt(wb)
    cp = np.zeros(len(mine))
    x = np.zeros(len(others))
    for _ in range(rounds):
        x, _ = _nnls(a[:, others], y - a[:, mine] @ cp)
        left = yb - b[:, others] @ x
        new, _ = _nnls(b[:, mine] * root[:, None], left * root)
        done = bool(np.all(np.abs(new - cp) <= 1e-4 * np.maximum(np.abs(new), 1e-9)))
        cp = new
        if done:
            break
    residual = y - a[:, others] @ x - a[:, mine] @ cp
    rb = (yb - b[:, others] @ x - b[:, mine] @ cp) * root
    by_column = dict(zip(others, x.tolist(), strict=True)) | dict(
        zip(mine, cp.tolist(), strict=True)
    )
    return (
        np.array([by_column[c] for c in columns]),
        float(residual @ residual),
        float(rb @ rb),
    )


def _prefill_rows(o: Observed) -> tuple[Any, Any]:
    """One row per ``/metrics`` interval at light load: the steps that computed the prompts of
    the requests that finished in it (the columns of :func:`_decode_windows`), and the time
    the server counted for them (ms). Empty without the server's counters."""
    import numpy as np

    iv: ServerIntervals | None = o.intervals
    if iv is None or not iv.n:
        return np.empty((0, 5)), np.empty(0)
    m = o.measured
    ok = m["ok"] & np.isfinite(m["last_s"])
    prompt = o.requests.prompt_tokens.astype(np.float64)
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)
    own = np.maximum(prompt - cached, 1.0)
    pairs = own * (cached + own / 2)
    # the context a decode reads, on average over the run
    context = float(np.mean(prompt + o.requests.output_tokens / 2.0))
    budget = float(o.rules.max_num_batched_tokens)
    rows, ys = [], []
    for k in range(iv.n):
        steps, served = float(iv.steps[k]), float(iv.prefilled[k])
        if steps <= 0 or served <= 0:
            continue
        per_step = float(iv.prefill_tokens[k]) / steps
        decodes = float(iv.decode_tokens[k]) / steps
        if per_step + decodes > LIGHT_LOAD * budget:
            continue
        fin = ok & (m["last_s"] > iv.start_s[k]) & (m["last_s"] <= iv.end_s[k])
        if not fin.any():
            continue
        share = served / float(fin.sum())  # the server's count over the records'
        if o.rules.chunked_prefill:
            chunks = float(np.ceil(own[fin] / max(budget - decodes, 1.0)).sum()) * share
        else:
            chunks = served
        rows.append(
            [
                chunks,
                float(iv.prefill_computed[k]) + chunks * per_step,
                chunks * decodes,
                chunks * decodes * context * 1e-3,
                float(pairs[fin].sum()) * share * 1e-6,
            ]
        )
        span = float(iv.end_s[k] - iv.start_s[k])
        paused = (
            float(o.stalls.paused_ms(iv.start_s[k : k + 1], iv.end_s[k : k + 1])[0]) * 1e-3
            if o.stalls is not None
            else 0.0
        )
        # prompts were in prefill during the stalls as often as at any time: their share goes
        ys.append(float(iv.prefill_time_s[k]) * 1000.0 * max(1.0 - paused / span, 0.0))
    if not rows:
        return np.empty((0, 5)), np.empty(0)
    return np.asarray(rows), np.asarray(ys)


def _step_gaps(o: Observed) -> tuple[Any, Any, Any]:
    """:func:`_timed_step_gaps` without the steps' bounds."""
    return _timed_step_gaps(o)[:3]


def _timed_step_gaps(o: Observed) -> tuple[Any, Any, Any, Any]:
    """One row per gap between two tokens of a decoding request (one step): what the step
    held (the columns of :func:`_decode_windows`: then the prompts it computed a chunk of and
    those whose last chunk it was),
    its time (ms), a weight (1 / the decodes it held, so that each step counts once) and its
    bounds (the two tokens' times, s).
    Left out: gaps over a stall, gaps in which no decode shows (the request's next token came
    within the spread of the last: one step's tokens delivered bunched, not a step), and steps
    whose prompts as placed here overfill the token budget (two prompts sharing it: the split
    is not known). Empty without token times."""
    import numpy as np

    empty = (np.empty((0, len(COLUMNS))), np.empty(0), np.empty(0), np.empty((0, 2)))
    times = o.token_s
    if times is None:
        return empty
    sizes = np.array([t.size for t in times])
    answered = np.flatnonzero(sizes > 0)
    decoding = np.flatnonzero(sizes >= 2)
    if not decoding.size:
        return empty
    prompt = o.requests.prompt_tokens.astype(np.float64)
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)
    own = np.maximum(prompt - cached, 1.0)
    # every decoded token (each request's tokens after its first) and the context it read
    dec_t = np.concatenate([times[i][1:] for i in decoding])
    dec_ctx = np.concatenate([prompt[i] + np.arange(1, sizes[i]) for i in decoding])
    order = np.argsort(dec_t)
    dec_t = dec_t[order]
    ctx_cum = np.concatenate(([0.0], np.cumsum(dec_ctx[order])))
    spread = min(
        TOKEN_SPREAD_S,
        0.25 * float(np.median(np.concatenate([np.diff(times[i]) for i in decoding]))),
    )
    first = np.array([times[i][0] for i in answered])
    porder = np.argsort(first)
    first = first[porder]
    p_own, p_cached = own[answered][porder], cached[answered][porder]
    rules = o.rules
    budget = float(rules.max_num_batched_tokens)
    rows, ys, spans = [], [], []
    for i in decoding:
        t = times[i]
        spans.append(np.column_stack([t[:-1], t[1:]]))
        hi = t[1:] + spread
        lo = t[:-1] + spread
        d0 = np.searchsorted(dec_t, lo, side="right")
        d1 = np.searchsorted(dec_t, hi, side="right")
        decodes = (d1 - d0).astype(np.float64)
        n = decodes.size
        tokens, pairs, chunks, ends = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        j0 = int(np.searchsorted(first, lo[0], side="right"))
        j1 = int(np.searchsorted(first, hi[-1], side="right"))
        if j1 > j0:
            # a prompt's last chunk is in the step that gave its first token, the earlier
            # ones (each what the decodes left of the budget) in the steps before
            last = np.searchsorted(hi, first[j0:j1], side="left")
            size_j, cached_j = p_own[j0:j1], p_cached[j0:j1]
            room = np.maximum(budget - decodes[last], 1.0) if rules.chunked_prefill else size_j
            if rules.long_prefill_token_threshold > 0:
                room = np.minimum(room, float(rules.long_prefill_token_threshold))
            count = np.ceil(size_j / room).astype(np.int64)
            c = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
            room_c, count_c = np.repeat(room, count), np.repeat(count, count)
            size = np.where(
                c < count_c - 1, room_c, np.repeat(size_j, count) - (count_c - 1) * room_c
            )
            at = np.repeat(last, count) - (count_c - 1) + c
            seen = at >= 0
            np.add.at(chunks, at[seen], 1.0)
            np.add.at(ends, last, 1.0)  # a prompt's last chunk: the step of its first token
            np.add.at(tokens, at[seen], size[seen])
            before = np.repeat(cached_j, count) + c * room_c
            np.add.at(pairs, at[seen], (size * (before + size / 2))[seen])
        rows.append(
            np.column_stack(
                [
                    np.ones(n),
                    tokens,
                    decodes,
                    (ctx_cum[d1] - ctx_cum[d0]) * 1e-3,
                    pairs * 1e-6,
                    chunks,
                    ends,
                ]
            )
        )
        y = np.diff(t) * 1000.0
        if o.stalls is not None:
            y = np.where(o.stalls.paused_ms(t[:-1] - spread, t[1:]) > 0, np.nan, y)
        ys.append(y)
    a = np.vstack(rows)
    y = np.concatenate(ys)
    good = np.isfinite(y) & (y > 0) & (a[:, 2] >= 1) & (a[:, 1] + a[:, 2] <= budget)
    a, y = a[good], y[good]
    return a, y, 1.0 / np.maximum(a[:, 2], 1.0), np.vstack(spans)[good]


def step_time_ratio(o: Observed, cost: StepCost) -> dict[str, float]:
    """The time ``cost`` gives the steps seen in ``o``'s token times (each counted once, as
    :func:`_step_gaps` places what they held) over the time they took: over all of them
    (``all``), those that computed prompts (``prefill``) and the decode-only ones
    (``decode``). Near 1, the step costs are right for what the steps held, and a
    prediction's error lies in the scheduling, the stalls or the queue. Empty without token
    times."""
    import numpy as np

    a, y, w = _step_gaps(o)
    if not y.size:
        return {}
    model = cost.step_ms(
        a[:, 1], a[:, 2], a[:, 3] * 1e3, a[:, 4] * 1e6, a[:, CHUNKS], a[:, PROMPTS]
    )
    prefill = a[:, 1] > 0
    out = {}
    for name, pick in (("all", np.ones_like(prefill)), ("prefill", prefill), ("decode", ~prefill)):
        if pick.any():
            out[name] = float(np.sum(w[pick] * model[pick]) / np.sum(w[pick] * y[pick]))
    return out


def _nnls(a: Any, y: Any) -> tuple[Any, float]:
    """Non-negative least squares on scaled columns: (coefficients, sum of squared errors)."""
    import numpy as np
    from scipy.optimize import nnls

    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    scaled = a / scale
    if scaled.shape[0] > scaled.shape[1]:
        # the same problem on the columns' triangle (Q's columns are orthonormal): tens of
        # thousands of steps solve in microseconds instead of a tenth of a second
        q, r = np.linalg.qr(scaled)
        x, _ = nnls(r, q.T @ y)
    else:
        x, _ = nnls(scaled, y)
    x = x / scale
    residual = y - a @ x
    return x, float(residual @ residual)


def _decode_windows(o: Observed) -> tuple[Any, Any]:
    """One row per decoding request: what its steps held (the columns of :data:`COLUMNS`),
    and how long they took (ms)."""
    import numpy as np

    m = o.measured
    first, last = m["first_s"], m["last_s"]
    ok = m["ok"] & np.isfinite(first) & np.isfinite(last)
    prompt = o.requests.prompt_tokens.astype(np.float64)
    output = o.requests.output_tokens.astype(np.float64)
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)
    # every decoded token's time, spread evenly between a request's first and last token
    # (the client may see several tokens in one chunk)
    dec = ok & (output > 1)
    counts = (output[dec] - 1).astype(np.int64)
    if not counts.sum():
        return np.empty((0, len(COLUMNS))), np.empty(0)
    offsets = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.arange(counts.sum()) - offsets + 1  # token number 1 … output-1
    span = np.repeat((last[dec] - first[dec]) / np.maximum(output[dec] - 1, 1), counts)
    times = np.repeat(first[dec], counts) + k * span
    ctx = np.repeat(prompt[dec], counts) + k
    order = np.argsort(times)
    times, ctx = times[order], ctx[order]
    ctx_cum = np.concatenate(([0.0], np.cumsum(ctx)))
    # prompts: computed at (about) their first token
    pre_t = first[ok]
    own = np.maximum(prompt[ok] - cached[ok], 0.0)
    pairs = own * (cached[ok] + own / 2)
    porder = np.argsort(pre_t)
    pre_t, own, pairs = pre_t[porder], own[porder], pairs[porder]
    # its chunks: what the requests decoding meanwhile leave of the budget, at a time
    budget = float(o.rules.max_num_batched_tokens)
    if o.rules.chunked_prefill:
        decoding = np.searchsorted(np.sort(first[dec]), pre_t, side="left") - np.searchsorted(
            np.sort(last[dec]), pre_t, side="left"
        )
        chunks = np.ceil(np.maximum(own, 1.0) / np.maximum(budget - decoding, 1.0))
    else:
        chunks = np.ones_like(own)
    own_cum = np.concatenate(([0.0], np.cumsum(own)))
    pair_cum = np.concatenate(([0.0], np.cumsum(pairs)))
    chunk_cum = np.concatenate(([0.0], np.cumsum(chunks)))
    pick = dec & m["after_warmup"]
    a_lo, a_hi = first[pick], last[pick]
    lo = np.searchsorted(times, a_lo, side="right")
    hi = np.searchsorted(times, a_hi, side="right")
    plo = np.searchsorted(pre_t, a_lo, side="right")
    phi = np.searchsorted(pre_t, a_hi, side="right")
    steps = output[pick] - 1
    rows = np.column_stack(
        [
            steps,
            own_cum[phi] - own_cum[plo],
            (hi - lo).astype(np.float64),
            (ctx_cum[hi] - ctx_cum[lo]) * 1e-3,
            (pair_cum[phi] - pair_cum[plo]) * 1e-6,
            chunk_cum[phi] - chunk_cum[plo],
            (phi - plo).astype(np.float64),
        ]
    )
    y = (a_hi - a_lo) * 1000.0
    if o.stalls is not None:
        y = y - o.stalls.paused_ms(a_lo, a_hi)  # the steps' time, not the stalls'
    good = np.isfinite(y) & (y > 0)
    return rows[good], y[good]


def _frontend_bounds(o: Observed) -> tuple[Any, Any]:
    """The requests whose token times place them, and for each the middle of the range its
    front end's delay lies in (ms; see the module's text). The steps are read off the
    requests decoding at its first token: each gap between two of a decoding request's
    tokens is one step, so the one that got a token with it (within a step's spread) had its
    tokens of the steps before at its own earlier tokens; the middle is the median over
    those requests. A request counts only where such a request's gaps back to the step
    before its prompt's first chunk are ordinary steps (each longer than the spread and no
    longer than the run's 99th-percentile inter-token gap, no stall), so an idle engine or a
    pause does not pass for the front end. Empty without token times."""
    import numpy as np

    times = o.token_s
    none = (np.empty(0, dtype=np.int64), np.empty(0))
    if times is None:
        return none
    sizes = np.array([t.size for t in times])
    decoding = np.flatnonzero(sizes >= 2)
    if not decoding.size:
        return none
    gaps = np.concatenate([np.diff(times[i]) for i in decoding])
    spread = min(TOKEN_SPREAD_S, 0.25 * float(np.median(gaps)))
    ordinary = float(np.percentile(gaps, 99))
    # every decoded token: its time, its request and its place in that request's tokens
    flat = np.concatenate([times[i] for i in decoding])
    owner = np.repeat(decoding, sizes[decoding])
    start = np.repeat(np.cumsum(sizes[decoding]) - sizes[decoding], sizes[decoding])
    place = np.arange(flat.size) - start
    # a token's step is ordinary if the gap before it is; count the others up to each token
    step = np.concatenate(([np.inf], np.diff(flat)))
    step[place == 0] = np.inf
    odd = (step <= spread) | (step > ordinary)
    if o.stalls is not None:
        odd |= o.stalls.paused_ms(flat - np.where(np.isfinite(step), step, 0.0), flat) > 0
    odd_cum = np.concatenate(([0], np.cumsum(odd)))
    order = np.argsort(flat)
    by_time = flat[order]
    answered = np.flatnonzero(sizes > 0)
    sent = np.asarray(o.client.sent_s, dtype=np.float64)
    prompt = o.requests.prompt_tokens.astype(np.float64)
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)
    own = np.maximum(prompt - cached, 1.0)
    rules = o.rules
    budget = float(rules.max_num_batched_tokens)
    threshold = float(rules.long_prefill_token_threshold)
    warm = o.measured["after_warmup"]
    placed, mids = [], []
    for i in answered[warm[answered]]:
        f = times[i][0]
        lo = int(np.searchsorted(by_time, f - spread, side="left"))
        hi = int(np.searchsorted(by_time, f + spread, side="right"))
        with_it = order[lo:hi]
        with_it = with_it[owner[with_it] != i]
        if not with_it.size:
            continue
        # the prompt's chunks: what the step's decodes leave of the budget
        room = max(budget - with_it.size, 1.0) if rules.chunked_prefill else own[i]
        if threshold > 0:
            room = min(room, threshold)
        count = int(math.ceil(own[i] / room))
        back = with_it[place[with_it] >= count + 1]  # tokens of the step before the first chunk
        back = back[odd_cum[back + 1] - odd_cum[back - count] == 0]
        if not back.size:
            continue
        end_j, end_before = flat[back - count], flat[back - count - 1]
        placed.append(int(i))
        mids.append(float(np.median((end_j + end_before) / 2 - sent[i])) * 1000.0)
    return np.asarray(placed, dtype=np.int64), np.asarray(mids)


def _frontend_law(
    runs: Sequence[Observed], say: Callable[[str], None]
) -> tuple[float, float, float] | None:
    """How the front end's delay grows: (at no load, ms; per 1,000 of the request's prompt
    tokens, ms; per request the client had in flight at its send, ms), from the delays
    :func:`_frontend_bounds` places, or None when it places too few. The API server is one
    process serving every request out, so its delay may grow with them (and with the prompt
    it tokenises); each term joins by the BIC rule, non-negative. The highest twentieth of
    the delays is left out: a stall, or a prompt queued behind another's chunks, puts a few
    far above the rest."""
    import numpy as np

    rows, ys = [], []
    for o in runs:
        placed, mids = _frontend_bounds(o)
        if placed.size:
            prompt = o.requests.prompt_tokens.astype(np.float64)[placed] * 1e-3
            rows.append(np.column_stack([prompt, _in_flight_at_send(o)[placed]]))
            ys.append(mids)
    y = np.concatenate(ys) if ys else np.empty(0)
    if y.size < 30:
        return None
    keep = y <= np.percentile(y, 95)
    a, y = np.vstack(rows)[keep], y[keep]
    n = float(y.size)
    ones = np.ones_like(y)

    def fit(columns: tuple[int, ...]) -> tuple[float, Any]:
        coef, sse = _nnls(np.column_stack([ones, *[a[:, c] for c in columns]]), y)
        return n * math.log(max(sse, 1e-12) / n) + (len(columns) + 1) * math.log(n), coef

    plain, coef = fit(())
    best: tuple[float, tuple[int, ...], Any] = (plain, (), coef)
    for columns in ((0,), (1,), (0, 1)):
        bic, coef = fit(columns)
        names = " and ".join(("per prompt token", "per request in flight")[c] for c in columns)
        say(f"front end {names} on {n:.0f} requests: BIC {bic - plain:+.1f}")
        if bic < best[0] - EVIDENCE:
            best = (bic, columns, coef)
    _, chosen, coef = best
    values = dict(zip(chosen, coef[1:].tolist(), strict=True))
    return float(coef[0]), float(values.get(0, 0.0)), float(values.get(1, 0.0))


def _in_flight_at_send(o: Observed) -> Any:
    """Per request: the requests the client had out when it sent it (sent before it, not yet
    ended; one that failed without an E2E ended at its send)."""
    import numpy as np

    sent = np.asarray(o.client.sent_s, dtype=np.float64)
    e2e = o.measured["e2e_ms"]
    ended = sent + np.where(np.isfinite(e2e), e2e, 0.0) * 1e-3
    known = np.isfinite(sent)
    sends = np.sort(sent[known])
    ends = np.sort(ended[known])
    out = np.searchsorted(sends, sent, side="left") - np.searchsorted(ends, sent, side="right")
    return np.where(known, out, 0).astype(np.float64)


def _arrival_cost(
    runs: Sequence[Observed], cost: StepCost, say: Callable[[str], None]
) -> tuple[float, float, float] | None:
    """What a request reaching the engine adds to the step it arrives in: (the front end's
    delay that places the arrivals, ms; the cost per arriving request, ms; per 1,000 of its
    prompt tokens, ms), or None when the token times show none. Each request reaches the
    engine the median of :func:`_frontend_bounds` after its send; the decode-only steps the
    token times show (each counted once, as :func:`_step_gaps` counts them), less what
    ``cost`` gives them and less the length an arrival's step has by chance (its length
    bias), are regressed on the arrivals in them and their prompt tokens (non-negative, with
    an intercept for what the step's constant absorbed of them); each term joins by the BIC
    rule."""
    import numpy as np

    mids = np.concatenate([_frontend_bounds(o)[1] for o in runs])
    if mids.size < 30:
        return None
    front = float(np.median(mids))
    rows, ys, ws = [], [], []
    for o in runs:
        steps = _arrival_steps(o, front)
        if steps is not None:
            rows.append(steps[0])
            ys.append(steps[1])
            ws.append(steps[2])
    if not rows:
        return None
    a, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(ws)
    left = y - (
        cost.base_ms
        + cost.decode_seq_ms * a[:, 0] ** cost.decode_exponent
        + cost.decode_context_ms_per_1k * a[:, 1]
    )
    n = float(w.sum())
    if not (a[:, 2] > 0).any() or n < 10:
        return None
    # a random arrival lands in a long step more often than in a short one (the inspection
    # paradox): each arrival in a step makes it longer by Var(step) / mean(step) with no cost
    # at all, so that much is taken off first (measured on the steps no arrival came in)
    quiet = a[:, 2] == 0
    predicted = y[quiet] - left[quiet]
    bias = float(np.average(left[quiet] ** 2 / np.maximum(predicted, 1e-3), weights=w[quiet]))
    left = left - bias * a[:, 2]
    root = np.sqrt(w)
    ones = np.ones_like(left)

    def fit(columns: tuple[int, ...]) -> tuple[float, Any]:
        x = np.column_stack([ones, *[a[:, c] for c in columns]])
        # the intercept may be either sign: split it into two non-negative columns
        x = np.column_stack([x, -ones])
        coef, sse = _nnls(x * root[:, None], left * root)
        bic = n * math.log(max(sse, 1e-12) / n) + (len(columns) + 1) * math.log(n)
        return bic, coef[1:-1]

    plain, _ = fit(())
    best: tuple[float, tuple[int, ...], Any] = (plain, (), np.empty(0))
    candidates: tuple[tuple[int, ...], ...] = ((2,), (3,), (2, 3))
    for columns in candidates:
        bic, coef = fit(columns)
        names = " and ".join(("per arrival", "per arriving prompt token")[c - 2] for c in columns)
        say(f"step cost {names} on {n:.0f} decode-only steps: BIC {bic - plain:+.1f}")
        if bic < best[0] - EVIDENCE:
            best = (bic, columns, coef)
    _, chosen, coef = best
    if not chosen:
        return None
    values = dict(zip(chosen, coef.tolist(), strict=True))
    return front, float(values.get(2, 0.0)), float(values.get(3, 0.0))


def _arrival_steps(o: Observed, front_ms: float) -> tuple[Any, Any, Any] | None:
    """The steps of :func:`_step_gaps` that computed no prompt (decodes only), with what
    reached the engine during each: (decodes, context tokens / 1,000, requests whose send
    plus ``front_ms`` lies in the step, their prompt tokens / 1,000), the step's time (ms) and
    its weight (each step counted once)."""
    import numpy as np

    a, y, w, spans = _timed_step_gaps(o)
    keep = a[:, CHUNKS] == 0
    if not keep.any():
        return None
    a, y, w, spans = a[keep], y[keep], w[keep], spans[keep]
    sent = np.asarray(o.client.sent_s, dtype=np.float64)
    known = np.isfinite(sent)
    arrive = sent[known] + front_ms * 1e-3
    by = np.argsort(arrive)
    arrive = arrive[by]
    prompt = o.requests.prompt_tokens.astype(np.float64)[known][by]
    tokens_cum = np.concatenate(([0.0], np.cumsum(prompt)))
    # arrivals during the step: after the step before ended, before this one did
    a0 = np.searchsorted(arrive, spans[:, 0], side="right")
    a1 = np.searchsorted(arrive, spans[:, 1], side="right")
    # a prompt the budget takes in more than one chunk has steps before its first token that
    # the token times place only roughly: steps its arrival is seen in are left out
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)[known][by]
    own = prompt - cached
    room = float(o.rules.max_num_batched_tokens) - a[:, 2]
    clear = np.ones(len(y), dtype=bool)
    for r in np.flatnonzero(a1 > a0):
        clear[r] = bool(own[a0[r] : a1[r]].max() <= room[r])
    rows = np.column_stack(
        [a[:, 2], a[:, 3], (a1 - a0).astype(np.float64), (tokens_cum[a1] - tokens_cum[a0]) * 1e-3]
    )
    return rows[clear], y[clear], w[clear]


def _frontend_residuals(o: Observed, cost: StepCost) -> list[float]:
    """Each request's TTFT less the step that computed its prompt (a lower bound on the
    front end's delay plus queueing; the fit takes a low quantile of them)."""
    import numpy as np

    m = o.measured
    ok = m["ok"] & m["after_warmup"] & np.isfinite(m["ttft_ms"])
    prompt = o.requests.prompt_tokens.astype(np.float64)
    cached = np.maximum(np.asarray(o.requests.known_hit, dtype=np.float64), 0.0)
    own = np.maximum(prompt - cached, 1.0)
    budget = float(o.rules.max_num_batched_tokens)
    chunks = np.ceil(own / budget) if o.rules.chunked_prefill else np.ones_like(own)
    step = chunks * (cost.base_ms + cost.prefill_chunk_ms) + cost.prefill_token_ms * own
    step += cost.prefill_prompt_ms
    step += cost.prefill_attention_ms_per_1m * own * (cached + own / 2) * 1e-6
    return list((m["ttft_ms"] - step)[ok])


def _targets(o: Observed) -> dict[str, Any]:
    """The measured quantiles a replay of ``o`` must match, over its summarised requests."""
    import numpy as np

    m = o.measured
    pick = m["ok"] & m["after_warmup"]
    out: dict[str, Any] = {"pick": pick}
    for name, qs in MATCHED:
        values = m[name][pick]
        values = values[np.isfinite(values) & (values > 0)]
        out[name] = np.percentile(values, qs) if values.size >= 5 else None
    return out


def _replayed_metrics(
    o: Observed, cost: StepCost, pick: Any, stalls: StallProcess | None = None
) -> dict[str, Any]:
    """``o`` replayed with ``REPLAYS`` seeds, its requests' metrics pooled (and each one's
    prompt tokens, which the front end's cost per token reads); ``steps``: their mean."""
    import numpy as np

    pooled: dict[str, list[Any]] = {"ok": [], "ttft_ms": [], "tpot_ms": [], "e2e_ms": []}
    steps = 0
    output = o.requests.output_tokens
    for seed in range(SEED, SEED + REPLAYS):
        rep = simulate(o.requests, o.client, o.rules, cost, seed=seed, stalls=stalls)
        sent = rep.sent_s
        ttft = (rep.first_s - sent) * 1000.0
        e2e = (rep.last_s - sent) * 1000.0
        pooled["ok"].append((rep.status == OK) & pick)
        pooled["ttft_ms"].append(ttft)
        pooled["e2e_ms"].append(e2e)
        pooled["tpot_ms"].append(
            np.where(output > 1, (e2e - ttft) / np.maximum(output - 1, 1), np.nan)
        )
        steps += rep.steps
    out = {name: np.concatenate(values) for name, values in pooled.items()}
    prompt = np.tile(o.requests.prompt_tokens.astype(np.float64), REPLAYS)
    return {**out, "prompt_tokens": prompt, "steps": steps / REPLAYS}


def _residuals(
    runs: Sequence[Observed],
    targets: Sequence[dict[str, Any]],
    got: Sequence[dict[str, Any]],
    front_ms: Any,
) -> Any:
    """Log ratios of the replayed quantiles to the measured ones (and of the steps counted),
    the replays' front end moved by ``front_ms`` (ms, and ms per 1,000 prompt tokens): a
    request's front end delays its arrival at the engine, so it adds to its TTFT and E2E."""
    import numpy as np

    out: list[float] = []
    for o, target, replay in zip(runs, targets, got, strict=True):
        shift = front_ms[0] + front_ms[1] * replay["prompt_tokens"] * 1e-3
        for name, qs in MATCHED:
            want = target[name]
            if want is None:
                continue
            values = replay[name] + (0.0 if name == "tpot_ms" else shift)
            values = values[replay["ok"]]
            values = values[np.isfinite(values) & (values > 0)]
            if values.size < 5:
                out.extend([3.0] * len(qs))  # it answered (almost) nothing: far off
                continue
            out.extend(np.log(np.percentile(values, qs) / want).tolist())
        steps = o.server.get("steps")
        if steps:
            out.append(math.log(max(replay["steps"], 1) / steps))
    return np.asarray(out)


def calibrate(
    runs: Sequence[Observed],
    start: StepCost,
    active: Sequence[str] = COEFFICIENTS,
    *,
    max_evaluations: int = MAX_EVALUATIONS,
    say: Callable[[str], None] = lambda _: None,
    stalls: StallProcess | None = None,
) -> Fitted:
    """The second stage: the ``active`` coefficients (and the jitter) fitted so replays match
    the measured quantiles; the others stay at ``start``'s values. The replays pause as
    ``stalls`` says, so the jitter is only what the stalls leave.

    The front end only delays a request's arrival at the engine: moving it all by a constant
    moves the engine's timeline with it, so its terms are not replayed for but solved on each
    replay (TTFT and E2E shifted). The jitter is tried at each of ``JITTERS`` (the replays'
    quantiles hardly tell nearby ones apart, and a search over it stopped wherever its start
    and the draws' chance left it), the other active terms searched at each; each replay
    pools ``REPLAYS`` seeds, the same for every candidate."""
    import numpy as np
    from scipy.optimize import least_squares

    targets = [_targets(o) for o in runs]
    full = np.array(start.vector())
    scale = _scales(runs, start)
    front = [COEFFICIENTS.index(name) for name in FRONT_END]
    moving = [i for i, name in enumerate(COEFFICIENTS) if name in active and name not in FRONT_END]
    z0 = full[moving] / scale[moving]
    lower = np.zeros_like(z0)
    if 0 in moving:
        lower[moving.index(0)] = 1e-4 / scale[0]  # a step always takes some time
    z0 = np.maximum(z0, lower)
    f0 = full[front]
    solving = [j for j, name in enumerate(FRONT_END) if name in active]
    f_scale = scale[front][solving]
    calls = 0

    def cost_of(z: Any, front_ms: Any, jitter: float) -> StepCost:
        x = full.copy()
        x[moving] = z * scale[moving]
        x[front] = front_ms
        return StepCost.from_vector(
            x,
            jitter=jitter,
            decode_exponent=start.decode_exponent,
            arrival_ms=start.arrival_ms,
            arrival_ms_per_1k_prompt=start.arrival_ms_per_1k_prompt,
            frontend_ms_per_in_flight=start.frontend_ms_per_in_flight,
            prefill_prompt_ms=start.prefill_prompt_ms,
        )

    def solve(z: Any, jitter: float) -> tuple[Any, Any]:
        """The residuals of candidate ``z`` at ``jitter``, and the front end they ask for."""
        nonlocal calls
        calls += 1
        got = [
            _replayed_metrics(o, cost_of(z, f0, jitter), t["pick"], stalls)
            for o, t in zip(runs, targets, strict=True)
        ]
        if not solving:
            return _residuals(runs, targets, got, np.zeros(len(FRONT_END))), f0

        def moved(u: Any) -> Any:
            shift = np.zeros(len(FRONT_END))
            shift[solving] = u * f_scale - f0[solving]
            return shift

        inner = least_squares(
            lambda u: _residuals(runs, targets, got, moved(u)),
            f0[solving] / f_scale,
            bounds=(0.0, np.inf),
            loss="soft_l1",
            f_scale=SOFT,
        )
        return inner.fun, f0 + moved(inner.x)

    best: tuple[float, StepCost] | None = None
    for jitter in JITTERS:
        z = z0
        if moving:
            z = least_squares(
                lambda z, jitter=jitter: solve(z, jitter)[0],
                z0,
                bounds=(lower, np.inf),
                loss="soft_l1",
                f_scale=SOFT,
                diff_step=0.05,
                max_nfev=max(max_evaluations // len(JITTERS), 2),
                xtol=1e-3,
                ftol=1e-4,
            ).x
        fun, front_ms = solve(z, jitter)
        value = float(np.sum(SOFT**2 * (np.sqrt(1.0 + (fun / SOFT) ** 2) - 1.0)))
        if best is None or value < best[0]:
            best = (value, cost_of(z, front_ms, jitter))
    assert best is not None
    say(f"calibrated in {calls} replays of {len(runs)} runs (cost {best[0]:.4f})")
    return Fitted(best[1], start, tuple(active), calls, best[0])


def _scales(runs: Sequence[Observed], start: StepCost) -> Any:
    """A typical size for each parameter (the fit moves them in these units): its starting
    value, or what would make a tenth of a typical step."""
    import numpy as np

    tpots, prompts, outputs, concurrency = [], [], [], []
    for o in runs:
        m = o.measured
        t = m["tpot_ms"][m["ok"] & np.isfinite(m["tpot_ms"])]
        if t.size:
            tpots.append(float(np.median(t)))
        prompts.append(float(np.mean(o.requests.prompt_tokens)))
        outputs.append(float(np.mean(o.requests.output_tokens)))
        c = o.summary.get(K.MAX_CONCURRENT_REQUESTS)
        concurrency.append(float(c) if isinstance(c, (int, float)) and c > 0 else 1.0)
    step = float(np.median(tpots)) if tpots else 10.0
    prompt = float(np.mean(prompts)) if prompts else 100.0
    busy = max(float(np.mean(concurrency)) if concurrency else 1.0, 1.0)
    typical = {
        "base_ms": step,
        "prefill_token_ms": step / max(prompt, 1.0),
        "decode_seq_ms": step / busy,
        "decode_context_ms_per_1k": step / max(busy * prompt * 1e-3, 1e-3),
        "prefill_attention_ms_per_1m": step / max(prompt * prompt * 0.5e-6, 1e-6),
        "prefill_chunk_ms": step,
        "frontend_ms": step,
        "frontend_ms_per_1k_prompt": step / max(prompt * 1e-3, 1e-3),
    }
    values = start.vector()
    out = [max(abs(v), 0.1 * typical[name]) for name, v in zip(COEFFICIENTS, values, strict=True)]
    return np.array(out)
