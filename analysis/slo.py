"""Service-level objectives: ``ttft_p95=500ms,tpot_p95=50ms,errors=1%``.

Each latency entry sets a per-request threshold (a request is *good* when every threshold
holds; goodput counts good requests per second, as ``vllm bench serve --goodput`` does) and,
when it names a percentile, a distribution target (p95 of TTFT at or under 500 ms).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import VprofError

METRICS = ("ttft", "tpot", "itl", "e2el")
_ALIASES = {"e2e": "e2el", "latency": "e2el"}
_UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001, "µs": 0.001}
_EXAMPLE = "e.g. ttft_p95=500ms,tpot_p95=50ms,errors=1%"
_KEY = re.compile(r"^(?P<metric>[a-z0-9]+?)(?:_p(?P<pct>\d+(?:\.\d+)?))?$")
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"
_VALUE = re.compile(rf"^(?P<number>{_NUMBER})\s*(?P<unit>[a-zµ%]*)$")
_MAX_MS = 86_400_000.0  # a day: a latency objective beyond it is a slip of the unit
_DURATION_HINT = "write a number with its unit: ms, s or us, e.g. 500ms or 0.5s"


class SloError(VprofError):
    """An SLO specification that cannot be parsed."""


@dataclass(frozen=True)
class SloTarget:
    """One latency objective: ``metric`` at or under ``threshold_ms`` (at ``percentile``)."""

    metric: str  # ttft | tpot | itl | e2el
    threshold_ms: float
    percentile: float | None = None  # None: a per-request threshold only

    @property
    def key(self) -> str:
        return self.metric if self.percentile is None else f"{self.metric}_p{self.percentile:g}"


@dataclass(frozen=True)
class Slo:
    """A parsed SLO: latency targets plus an optional ceiling on the error rate."""

    targets: tuple[SloTarget, ...]
    max_error_rate: float | None = None
    text: str = ""

    def __str__(self) -> str:
        return self.text or ",".join(
            [f"{t.key}={t.threshold_ms:g}ms" for t in self.targets]
            + (
                [f"errors={self.max_error_rate * 100:.4g}%"]
                if self.max_error_rate is not None
                else []
            )
        )


def parse_slo(text: str) -> Slo:
    """Parse ``key=value`` pairs such as ``ttft_p95=500ms,tpot_p95=50ms,errors=1%``.

    Keys are ``ttft``, ``tpot``, ``itl`` or ``e2el`` with an optional ``_pNN`` percentile, or
    ``errors``. Units are said, never guessed: a latency is a positive number with ``ms``,
    ``s`` or ``us``; ``errors`` is a percentage with ``%`` (a bare ``0`` is allowed: no
    errors at all). A bare number is refused with the spelling to use. ITL targets are
    checked on the pooled distribution only and do not enter goodput (as in ``vllm bench
    serve``, whose goodput accepts ttft, tpot and e2el).

    Example:
        >>> parse_slo("ttft_p95=0.5s").targets[0].threshold_ms
        500.0
    """
    if not text or not text.strip():
        raise SloError("empty SLO", key="--slo", hint=_EXAMPLE)
    targets: list[SloTarget] = []
    max_error_rate: float | None = None
    seen: set[str] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise SloError(f"{part!r} is not key=value", key="--slo", hint=_EXAMPLE)
        key, _, value = (s.strip() for s in part.partition("="))
        key = key.lower()
        if key in seen:
            raise SloError(f"{key!r} is given twice", key="--slo", hint="give each key once")
        seen.add(key)
        if key in ("errors", K.ERROR_RATE):
            max_error_rate = _parse_rate(value, key)
            continue
        match = _KEY.match(key)
        metric = _ALIASES.get(match["metric"], match["metric"]) if match else key
        if not match or metric not in METRICS:
            raise SloError(
                f"unknown SLO key {key!r}",
                key="--slo",
                hint=f"use {', '.join(METRICS)} with an optional _pNN, or errors; {_EXAMPLE}",
            )
        percentile = float(match["pct"]) if match["pct"] is not None else None
        if percentile is not None and not 0 < percentile <= 100:
            raise SloError(f"{key!r}: percentile must be in (0, 100]", key="--slo", hint=_EXAMPLE)
        targets.append(SloTarget(metric, _parse_ms(value, key), percentile))
    if not targets and max_error_rate is None:
        raise SloError("no objectives given", key="--slo", hint=_EXAMPLE)
    return Slo(tuple(targets), max_error_rate, text.strip())


def _parse_ms(value: str, key: str) -> float:
    """A latency bound: a positive number with its unit, in milliseconds."""
    text = value.strip().lower()
    match = _VALUE.match(text)
    if not match:
        raise SloError(f"{key}={value!r} is not a duration", key="--slo", hint=_DURATION_HINT)
    number, unit = match["number"], match["unit"]
    if not unit:
        raise SloError(
            f"{key}={value!r} has no unit",
            key="--slo",
            hint=f"write {key}={number}ms or {key}={number}s",
        )
    if unit not in _UNITS_MS:
        raise SloError(f"{key}={value!r}: unknown unit {unit!r}", key="--slo", hint=_DURATION_HINT)
    ms = float(number) * _UNITS_MS[unit]
    if not math.isfinite(ms):  # 400 digits parse as float("inf")
        raise SloError(f"{key}={value!r} is not a finite duration", key="--slo")
    if ms <= 0:
        raise SloError(
            f"{key}={value!r}: a bound must be more than 0 (one of 0 or less is never met)",
            key="--slo",
        )
    if ms > _MAX_MS:
        raise SloError(f"{key}={value!r} is more than a day", key="--slo", hint=_DURATION_HINT)
    return ms


def _parse_rate(value: str, key: str) -> float:
    """An error-rate ceiling: a percentage with ``%`` (or a bare 0), as a fraction."""
    text = value.strip()
    match = _VALUE.match(text.lower())
    if not match or match["unit"] not in ("%", ""):
        raise SloError(f"{key}={value!r} is not a rate", key="--slo", hint="write e.g. 1%")
    number = float(match["number"])
    if not match["unit"] and number != 0:
        raise SloError(
            f"{key}={value!r} has no unit",
            key="--slo",
            hint=f"write a percentage: {key}={match['number']}%"
            + (f" (or {key}={number * 100:g}% if {number:g} is a fraction)" if number < 1 else ""),
        )
    if not 0.0 <= number <= 100.0:  # nan fails this too
        raise SloError(f"{key}={value!r} must be between 0 and 100 %", key="--slo")
    return number / 100.0
