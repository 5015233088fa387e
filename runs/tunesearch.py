"""The search behind ``vprof tune``, kept pure: which candidate to measure next, at which
request rates, when a trial may stop, and which candidate wins. Trials are run by a
:class:`TrialRunner` — real servers in ``vprof.runs.tune``, a fake in the tests.

- **A trial** is one candidate's capacity: an open-loop rate search on one server that climbs
  ×2 until the SLO is missed, then bisects until the last rate that met it and the first that
  did not are within ``resolution``; the sustainable rate is the capacity plan's
  (``vprof.analysis.plan``: interpolated on the binding constraint, client-limited levels never
  met). Once a best exists, a trial first probes just below the best's rate: a candidate that
  misses the SLO there is clearly worse and stops after one level.
- **The search** is staged coordinate descent in the guide's order (prefill budget, then
  concurrency, the prefix cache, memory): each key is a ladder walked from the best so far,
  upward first, while each step improves; a server that fails to start or runs out of memory
  ends a climb, as preemptions do for memory-hungry keys (the guide's rule). Passes repeat
  while they find something better. Every candidate is measured at most once.
- **Coupled keys** (``tunespace.COUPLED``: batched tokens and max-num-seqs) are not left to
  one key at a time: each point of one's line that comes within ``noise`` of the best
  without beating it has the other's line walked from it, closest first, so an optimum off
  both lines through the best is still reached.
- **Near ties** (within ``noise`` of the best) are measured again with ``repeat`` runs each,
  interleaved, at the best's rate; the answer then rests on those runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from vprof.analysis.slo import Slo
from vprof.runs.tunespace import (
    BATCHED,
    COUPLED,
    MORE_MEMORY_WHEN_HIGHER,
    Candidate,
    Dim,
    Space,
)

OBJECTIVES = ("max-rate", "min-latency", "min-cost")
# Two runs of one configuration on one server differ by 5–20 % (VLLM_CPU.md, and ±15–25 % on a
# GPU for latency percentiles); a capacity is steadier than a percentile, so 10 % is the gap
# below which two candidates are called a near tie and measured again.
NOISE = 0.10
RESOLUTION = 0.10  # a rate search ends when its met/missed bracket is this narrow
GROWTH = 2.0  # the climb's factor per level
MAX_PASSES = 3  # coordinate descent passes over the stages
MAX_CONTENDERS = 1  # near ties measured again beside the best (each costs server starts)
# The final check adds repeats (A B A B …) until every near tie is decided — its difference
# significant, or its interval within ±noise (the two are equivalent) — or this many.
MAX_CONFIRM_REPEATS = 5

# Trial states (the trial table's ``state`` column)
MEASURED = "measured"
NO_LEVEL_MET = "no level met"
NOT_STARTED = "not started"
OUT_OF_MEMORY = "out of memory"
REFUSED = "refused"
RUN_FAILED = "run failed"
CLEARLY_WORSE = "clearly worse"  # missed the SLO just below the best's rate: not searched further

Say = Callable[[str], None]


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


@dataclass(frozen=True)
class RateLimits:
    """Where a trial's rate search starts, how it climbs and where it ends."""

    start_rps: float = 1.0
    max_rps: float = 10_000.0
    min_rps: float = 0.05
    growth: float = GROWTH
    resolution: float = RESOLUTION
    noise: float = NOISE


@dataclass(frozen=True)
class SearchSettings(RateLimits):
    """How each trial's rate search runs and how many trials the budget allows."""

    repeat: int = 2  # runs per near tie in the final check (1: no check)
    budget_trials: int | None = 12
    budget_time_s: float | None = None


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

    @property
    def server_ran(self) -> bool:
        return self.state != "not-started"


class Trial(Protocol):
    """One candidate's server, measured one level at a time (started on first need)."""

    server_started: bool  # True once a server was started for this trial

    def measure(self, rate_rps: float) -> Measurement: ...

    def close(self) -> None: ...


class TrialRunner(Protocol):
    """Runs trials on real servers (or, in tests, a model of them)."""

    def open(self, candidate: Candidate) -> Trial: ...

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


