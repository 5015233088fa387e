"""Runs side by side: is the difference from the baseline real, or noise?

Runs are compared as *groups*: the repeats of one configuration (``vprof bench --repeat N``)
form one group. Two kinds of interval answer two different questions:

- **two or more runs on each side** — a Welch t-interval over the per-run values of each
  statistic (on a log scale, so the difference reads as a ratio). Each run's value carries both
  its request noise and the run-to-run variation, so the interval says whether the next runs
  will agree; a difference is *significant* when the 95 % interval excludes zero, the p-value
  still passes once adjusted over the metrics judged with it (:func:`_judge_family`), and the
  interval does not lie wholly within ±``NEGLIGIBLE_PCT`` (then it is real but negligible). A
  statistic whose repeats disagree by more than ``UNSTABLE_RATIO`` (a median that flips
  between two modes, say) is flagged as unstable instead of compared.
- **one run on a side** — a request bootstrap inside each run (``vprof.analysis.bootstrap``).
  It measures request noise only, so nothing is called significant.

Runs whose load generator was the bottleneck are suspect: their differences are not judged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vprof.analysis import designs
from vprof.analysis.alternation import (
    SLICE_METRICS,
    alternation,
    blocks_interval,
    is_alternating,
    paired_blocks,
    side_views,
)
from vprof.analysis.bootstrap import STAT, all_bootstraps, sized_bootstraps
from vprof.analysis.keys import BOTTLENECK, CLIENT_FIX, Metric, client_limit, stat_key
from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.run import Run, damage, display_names, load_run, summarize_loaded
from vprof.analysis.summary import BACKED_OFF, HELD_BACK
from vprof.common.errors import RunError
from vprof.common.suggest import suggestion
from vprof.records.hardware import hardware_summary

# What compare judges by default: what every slice of an alternating run measures too.
DEFAULT_METRICS = SLICE_METRICS
_LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2el": "E2E latency",
    "ttft_from_schedule": "TTFT from schedule",
    "e2el_from_schedule": "E2E latency from schedule",
}
_HIGHER_IS_BETTER = ("throughput", "goodput", "cache_hit")
CONFIDENCE = 0.95
# Resamples for the one-run-a-side (request noise) interval when a count is asked for; its
# Monte-Carlo error at 95 % is small next to what it measures, and it is never a verdict.
DEFAULT_N_BOOT = 1000
# Without a count, as many resamples as put each end of every such interval within this
# Monte-Carlo standard error (percentage points; intervals print with one decimal).
DEFAULT_PRECISION_PCT = 0.2
# Repeats of one configuration whose values differ by more than this factor do not measure one
# thing: the statistic is unstable (bimodal), and a % change of it would be noise.
UNSTABLE_RATIO = 3.0
# a repeat (--r2, …) or the second phase of a swapped alternating run (--p2)
_REPEAT_SUFFIX = re.compile(r"--[rp]\d+$")

# The columns a terminal table shows (the verdict says better/worse and significance).
TABLE_COLUMNS = (
    "metric",
    "baseline_value",
    "run",
    "value",
    "diff_pct",
    "ci_low_pct",
    "ci_high_pct",
    "detectable_pct",
    "outcome",
)
METHOD_RUNS = "Welch t over per-run values"
METHOD_PAIRED = "paired t over interleaved repeats"
METHOD_SLICES = "paired t over alternating slices"
METHOD_REQUESTS = "request bootstrap within one run (request noise only)"
# A difference whose whole 95 % interval lies within ±this is real but negligible: exact
# timing (the emulator, a quiet GPU over many slices) resolves offsets of 0.1 % that no setting
# is chosen by. Called "no meaningful difference", like criterion's noise threshold.
NEGLIGIBLE_PCT = 1.0

# A design that could not have seen a change this large (%) has too few runs or slices; its
# own figure (a t quantile over one degree of freedom, say) would read as noise.
DETECTABLE_CAP_PCT = 1000.0

# Methods whose intervals include the variation between runs: only they can be significant.
VERDICT_METHODS = (METHOD_RUNS, METHOD_PAIRED, METHOD_SLICES)


# A held-back run's medians are judged only while its loop's median lag stays this small.
MEDIAN_LAG_LIMIT_MS = 1.0


@dataclass(frozen=True)
class Group:
    """The runs of one side of a comparison (the repeats of one configuration)."""

    label: str
    runs: tuple[Run, ...]
    summaries: tuple[dict[str, Any], ...]
    # sides of one alternating run: one client loaded every side in turn, so a client held
    # back by the machine delayed each side's slices alike and a paired difference cancels
    # it; only a client that could not send the load asked for is suspect
    shared_client: bool = False

    @property
    def suspect(self) -> list[str]:
        """Runs of this group whose load generator was the bottleneck."""
        return [str(s.get(K.RUN)) for s in self.summaries if client_limited(s)]

    @property
    def damage(self) -> list[str]:
        """Runs of this group read from a damaged records file, and how much was readable."""
        return damage(self.summaries)

    def suspect_for(self, metric: str) -> list[str]:
        """Runs whose client makes ``metric`` untrustworthy. A run only held back by the
        machine (a loop at a few % CPU that now and then waited for a core) stamped a few
        chunks late: its tails and throughput carry that, its medians do not."""
        if self.shared_client:
            return [str(s.get(K.RUN)) for s in self.summaries if _short_of_load(s)]
        if not metric.startswith("median_"):
            return self.suspect
        return [
            str(s.get(K.RUN)) for s in self.summaries if client_limited(s) and not _medians_ok(s)
        ]


def _medians_ok(summary: dict[str, Any]) -> bool:
    """Only held back by the machine, with the loop's median lag (when known) under the limit."""
    lag_p50 = summary.get(K.LOADGEN_LOOP_LAG_P50_MS)
    return (
        set(summary.get(K.CLIENT_LIMITED_BY) or ()) == {HELD_BACK}
        and lag_p50 is not None
        and lag_p50 <= MEDIAN_LAG_LIMIT_MS
    )


