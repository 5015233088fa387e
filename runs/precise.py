"""Repeat until precise: ``vprof bench A B --precision 5%`` without ``--alternate``.

Runs the bench with two repeats, then adds one repeat round at a time (A B A B …, resuming what
completed) until every headline metric's 95 % interval against the baseline is within the
target, or the next round would not fit in the time budget. The comparison is compare's own:
paired over interleaved repeats, Welch otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vprof.common.errors import RunError
from vprof.runs.bench import run_bench
from vprof.runs.spec import BenchSpec, Progress, RunOutcome

if TYPE_CHECKING:
    from vprof.registry import Profile

DEFAULT_BUDGET_S = 600.0
MAX_REPEATS = 100


def half_widths(frame: Any, metrics: Sequence[str]) -> dict[str, float]:
    """Each metric's widest 95 % half-width (%) over the rows of a comparison frame (NaN when
    a row has no interval)."""
    out: dict[str, float] = {}
    for row in frame.to_dict("records"):
        metric = str(row["metric"])
        if not any(metric == m or metric.startswith(m.removesuffix("_ms")) for m in metrics):
            continue
        diff, low, high = row["diff_pct"], row["ci_low_pct"], row["ci_high_pct"]
        width = (
            max(high - diff, diff - low) if math.isfinite(low) and math.isfinite(high) else math.nan
        )
        out[metric] = max(out.get(metric, -math.inf), width) if math.isfinite(width) else math.nan
    return out


def repeat_until_precise(
    profiles: Sequence[Profile],
    spec: BenchSpec,
    say: Progress = print,
    *,
    precision_pct: float | None,
    budget_s: float | None,
    metrics: Sequence[str] = (),
) -> list[RunOutcome]:
    """Add repeat rounds until every headline metric is within ``precision_pct`` (or the
    budget runs out); the outcomes of the last bench (every repeat so far)."""
    from vprof.analysis.alternation import HEADLINE_METRICS
    from vprof.analysis.compare import compare

    if len(profiles) < 2:
        raise RunError(
            "--precision judges a comparison: give two or more profiles", key="--precision"
        )
    metrics = tuple(metrics) or HEADLINE_METRICS
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET_S
    started = time.monotonic()
    repeat = max(2, spec.repeat)
    while True:
        outcomes = run_bench(profiles, replace(spec, repeat=repeat), say)
        runs = [o.run.path for o in outcomes if o.finished]
        elapsed = time.monotonic() - started
        if len(runs) < 2 * len(profiles) or not all(o.finished for o in outcomes):
            say("not every repeat completed: stopping the repeats here")
            return outcomes
        widths = half_widths(compare(runs, metrics=metrics), metrics)
        shown = ", ".join(f"{k} ±{v:.1f} %" for k, v in widths.items())
        say(f"after {repeat} repeats ({elapsed:.0f} s): {shown}")
        if (
            precision_pct is not None
            and widths
            and all(v <= precision_pct for v in widths.values())
        ):
            say(f"every headline metric within ±{precision_pct:g} %: done")
            return outcomes
        per_round = elapsed / repeat
        if elapsed + per_round > budget or repeat >= MAX_REPEATS:
            say(
                f"the time budget ({budget:g} s) leaves no room for another round"
                + (f": not every metric reached ±{precision_pct:g} %" if precision_pct else "")
            )
            return outcomes
        repeat += 1
