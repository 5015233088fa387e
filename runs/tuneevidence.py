"""What measuring a candidate showed, and how candidates rank (pure).

A trial's *evidence* is its levels (one bench run each), the capacity plan over them (the
sustainable rate and what binds) and how the trial ended. A :class:`TrialResult` is that
evidence with the search's bookkeeping: which candidate, in which stage, its trial number.
The :class:`Objective` says which of two results is better.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.slo import Slo
from vprof.runs.spec import NOT_STARTED as CELL_NOT_STARTED  # a bench cell no server ran
from vprof.runs.tunespace import Candidate

OBJECTIVES = ("max-rate", "min-latency", "min-cost")

# Trial states (the trial table's ``state`` column)
MEASURED = "measured"
NO_LEVEL_MET = "no level met"
NOT_STARTED = "not started"
OUT_OF_MEMORY = "out of memory"
REFUSED = "refused"
RUN_FAILED = "run failed"
CLEARLY_WORSE = "clearly worse"  # missed the SLO just below the best's rate: not searched further
# the server could not start for a reason of the machine (port, GPU, model, disk), not of the
# candidate's settings: the tune stops there
ENVIRONMENT = "not started (environment)"
# States of a trial whose server ran at least one level: it has an answer, or why not.
RAN = (MEASURED, RUN_FAILED, NO_LEVEL_MET, CLEARLY_WORSE)


class SearchError(Exception):
    """A bug in how the search was set up (user input is checked before it starts)."""


@dataclass(frozen=True)
class Objective:
    """What ``best`` means. ``max-rate``: the highest request rate per replica within the SLO;
    ``min-cost``: the highest rate per GPU (replicas × GPUs for ``target_rps``, money with
    ``gpu_hour_price``); ``min-latency``: the lowest value of the SLO's first target at
    ``target_rps``, among candidates that meet the whole SLO there."""

    kind: str = "max-rate"
    target_rps: float | None = None
    headroom: float = 0.2
    gpu_hour_price: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise SearchError(f"unknown objective {self.kind!r}")
        if self.kind == "min-latency" and not self.target_rps:
            raise SearchError("min-latency needs target_rps")

    def score(self, result: TrialResult | None) -> float | None:
        """Higher is better; None when the candidate has no answer (never met the SLO)."""
        if result is None or result.state not in RAN:
            return None
        if self.kind == "min-latency":
            return -result.latency_ms if result.latency_ms is not None else None
        rate = result.sustainable_rps
        if rate is None or not rate > 0:
            return None
        return rate / result.gpus if self.kind == "min-cost" else rate

    def rank(self, result: TrialResult) -> float:
        """:meth:`score`, with no answer ranked last (for sorting)."""
        score = self.score(result)
        return score if score is not None else -math.inf

    def better(self, a: TrialResult | None, b: TrialResult | None) -> bool:
        sa, sb = self.score(a), self.score(b)
        return sa is not None and (sb is None or sa > sb)

    def within(self, result: TrialResult, best: TrialResult | None, noise: float) -> bool:
        """True when ``result`` has an answer within ``noise`` of ``best``'s (or is it)."""
        score, top = self.score(result), self.score(best)
        if score is None:
            return False
        if top is None or result is best:
            return True
        return score >= (top * (1 - noise) if top > 0 else top * (1 + noise))


@dataclass
class Measurement:
    """One level of a trial: one bench run at ``rate_rps`` (offered), its summary, and whether
    it met the SLO (set by the trial's plan; repeats of a rate meet it only together)."""

    rate_rps: float
    state: str  # a run state (completed, failed, …), skipped (done before) or not-started
    summary: Mapping[str, Any] = field(default_factory=dict)
    run: str = ""  # the run folder
    reason: str = ""
    repeat: int = 1
    oom: bool = False  # the server ran out of memory (at start-up or during the run)
    wall_s: float = 0.0
    met: bool = False
    started_server: bool = False  # this run began with a server start
    environment: str = ""  # no server could start here at all: why (port in use, no GPU, …)

    @property
    def server_ran(self) -> bool:
        return self.state != CELL_NOT_STARTED


@dataclass(frozen=True)
class Verdict:
    """compare's answer on one metric between two groups of runs."""

    text: str
    significant: bool = False
    half_width_pct: float = math.inf  # the 95 % interval's half-width (inf: no interval)

    def decided(self, noise: float) -> bool:
        """A difference found, or an interval so narrow the two are within ``noise``."""
        return self.significant or self.half_width_pct <= noise * 100.0


@dataclass(kw_only=True)
class Evidence:
    """What measuring one candidate showed: its levels, their capacity plan, how it ended."""

    state: str = MEASURED
    measurements: list[Measurement] = field(default_factory=list)
    sustainable_rps: float | None = None
    binding: str | None = None
    basis: str = ""
    latency_ms: float | None = None  # min-latency: the SLO's first target at target_rps
    note: str = ""  # why the trial ended where it did
    server_started: bool = False
    wall_s: float = 0.0

    @property
    def preempted(self) -> bool:
        return any(
            (m.summary.get(K.NUM_PREEMPTIONS) or 0) > 0 for m in self.measurements if m.summary
        )

    def levels_text(self) -> str:
        """``4✓ 8✓ 16✗ 11.3✓``: each level's offered rate and whether it met the SLO."""
        return " ".join(f"{m.rate_rps:g}{_mark(m)}" for m in self.measurements)


