"""Predicted load ladders and the capacity plans read from them: what ``vprof plan`` and
``vprof report`` draw from a model, and how ``vprof tune`` ranks candidates it has not run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from vprof.forecast.model import ConfigModel
from vprof.forecast.predict import predict
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
) -> list[dict[str, Any]]:
    """Predicted summaries of ``s`` at each open-loop rate."""
    return [
        predict(
            config, s.at_rate(r), slo=slo, model_path=model_path, rules=rules, label=label
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
) -> tuple[float | None, list[dict[str, Any]]]:
    """The predicted sustainable rate of ``s`` under ``slo`` (the capacity plan's, over a
    predicted ladder that climbs ×1.5 until the SLO is missed, then bisects), and the ladder."""
    from vprof.analysis.plan import plan

    def met(summary: dict[str, Any]) -> bool:
        answer = plan([summary], target_rps=1.0, slo=slo).profiles[0]
        return bool(answer.levels and answer.levels[0].passed)

    # what the server sustains: arrivals are not held back by the load generator's users
    s = dataclasses.replace(s, shape=dataclasses.replace(s.shape, max_in_flight=UNCAPPED))
    rate = start_rps or _start_rate(config)
    levels: list[dict[str, Any]] = []
    passed: dict[float, bool] = {}

    def level(r: float) -> bool:
        summary = predict(
            config, s.at_rate(r), slo=slo, rules=rules, label=label, model_path=model_path
        ).summary
        levels.append(summary)
        passed[r] = met(summary)
        return passed[r]

    if level(rate):
        while len(levels) < MAX_LEVELS and level(rate * GROWTH):
            rate *= GROWTH
    else:
        while len(levels) < MAX_LEVELS and rate > 1e-3 and not level(rate / GROWTH):
            rate /= GROWTH
    while len(levels) < MAX_LEVELS:
        ok = [r for r, v in passed.items() if v]
        bad = [r for r, v in passed.items() if not v]
        if not ok or not bad:
            break
        lo = max(ok)
        hi = min(r for r in bad if r > lo) if any(r > lo for r in bad) else None
        if hi is None or hi / lo <= 1 + RESOLUTION:
            break
        level(math.sqrt(lo * hi))
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
