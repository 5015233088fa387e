"""The final check of a tune: the best and its near ties measured again, side by side.

Near ties (within ``noise`` of the best) are measured again with ``repeat`` runs each,
interleaved, at the best's rate, and re-planned with those runs; rounds are added while
compare's verdict has not decided a tie (a significant difference, or an interval within
±noise), up to :data:`MAX_CONFIRM_REPEATS`. The answer then rests on those runs. Pure over
two doors a :class:`Checker` supplies: the interleaved runs, and compare's verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from vprof.analysis.slo import Slo
from vprof.runs.tuneevidence import (
    Measurement,
    Objective,
    TrialResult,
    Verdict,
    near_ties,
    plan_levels,
)
from vprof.runs.tunesearch import SearchResult, SearchSettings
from vprof.runs.tunespace import Candidate

MAX_CONTENDERS = 1  # near ties measured again beside the best (each costs server starts)
# The check adds repeats (A B A B …) until every near tie is decided — its difference
# significant, or its interval within ±noise (the two are equivalent) — or this many.
MAX_CONFIRM_REPEATS = 5


class Checker(Protocol):
    def confirm(
        self, candidates: Sequence[Candidate], rate_rps: float, repeats: int
    ) -> dict[Candidate, list[Measurement]]:
        """``repeats`` runs of each candidate at ``rate_rps``, interleaved (A B A B …)."""
        ...

    def verdict(
        self, base: Sequence[Measurement], other: Sequence[Measurement], metric: str
    ) -> Verdict:
        """Whether ``other`` differs from ``base`` on ``metric``, by compare's rule."""
        ...


def check_best(
    found: SearchResult,
    checker: Checker,
    *,
    slo: Slo,
    objective: Objective,
    settings: SearchSettings,
    clock: Callable[[], float],
    say: Callable[[str], None] = lambda _: None,
) -> tuple[TrialResult | None, dict[str, Any]]:
    """Measure the best and its near ties ``repeat`` times each at the best's rate,
    interleaved, adding a round at a time while a tie is undecided; re-plan them with those
    runs and pick again. Returns the best after the check, and what the check did."""
    s = settings
    best = found.best
    if best is None or s.repeat < 2:
        return best, {}
    group = [best, *near_ties(found.trials, best, objective, s.noise, MAX_CONTENDERS)]
    if objective.kind == "min-latency":
        rate = float(objective.target_rps or 0.0)
    else:
        # the best's highest level that met the SLO: its run there is the first repeat,
        # and the claim then rests on N runs at a rate it has already met once
        rate = max((m.rate_rps for m in best.measurements if m.met), default=0.0)
    if not rate > 0:
        return best, {}

    def over_budget() -> bool:
        if s.budget_time_s is None or not found.trial_walls:
            return False
        typical = sum(found.trial_walls) / len(found.trial_walls)
        return clock() - found.started_at + typical * len(group) > s.budget_time_s

    if over_budget():
        note = "no time left in the budget to repeat the best; its answer rests on one run"
        return best, {"skipped": note}
    labels = ", ".join(r.label for r in group)
    repeat = s.repeat
    servers = 0
    while True:
        say(f"checking {labels} at {rate:g} req/s, {repeat} runs each (interleaved)")
        runs = checker.confirm([r.candidate for r in group], rate, repeat)
        servers += sum(m.started_server for ms in runs.values() for m in ms)
        judged = _judge_ties(group, runs, checker, slo)
        undecided = [v for v in judged.values() if not v.decided(s.noise)]
        if not undecided or repeat >= max(s.repeat, MAX_CONFIRM_REPEATS) or over_budget():
            break
        repeat += 1  # the rounds so far stand (a bench resumes them); one more of each
    for result in group:
        extra = runs.get(result.candidate, [])
        # a run the search already made at this rate is the check's first repeat
        known = {m.run: m for m in result.measurements if m.run}
        result.measurements.extend(m for m in extra if not m.run or m.run not in known)
        plan_levels(result, result.label, slo, objective)
        extra = [known.get(m.run, m) if m.run else m for m in extra]
        met = sum(m.met for m in extra)
        result.confirmed = f"{met} of {len(extra)} runs at {rate:g} req/s met the SLO"
    checked: TrialResult | None = max(group, key=objective.rank)
    if objective.score(checked) is None:
        checked = None
    verdicts = []
    metric = _verdict_metric(group[0], slo)
    if checked is not None and metric:
        base = runs.get(checked.candidate, [])
        for other in (r for r in group if r is not checked):
            found_verdict = checker.verdict(base, runs.get(other.candidate, []), metric)
            verdicts.append(
                {
                    "vs": other.label,
                    "metric": metric,
                    "verdict": found_verdict.text,
                    "decided": found_verdict.decided(s.noise),
                }
            )
    return checked, {
        "rate_rps": rate,
        "repeats": repeat,
        "candidates": [r.label for r in group],
        "servers": servers,
        "verdicts": verdicts,
    }


def _judge_ties(
    group: Sequence[TrialResult],
    runs: dict[Candidate, list[Measurement]],
    checker: Checker,
    slo: Slo,
) -> dict[str, Verdict]:
    """Each near tie against the group's first (the best so far), by compare's rule."""
    metric = _verdict_metric(group[0], slo)
    if not metric:
        return {}
    base = runs.get(group[0].candidate, [])
    return {
        other.label: checker.verdict(base, runs.get(other.candidate, []), metric)
        for other in group[1:]
    }


def _verdict_metric(result: TrialResult, slo: Slo) -> str | None:
    """The summary key the tie is judged on: the constraint that binds (else the SLO's first
    percentile target)."""
    from vprof.analysis.keys import stat_key
    from vprof.analysis.stats import pct_key

    targets = [t for t in slo.targets if t.percentile is not None]
    chosen = next((t for t in targets if t.key == result.binding), None)
    chosen = chosen or (targets[0] if targets else None)
    if chosen is None or chosen.percentile is None:
        return None
    return stat_key(pct_key(chosen.percentile), chosen.metric)