def _short_of_load(summary: dict[str, Any]) -> bool:
    """The client fell short of the load itself (its loop fell behind, users or the in-flight
    cap not kept), not merely held back by other processes."""
    reasons = set(summary.get(K.CLIENT_LIMITED_BY) or ()) - {HELD_BACK}
    behind = summary.get(K.LOADGEN_SATURATED) and not summary.get(K.LOADGEN_STARVED)
    return bool(reasons or behind)


def backed_off(summary: dict[str, Any]) -> bool:
    """The run fell short of its users only because the server failed requests (its users
    back off after a failure), not through its load generator."""
    reasons = summary.get(K.CLIENT_LIMITED_BY) or ()
    return bool(reasons) and all(str(r).startswith(BACKED_OFF) for r in reasons)


def client_limited(summary: dict[str, Any]) -> bool:
    """True when a run's numbers may be the client's, not the server's."""
    return bool(summary.get(K.CLIENT_LIMITED) or summary.get(K.LOADGEN_SATURATED))


def cell_key(path: Path) -> tuple[str, str]:
    """Run folders that are repeats of one configuration share this: their bench folder and
    their name without the ``--rN`` repeat suffix."""
    path = Path(path)
    return str(path.parent), _REPEAT_SUFFIX.sub("", path.name)


def group_runs(runs: Sequence[Run]) -> list[list[Run]]:
    """Repeats together, in the order their first run was given (a run given twice is
    compared with itself, not pooled with itself)."""
    groups: list[list[Run]] = []
    for run in runs:
        home = next(
            (
                g
                for g in groups
                if cell_key(g[0].path) == cell_key(run.path) and run.path not in {r.path for r in g}
            ),
            None,
        )
        if home is None:
            groups.append([run])
        else:
            home.append(run)
    return groups


def repeat_of(run: Run) -> int:
    """Which repeat a run folder holds (its ``--rN`` suffix; none: the first)."""
    match = _REPEAT_SUFFIX.search(run.path.name)
    return int(match.group(0)[3:]) if match else 1


def _labels(groups: Sequence[Sequence[Run]], summaries: Sequence[Sequence[dict]]) -> list[str]:
    """Each group's name; groups of one configuration are told apart by their repeats."""
    cells = [cell_key(g[0].path) for g in groups]
    if len(set(cells)) == len(cells):
        return display_names([s[0] for s in summaries])
    names = [
        f"{s[0].get(K.PROFILE) or cell[1]} (r{', r'.join(str(repeat_of(r)) for r in g)})"
        for g, s, cell in zip(groups, summaries, cells, strict=True)
    ]
    if len(set(names)) == len(names):
        return names
    return [f"{name}#{i + 1}" for i, name in enumerate(names)]