def _mark(m: Measurement) -> str:
    if not m.server_ran:
        return "!"
    return "✓" if m.met else "✗"


@dataclass(kw_only=True)
class TrialResult(Evidence):
    """What one candidate showed (or why it was never started), with the search's bookkeeping."""

    candidate: Candidate
    label: str
    stage: str
    number: int | None = None  # the trial's number (None: refused, never started)
    gpus: int = 1
    confirmed: str = ""  # the final check at the best's rate: "k of N runs met"

    @classmethod
    def of(cls, evidence: Evidence, **bookkeeping: Any) -> TrialResult:
        """``evidence`` with the search's bookkeeping (candidate, label, stage, number, …)."""
        from dataclasses import fields

        return cls(**{f.name: getattr(evidence, f.name) for f in fields(Evidence)}, **bookkeeping)


@dataclass
class TuneResult:
    """The search's answer: every trial, the best, and how the search ended."""

    trials: list[TrialResult]
    best: TrialResult | None
    start: Candidate
    stopped_by: str
    servers_started: int
    wall_s: float
    confirmation: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    environment: str = ""  # the search stopped: no server could start on this machine (why)

    @property
    def tried(self) -> list[TrialResult]:
        """Trials the search started (a server was asked for), measured or not."""
        return [t for t in self.trials if t.number is not None]

    @property
    def measured(self) -> list[TrialResult]:
        """Trials whose server ran at least one level."""
        return [t for t in self.trials if t.state in RAN]


# --------------------------------------------------------------------------- the plan


def plan_levels(evidence: Evidence, label: str, slo: Slo, objective: Objective) -> None:
    """The capacity plan over the trial's levels: its sustainable rate and what binds (and,
    for min-latency, the latency at the target rate); marks each level met or not."""
    from vprof.analysis.plan import plan

    summarized = [m for m in evidence.measurements if usable(m.summary)]
    for m in evidence.measurements:
        m.met = False
    if not summarized:
        evidence.sustainable_rps, evidence.binding = None, None
        evidence.basis = "nothing measured"
        return
    # one profile per trial (its levels grouped under the candidate's label); each level
    # named by its position, so the plan's merged repeats map back to measurements
    summaries = [{**m.summary, K.PROFILE: label, K.RUN: str(i)} for i, m in enumerate(summarized)]
    answer = plan(summaries, target_rps=objective.target_rps or 1.0, slo=slo)
    profile_plan = answer.profiles[0]
    for level in profile_plan.levels:
        for i in level.run.split(", "):
            summarized[int(i)].met = level.passed
    evidence.sustainable_rps = profile_plan.sustainable_rps
    evidence.binding = profile_plan.binding
    evidence.basis = profile_plan.basis
    if objective.kind == "min-latency":
        evidence.latency_ms = _latency_at_target(profile_plan, slo)


def _latency_at_target(profile_plan: Any, slo: Slo) -> float | None:
    target = next((t for t in slo.targets if t.percentile is not None), None)
    if target is None:
        return None
    for level in profile_plan.levels:
        if not level.passed:
            continue
        for check in level.checks:
            if check.get("key") == target.key and "value_ms" in check:
                value = float(check["value_ms"])
                return value if math.isfinite(value) else None
    return None


def usable(summary: Mapping[str, Any]) -> bool:
    """True when a level's summary has something to plan on (a throughput)."""
    return bool(summary) and summary.get(K.REQUEST_THROUGHPUT) is not None


# --------------------------------------------------------------------------- ranking


def near_ties(
    trials: Sequence[TrialResult],
    best: TrialResult | None,
    objective: Objective,
    noise: float,
    most: int,
) -> list[TrialResult]:
    """Up to ``most`` measured candidates within ``noise`` of the best (best excluded), best
    first."""
    top = objective.score(best)
    if best is None or top is None:
        return []
    limit = top * (1 - noise) if top > 0 else top * (1 + noise)
    ties = [
        r for r in trials if r is not best and (s := objective.score(r)) is not None and s >= limit
    ]
    ties.sort(key=lambda r: -(objective.score(r) or 0.0))
    return ties[:most]


def describe(result: TrialResult, objective: Objective) -> str:
    """One line: what the trial showed."""
    if result.state == REFUSED:
        return f"refused: {result.note}"
    if result.state in (NOT_STARTED, OUT_OF_MEMORY, ENVIRONMENT):
        return f"{result.state}: {result.note}"
    if objective.kind == "min-latency":
        value = result.latency_ms
        shown = f"{value:.1f} ms" if value is not None else "SLO missed"
        return f"{shown} at {objective.target_rps:g} req/s ({result.levels_text()})"
    if result.sustainable_rps is None:
        return f"no level met the SLO ({result.levels_text()}); {result.note}"
    return (
        f"{result.sustainable_rps:.3g} req/s sustainable ({result.binding or 'nothing'} "
        f"binds; levels {result.levels_text()}); {result.note}"
    )
