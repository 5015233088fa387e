"""Intervals for a difference between two configurations, by the design that produced the data.

Two designs, one shape of answer (:class:`Interval`):

- :func:`welch` — independent measurements on each side (runs in blocked or shuffled order):
  Welch's t over the per-run values.
- :func:`paired` — measurements made in pairs close in time (interleaved repeats A B A B …,
  or alternating slices between two live servers): Student's t over the within-pair
  differences, so slow drift and host state shared by both members of a pair cancel.
- :func:`crossover` — pairs made in phases between which the servers swapped places
  (``bench --alternate --swap``): each phase's mean difference carries the server instances'
  offset with opposite signs, so the estimate is the mean of the phase means and the
  interval is built from the variation within phases (the offset cancels instead of
  widening the interval).

Both work on logs when every value is positive, so a difference reads as a ratio, and on the
values otherwise (shown as a share of the baseline's mean). Each interval also says the
smallest change the data would have detected with 80 % power (:attr:`Interval.detectable_pct`)
and the power at a given shift (:meth:`Interval.power_at`): a "no significant difference" is
only worth what it could have seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vprof.common.errors import RunError

CONFIDENCE = 0.95
ALPHA = 1.0 - CONFIDENCE  # the chance of calling a difference that is not there
POWER = 0.80
WELCH = "welch"
PAIRED = "paired"
CROSSOVER = "crossover"


def _t(q: float, df: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


@dataclass(frozen=True)
class Interval:
    """A difference (other − baseline) on the analysis scale, with its uncertainty."""

    design: str  # WELCH or PAIRED
    logs: bool  # True: ``diff`` is a difference of logs (a ratio); else of raw values
    diff: float
    se: float  # standard error of ``diff``
    df: float  # degrees of freedom of its t distribution
    base_value: float  # the baseline's centre (geometric mean on logs), for percentages
    value: float  # the other side's centre
    n: int  # pairs (paired) or the smaller side's count (welch)

    @property
    def half(self) -> float:
        """Half-width of the 95 % interval, on the analysis scale."""
        return _t(0.5 + CONFIDENCE / 2, self.df) * self.se if self.se > 0 else 0.0

    def pct(self, x: float) -> float:
        """A difference on the analysis scale as a percentage of the baseline."""
        if self.logs:
            return (math.exp(x) - 1.0) * 100.0
        return x * 100.0 / self.base_value if self.base_value else math.nan

    @property
    def diff_pct(self) -> float:
        return self.pct(self.diff)

    @property
    def low_pct(self) -> float:
        return self.pct(self.diff - self.half)

    @property
    def high_pct(self) -> float:
        return self.pct(self.diff + self.half)

    @property
    def half_width_pct(self) -> float:
        """The interval's half-width as a percentage (the larger side of a ratio's)."""
        return max(abs(self.high_pct - self.diff_pct), abs(self.diff_pct - self.low_pct))

    @property
    def significant(self) -> bool:
        return self.se > 0 and abs(self.diff) > self.half

    @property
    def p_value(self) -> float:
        """The two-sided chance of a difference at least this large when there is none."""
        from scipy.special import stdtr

        if not self.se > 0:
            return 0.0 if self.diff else 1.0
        return float(2.0 * stdtr(self.df, -abs(self.diff) / self.se))

    @property
    def detectable_pct(self) -> float:
        """The smallest change (either way, as a percentage) this design would have found with
        80 % power at 95 % confidence: (t₀.₉₇₅ + t₀.₈₀) × the standard error."""
        return self.detectable_at(ALPHA)

    def detectable_at(self, alpha: float) -> float:
        """:attr:`detectable_pct` for a test at level ``alpha`` (two-sided)."""
        if not self.se > 0:
            return 0.0
        shift = (_t(1.0 - alpha / 2, self.df) + _t(POWER, self.df)) * self.se
        return self.pct(shift) if self.logs else abs(self.pct(shift))

    def power_at(self, shift_pct: float, alpha: float = ALPHA) -> float:
        """The chance this design calls a true change of ``shift_pct`` % significant at level
        ``alpha`` (noncentral t)."""
        from scipy.stats import nct

        if not self.se > 0:
            return 1.0 if shift_pct else 0.0
        if self.logs:
            if shift_pct <= -100.0:
                return 1.0
            delta = math.log1p(shift_pct / 100.0)
        else:
            delta = shift_pct / 100.0 * self.base_value
        ncp = abs(delta) / self.se  # the test is two-sided: a shift either way is as visible
        crit = _t(1.0 - alpha / 2, self.df)
        wrong_way = float(nct.cdf(-crit, self.df, ncp))  # vanishing, and NaN far out
        return min(1.0, float(nct.sf(crit, self.df, ncp)) + (wrong_way if wrong_way > 0 else 0.0))


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini and Hochberg's adjustment of a family's p-values (scipy's): the members whose
    adjusted value is at most α are called different with an expected share of false calls
    among them of at most α. When nothing differs (an A/A) any call is a false one, so the
    chance of calling *any* member different stays at α; when a setting moves several metrics,
    each needs little more than it would alone."""
    if not p_values:
        return []
    from scipy.stats import false_discovery_control

    return [float(q) for q in false_discovery_control(list(p_values), method="bh")]


