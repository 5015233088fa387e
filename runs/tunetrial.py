"""One candidate's trial, pure over its server: where each level goes and when it stops.

A trial is one candidate's capacity: an open-loop rate search on one server that climbs ×2
until the SLO is missed, then bisects until the last rate that met it and the first that did
not are within ``resolution``; the sustainable rate is the capacity plan's
(``vprof.analysis.plan``: interpolated on the binding constraint, client-limited levels never
met). Once a best exists, a trial first probes just below the best's rate: a candidate that
misses the SLO there is clearly worse and stops after one level. For min-latency a trial is
one level at the target rate. The server is behind a :class:`Trial` (real servers in
``vprof.runs.tunebench``, recordings and models in the benchmark and the tests).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Protocol

from vprof.analysis.slo import Slo
from vprof.records.rundir import RunState
from vprof.runs.tuneevidence import (
    CLEARLY_WORSE,
    ENVIRONMENT,
    MEASURED,
    NO_LEVEL_MET,
    NOT_STARTED,
    OUT_OF_MEMORY,
    RUN_FAILED,
    Evidence,
    Measurement,
    Objective,
    plan_levels,
)

# Two runs of one configuration on one server differ by 5–20 % on the CPU build (and ±15–25 %
# on a GPU for latency percentiles); a capacity is steadier than a percentile, so 10 % is the
# gap below which two candidates are called a near tie and measured again.
NOISE = 0.10
RESOLUTION = 0.10  # a rate search ends when its met/missed bracket is this narrow
GROWTH = 2.0  # the climb's factor per level


class Trial(Protocol):
    """One candidate's server, measured one level at a time (started on first need)."""

    server_started: bool  # True once a server was started for this trial

    def measure(self, rate_rps: float) -> Measurement: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RateLimits:
    """Where a trial's rate search starts, how it climbs and where it ends."""

    start_rps: float = 1.0
    max_rps: float = 10_000.0
    min_rps: float = 0.05
    growth: float = GROWTH
    resolution: float = RESOLUTION
    noise: float = NOISE


def run_trial(
    trial: Trial,
    label: str,
    *,
    race_rps: float | None,
    limits: RateLimits,
    slo: Slo,
    objective: Objective,
    clock: Callable[[], float] = time.monotonic,
) -> Evidence:
    """Measure one candidate on ``trial`` (closed after) and say what it showed: the rate
    search racing ``race_rps`` (the rate to beat; None: no best yet), or for min-latency one
    level at the target rate."""
    evidence = Evidence()
    began = clock()
    try:
        if objective.kind == "min-latency":
            _at_target(trial, evidence, label, slo, objective)
        else:
            _rate_search(trial, evidence, label, race_rps, limits, slo, objective)
    finally:
        trial.close()
    evidence.server_started = trial.server_started
    evidence.wall_s = clock() - began
    if evidence.state == MEASURED and evidence.note.startswith("clearly worse"):
        evidence.state = CLEARLY_WORSE
    elif evidence.state == MEASURED and _no_answer(evidence, objective):
        evidence.state = NO_LEVEL_MET
    return evidence


def _no_answer(evidence: Evidence, objective: Objective) -> bool:
    if objective.kind == "min-latency":
        return evidence.latency_ms is None
    return evidence.sustainable_rps is None or not evidence.sustainable_rps > 0


def _rate_search(
    trial: Trial,
    evidence: Evidence,
    label: str,
    race_rps: float | None,
    limits: RateLimits,
    slo: Slo,
    objective: Objective,
) -> None:
    bounds = {f.name: getattr(limits, f.name) for f in fields(RateLimits)}
    search = RateSearch(**bounds, race_rps=race_rps)
    while True:
        rate, why = search.next_rate(_met(evidence))
        if rate is None:
            evidence.note = why
            return
        measurement = _level(trial, rate, evidence, label, slo, objective)
        if _ended(measurement, evidence, f" at {rate:g} req/s"):
            return


def _at_target(
    trial: Trial, evidence: Evidence, label: str, slo: Slo, objective: Objective
) -> None:
    measurement = _level(trial, float(objective.target_rps or 0.0), evidence, label, slo, objective)
    _ended(measurement, evidence, "")


def _level(
    trial: Trial, rate: float, evidence: Evidence, label: str, slo: Slo, objective: Objective
) -> Measurement:
    """Measure one level and plan the trial's levels again with it."""
    measurement = trial.measure(rate)
    evidence.measurements.append(measurement)
    plan_levels(evidence, label, slo, objective)
    return measurement


def _ended(measurement: Measurement, evidence: Evidence, where: str) -> bool:
    """True, with the trial's state and note set, when the level's server did not start or
    its run failed (out of memory, when it says so): the trial ends there."""
    if measurement.environment:
        evidence.state = ENVIRONMENT
        evidence.note = f"{measurement.environment}: {first_line(measurement.reason)}"
        return True
    if not measurement.server_ran:
        evidence.state = OUT_OF_MEMORY if measurement.oom else NOT_STARTED
        evidence.note = first_line(measurement.reason) or "the server did not start"
        return True
    if measurement.state == RunState.FAILED:
        evidence.state = OUT_OF_MEMORY if measurement.oom else RUN_FAILED
        evidence.note = f"the run{where} failed: {first_line(measurement.reason)}"
        return True
    return False


def _met(evidence: Evidence) -> dict[float, bool]:
    """Whether each offered rate met the SLO (repeats: only if every repeat did)."""
    met: dict[float, bool] = {}
    for m in evidence.measurements:
        met[m.rate_rps] = met.get(m.rate_rps, True) and m.met
    return met


def first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text and text.strip() else ""


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
