"""What a report is asked for: the SLO, the target rate, headroom, prices, the comparison's
baseline and bootstrap; each checked once, here, before any run folder is read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vprof.common.errors import ReportError

DEFAULT_HEADROOM = 0.2  # as `vprof plan`


@dataclass(frozen=True)
class ReportOptions:
    """Options of one report; ``slo`` is the parsed :class:`vprof.analysis.Slo` or None."""

    slo: Any = None
    target_rps: float | None = None
    headroom: float = DEFAULT_HEADROOM
    gpu_hour_price: float | None = None
    baseline: str | None = None
    n_boot: int | None = None  # None: as many as compare's precision needs
    seed: int = 0
    title: str | None = None
    model: Any = None  # a vprof.forecast ForecastModel: predicted curves beside the runs

    def to_dict(self) -> dict[str, Any]:
        """The options as the report's data shows them (the SLO as text)."""
        return {
            "slo": str(self.slo) if self.slo is not None else None,
            "target_rps": self.target_rps,
            "headroom": self.headroom,
            "gpu_hour_price": self.gpu_hour_price,
            "baseline": self.baseline,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "model": self.model.path if self.model is not None else None,
        }


def _number(value: Any, flag: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ReportError(f"{value!r} is not a number", key=flag) from None
    if not math.isfinite(number):
        raise ReportError(f"{value!r} is not a finite number", key=flag)
    return number


def check_options(
    *,
    slo: Any = None,
    target_rps: float | None = None,
    headroom: float = DEFAULT_HEADROOM,
    gpu_hour_price: float | None = None,
    baseline: str | None = None,
    n_boot: int | None = None,
    seed: int = 0,
    title: str | None = None,
    model: str | None = None,
) -> ReportOptions:
    """Parse and range-check the options; raises :class:`ReportError` (or ``SloError``)."""
    from vprof.analysis import parse_slo

    parsed = parse_slo(slo) if isinstance(slo, str) else slo
    if target_rps is not None:
        target_rps = _number(target_rps, "--rps")
        if target_rps <= 0:
            raise ReportError(f"the target rate must be positive, got {target_rps:g}", key="--rps")
        if parsed is None:
            raise ReportError(
                "a target rate needs an SLO to plan replicas against",
                key="--rps",
                hint="add --slo, e.g. --slo ttft_p95=500ms",
            )
    headroom = _number(headroom, "--headroom")
    if not 0 <= headroom <= 10:
        raise ReportError(
            f"headroom must be between 0 and 10 (0.2 = 20 %), got {headroom:g}", key="--headroom"
        )
    if gpu_hour_price is not None:
        gpu_hour_price = _number(gpu_hour_price, "--gpu-hour-price")
        if gpu_hour_price <= 0:
            raise ReportError(
                f"the price of a GPU-hour must be positive, got {gpu_hour_price:g}",
                key="--gpu-hour-price",
            )
    if n_boot is not None and (
        isinstance(n_boot, bool) or not isinstance(n_boot, int) or not 0 <= n_boot <= 100_000
    ):
        raise ReportError(f"--n-boot must be a whole number from 0 to 100000, got {n_boot!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ReportError(f"--seed must be a whole number of 0 or more, got {seed!r}")
    fitted = None
    if model:
        from vprof.forecast.model import read_model

        fitted = read_model(model)  # a bad model file fails before any run is read
    return ReportOptions(
        model=fitted,
        slo=parsed,
        target_rps=target_rps,
        headroom=headroom,
        gpu_hour_price=gpu_hour_price,
        baseline=baseline or None,
        n_boot=n_boot,
        seed=seed,
        title=title or None,
    )