@dataclass
class Rows:
    """A comparison's rows (one dict per metric and group, as built) and ``attrs`` (notes,
    warnings, n_boot): what :func:`compare` returns as a DataFrame, without pandas."""

    rows: list[dict[str, Any]]
    attrs: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """The rows as ``DataFrame(rows).to_dict("records")`` gives them: every column in
        every row (NaN where a row has none), a column of numbers that holds a float or a gap
        all floats, numpy scalars as Python's."""
        columns: dict[str, list[Any]] = {}
        for i, row in enumerate(self.rows):
            for key in row:
                columns.setdefault(key, [math.nan] * i)
            for key, values in columns.items():
                values.append(row.get(key, math.nan))
        if not columns:
            return [{} for _ in self.rows]
        return [
            dict(zip(columns, values, strict=True))
            for values in zip(*(_column(v) for v in columns.values()), strict=True)
        ]

    def frame(self) -> Any:
        """The rows as a pandas DataFrame, ``attrs`` attached."""
        import pandas as pd

        frame = pd.DataFrame(self.rows)
        frame.attrs.update(self.attrs)
        return frame


def _column(values: list[Any]) -> list[Any]:
    """One column's values as pandas infers and boxes them (see :meth:`Rows.records`):
    numbers with a float or a gap become floats, text with gaps holds NaN for None."""
    plain = [v.item() if hasattr(v, "item") and hasattr(v, "dtype") else v for v in values]
    given = [v for v in plain if v is not None]
    if not given:
        return plain
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in given):
        if len(given) < len(plain) or any(isinstance(v, float) for v in given):
            return [math.nan if v is None else float(v) for v in plain]
        return plain
    gap = [isinstance(v, float) and math.isnan(v) for v in given]
    if all(isinstance(v, str) or g for v, g in zip(given, gap, strict=True)) and not all(gap):
        return [math.nan if v is None else v for v in plain]
    return plain


def compare(
    runs: Sequence[str | Path | Run] | Sequence[Sequence[str | Path | Run]], **options: Any
) -> Any:
    """Compare groups of runs with the first group as baseline; one row per (metric, group),
    as a pandas DataFrame (``options``: :func:`comparison`'s keywords, described below).

    ``runs`` is a list of runs (repeats of one configuration are grouped, see
    :func:`group_runs`) or a list of explicit groups (lists of runs). Columns: ``metric``,
    ``baseline``, ``baseline_value``, ``run``, ``value``, ``diff_pct``, ``ci_low_pct``,
    ``ci_high_pct``, ``detectable_pct`` (the smallest change the design would have found with
    80 % power, at 5 % over the family's size; NaN with one run a side), ``p_value`` and
    ``p_adjusted`` (its p-value alone and adjusted over the metrics judged with it; NaN for a
    row not judged), ``runs`` (how many on each side), ``method`` (the design: paired t over
    interleaved repeats, Welch t, or a request bootstrap), ``significant``, ``stable``,
    ``suspect``, ``better``, a plain ``verdict`` and ``warnings`` (the damaged runs on either
    side, see :func:`vprof.analysis.run.damage`);
    with ``detect`` (a shift in %) also ``power_pct``, the power at that shift. The frame's
    ``attrs["notes"]`` says what the reader must know (different workloads, say), and
    ``attrs["warnings"]`` every damaged run compared.
    ``summaries`` (by run path) are reused instead of summarising those runs again.
    One-run-a-side intervals draw ``n_boot`` request resamples, or without it as many as put
    each end within ``precision_pct`` percentage points (Monte-Carlo error);
    ``attrs["n_boot"]`` says how many were drawn.

    Example:
        >>> compare(["runs/baseline", "runs/chunked-256"])  # doctest: +SKIP
    """
    return comparison(runs, **options).frame()


def comparison(
    runs: Sequence[str | Path | Run] | Sequence[Sequence[str | Path | Run]],
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_boot: int | None = None,
    seed: int = 0,
    slo: str | None = None,
    summaries: Mapping[Path, dict[str, Any]] | None = None,
    detect: float | None = None,
    precision_pct: float = DEFAULT_PRECISION_PCT,
) -> Rows:
    """:func:`compare`'s rows and notes without pandas (the report reads them as they are);
    its parameters are described there."""
    if not (isinstance(precision_pct, (int, float)) and 0 < precision_pct < math.inf):
        raise RunError(
            f"the bootstrap's precision must be a positive number, got {precision_pct!r}"
        )
    metrics = list(dict.fromkeys(metrics))  # a metric named twice is one member of the family
    explicit = bool(runs) and all(isinstance(r, (list, tuple)) for r in runs)
    flat = [_load(r) for group in runs for r in group] if explicit else [_load(r) for r in runs]  # type: ignore[union-attr]
    if any(is_alternating(r) for r in flat):
        return _compare_alternating(flat, metrics, slo, detect)
    groups = _load_groups(flat if not explicit else runs, slo, summaries or {})
    if len(groups) < 2:
        raise RunError(
            "compare needs at least two runs or groups (the first is the baseline)",
            hint="pass the runs of two configurations, or two groups separated by `vs`",
        )
    open_loop = all(s.get(K.OPEN_LOOP) for g in groups for s in g.summaries)
    if open_loop:
        metrics = [from_schedule(m) for m in metrics]
    _check_metrics(metrics, groups)
    boots, drawn = _bootstraps(groups, metrics, n_boot, seed, precision_pct)
    base = groups[0]
    families = []
    for i, other in enumerate(groups[1:], start=1):
        if min(len(base.runs), len(other.runs)) >= 2:
            family = [_between_runs(metric, base, other) for metric in metrics]
        else:
            family = [
                _within_run(metric, base, other, boots[0].get(metric), boots[i].get(metric))
                for metric in metrics
            ]
        families.append(_judge_family(family, base, other, detect))
    frame = Rows(_metric_major(families))
    frame.attrs["notes"] = _notes(groups) + _family_note(families)
    frame.attrs["warnings"] = [line for g in groups for line in g.damage]
    frame.attrs["n_boot"] = drawn
    if open_loop:
        frame.attrs["notes"].append(
            "open loop: TTFT and E2E latency are measured from each request's intended send "
            "time (the *_from_schedule_ms metrics), so a client that held requests back cannot "
            "hide the wait"
        )
    return frame


