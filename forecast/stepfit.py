"""Fitting a step-time model to measured runs (numpy and SciPy's least squares).

Two stages. First a linear estimate from the records alone: while a request decodes, each of
its steps produces one of its tokens, so the time from its first to its last token is the sum
of ``output − 1`` steps, and what those steps held is known from the other requests: the
tokens they decoded meanwhile (and their context), the prompts whose first token came
meanwhile (their uncached tokens and attention). Non-negative least squares over every
request gives the step coefficients. Then the replay itself is fitted: each run is replayed
with the requests it really sent (their send times, lengths and cached tokens), and the
coefficients, the front end's delay and the steps' jitter are moved until the replayed
TTFT, TPOT and E2E quantiles match the measured ones (in log, with a soft L1 loss so one
saturated run cannot pull the rest) and the number of steps matches what the server counted
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
from vprof.forecast.observed import Observed
from vprof.forecast.simulate import OK, simulate
from vprof.forecast.stepcost import COEFFICIENTS, StepCost

TTFT_QUANTILES = (10, 50, 90, 95)
TPOT_QUANTILES = (10, 50, 90)
E2E_QUANTILES = (50,)
MATCHED = (("ttft_ms", TTFT_QUANTILES), ("tpot_ms", TPOT_QUANTILES), ("e2e_ms", E2E_QUANTILES))
MAX_EVALUATIONS = 120  # replays of every run the calibration may spend
EVIDENCE = 10.0  # BIC points a context or attention term must win by to join the model
VARIED = 0.25  # prompts vary enough to show a per-token front-end cost (std / mean)
SEED = 0


@dataclass(frozen=True)
class Fitted:
    cost: StepCost
    linear: StepCost  # the first stage's estimate
    active: tuple[str, ...]  # the coefficients the data could tell apart
    evaluations: int
    residual: float  # the calibration's final cost (smaller is better)


def linear_estimate(runs: Sequence[Observed]) -> tuple[StepCost, tuple[str, ...]]:
    """The first stage: step coefficients from decode windows (see the module's text), and
    which coefficients the data can tell apart (the ones the calibration may move).

    The constant, per-prefill-token and per-decode terms are always fitted; the context and
    attention terms join only when they explain the windows clearly better (BIC lower by
    more than ``EVIDENCE``): with one prompt length, per-token and per-pair costs are the same
    column and a fit could put the cost on either."""
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
    best: tuple[float, tuple[int, ...], Any] | None = None
    for extra in ((), (3,), (4,), (3, 4)):
        columns = (0, 1, 2, *extra)
        x, sse = _nnls(a[:, columns], y)
        n = y.size
        bic = n * math.log(max(sse, 1e-12) / n) + len(columns) * math.log(n)
        if best is None or bic < best[0] - (EVIDENCE if extra else 0.0):
            best = (bic, columns, x)
    assert best is not None
    _, columns, x = best
    values = [0.0] * 5
    for column, value in zip(columns, x, strict=True):
        values[column] = float(value)
    cost = StepCost(*values)
    fronts: list[float] = []
    for o in runs:
        fronts.extend(_frontend_residuals(o, cost))
    front = float(np.percentile(fronts, 25)) if fronts else 0.0
    active = [COEFFICIENTS[c] for c in columns] + ["frontend_ms"]
    prompts = np.concatenate([o.requests.prompt_tokens for o in runs]).astype(np.float64)
    if prompts.size and np.std(prompts) > VARIED * np.mean(prompts):
        active.append("frontend_ms_per_1k_prompt")  # only varied prompts can show it
    return dataclasses.replace(cost, frontend_ms=max(front, 0.0)), tuple(active)


def _nnls(a: Any, y: Any) -> tuple[Any, float]:
    """Non-negative least squares on scaled columns: (coefficients, sum of squared errors)."""
    import numpy as np
    from scipy.optimize import nnls

    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    x, _ = nnls(a / scale, y)
    x = x / scale
    residual = y - a @ x
    return x, float(residual @ residual)


def _decode_windows(o: Observed) -> tuple[Any, Any]:
    """One row per decoding request: what its steps held, and how long they took (ms)."""
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
        return np.empty((0, 5)), np.empty(0)
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
    own_cum = np.concatenate(([0.0], np.cumsum(own)))
    pair_cum = np.concatenate(([0.0], np.cumsum(pairs)))
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
        ]
    )
    y = (a_hi - a_lo) * 1000.0
    good = np.isfinite(y) & (y > 0)
    return rows[good], y[good]


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
    step = chunks * cost.base_ms + cost.prefill_token_ms * own
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


def _replayed_metrics(o: Observed, cost: StepCost, pick: Any) -> dict[str, Any]:
    import numpy as np

    rep = simulate(o.requests, o.client, o.rules, cost, seed=SEED)
    ok = (rep.status == OK) & pick
    sent = rep.sent_s
    ttft = (rep.first_s - sent) * 1000.0
    e2e = (rep.last_s - sent) * 1000.0
    output = o.requests.output_tokens
    tpot = np.where(output > 1, (e2e - ttft) / np.maximum(output - 1, 1), np.nan)
    return {"ok": ok, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "steps": rep.steps}


def calibrate(
    runs: Sequence[Observed],
    start: StepCost,
    active: Sequence[str] = COEFFICIENTS,
    *,
    max_evaluations: int = MAX_EVALUATIONS,
    say: Callable[[str], None] = lambda _: None,
) -> Fitted:
    """The second stage: the ``active`` coefficients (and the jitter) fitted so replays match
    the measured quantiles; the others stay at ``start``'s values."""
    import numpy as np
    from scipy.optimize import least_squares

    targets = [_targets(o) for o in runs]
    full = np.array([*start.vector(), max(start.jitter, 0.05)])
    scale = _scales(runs, start)
    moving = [i for i, name in enumerate(COEFFICIENTS) if name in active] + [len(COEFFICIENTS)]
    z0 = full[moving] / scale[moving]
    lower = np.zeros_like(z0)
    if 0 in moving:
        lower[moving.index(0)] = 1e-4 / scale[0]  # a step always takes some time
    upper = np.full_like(z0, np.inf)
    upper[-1] = 1.0 / scale[-1]  # jitter: a coefficient of variation
    z0 = np.clip(z0, lower, np.where(np.isinf(upper), np.maximum(z0, lower) + 1, upper))
    calls = 0

    def cost_of(z: Any) -> StepCost:
        x = full.copy()
        x[moving] = z * scale[moving]
        return StepCost.from_vector(x[:-1], jitter=float(x[-1]))

    def residuals(z: Any) -> Any:
        nonlocal calls
        calls += 1
        cost = cost_of(z)
        out: list[float] = []
        for o, target in zip(runs, targets, strict=True):
            got = _replayed_metrics(o, cost, target["pick"])
            for name, qs in MATCHED:
                want = target[name]
                if want is None:
                    continue
                values = got[name][got["ok"]]
                values = values[np.isfinite(values) & (values > 0)]
                if values.size < 5:
                    out.extend([3.0] * len(qs))  # it answered (almost) nothing: far off
                    continue
                out.extend(np.log(np.percentile(values, qs) / want).tolist())
            steps = o.server.get("steps")
            if steps:
                out.append(math.log(max(got["steps"], 1) / steps))
        return np.asarray(out)

    result = least_squares(
        residuals,
        z0,
        bounds=(lower, upper),
        loss="soft_l1",
        f_scale=0.1,
        diff_step=0.05,
        max_nfev=max_evaluations,
        xtol=1e-3,
        ftol=1e-4,
    )
    cost = cost_of(result.x)
    say(f"calibrated in {calls} replays of {len(runs)} runs (cost {result.cost:.4f})")
    return Fitted(cost, start, tuple(active), calls, float(result.cost))


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
        "frontend_ms": step,
        "frontend_ms_per_1k_prompt": step / max(prompt * 1e-3, 1e-3),
    }
    values = start.vector()
    out = [max(abs(v), 0.1 * typical[name]) for name, v in zip(COEFFICIENTS, values, strict=True)]
    return np.array([*out, 0.1])
