"""``vprof tune --guided``: a capacity model chooses what to measure next; servers decide.

The guided search (:func:`guided_search`) measures the starting settings, then repeats: the
:class:`Guide` refits its model on every level measured so far and predicts every candidate
the rules allow; the candidate predicted best that is not yet measured is measured next
(through the search's one ``evaluate`` door, racing the best as every trial does). It stops
when the budget is used, when every candidate has been measured, or when no candidate left
is predicted within noise of the best measured one (the model's prediction for that one:
the comparison is the model's against itself, so a bias common to all cancels). Every claim
still rests on runs of the real server: the model only orders the queue.

:class:`ModelGuide` is the guide ``vprof tune`` uses: a step-time model fitted on the trials'
level summaries (``vprof.forecast.levelfit``), replaying each candidate's scheduler rules.
It sees what the scheduler sees (batched tokens, max-num-seqs, chunked prefill, prefix
caching, max-model-len); candidates that differ only in other keys are predicted alike, and
the first of them in the space's order (the profile's own value first) is measured first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from vprof.analysis.keys import SummaryKey as K
from vprof.runs.tuneevidence import RAN, Measurement, TrialResult, usable
from vprof.runs.tunesearch import SearchResult, SearchStopped
from vprof.runs.tunespace import Candidate, Space

if TYPE_CHECKING:
    from vprof.forecast.levelfit import LevelModel, MeasuredLevel
    from vprof.forecast.rules import SchedulerRules
    from vprof.forecast.stepcost import StepCost
    from vprof.runs.tunesearch import Ledger

STAGE = "guided"
# Levels of one trial the model is fitted on: its quietest, and the two around its capacity
# (the last that met the SLO and the first above it that did not); the rest add time, not
# information about the steps.
LEVELS_PER_TRIAL = 3


class Guide(Protocol):
    def predict(
        self, trials: Sequence[TrialResult], candidates: Sequence[Candidate]
    ) -> dict[Candidate, float | None]:
        """Each candidate's predicted sustainable rate (None: predicted to meet no level),
        from a model refitted on ``trials``; ``{}`` when nothing measured can be fitted."""
        ...


def guided_search(space: Space, start: Candidate, ledger: Ledger, guide: Guide) -> SearchResult:
    """Measure ``start``, then the candidate the guide predicts best, until the budget ends or
    no candidate left is predicted within noise of the best (see the module's text)."""
    noise = ledger.settings.noise
    try:
        ledger.consider(start, "start")
        while True:
            left = [c for c in space.grid() if c not in ledger.results]
            left = [c for c in left if ledger.refusal(c) is None]
            if not left:
                return ledger.result("every candidate the rules allow was measured")
            ledger.check_budget()  # before a refit that the budget would not use
            ran = [t for t in ledger.order if t.state in RAN]
            best = ledger.best
            known = [best.candidate] if best is not None else []
            predicted = guide.predict(ran, [*left, *known])
            scores = {c: _score(predicted.get(c), c, ledger) for c in left}
            if not predicted:  # no model yet: the nearest neighbour of the start
                nxt = min(left, key=lambda c: _distance(space, c, start))
                ledger.consider(nxt, f"{STAGE} (no model yet)")
                continue
            nxt = _next(space, left, scores, list(ledger.results), noise)
            if scores[nxt] == -math.inf:
                return ledger.result("the model predicts no candidate left meets the SLO")
            top = _score(predicted.get(best.candidate), best.candidate, ledger) if best else None
            if top is not None and top > -math.inf and scores[nxt] < top * (1 - noise):
                return ledger.result(
                    f"no candidate left is predicted within {noise * 100:g} % of the best "
                    f"(the most promising: {ledger.label(nxt)}, predicted "
                    f"{scores[nxt] / top * 100:.0f} % of it)"
                )
            shown = predicted.get(nxt)
            ledger.consider(nxt, f"{STAGE} (predicted {shown:.3g} req/s)")
    except SearchStopped as exc:
        return ledger.result(str(exc))


def _score(rate: float | None, candidate: Candidate, ledger: Ledger) -> float:
    """A predicted rate as the objective ranks it (per GPU for min-cost)."""
    if rate is None or not rate > 0:
        return -math.inf
    return rate / ledger.gpus(candidate) if ledger.objective.kind == "min-cost" else rate


def _next(
    space: Space,
    left: Sequence[Candidate],
    scores: Mapping[Candidate, float],
    measured: Sequence[Candidate],
    noise: float,
) -> Candidate:
    """The candidate to measure next: of those predicted within ``noise`` of the best
    prediction (a near tie the model cannot order, as two runs of one setting differ by about
    that much), the one farthest from every candidate measured so far; a tie on distance goes
    to the higher prediction, then to the space's order. A neighbour of a measured setting
    mostly re-measures what is known; a distant one tests the model where it has seen least."""
    top = max(scores[c] for c in left)
    if top == -math.inf:
        return left[0]
    ties = [c for c in left if scores[c] >= top * (1 - noise)]

    def spread(c: Candidate) -> float:
        return min((_distance(space, c, m) for m in measured), default=0.0)

    return max(ties, key=lambda c: (spread(c), scores[c], -left.index(c)))


def _distance(space: Space, a: Candidate, b: Candidate) -> float:
    return sum(
        abs(d.index(a.get(d.key)) - d.index(b.get(d.key)))
        if d.ordered
        else float(a.get(d.key) != b.get(d.key))
        for d in space.dims
    )


class ModelGuide:
    """A :class:`Guide` from a level model: refitted on the trials' levels at every call
    (warm-started from the last fit), predicting each candidate's capacity by replay."""

    def __init__(
        self,
        model: LevelModel,
        rules_of: Callable[[Candidate], SchedulerRules],
        *,
        start_rps: float = 1.0,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.model = model
        self.rules_of = rules_of
        self.start_rps = start_rps
        self.say = say
        self.cost: StepCost | None = None
        self.fits = 0

    def levels(self, trials: Sequence[TrialResult]) -> list[MeasuredLevel]:
        from vprof.forecast.levelfit import MeasuredLevel

        out = []
        for trial in trials:
            rules = self.rules_of(trial.candidate)
            for m in fitted_levels(trial):
                out.append(MeasuredLevel(rules, m.rate_rps, m.summary))
        return out

    def predict(
        self, trials: Sequence[TrialResult], candidates: Sequence[Candidate]
    ) -> dict[Candidate, float | None]:
        levels = self.levels(trials)
        if not levels:
            return {}
        template = [lv.summary.get(K.CHAT_TEMPLATE_PROMPT_TOKENS) for lv in levels]
        counted = [t for t in template if isinstance(t, (int, float)) and t >= 0]
        if counted:
            self.model.use_chat_template_tokens(int(round(sorted(counted)[len(counted) // 2])))
        self.cost = self.model.fit(levels, self.cost)
        self.fits += 1
        rates = [t.sustainable_rps for t in trials if t.sustainable_rps]
        start = max(rates) if rates else self.start_rps
        rules = {c: self.rules_of(c) for c in candidates}
        by_rules: dict[SchedulerRules, float | None] = {}
        for r in rules.values():
            if r not in by_rules:
                by_rules[r] = self.model.sustainable(r, self.cost, start_rps=start)
        self.say(f"model refitted on {len(levels)} levels: {_cost_text(self.cost)}")
        return {c: by_rules[rules[c]] for c in candidates}


def fitted_levels(trial: TrialResult) -> list[Measurement]:
    """The levels of ``trial`` a fit uses (see :data:`LEVELS_PER_TRIAL`)."""
    levels = sorted((m for m in trial.measurements if usable(m.summary)), key=lambda m: m.rate_rps)
    if len(levels) <= LEVELS_PER_TRIAL:
        return levels
    met = [m for m in levels if m.met]
    last_met = met[-1] if met else None
    floor = last_met.rate_rps if last_met is not None else -math.inf
    above = [m for m in levels if not m.met and m.rate_rps > floor]
    chosen = [levels[0], last_met, above[0] if above else None]
    out: list[Measurement] = []
    for m in chosen:
        if m is not None and all(m is not o for o in out):
            out.append(m)
    return out


def _cost_text(cost: StepCost) -> str:
    return (
        f"step {cost.base_ms:.3g} ms + {cost.prefill_token_ms * 1e3:.3g} µs/prefill token + "
        f"{cost.decode_seq_ms:.3g} ms/decode; front end {cost.frontend_ms:.3g} ms; "
        f"jitter {cost.jitter:.2f}"
    )


def predicted_ranking(
    predicted: Mapping[Candidate, float | None],
) -> list[Candidate]:
    """Candidates by predicted rate, highest first (no answer last)."""
    return sorted(predicted, key=lambda c: -(predicted[c] or 0.0))