def _compare_alternating(
    phases: Sequence[Run], metrics: Sequence[str], slo: str | None, detect: float | None
) -> Rows:
    """Sides of one alternating run (its phases): a paired t over the blocks' differences."""
    if not all(is_alternating(r) for r in phases):
        raise RunError(
            "an alternating run cannot be compared with ordinary runs",
            hint="compare an alternating run on its own: its sides are the groups",
        )
    if len({cell_key(r.path) for r in phases}) > 1:
        raise RunError(
            "these are several alternating runs: compare one at a time (with its --p2 phase)",
            hint="vprof compare OUT/alt--… ",
        )
    views = [side_views(r) for r in phases]
    names = [v.profile for v in views[0]]
    groups = []
    for name in names:
        runs = tuple(phase[[v.profile for v in phase].index(name)] for phase in views)
        summaries = tuple(summarize_loaded(r, slo=slo) for r in runs)
        groups.append(Group(name, runs, summaries, shared_client=True))
    open_loop = all(s.get(K.OPEN_LOOP) for g in groups for s in g.summaries)
    if open_loop:
        metrics = [from_schedule(m) for m in metrics]
    order, blocks = paired_blocks(phases, metrics)
    base = groups[0]
    families = []
    for other in groups[1:]:
        family = []
        for metric in metrics:
            interval, n = blocks_interval(blocks, base.label, other.label, metric)
            row = _row(metric, base, other, method=METHOD_SLICES)
            row["runs"] = f"{n} blocks"
            row["evidence"] = f"{n} paired slices"
            if interval is None:
                row["missing"] = True
            else:
                row.update(interval_fields(interval))
            family.append(row)
        families.append(_judge_family(family, base, other, detect))
    frame = Rows(_metric_major(families))
    frame.attrs["warnings"] = [line for g in groups for line in g.damage]
    alt = alternation(phases[0])
    assert alt is not None
    swapped = " (the servers swapped profiles halfway)" if len(phases) > 1 else ""
    frame.attrs["notes"] = [
        f"alternating slices: {len(blocks)} blocks of {' / '.join(order)} "
        f"({alt.schedule.slice_s:g} s slices, the first {alt.schedule.warmup_s:g} s of each "
        f"not measured, ABBA order){swapped}; each interval is over the blocks' paired "
        "differences, so drift and host state shared within a block cancel"
    ]
    if len(phases) == 1:
        frame.attrs["notes"].append(
            "the servers did not swap profiles: each verdict compares these server instances, "
            "and an offset of one instance (two copies of one profile on one GPU differed by "
            "8-10 %) would read as the profiles' difference (--swap measures it away)"
        )
    if len(blocks) < 2:
        frame.attrs["notes"].append("fewer than two whole blocks: no interval")
    frame.attrs["notes"] += _family_note(families) + host_notes(groups, paired=True)
    return frame


def from_schedule(metric: str) -> str:
    """``p95_ttft_ms`` → ``p95_ttft_from_schedule_ms`` (TTFT and E2E only)."""
    match = STAT.match(metric)
    if match and match["metric"] in ("ttft", "e2el"):
        return stat_key(match["stat"], Metric(f"{match['metric']}_from_schedule"))
    return metric


