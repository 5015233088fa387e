"""A step-time model fitted on level summaries, to rank settings before they are measured.

``vprof forecast fit`` needs each request's record and the KV cache the server had; a tune
(and its recording in ``benchmarks/data/tune_grid_cpu.json``) keeps, for every level it
measured, the level's summary: offered rate, latency percentiles, throughput, and the
server's ``/metrics`` figures. This fits the same step-time model
(:class:`~vprof.forecast.stepcost.StepCost`: a constant per step, a cost per prefill token
and per decoding sequence, the front end's delay, the steps' jitter) on those summaries:
each level is replayed (``vprof.forecast.simulate``) with the request stream the workload
and the level's rate send, under the scheduler rules of the settings it ran with, and the
coefficients move until the replayed median and p95 TTFT (from the intended send time) and
median TPOT match the measured ones. With one fitted cost, any other settings' levels are
replayed the same way, and their capacity is the plan's (``vprof.analysis.plan``) over a
predicted climb and bisection of rates.

Context and attention terms are left out: with one workload's prompt lengths they cannot be
told apart from the per-token cost. Client-limited levels say nothing of the server and are
not fitted on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import stat_key
from vprof.analysis.slo import Slo
from vprof.analysis.stats import pct_key
from vprof.forecast.capacity import MAX_LEVELS, climb
from vprof.forecast.rules import SchedulerRules
from vprof.forecast.scenario import Scenario, Stream, build_stream
from vprof.forecast.simulate import OK, simulate
from vprof.forecast.stepcost import StepCost

SEED = 0
# A KV cache that holds every request: what a model takes when the server's own is unknown.
AMPLE_KV_TOKENS = 10**9
FITTED = ("base_ms", "prefill_token_ms", "decode_seq_ms", "frontend_ms", "jitter")
MAX_EVALUATIONS = 30  # replays of every fitted level per fit
MAX_JITTER = 0.5
GROWTH = 1.25  # the predicted climb's factor per level
RESOLUTION = 0.02  # the predicted bisection ends when met and missed are this close
UNANSWERED = 3.0  # a level's residual (in log) when the replay answered almost nothing
_STATS = (("median", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))


@dataclass(frozen=True)
class MeasuredLevel:
    """One level a tune measured: the settings' scheduler rules, the rate it offered, and
    its summary."""

    rules: SchedulerRules
    rate_rps: float
    summary: Mapping[str, Any]


class LevelModel:
    """Levels of one workload under one open-loop traffic shape on one server, predicted for
    any scheduler rules; ``fit`` moves the step cost to match measured levels."""

    def __init__(self, scenario: Scenario, slo: Slo, *, chat_template_tokens: int = 0) -> None:
        if not scenario.shape.open_loop:
            raise ValueError("a level model needs an open-loop traffic shape")  # a caller's bug
        self.scenario = scenario
        self.slo = slo
        # one seed fixes a level: the lengths and arrivals the scenario plans from it, and the
        # replay's step-time draws
        self.seed = SEED if scenario.seed is None else scenario.seed
        self.chat_template_tokens = chat_template_tokens
        self._streams: dict[float, Stream] = {}

    def use_chat_template_tokens(self, tokens: int) -> None:
        """Chat requests carry ``tokens`` beyond their content (as the server counted them)."""
        if tokens != self.chat_template_tokens:
            self.chat_template_tokens = tokens
            self._streams.clear()

    def stream(self, rate_rps: float) -> Stream:
        if rate_rps not in self._streams:
            self._streams[rate_rps] = build_stream(
                self.scenario.at_rate(rate_rps), chat_template_tokens=self.chat_template_tokens
            )
        return self._streams[rate_rps]

    # ------------------------------------------------------------------ one level

    def level(self, rules: SchedulerRules, cost: StepCost, rate_rps: float) -> dict[str, Any]:
        """A predicted level's summary: what a plan reads (the offered and served rate, the
        throughput as a bench reads it, and the latency percentiles the SLO and the fit name)."""
        import numpy as np

        stream = self.stream(rate_rps)
        replayed = simulate(stream.requests, stream.client, rules, cost, seed=self.seed)
        scheduled = np.asarray(stream.scheduled_s, dtype=np.float64)
        window = scheduled >= stream.warmup_s
        ok = window & (replayed.status == OK)
        output = np.asarray(stream.requests.output_tokens)[ok]
        first, last = replayed.first_s[ok], replayed.last_s[ok]
        values = {
            "ttft": (first - replayed.sent_s[ok]) * 1000.0,
            "ttft_from_schedule": (first - scheduled[ok]) * 1000.0,
            "e2el": (last - replayed.sent_s[ok]) * 1000.0,
            "e2el_from_schedule": (last - scheduled[ok]) * 1000.0,
            "tpot": ((last - first) * 1000.0 / np.maximum(output - 1, 1))[output > 1],
        }
        answered = float(ok.sum()) / max(int(window.sum()), 1)
        # vllm bench serve's throughput: the answers over the time from the first send to the
        # last answer (below the served rate by the last answers' latency over the level)
        ended = replayed.last_s[window & np.isfinite(replayed.last_s)]
        sent = replayed.sent_s[window & np.isfinite(replayed.sent_s)]
        span = float(ended.max() - sent.min()) if ended.size and sent.size else 0.0
        summary: dict[str, Any] = {
            K.OPEN_LOOP: True,
            K.OFFERED_LOAD: rate_rps,
            K.OFFERED_LOAD_UNIT: "req/s",
            K.STATE: "completed",
            K.REQUEST_THROUGHPUT: float(ok.sum()) / span if span > 0 else 0.0,
            K.SERVED_RATE: rate_rps * answered,
            K.NUM_PREEMPTIONS: replayed.preemptions,
        }
        stats = {*_STATS, *((pct_key(q), q) for q in self._target_percentiles())}
        for metric, array in values.items():
            array = array[np.isfinite(array)]
            for name, q in stats:
                # too few answers to say: infinite, so the SLO's check fails the level
                value = float(np.percentile(array, q)) if array.size >= 3 else math.inf
                summary[stat_key(name, metric)] = value
        return summary

    def _target_percentiles(self) -> list[float]:
        return [t.percentile for t in self.slo.targets if t.percentile is not None]

    # ------------------------------------------------------------------ fitting

    def fit(
        self,
        levels: Sequence[MeasuredLevel],
        start: StepCost | None = None,
        *,
        max_evaluations: int = MAX_EVALUATIONS,
    ) -> StepCost:
        """The step cost whose replays match ``levels`` best (median and p95 TTFT from the
        schedule, median TPOT), starting from ``start`` (else an estimate from the levels)."""
        import numpy as np
        from scipy.optimize import least_squares

        fitted = [lv for lv in levels if _fittable(lv.summary)]
        if not fitted:
            raise ValueError("no measured level to fit on")  # the caller checks first
        first = start or initial_cost(fitted, self)
        x0 = np.log([max(getattr(first, name), 1e-6) for name in FITTED])
        upper = np.full(len(FITTED), np.inf)
        upper[FITTED.index("jitter")] = math.log(MAX_JITTER)
        x0 = np.minimum(x0, upper - 1e-9)

        def cost_of(x: Any) -> StepCost:
            return dataclasses.replace(first, **dict(zip(FITTED, np.exp(x).tolist(), strict=True)))

        def residuals(x: Any) -> Any:
            cost = cost_of(x)
            out: list[float] = []
            for lv in fitted:
                out.extend(_residuals(self.level(lv.rules, cost, lv.rate_rps), lv.summary))
            return np.asarray(out)

        result = least_squares(
            residuals,
            x0,
            bounds=(np.full(len(FITTED), -np.inf), upper),
            loss="soft_l1",
            f_scale=0.1,
            diff_step=0.05,
            max_nfev=max_evaluations,
            xtol=1e-3,
            ftol=1e-4,
        )
        return cost_of(result.x)

    # ------------------------------------------------------------------ capacity

    def sustainable(
        self, rules: SchedulerRules, cost: StepCost, *, start_rps: float
    ) -> float | None:
        """The predicted sustainable rate under the SLO (the capacity plan's, over predicted
        levels that climb ×1.25 from ``start_rps`` until the SLO is missed, then bisect)."""
        count = iter(range(MAX_LEVELS + 1))

        def level(rate: float) -> dict[str, Any]:
            summary = self.level(rules, cost, rate)
            return {**summary, K.RUN: str(next(count)), K.PROFILE: "candidate"}

        rate, _ = climb(level, self.slo, start_rps, growth=GROWTH, resolution=RESOLUTION)
        return rate


# The measured figures a fit matches, each a (summary key, weight).
_MATCHED = (
    (stat_key("median", "ttft_from_schedule"), 1.0),
    (stat_key("p95", "ttft_from_schedule"), 1.0),
    (stat_key("median", "tpot"), 0.5),
)


def _fittable(summary: Mapping[str, Any]) -> bool:
    return bool(summary.get(K.REQUEST_THROUGHPUT)) and not summary.get(K.CLIENT_LIMITED)


def _residuals(predicted: Mapping[str, Any], measured: Mapping[str, Any]) -> list[float]:
    out = []
    for key, weight in _MATCHED:
        want = measured.get(key)
        if not isinstance(want, (int, float)) or not want > 0 or not math.isfinite(want):
            continue
        got = predicted.get(key)
        if not isinstance(got, (int, float)) or not got > 0 or not math.isfinite(got):
            out.append(UNANSWERED * weight)
            continue
        out.append(weight * math.log(got / want))
    return out


def initial_cost(levels: Sequence[MeasuredLevel], model: LevelModel) -> StepCost:
    """A first estimate from the quietest level (the lowest rate): a decode step takes about
    its median TPOT, and a prompt its median TTFT less the steps of its chunks."""
    import numpy as np

    quiet = min(levels, key=lambda lv: lv.rate_rps)
    s = quiet.summary
    tpot = _positive(s.get(stat_key("median", "tpot")))
    ttft = _positive(s.get(stat_key("median", "ttft_from_schedule")))
    ttft = ttft or _positive(s.get(K.MEDIAN_TTFT_MS)) or 100.0
    prompt = float(np.mean(model.stream(quiet.rate_rps).requests.prompt_tokens))
    base = 0.8 * tpot if tpot else 0.02 * ttft
    chunks = (
        math.ceil(prompt / quiet.rules.max_num_batched_tokens) if quiet.rules.chunked_prefill else 1
    )
    frontend = 0.05 * ttft
    per_token = max(ttft - frontend - chunks * base, 0.1 * ttft) / max(prompt, 1.0)
    return StepCost(
        base_ms=base,
        prefill_token_ms=per_token,
        decode_seq_ms=0.1 * (tpot or base),
        frontend_ms=frontend,
        jitter=0.1,
    )


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
        return float(value)
    return None
