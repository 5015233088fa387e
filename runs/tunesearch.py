"""The search behind ``vprof tune``, pure over the space: which candidate to measure next.

Candidates are measured through one door, ``evaluate(candidate, race_rps) -> Evidence``,
which ``vprof.runs.tuner`` builds from a trial runner (real servers, a recording, or a
model); the :class:`Ledger` keeps what came back. Every candidate is considered at most once;
one the validator refuses, or that needs at least the memory of one that ran out, is never
evaluated.

- **The staged search** (:func:`staged_search`) is coordinate descent in the guide's order
  (prefill budget, then concurrency, the prefix cache, memory): each key is a ladder walked
  from the best so far, upward first, while each step improves; a server that fails to start
  or runs out of memory ends a climb, as preemptions do for memory-hungry keys (the guide's
  rule). Passes repeat while they find something better.
- **Coupled keys** (``tunespace.COUPLED``: batched tokens and max-num-seqs) are not left to
  one key at a time: each point of one's line that comes within ``noise`` of the best
  without beating it has the other's line walked from it, closest first, so an optimum off
  both lines through the best is still reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vprof.runs.tuneevidence import (
    ENVIRONMENT,
    NOT_STARTED,
    OUT_OF_MEMORY,
    RAN,
    REFUSED,
    Evidence,
    Objective,
    TrialResult,
    describe,
)
from vprof.runs.tunespace import (
    COUPLED,
    MORE_MEMORY_WHEN_HIGHER,
    Candidate,
    Dim,
    Space,
    needs_more_memory,
)
from vprof.runs.tunetrial import RateLimits

MAX_PASSES = 3  # coordinate descent passes over the stages
CONVERGED = "converged (a pass over every stage found nothing better)"

Say = Callable[[str], None]
# The one door to the servers: measure ``candidate``, racing ``race_rps`` (None: no best yet).
Evaluate = Callable[[Candidate, "float | None"], Evidence]


@dataclass(frozen=True)
class SearchSettings(RateLimits):
    """How each trial's rate search runs, how many trials the budget allows, and how many runs
    the final check makes of the best and its near ties."""

    repeat: int = 2  # runs per near tie in the final check (1: no check)
    budget_trials: int | None = 12
    budget_time_s: float | None = None


class SearchStopped(Exception):
    """The search ends here; its text says why."""


class OutOfBudget(SearchStopped):
    """The next trial would exceed the budget (its text says which)."""


class EnvironmentProblem(SearchStopped):
    """A server could not start for a reason of the machine, not of its settings: every
    further candidate would fail the same way, so nothing more is tried."""


@dataclass
class SearchResult:
    """What a search found: every candidate it considered, in order, and the best."""

    trials: list[TrialResult]
    best: TrialResult | None
    stopped_by: str
    started_at: float
    trial_walls: list[float] = field(default_factory=list)  # trials that started a server
    environment: str = ""  # set when an environment problem stopped the search


class Ledger:
    """The trials of one search: each candidate considered once, through ``evaluate``.

    ``refuse(candidate)`` says why a candidate must not start (the validator's and the guide's
    rules; None when it may); ``gpus(candidate)`` how many GPUs one replica takes; ``label``
    names a candidate (for run folders and tables).
    """

    def __init__(
        self,
        space: Space,
        evaluate: Evaluate,
        *,
        objective: Objective,
        settings: SearchSettings,
        refuse: Callable[[Candidate], str | None] = lambda c: None,
        gpus: Callable[[Candidate], int] = lambda c: 1,
        label: Callable[[Candidate], str] = lambda c: c.label("candidate"),
        say: Say = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.space = space
        self.evaluate = evaluate
        self.objective = objective
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
        self.trial_walls: list[float] = []
        self.environment = ""

    def consider(self, candidate: Candidate, stage: str) -> TrialResult:
        """The candidate's result: from an earlier trial, refused, or measured now."""
        if candidate in self.results:
            return self.results[candidate]
        label = self.label(candidate)
        reason = self.refusal(candidate)
        if reason is not None:
            refused = TrialResult(
                candidate=candidate, label=label, stage=stage, state=REFUSED, note=reason
            )
            self._record(refused)
            return refused
        self.check_budget()
        self.trials_run += 1
        number = self.trials_run
        self.say(f"trial {number}: {label} ({stage})")
        evidence = self.evaluate(candidate, self.race_rate(candidate))
        result = TrialResult.of(
            evidence,
            candidate=candidate,
            label=label,
            stage=stage,
            number=number,
            gpus=self.gpus(candidate),
        )
        if result.server_started:
            self.trial_walls.append(result.wall_s)
        self._record(result)
        self.say(f"trial {number}: {label}: {describe(result, self.objective)}")
        if result.state == ENVIRONMENT:
            self.environment = (
                f"the server of {label} could not start for a reason of this machine, not of "
                f"its settings ({result.note})"
            )
            raise EnvironmentProblem(self.environment)
        return result

    def refusal(self, candidate: Candidate) -> str | None:
        """Why ``candidate`` must not start: a rule, or an earlier trial out of memory."""
        reason = self.refuse(candidate)
        if reason is not None:
            return reason
        for other in self.order:
            if other.state == OUT_OF_MEMORY and needs_more_memory(
                candidate, other.candidate, self.space
            ):
                return f"needs at least the memory of {other.label}, which ran out of memory"
        return None

    def race_rate(self, candidate: Candidate) -> float | None:
        """The rate ``candidate`` must sustain to match the best so far (None: no best)."""
        best = self.best
        if best is None or best.sustainable_rps is None:
            return None
        if self.objective.kind == "min-cost":
            return best.sustainable_rps / best.gpus * self.gpus(candidate)
        return best.sustainable_rps

    def close_to_best(self, result: TrialResult) -> bool:
        return self.objective.within(result, self.best, self.settings.noise)

    def result(self, stopped_by: str) -> SearchResult:
        return SearchResult(
            self.order, self.best, stopped_by, self.started_at, self.trial_walls, self.environment
        )

    def check_budget(self) -> None:
        """Raise :class:`OutOfBudget` when another trial would exceed the budget."""
        s = self.settings
        if s.budget_trials is not None and self.trials_run >= s.budget_trials:
            raise OutOfBudget(f"the trial budget ({s.budget_trials}) was used")
        if s.budget_time_s is not None:
            elapsed = self.clock() - self.started_at
            typical = sum(self.trial_walls) / len(self.trial_walls) if self.trial_walls else 0.0
            if elapsed + typical > s.budget_time_s:
                raise OutOfBudget(
                    f"the time budget ({duration_text(s.budget_time_s)}) would be exceeded by "
                    f"another trial (about {duration_text(typical)} each)"
                )

    def _record(self, result: TrialResult) -> None:
        self.results[result.candidate] = result
        self.order.append(result)
        if self.objective.better(result, self.best):
            self.best = result