def _load_groups(
    runs: Sequence[Any], slo: str | None, known: Mapping[Path, dict[str, Any]]
) -> list[Group]:
    explicit = bool(runs) and all(isinstance(r, (list, tuple)) for r in runs)
    loaded: list[list[Run]]
    if explicit:
        loaded = [[_load(r) for r in group] for group in runs]
    else:
        loaded = group_runs([_load(r) for r in runs])
    if any(not group for group in loaded):
        raise RunError("a group of runs to compare is empty")
    summaries = [
        [known[r.path] if r.path in known else summarize_loaded(r, slo=slo) for r in group]
        for group in loaded
    ]
    labels = _labels(loaded, summaries)
    return [
        Group(label, tuple(g), tuple(s))
        for label, g, s in zip(labels, loaded, summaries, strict=True)
    ]


def _check_metrics(metrics: Sequence[str], groups: Sequence[Group]) -> None:
    """A metric no summary has is a typo: name the keys that can be compared."""

    known = {
        k
        for g in groups
        for s in g.summaries
        for k, v in s.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    for metric in metrics:
        if metric not in known:
            hint = suggestion(
                metric, sorted(known), "e.g. p95_ttft_ms, median_itl_ms, request_throughput"
            )
            raise RunError(f"no summary has a number named {metric!r}", key="--metric", hint=hint)


def _load(run: str | Path | Run) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def _bootstraps(
    groups: list[Group], metrics: Sequence[str], n_boot: int | None, seed: int, precision: float
) -> tuple[list[dict], int]:
    """Request-bootstrap distributions of each group's first run, when some side has one run,
    and how many resamples each holds (``n_boot``, else sized by ``precision``)."""
    if all(len(g.runs) >= 2 for g in groups):
        return [{} for _ in groups], 0
    from vprof.analysis.summary import masks

    columns = []
    for group in groups:
        run = group.runs[0]
        cols = run.columns
        _, ok, _ = masks(cols, run.warmup_until)
        columns.append((cols, ok))
    if n_boot is None:
        return sized_bootstraps(columns, metrics, precision, seed)
    return all_bootstraps(columns, metrics, n_boot, seed), n_boot


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _values(group: Group, metric: str) -> list[float]:
    return [v for s in group.summaries if math.isfinite(v := _number(s.get(metric)))]


def _spread_ok(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    if len(positive) < 2:
        return True
    return max(positive) / min(positive) <= UNSTABLE_RATIO


def _between_runs(metric: str, base: Group, other: Group) -> dict[str, Any]:
    """Per-run values of each side: paired by repeat when the runs were made in A B A B
    order (slow drift cancels within a pair), else Welch's t over independent values."""
    pairs = _repeat_pairs(metric, base, other)
    if pairs is not None:
        a, b = pairs
        row = _row(metric, base, other, method=METHOD_PAIRED)
        row["evidence"] = f"{len(a)} interleaved pairs of runs"
        interval = designs.paired(a, b)
    else:
        a, b = _values(base, metric), _values(other, metric)
        row = _row(metric, base, other, method=METHOD_RUNS)
        row["evidence"] = f"{len(a)} vs {len(b)} runs"
        interval = designs.welch(a, b)
    if interval is None:
        return {**row, "missing": True}
    row["stable"] = _spread_ok(a) and _spread_ok(b)
    row["spread"] = (min(a), max(a), min(b), max(b))
    return {**row, **interval_fields(interval)}


def interval_fields(interval: designs.Interval) -> dict[str, Any]:
    """A comparison row's numbers from an interval (its design's own columns)."""
    return {
        "baseline_value": interval.base_value,
        "value": interval.value,
        "diff_pct": interval.diff_pct,
        "ci_low_pct": interval.low_pct,
        "ci_high_pct": interval.high_pct,
        "detectable_pct": interval.detectable_pct,
        "has_ci": True,
        "interval": interval,
    }


def _repeat_pairs(metric: str, base: Group, other: Group) -> tuple[list[float], list[float]] | None:
    """The two sides' values paired by repeat, when both were run interleaved in one bench
    (A1 B1 A2 B2 …) and every repeat has a value on both sides; else ``None``."""
    sides = []
    for group in (base, other):
        by_repeat: dict[int, float] = {}
        for run, summary in zip(group.runs, group.summaries, strict=True):
            if run.meta.get("order") != "interleaved":
                return None
            value = _number(summary.get(metric))
            if not math.isfinite(value):
                return None
            by_repeat[repeat_of(run)] = value
        if len(by_repeat) != len(group.runs):
            return None
        sides.append(by_repeat)
    if set(sides[0]) != set(sides[1]) or len(sides[0]) < 2:
        return None
    if {r.path.parent for r in base.runs} != {r.path.parent for r in other.runs}:
        return None  # pairs are runs made beside each other, in one bench
    order = sorted(sides[0])
    return [sides[0][r] for r in order], [sides[1][r] for r in order]


def _within_run(
    metric: str, base: Group, other: Group, base_boot: Any, boot: Any
) -> dict[str, Any]:
    """One run a side: the difference of their values, with a request-noise interval."""
    import numpy as np

    row = _row(metric, base, other, method=METHOD_REQUESTS)
    base_value = _number(base.summaries[0].get(metric))
    value = _number(other.summaries[0].get(metric))
    diff = (value - base_value) / base_value * 100.0 if base_value else math.nan
    row.update(baseline_value=base_value, value=value, diff_pct=diff)
    if base_boot is None or boot is None:
        return row
    with np.errstate(divide="ignore", invalid="ignore"):
        diffs = (boot - base_boot) / base_boot * 100.0
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size:
        low, high = (float(v) for v in np.percentile(diffs, [2.5, 97.5]))
        row.update(ci_low_pct=low, ci_high_pct=high, has_ci=True)
        row["stable"] = all(_boot_spread_ok(x) for x in (base_boot, boot))
    return row


def _boot_spread_ok(boot: Any) -> bool:
    """A statistic whose own 95 % request interval spans more than UNSTABLE_RATIO is bimodal
    or too thin to stand for the run."""
    import numpy as np

    finite = boot[np.isfinite(boot)]
    if not finite.size:
        return True
    low, high = np.percentile(finite, [2.5, 97.5])
    return not (low > 0 and high / low > UNSTABLE_RATIO)


def _row(metric: str, base: Group, other: Group, *, method: str) -> dict[str, Any]:
    return {
        "metric": metric,
        "baseline": base.label,
        "baseline_value": math.nan,
        "run": other.label,
        "value": math.nan,
        "diff_pct": math.nan,
        "ci_low_pct": math.nan,
        "ci_high_pct": math.nan,
        "detectable_pct": math.nan,
        "p_value": math.nan,
        "p_adjusted": math.nan,
        "runs": f"{len(base.runs)} vs {len(other.runs)}",
        "method": method,
        "stable": True,
        "has_ci": False,
    }


def _label(metric: str) -> str:
    match = STAT.match(metric)
    if not match:
        return metric.replace("_", " ")
    return f"{match['stat']} {_LABELS[match['metric']]}"


def _fmt(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _fmt_value(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _judge_family(
    rows: list[dict[str, Any]], base: Group, other: Group, detect: float | None
) -> list[dict[str, Any]]:
    """Judge one group's rows against the baseline as one family: the p-values of the metrics
    that can be judged are adjusted together (Benjamini–Hochberg), so twelve metrics of an A/A
    share one 5 % chance of any "difference" instead of having twelve."""
    judged = [i for i, row in enumerate(rows) if _judgeable(row, base, other)]
    adjusted = designs.benjamini_hochberg([rows[i]["interval"].p_value for i in judged])
    p_adjusted = dict(zip(judged, adjusted, strict=True))
    return [
        {
            **_judge(row, base, other, detect, p_adjusted.get(i), len(judged)),
            "warnings": base.damage + other.damage,
        }
        for i, row in enumerate(rows)
    ]


def _judgeable(row: dict[str, Any], base: Group, other: Group) -> bool:
    """A row whose interval can be a verdict: a design over runs or slices, stable values and
    a client that kept up."""
    metric = row["metric"]
    return (
        row["method"] in VERDICT_METHODS
        and row.get("interval") is not None
        and row["value"] != row["baseline_value"]  # identical can never be called different
        and row["stable"]
        and not row.get("missing")
        and not (base.suspect_for(metric) or other.suspect_for(metric))
    )


def _metric_major(families: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each group's family of rows, interleaved as the table reads: metric by metric."""
    return [row for rows in zip(*families, strict=True) for row in rows]


def _family_note(families: list[list[dict[str, Any]]]) -> list[str]:
    sizes = {sum(math.isfinite(row["p_adjusted"]) for row in rows) for rows in families}
    if max(sizes, default=0) < 2:
        return []
    judged = "/".join(str(n) for n in sorted(sizes))
    return [
        f"{judged} metrics judged together (Benjamini–Hochberg): identical configurations "
        f"show a difference in any of them {designs.ALPHA * 100:g} % of the time, not that much "
        "in each; a change in one metric alone must be larger to be found (its detectable ±); "
        "judge fewer (--metric) to see smaller changes in those"
    ]


def _judge(
    row: dict[str, Any],
    base: Group,
    other: Group,
    detect: float | None = None,
    p_adjusted: float | None = None,
    family: int = 1,
) -> dict[str, Any]:
    """Significance, direction, what the design could have seen, and the one-sentence
    verdict. ``detect``: a shift (%) whose power is reported too (``power_pct``).
    ``p_adjusted``: the row's p-value adjusted over the ``family`` judged with it
    (Benjamini–Hochberg; ``None``: the row is not judgeable)."""
    metric, name = row["metric"], other.label
    label = _label(metric)
    diff, low, high = row["diff_pct"], row["ci_low_pct"], row["ci_high_pct"]
    by_runs = row["method"] in VERDICT_METHODS
    suspect = base.suspect_for(metric) + other.suspect_for(metric)
    has_ci = row.pop("has_ci")
    spread = row.pop("spread", None)
    missing = row.pop("missing", False)
    found: designs.Interval | None = row.pop("interval", None)
    evidence = row.pop("evidence", None) or f"{row['runs']} runs"
    excludes_zero = by_runs and has_ci and row["stable"] and not suspect and (low > 0 or high < 0)
    negligible = excludes_zero and max(abs(low), abs(high)) < NEGLIGIBLE_PCT
    # A change in one metric alone must clear α over the family's size: what the design could
    # have seen, and its power, are stated at that level.
    alpha = designs.ALPHA / max(family, 1)
    rejected = True
    if p_adjusted is not None and found is not None:
        row["p_value"], row["p_adjusted"] = found.p_value, p_adjusted
        row["detectable_pct"] = found.detectable_at(alpha)
        rejected = p_adjusted <= designs.ALPHA
    significant = excludes_zero and not negligible and rejected
    if detect is not None:
        row["power_pct"] = found.power_at(detect, alpha) * 100.0 if found is not None else math.nan
    interval = f"[{low:+.1f} %, {high:+.1f} %]" if has_ci else ""
    if row["baseline_value"] == row["value"] and not missing:
        verdict, row["diff_pct"], outcome = f"{label}: identical", 0.0, "identical"
    elif missing or math.isnan(diff):
        lacking = name if math.isnan(row["value"]) or missing else f"baseline {base.label}"
        verdict = f"{label}: not comparable ({lacking} has no value, or the baseline is 0)"
        outcome = "not comparable"
    elif suspect and all(backed_off(s) for s in (*base.summaries, *other.summaries)
                         if str(s.get(K.RUN)) in suspect):  # fmt: skip
        verdict = (
            f"{label}: not judged — in {', '.join(suspect)} the server failed requests and "
            "their users backed off, so it saw less load than asked"
        )
        outcome = "not judged"
    elif suspect:
        limits = {
            client_limit(s)
            for s in (*base.summaries, *other.summaries)
            if str(s.get(K.RUN)) in suspect
        }
        what, fix = limits.pop() if len(limits) == 1 else (BOTTLENECK, CLIENT_FIX)
        verdict = f"{label}: not judged — {what} in {', '.join(suspect)} ({fix})"
        outcome = "not judged"
    elif not row["stable"]:
        outcome = "unstable"
        if spread:
            lo_a, hi_a, lo_b, hi_b = (_fmt_value(v) for v in spread)
            where = f"{lo_a}–{hi_a} in {base.label}, {lo_b}–{hi_b} in {name}"
            verdict = f"{label}: unstable between repeats ({where}): not compared"
        else:
            verdict = f"{label}: unstable within the run (its own interval spans ×3+): not compared"
    elif not by_runs:
        detail = f"{diff:+.1f} % {interval}".strip()
        verdict = (
            f"{label}: {detail} within one run each — request noise only, not a verdict "
            "(use --repeat 2 or more, or --alternate)"
        )
        outcome = "request noise"
    elif negligible:
        verdict = (
            f"{label}: no meaningful difference ({diff:+.1f} % {interval}, {evidence}: the whole "
            f"interval lies within ±{NEGLIGIBLE_PCT:g} %)"
        )
        outcome = "negligible"
    elif not significant:
        seen = _could_see(row, detect, family)
        if excludes_zero:  # its own interval excludes zero, the family's adjustment does not
            seen = (
                f"p {row['p_value']:.2g}, adjusted {row['p_adjusted']:.2g} over the {family} "
                f"metrics judged together; {seen}"
            )
        verdict = (
            f"{label}: no significant difference ({diff:+.1f} % {interval}, {evidence}; {seen})"
        )
        outcome = "not significant"
    else:
        outcome = "significant"  # better or worse, below
        direction = "lowers" if diff < 0 else "raises"
        a, b = sorted((abs(low), abs(high)))
        verdict = (
            f"{name} {direction} {label} by {_fmt(abs(diff))} % [{_fmt(a)} %, {_fmt(b)} %] "
            f"({evidence})"
        )
    higher_better = any(word in metric for word in _HIGHER_IS_BETTER)
    better = ""
    if significant and diff != 0:
        better = outcome = "better" if (diff > 0) == higher_better else "worse"
    return {
        **row,
        "significant": significant,
        "suspect": bool(suspect),
        "better": better,
        "outcome": outcome,
        "verdict": verdict,
    }


def _could_see(row: dict[str, Any], detect: float | None, family: int = 1) -> str:
    """What a design that found nothing could have found: the smallest change it detects with
    80 % power, and the power at ``detect`` when asked."""
    detectable = row["detectable_pct"]
    if not detectable < DETECTABLE_CAP_PCT:  # unbounded, or no bound at all (nan)
        return (
            f"could not have seen a change under ±{DETECTABLE_CAP_PCT:g} %: too few runs or slices"
        )
    seen = f"could not have seen a change under ±{_fmt(detectable)} %"
    if family > 1:
        seen += " in this metric alone"
    if detect is not None and math.isfinite(row.get("power_pct", math.nan)):
        seen += f"; power at ±{_fmt(detect)} %: {row['power_pct']:.0f} %"
    return seen


# Runs whose host worked this much slower (the probe's median) than the fastest run's host.
HOST_PACE_GAP_PCT = 15.0


# More than this share of a run with every task stalled on I/O is worth a note.
HOST_IO_STALL_LIMIT_PCT = 1.0


def host_notes(groups: Sequence[Group], paired: bool = False) -> list[str]:
    """Runs taken while the host was unsteady (host.jsonl), stalled on I/O, or at paces far
    apart."""
    notes = []
    summaries = [s for g in groups for s in g.summaries]
    unsteady = sorted({str(s.get(K.RUN)) for s in summaries if s.get(K.HOST_UNSTEADY)})
    if unsteady:
        spread = max(float(s.get(K.HOST_PACE_SPREAD_PCT) or 0) for s in summaries)
        tail = (
            ": alternating slices share the host's moments, so the paired differences cancel it"
            if paired
            else ": their differences may be the host's"
        )
        notes.append(
            f"the host was unsteady during {', '.join(unsteady)} (its pace spread up to "
            f"{spread:.0f} % within a run){tail}"
        )
    stalled = {
        str(s.get(K.RUN)): float(s[K.HOST_IO_STALL_PCT])
        for s in summaries
        if (s.get(K.HOST_IO_STALL_PCT) or 0) > HOST_IO_STALL_LIMIT_PCT
    }
    if stalled:
        worst = max(stalled, key=lambda k: stalled[k])
        notes.append(
            f"every process on the host was stalled on I/O for {stalled[worst]:.1f} % of "
            f"{worst}{' and others' if len(stalled) > 1 else ''} (/proc/pressure/io): "
            "latencies there include the host's stalls"
        )
    work = {str(s.get(K.RUN)): float(s[K.HOST_WORK_MS]) for s in summaries if s.get(K.HOST_WORK_MS)}
    if not paired and len(work) > 1:
        gap = (max(work.values()) / min(work.values()) - 1.0) * 100.0
        if gap > HOST_PACE_GAP_PCT:
            slow = max(work, key=lambda k: work[k])
            notes.append(
                f"the host ran {gap:.0f} % slower during {slow} than during the fastest run "
                "(host.jsonl): differences between runs include the host's"
            )
    return notes


def _notes(groups: Sequence[Group]) -> list[str]:
    """What a reader must know before trusting the table."""
    notes = []
    workloads = {str(s.get(K.WORKLOAD)) for g in groups for s in g.summaries}
    if len(workloads) > 1:
        notes.append(
            f"the runs used different workloads ({', '.join(sorted(workloads))}): "
            "their differences mix the workload with the profile"
        )
    traffics = {str(s.get(K.TRAFFIC)) for g in groups for s in g.summaries}
    if len(traffics) > 1:
        notes.append(f"the runs used different traffic shapes ({', '.join(sorted(traffics))})")
    notes += host_notes(groups)
    machines = {
        hardware_summary(run.meta["hardware"])[0]
        for g in groups
        for run in g.runs
        if isinstance(run.meta.get("hardware"), Mapping)
    }
    if len(machines) > 1:
        notes.append(
            f"the runs record different hardware ({'; '.join(sorted(machines))}): their "
            "differences mix the hardware with the profile"
        )
    if any(len(g.runs) < 2 for g in groups):
        notes.append(
            "one run on a side: intervals cover request noise only and nothing is called "
            "significant; run `vprof bench … --repeat 2` (or more) for verdicts"
        )
    return notes