def _scale(values: Sequence[float], logs: bool) -> list[float]:
    return [math.log(v) for v in values] if logs else list(values)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _centre(xs: Sequence[float], logs: bool) -> float:
    return math.exp(_mean(xs)) if logs else _mean(xs)


def welch(a: Sequence[float], b: Sequence[float]) -> Interval | None:
    """Welch's t over independent values (two or more a side); ``None`` with fewer."""
    if len(a) < 2 or len(b) < 2:
        return None
    logs = all(v > 0 for v in [*a, *b])
    xa, xb = _scale(a, logs), _scale(b, logs)
    va, vb = _var(xa) / len(xa), _var(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se > 0:
        df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    else:
        df = float(len(xa) + len(xb) - 2)
    return Interval(
        WELCH,
        logs,
        _mean(xb) - _mean(xa),
        se,
        df,
        _centre(xa, logs),
        _centre(xb, logs),
        min(len(a), len(b)),
    )


def paired(a: Sequence[float], b: Sequence[float]) -> Interval | None:
    """Student's t over the differences ``b[i] − a[i]`` of values measured in pairs (two or
    more pairs; ``None`` with fewer)."""
    if len(a) != len(b):
        raise ValueError("paired values need as many on each side")
    if len(a) < 2:
        return None
    logs = all(v > 0 for v in [*a, *b])
    xa, xb = _scale(a, logs), _scale(b, logs)
    d = [y - x for x, y in zip(xa, xb, strict=True)]
    se = math.sqrt(_var(d) / len(d))
    return Interval(
        PAIRED, logs, _mean(d), se, float(len(d) - 1), _centre(xa, logs), _centre(xb, logs), len(d)
    )


def crossover(phases: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Interval | None:
    """Paired values in two or more phases (``(a, b)`` each, paired by position): the mean of
    the phases' mean differences, with a t over the pooled within-phase variation. ``None``
    unless every phase has two or more pairs."""
    if len(phases) < 2 or any(len(a) != len(b) or len(a) < 2 for a, b in phases):
        return None
    everything = [v for a, b in phases for v in (*a, *b)]
    logs = all(v > 0 for v in everything)
    diffs = [
        [y - x for x, y in zip(_scale(a, logs), _scale(b, logs), strict=True)] for a, b in phases
    ]
    means = [_mean(d) for d in diffs]
    residual = sum((x - m) ** 2 for d, m in zip(diffs, means, strict=True) for x in d)
    n = sum(len(d) for d in diffs)
    df = n - len(diffs)
    variance = residual / df
    se = math.sqrt(variance * sum(1 / len(d) for d in diffs)) / len(diffs)
    xa = [x for a, _ in phases for x in _scale(a, logs)]
    xb = [x for _, b in phases for x in _scale(b, logs)]
    return Interval(
        CROSSOVER, logs, _mean(means), se, float(df), _centre(xa, logs), _centre(xb, logs), n
    )


def parse_shift(text: str, key: str = "--detect") -> float:
    """``--detect 10%`` or ``--precision 5%`` (or ``10``) → 10.0; a clear error for anything
    else."""

    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise RunError(f"{text!r} is not a percentage", key=key, hint="e.g. 10%") from None
    if not math.isfinite(value) or not 0 < value < 1000:
        raise RunError(
            f"{text!r}: give a percentage above 0 and below 1000", key=key, hint="e.g. 10%"
        )
    return value