def duration_text(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


# --------------------------------------------------------------------------- the staged search


def staged_search(space: Space, start: Candidate, ledger: Ledger) -> SearchResult:
    """Search from ``start`` until the budget ends or a pass finds nothing better."""
    stopped_by = CONVERGED
    walk = _Walk(space, start, ledger)
    try:
        ledger.consider(start, "start")
        for _ in range(MAX_PASSES):
            before = ledger.best
            for name, dims in space.stages():
                walk.stage(name, dims)
            if ledger.best is before:
                break
        else:
            stopped_by = f"{MAX_PASSES} passes over the stages"
    except SearchStopped as exc:
        stopped_by = str(exc)
    return ledger.result(stopped_by)


class _Walk:
    """Coordinate descent over the space's stages, from the best so far."""

    def __init__(self, space: Space, start: Candidate, ledger: Ledger) -> None:
        self.space = space
        self.start = start
        self.ledger = ledger

    def center(self) -> Candidate:
        best = self.ledger.best
        return best.candidate if best is not None else self.start

    def stage(self, name: str, dims: Sequence[Dim]) -> None:
        center = self.center()
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
                self.line(center.with_value(outer.key, value), inner, name, walk_if_close=other)
            return
        for dim in dims:
            self.line(self.center(), dim, name)

    def line(self, center: Candidate, dim: Dim, stage: str, *, walk_if_close: bool = False) -> None:
        """Walk ``dim`` from ``center`` (see :meth:`walk`); then, when ``dim`` is one of a
        coupled pair, walk the other key of the pair from each point this walk measured that
        came within noise of the best without beating it, the closest first. One key at a
        time misses an optimum that lies off both lines: the best batched tokens at one
        max-num-seqs is not the best at another."""
        ledger = self.ledger
        first = len(ledger.order)
        self.walk(center, dim, stage, walk_if_close=walk_if_close)
        partners = [
            d
            for d in self.space.dims
            if d.ordered and d.key != dim.key and frozenset((d.key, dim.key)) in COUPLED
        ]
        if not partners:
            return
        measured = [r for r in ledger.order[first:] if r.number is not None]
        for result in sorted(measured, key=lambda r: -ledger.objective.rank(r)):
            if result is ledger.best or not ledger.close_to_best(result):
                continue  # (the best may have moved on since this walk)
            for other in partners:
                self.walk(result.candidate, other, f"{stage} × {other.key}")

    def walk(self, center: Candidate, dim: Dim, stage: str, *, walk_if_close: bool = False) -> None:
        """Walk ``dim`` from ``center``'s value: upward while each step improves, else
        downward; a categorical key tries each value. With ``walk_if_close`` the walk goes on
        past its first point only when that point is within noise of the best."""
        ledger = self.ledger
        if not dim.ordered:
            for value in dim.values:
                ledger.consider(center.with_value(dim.key, value), stage)
            return
        values = dim.values
        here = dim.index(center.get(dim.key))
        # the nearest value that may run is where the walk starts (upward first on a tie)
        nearest = sorted(range(len(values)), key=lambda i: (abs(i - here), -i))
        start, line_best = None, None
        for i in nearest:
            result = ledger.consider(center.with_value(dim.key, values[i]), stage)
            if result.state != REFUSED:
                start, line_best = i, result
                break
        if start is None or line_best is None:
            return
        if walk_if_close and not ledger.close_to_best(line_best):
            return
        best_i = start
        hungry = dim.key in MORE_MEMORY_WHEN_HIGHER
        for step in (1, -1):
            if step > 0 and hungry and line_best.preempted:
                continue  # the guide: no higher than where preemptions began
            j, improved = best_i + step, False
            while 0 <= j < len(values):
                result = ledger.consider(center.with_value(dim.key, values[j]), stage)
                if result.state == REFUSED:
                    j += step
                    continue
                if result.state in (NOT_STARTED, OUT_OF_MEMORY) and line_best.state in RAN:
                    break  # past what this server can start with
                if not ledger.objective.better(result, line_best):
                    break
                line_best, best_i, improved = result, j, True
                if step > 0 and hungry and result.preempted:
                    break
                j += step
            if improved and step > 0:
                break  # the way up was better; no need to look down
