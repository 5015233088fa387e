"""Predicted load ladders and the capacity plans read from them: what ``vprof plan`` and
``vprof report`` draw from a model, and how ``vprof tune`` ranks candidates it has not run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.forecast.model import ConfigModel
from vprof.forecast.predict import PACE, predict
from vprof.forecast.rules import SchedulerRules
from vprof.forecast.scenario import Scenario

GROWTH = 1.5  # the predicted ladder's step while the SLO holds
RESOLUTION = 0.03  # bisection stops when met and missed rates are this close
MAX_LEVELS = 40
UNCAPPED = 1_000_000  # requests in flight: as many as arrive


def ladder(
    config: ConfigModel,
    s: Scenario,
    rates: Sequence[float],
    *,
    slo: Any = None,
    model_path: str = "",
    rules: SchedulerRules | None = None,
    label: str | None = None,
    pace: bool = False,
) -> list[dict[str, Any]]:
    """Predicted summaries of ``s`` at each open-loop rate (with the step-time band of
    :func:`~vprof.forecast.predict.predict`, given ``pace``)."""
    return [
        predict(
            config,
            s.at_rate(r),
            slo=slo,
            model_path=model_path,
            rules=rules,
            label=label,
            pace=pace,
        ).summary
        for r in rates
    ]


def sustainable(
    config: ConfigModel,
    s: Scenario,
    slo: Any,
    *,
    start_rps: float | None = None,
    rules: SchedulerRules | None = None,
    label: str | None = None,
    model_path: str = "",
    pace: bool = False,
) -> tuple[float | None, list[dict[str, Any]]]:
    """The predicted sustainable rate of ``s`` under ``slo`` (the capacity plan's, over a
    predicted ladder that climbs ×1.5 until the SLO is missed, then bisects), and the ladder.

    With ``pace``, the rate is also found with every step ``PACE`` slower and faster, and each
    level's ``forecast`` says both (``pace``: ``sustainable_rps``, None where no level met the
    SLO), which the plan prints beside its answer."""
    # what the server sustains: arrivals are not held back by the load generator's users
    s = dataclasses.replace(s, shape=dataclasses.replace(s.shape, max_in_flight=UNCAPPED))

    def at(model: ConfigModel) -> Callable[[float], dict[str, Any]]:
        def level(r: float) -> dict[str, Any]:
            return predict(
                model, s.at_rate(r), slo=slo, rules=rules, label=label, model_path=model_path
            ).summary

        return level

    rate, levels = climb(at(config), slo, start_rps or _start_rate(config))
    if pace and rate is not None:
        band = [
            climb(at(dataclasses.replace(config, cost=config.cost.paced(f))), slo, rate)[0]
            for f in (1.0 + PACE, 1.0 - PACE)
        ]
        for summary in levels:
            summary[K.FORECAST]["pace"] = {"step_time_pct": PACE * 100.0, "sustainable_rps": band}
    return rate, levels


def climb(
    level: Callable[[float], dict[str, Any]],
    slo: Any,
    start_rps: float,
    *,
    growth: float = GROWTH,
    resolution: float = RESOLUTION,
) -> tuple[float | None, list[dict[str, Any]]]:
    """The capacity plan's sustainable rate over predicted levels (``level(rate)``, a
    summary) that climb ×``growth`` from ``start_rps`` while the SLO holds (÷ while it does
    not), then bisect until met and missed are within ``resolution``; and those levels."""
    from vprof.analysis.plan import plan

    levels: list[dict[str, Any]] = []
    passed: dict[float, bool] = {}

    def measure(r: float) -> bool:
        summary = level(r)
        answer = plan([summary], target_rps=1.0, slo=slo).profiles[0]
        levels.append(summary)
        passed[r] = bool(answer.levels and answer.levels[0].passed)
        return passed[r]

    rate = start_rps
    if measure(rate):
        while len(levels) < MAX_LEVELS and measure(rate * growth):
            rate *= growth
    else:
        while len(levels) < MAX_LEVELS and rate > 1e-3 and not measure(rate / growth):
            rate /= growth
    while len(levels) < MAX_LEVELS:
        ok = [r for r, v in passed.items() if v]
        bad = [r for r, v in passed.items() if not v]
        if not ok or not bad:
            break
        lo = max(ok)
        hi = min(r for r in bad if r > lo) if any(r > lo for r in bad) else None
        if hi is None or hi / lo <= 1 + resolution:
            break
        measure(math.sqrt(lo * hi))
    if not any(passed.values()):
        return None, levels
    answer = plan(levels, target_rps=1.0, slo=slo).profiles[0]
    return answer.sustainable_rps, levels


def _start_rate(config: ConfigModel) -> float:
    span = config.span.get("rate_rps")
    if span and len(span) == 2 and span[1] > 0:
        return float(span[1])
    return 1.0


def around(measured_rates: Sequence[float], points: int = 12, reach: float = 1.5) -> list[float]:
    """Rates for a predicted curve over measured levels: from the lowest ÷ ``reach`` to the
    highest × ``reach``, evenly spaced on a log scale."""
    rates = [r for r in measured_rates if r > 0 and math.isfinite(r)]
    if not rates:
        return []
    lo, hi = min(rates) / reach, max(rates) * reach
    if points < 2 or hi <= lo:
        return [lo]
    step = (hi / lo) ** (1 / (points - 1))
    return [round(lo * step**k, 4) for k in range(points)]