@dataclass(frozen=True)
class Verdict:
    """compare's answer on one metric between two groups of runs."""

    text: str
    significant: bool = False
    half_width_pct: float = math.inf  # the 95 % interval's half-width (inf: no interval)

    def decided(self, noise: float) -> bool:
        """A difference found, or an interval so narrow the two are within ``noise``."""
        return self.significant or self.half_width_pct <= noise * 100.0


@dataclass
class TrialResult:
    """What one candidate showed (or why it was never started), with the evidence."""

    candidate: Candidate
    label: str
    stage: str
    state: str
    measurements: list[Measurement] = field(default_factory=list)
    sustainable_rps: float | None = None
    binding: str | None = None
    basis: str = ""
    latency_ms: float | None = None  # min-latency: the SLO's first target at target_rps
    note: str = ""  # why the trial ended where it did
    number: int | None = None  # the trial's number (None: refused, never started)
    server_started: bool = False
    gpus: int = 1
    wall_s: float = 0.0
    confirmed: str = ""  # the final check at the best's rate: "k of N runs met"

    @property
    def preempted(self) -> bool:
        return any(
            (m.summary.get("num_preemptions") or 0) > 0 for m in self.measurements if m.summary
        )

    def levels_text(self) -> str:
        """``4✓ 8✓ 16✗ 11.3✓``: each level's offered rate and whether it met the SLO."""
        return " ".join(f"{m.rate_rps:g}{_mark(m)}" for m in self.measurements)


def _mark(m: Measurement) -> str:
    if not m.server_ran:
        return "!"
    return "✓" if m.met else "✗"


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

    @property
    def measured(self) -> list[TrialResult]:
        return [t for t in self.trials if t.number is not None]


class _OutOfBudget(Exception):
    pass


class Tuner:
    """Runs the staged search over ``space`` from ``start`` with ``runner``.

    ``refuse(candidate)`` says why a candidate must not start (the validator's and the guide's
    rules; None when it may); ``gpus(candidate)`` how many GPUs one replica takes; ``label``
    names a candidate (for run folders and tables); ``known_oom`` lists candidates that ran
    out of memory at start-up in an earlier, resumed tune.
    """

    def __init__(
        self,
        space: Space,
        start: Candidate,
        *,
        slo: Slo,
        objective: Objective,
        runner: TrialRunner,
        settings: SearchSettings,
        refuse: Callable[[Candidate], str | None] = lambda c: None,
        gpus: Callable[[Candidate], int] = lambda c: 1,
        label: Callable[[Candidate], str] = lambda c: c.label("candidate"),
        say: Say = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.space = space
        self.start = start
        self.slo = slo
        self.objective = objective
        self.runner = runner
        self.settings = settings
        self.refuse = refuse
        self.gpus = gpus
        self.label = label
        self.say = say
        self.clock = clock
        self.results: dict[Candidate, TrialResult] = {}
        self.order: list[TrialResult] = []
        self.best: TrialResult | None = None
        self.trials_run = 0
        self.started_at = clock()
        self.trial_walls: list[float] = []  # trials of this invocation that started a server

    # ------------------------------------------------------------------ the whole search

    def run(self) -> TuneResult:
        """Search until the budget ends or a pass finds nothing better; then settle near ties."""
        stopped_by = "converged (a pass over every stage found nothing better)"
        try:
            self.evaluate(self.start, "start")
            for _ in range(MAX_PASSES):
                before = self.best
                for name, dims in self.space.stages():
                    self._stage(name, dims)
                if self.best is before:
                    break
            else:
                stopped_by = f"{MAX_PASSES} passes over the stages"
        except _OutOfBudget as exc:
            stopped_by = str(exc)
        confirmation = self._confirm()
        servers = sum(t.server_started for t in self.order) + confirmation.get("servers", 0)
        return TuneResult(
            trials=self.order,
            best=self.best,
            start=self.start,
            stopped_by=stopped_by,
            servers_started=servers,
            wall_s=self.clock() - self.started_at,
            confirmation=confirmation,
        )

    def _stage(self, name: str, dims: Sequence[Dim]) -> None:
        center = self._center()
        if len(dims) == 2 and not dims[0].ordered and dims[1].ordered:
            # prefill: each chunked-prefill value with its own batched-tokens ladder (the two
            # are bound together: without chunking the budget must hold a whole prompt)
            outer, inner = dims
            for value in outer.values:
                other = value != center.get(outer.key) or type(value) is not type(
                    center.get(outer.key)
                )
                # another chunked-prefill value walks its ladder only if its first point
                # comes within noise of the best: a server start is the price of each step
                self._line(center.with_value(outer.key, value), inner, name, walk_if_close=other)
            return
        for dim in dims:
            self._line(self._center(), dim, name)

    def _center(self) -> Candidate:
        return self.best.candidate if self.best is not None else self.start

    def _line(
        self, center: Candidate, dim: Dim, stage: str, *, walk_if_close: bool = False
    ) -> None:
        """Walk ``dim`` from ``center`` (see :meth:`_walk`); then, when ``dim`` is one of a
        coupled pair, walk the other key of the pair from each point this walk measured that
        came within noise of the best without beating it, the closest first. One key at a
        time misses an optimum that lies off both lines: the best batched tokens at one
        max-num-seqs is not the best at another."""
        first = len(self.order)
        self._walk(center, dim, stage, walk_if_close=walk_if_close)
        partners = [
            d for d in self.space.dims
            if d.ordered and d.key != dim.key and frozenset((d.key, dim.key)) in COUPLED
        ]  # fmt: skip
        if not partners:
            return
        measured = [r for r in self.order[first:] if r.number is not None]
        for result in sorted(measured, key=lambda r: -self._rank(r)):
            if result is self.best or not self._close_to_best(result):
                continue  # (the best may have moved on since this walk)
            for other in partners:
                self._walk(result.candidate, other, f"{stage} × {other.key}")

    def _walk(
        self, center: Candidate, dim: Dim, stage: str, *, walk_if_close: bool = False
    ) -> None:
        """Walk ``dim`` from ``center``'s value: upward while each step improves, else
        downward; a categorical key tries each value. With ``walk_if_close`` the walk goes on
        past its first point only when that point is within noise of the best."""
        if not dim.ordered:
            for value in dim.values:
                self.evaluate(center.with_value(dim.key, value), stage)
            return
        values = dim.values
        here = dim.index(center.get(dim.key))
        # the nearest value that may run is where the walk starts (upward first on a tie)
        nearest = sorted(range(len(values)), key=lambda i: (abs(i - here), -i))
        start, line_best = None, None
        for i in nearest:
            result = self.evaluate(center.with_value(dim.key, values[i]), stage)
            if result.state != REFUSED:
                start, line_best = i, result
                break
        if start is None or line_best is None:
            return
        if walk_if_close and not self._close_to_best(line_best):
            return
        best_i = start
        hungry = dim.key in MORE_MEMORY_WHEN_HIGHER
        for step in (1, -1):
            if step > 0 and hungry and line_best.preempted:
                continue  # the guide: no higher than where preemptions began
            j, improved = best_i + step, False
            while 0 <= j < len(values):
                result = self.evaluate(center.with_value(dim.key, values[j]), stage)
                if result.state == REFUSED:
                    j += step
                    continue
                ran = (MEASURED, NO_LEVEL_MET, RUN_FAILED, CLEARLY_WORSE)
                if result.state in (NOT_STARTED, OUT_OF_MEMORY) and line_best.state in ran:
                    break  # past what this server can start with
                if not self._better(result, line_best):
                    break
                line_best, best_i, improved = result, j, True
                if step > 0 and hungry and result.preempted:
                    break
                j += step
            if improved and step > 0:
                break  # the way up was better; no need to look down

    # ------------------------------------------------------------------ one candidate

    def evaluate(self, candidate: Candidate, stage: str) -> TrialResult:
        """The candidate's result: from an earlier trial, refused, or measured now."""
        if candidate in self.results:
            return self.results[candidate]
        label = self.label(candidate)
        reason = self._refusal(candidate)
        if reason is not None:
            result = TrialResult(candidate, label, stage, REFUSED, note=reason)
            self._record(result)
            return result
        self._check_budget()
        self.trials_run += 1
        result = TrialResult(candidate, label, stage, MEASURED, number=self.trials_run,
                             gpus=self.gpus(candidate))  # fmt: skip
        self.say(f"trial {self.trials_run}: {label} ({stage})")
        began = self.clock()
        trial = self.runner.open(candidate)
        try:
            if self.objective.kind == "min-latency":
                self._at_target(trial, result)
            else:
                self._rate_search(trial, result)
        finally:
            trial.close()
        result.server_started = trial.server_started
        result.wall_s = self.clock() - began
        if result.server_started:
            self.trial_walls.append(result.wall_s)
        self._assess(result)
        self._record(result)
        self.say(f"trial {result.number}: {label}: {self.describe(result)}")
        return result

    def _refusal(self, candidate: Candidate) -> str | None:
        reason = self.refuse(candidate)
        if reason is not None:
            return reason
        for other in self.order:
            if other.state == OUT_OF_MEMORY and _needs_more_memory(candidate, other, self.space):
                return f"needs at least the memory of {other.label}, which ran out of memory"
        return None

    def _check_budget(self) -> None:
        s = self.settings
        if s.budget_trials is not None and self.trials_run >= s.budget_trials:
            raise _OutOfBudget(f"the trial budget ({s.budget_trials}) was used")
        if s.budget_time_s is not None:
            elapsed = self.clock() - self.started_at
            typical = sum(self.trial_walls) / len(self.trial_walls) if self.trial_walls else 0.0
            if elapsed + typical > s.budget_time_s:
                raise _OutOfBudget(
                    f"the time budget ({_duration(s.budget_time_s)}) would be exceeded by "
                    f"another trial (about {_duration(typical)} each)"
                )

    def _record(self, result: TrialResult) -> None:
        self.results[result.candidate] = result
        self.order.append(result)
        if self._better(result, self.best):
            self.best = result

    # ------------------------------------------------------------------ measuring

    def race_rate(self, candidate: Candidate) -> float | None:
        """The rate ``candidate`` must sustain to match the best so far (None: no best)."""
        best = self.best
        if best is None or best.sustainable_rps is None:
            return None
        if self.objective.kind == "min-cost":
            return best.sustainable_rps / best.gpus * self.gpus(candidate)
        return best.sustainable_rps

    def _rate_search(self, trial: Trial, result: TrialResult) -> None:
        limits = {f.name: getattr(self.settings, f.name) for f in fields(RateLimits)}
        search = RateSearch(**limits, race_rps=self.race_rate(result.candidate))
        while True:
            rate, why = search.next_rate(self._met(result))
            if rate is None:
                result.note = why
                return
            measurement = trial.measure(rate)
            result.measurements.append(measurement)
            self._plan(result)
            if not measurement.server_ran:
                result.state = OUT_OF_MEMORY if measurement.oom else NOT_STARTED
                result.note = _first_line(measurement.reason) or "the server did not start"
                return
            if measurement.state == "failed":
                result.state = RUN_FAILED
                result.note = f"the run at {rate:g} req/s failed: {_first_line(measurement.reason)}"
                if measurement.oom:
                    result.state = OUT_OF_MEMORY
                return

    def _at_target(self, trial: Trial, result: TrialResult) -> None:
        rate = float(self.objective.target_rps or 0.0)
        measurement = trial.measure(rate)
        result.measurements.append(measurement)
        self._plan(result)
        if not measurement.server_ran:
            result.state = OUT_OF_MEMORY if measurement.oom else NOT_STARTED
            result.note = _first_line(measurement.reason) or "the server did not start"
        elif measurement.state == "failed":
            result.state = RUN_FAILED
            result.note = f"the run failed: {_first_line(measurement.reason)}"

    def _met(self, result: TrialResult) -> dict[float, bool]:
        """Whether each offered rate met the SLO (repeats: only if every repeat did)."""
        met: dict[float, bool] = {}
        for m in result.measurements:
            met[m.rate_rps] = met.get(m.rate_rps, True) and m.met
        return met

    def _plan(self, result: TrialResult) -> None:
        """The capacity plan over the trial's levels: its sustainable rate and what binds."""
        from vprof.analysis.plan import plan

        summarized = [m for m in result.measurements if _usable(m.summary)]
        for m in result.measurements:
            m.met = False
        if not summarized:
            result.sustainable_rps, result.binding, result.basis = None, None, "nothing measured"
            return
        # one profile per trial (its levels grouped under the candidate's label); each level
        # named by its position, so the plan's merged repeats map back to measurements
        summaries = [
            {**m.summary, "profile": result.label, "run": str(i)} for i, m in enumerate(summarized)
        ]
        answer = plan(summaries, target_rps=self.objective.target_rps or 1.0, slo=self.slo)
        profile_plan = answer.profiles[0]
        for level in profile_plan.levels:
            for i in level.run.split(", "):
                summarized[int(i)].met = level.passed
        result.sustainable_rps = profile_plan.sustainable_rps
        result.binding = profile_plan.binding
        result.basis = profile_plan.basis
        if self.objective.kind == "min-latency":
            result.latency_ms = self._latency_at_target(profile_plan)

    def _latency_at_target(self, profile_plan: Any) -> float | None:
        target = next((t for t in self.slo.targets if t.percentile is not None), None)
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

    def _assess(self, result: TrialResult) -> None:
        if result.state == MEASURED and result.note.startswith("clearly worse"):
            result.state = CLEARLY_WORSE
        elif result.state == MEASURED and self.score(result) is None:
            result.state = NO_LEVEL_MET

    # ------------------------------------------------------------------ comparing

    def score(self, result: TrialResult | None) -> float | None:
        """Higher is better; None when the candidate has no answer (never met the SLO)."""
        if result is None or result.state not in (
            MEASURED,
            RUN_FAILED,
            NO_LEVEL_MET,
            CLEARLY_WORSE,
        ):
            return None
        if self.objective.kind == "min-latency":
            return -result.latency_ms if result.latency_ms is not None else None
        rate = result.sustainable_rps
        if rate is None or not rate > 0:
            return None
        return rate / result.gpus if self.objective.kind == "min-cost" else rate

    def _rank(self, result: TrialResult) -> float:
        score = self.score(result)
        return score if score is not None else -math.inf

    def _better(self, a: TrialResult | None, b: TrialResult | None) -> bool:
        sa, sb = self.score(a), self.score(b)
        return sa is not None and (sb is None or sa > sb)

    def _close_to_best(self, result: TrialResult) -> bool:
        score, top = self.score(result), self.score(self.best)
        if score is None:
            return False
        if top is None or result is self.best:
            return True
        noise = self.settings.noise
        return score >= (top * (1 - noise) if top > 0 else top * (1 + noise))

    def near_ties(self) -> list[TrialResult]:
        """Measured candidates within ``noise`` of the best (best excluded), best first."""
        best = self.best
        top = self.score(best)
        if best is None or top is None:
            return []
        noise = self.settings.noise
        limit = top * (1 - noise) if top > 0 else top * (1 + noise)
        ties = [
            r for r in self.order
            if r is not best and (s := self.score(r)) is not None and s >= limit
        ]  # fmt: skip
        ties.sort(key=lambda r: -(self.score(r) or 0.0))
        return ties[:MAX_CONTENDERS]

    # ------------------------------------------------------------------ the final check

    def _confirm(self) -> dict[str, Any]:
        """Measure the best and its near ties ``repeat`` times each at the best's rate,
        interleaved, adding a round at a time while a tie is undecided (compare's rule: a
        significant difference, or an interval within ±noise); re-plan them with those runs
        and pick again."""
        s = self.settings
        best = self.best
        if best is None or s.repeat < 2:
            return {}
        group = [best, *self.near_ties()]
        if self.objective.kind == "min-latency":
            rate = float(self.objective.target_rps or 0.0)
        else:
            # the best's highest level that met the SLO: its run there is the first repeat,
            # and the claim then rests on N runs at a rate it has already met once
            rate = max((m.rate_rps for m in best.measurements if m.met), default=0.0)
        if not rate > 0:
            return {}
        if s.budget_time_s is not None and self.trial_walls:
            elapsed = self.clock() - self.started_at
            typical = sum(self.trial_walls) / len(self.trial_walls)
            if elapsed + typical * len(group) > s.budget_time_s:
                note = "no time left in the budget to repeat the best; its answer rests on one run"
                return {"skipped": note}
        labels = ", ".join(r.label for r in group)
        repeat = s.repeat
        servers = 0
        while True:
            self.say(f"checking {labels} at {rate:g} req/s, {repeat} runs each (interleaved)")
            runs = self.runner.confirm([r.candidate for r in group], rate, repeat)
            servers += sum(m.started_server for ms in runs.values() for m in ms)
            judged = self._judge_ties(group, runs)
            undecided = [v for v in judged.values() if not v.decided(s.noise)]
            if not undecided or repeat >= max(s.repeat, MAX_CONFIRM_REPEATS):
                break
            if s.budget_time_s is not None and self.trial_walls:
                typical = sum(self.trial_walls) / len(self.trial_walls)
                if self.clock() - self.started_at + typical * len(group) > s.budget_time_s:
                    break
            repeat += 1  # the rounds so far stand (a bench resumes them); one more of each
        for result in group:
            extra = runs.get(result.candidate, [])
            # a run the search already made at this rate is the check's first repeat
            known = {m.run: m for m in result.measurements if m.run}
            result.measurements.extend(m for m in extra if not m.run or m.run not in known)
            self._plan(result)
            extra = [known.get(m.run, m) if m.run else m for m in extra]
            met = sum(m.met for m in extra)
            result.confirmed = f"{met} of {len(extra)} runs at {rate:g} req/s met the SLO"
        self.best = max(group, key=self._rank)
        if self.score(self.best) is None:
            self.best = None
        verdicts = []
        metric = self._verdict_metric(group[0])
        others = [r for r in group if r is not self.best]
        if self.best is not None and metric:
            base = runs.get(self.best.candidate, [])
            for other in others:
                found = self.runner.verdict(base, runs.get(other.candidate, []), metric)
                verdicts.append(
                    {
                        "vs": other.label,
                        "metric": metric,
                        "verdict": found.text,
                        "decided": found.decided(s.noise),
                    }
                )
        return {
            "rate_rps": rate,
            "repeats": repeat,
            "candidates": [r.label for r in group],
            "servers": servers,
            "verdicts": verdicts,
        }

    def _judge_ties(
        self, group: Sequence[TrialResult], runs: dict[Candidate, list[Measurement]]
    ) -> dict[str, Verdict]:
        """Each near tie against the group's first (the best so far), by compare's rule."""
        metric = self._verdict_metric(group[0])
        if not metric:
            return {}
        base = runs.get(group[0].candidate, [])
        return {
            other.label: self.runner.verdict(base, runs.get(other.candidate, []), metric)
            for other in group[1:]
        }

    def _verdict_metric(self, result: TrialResult) -> str | None:
        """The summary key the tie is judged on: the constraint that binds (else the SLO's
        first percentile target)."""
        from vprof.analysis.stats import pct_key

        targets = [t for t in self.slo.targets if t.percentile is not None]
        chosen = next((t for t in targets if t.key == result.binding), None)
        chosen = chosen or (targets[0] if targets else None)
        if chosen is None or chosen.percentile is None:
            return None
        return f"{pct_key(chosen.percentile)}_{chosen.metric}_ms"

    # ------------------------------------------------------------------ words

    def describe(self, result: TrialResult) -> str:
        """One line: what the trial showed."""
        if result.state == REFUSED:
            return f"refused: {result.note}"
        if result.state in (NOT_STARTED, OUT_OF_MEMORY):
            return f"{result.state}: {result.note}"
        if self.objective.kind == "min-latency":
            value = result.latency_ms
            shown = f"{value:.1f} ms" if value is not None else "SLO missed"
            return f"{shown} at {self.objective.target_rps:g} req/s ({result.levels_text()})"
        if result.sustainable_rps is None:
            return f"no level met the SLO ({result.levels_text()}); {result.note}"
        return (
            f"{result.sustainable_rps:.3g} req/s sustainable ({result.binding or 'nothing'} "
            f"binds; levels {result.levels_text()}); {result.note}"
        )


# --------------------------------------------------------------------------- the rate search


def round_rate(rate: float) -> float:
    """Three significant digits: levels get tidy names and a resumed search asks for the very
    same rates."""
    if not rate > 0 or not math.isfinite(rate):
        return rate
    digits = 2 - math.floor(math.log10(rate))
    return round(rate, digits)


@dataclass(frozen=True)
class RateSearch(RateLimits):
    """Where a trial's next level goes, from the levels so far (pure).

    Without a best to race: start at ``start_rps``, ×``growth`` while the SLO is met (÷ while
    missed), then bisect (geometric mean) until missed/met are within ``resolution``. With a
    best (``race_rps``): first probe at ``race_rps × (1 − noise)``; missing there ends the trial
    (clearly worse); meeting it jumps to ``race_rps × (1 + resolution)``, which settles whether
    the candidate beats the best: if it does, the search goes on from there; if it misses at or
    below the best's rate it is a near tie, which the final check with repeats settles.
    """

    race_rps: float | None = None

    def next_rate(self, met: Mapping[float, bool]) -> tuple[float | None, str]:
        """The next offered rate, or None and why the search is over."""
        fails = [r for r, ok in met.items() if not ok]
        hi = min(fails) if fails else None
        passes = [r for r, ok in met.items() if ok and (hi is None or r < hi)]
        lo = max(passes) if passes else None
        race = self.race_rps
        # the race's two probes, rounded as every level is (so comparisons see what was run)
        probe = round_rate(race * (1 - self.noise)) if race is not None else None
        above = round_rate(race * (1 + self.resolution)) if race is not None else None
        if race is not None and hi is not None and probe is not None and hi <= probe:
            return None, (
                f"clearly worse than the best: missed the SLO at {hi:g} req/s, below the "
                f"{race:.3g} req/s the best sustains"
            )
        if race is not None and hi is not None and lo is not None and hi <= race * (1 + 1e-9):
            return None, (
                f"a near tie below the best: met at {lo:g}, missed at {hi:g} req/s (the best "
                f"sustains {race:.3g})"
            )
        if lo is None and hi is None:
            first = probe if probe is not None else self.start_rps
            return self._fresh(min(first, self.max_rps), met)
        if lo is None:
            assert hi is not None
            rate = hi / self.growth
            if rate < self.min_rps:
                return None, f"no level met the SLO (the lowest tried: {hi:g} req/s)"
            return self._fresh(rate, met)
        if hi is None:
            if lo >= self.max_rps:
                return None, f"met the SLO at the highest rate allowed ({self.max_rps:g} req/s)"
            rate = lo * self.growth
            if above is not None and lo < above:
                rate = min(rate, above)
            return self._fresh(min(rate, self.max_rps), met)
        if hi / lo <= 1 + self.resolution:
            return None, f"met at {lo:g}, missed at {hi:g} req/s"
        return self._fresh(math.sqrt(lo * hi), met, bracket=(lo, hi))

    def _fresh(
        self, rate: float, met: Mapping[float, bool], bracket: tuple[float, float] | None = None
    ) -> tuple[float | None, str]:
        rate = round_rate(rate)
        if rate in met:  # rounding cannot split the bracket further
            where = f"met at {bracket[0]:g}, missed at {bracket[1]:g} req/s" if bracket else ""
            return None, where or f"{rate:g} req/s was measured already"
        return rate, ""


# --------------------------------------------------------------------------- helpers


def _usable(summary: Mapping[str, Any]) -> bool:
    return bool(summary) and summary.get("request_throughput") is not None


def _needs_more_memory(candidate: Candidate, other: TrialResult, space: Space) -> bool:
    from vprof.runs.tunespace import needs_more_memory

    return needs_more_memory(candidate, other.candidate, space)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text and text.strip() else ""


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


__all__ = [
    "BATCHED",
    "OBJECTIVES",
    "Measurement",
    "Objective",
    "RateSearch",
    "SearchSettings",
    "Trial",
    "TrialResult",
    "TrialRunner",
    "TuneResult",
    "Tuner",
    "round_rate",
]
