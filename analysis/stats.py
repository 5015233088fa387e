"""Numeric helpers shared by summaries and comparisons (numpy imported lazily).

Percentiles are numpy's default ``linear`` method, as ``vllm bench serve`` uses, so numbers
line up with it; key names follow its spelling (``p99``, ``p99.9``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99, 99.9)

# Above this many values a variance from sums (one pass, no temporaries) replaces np.std.
_LARGE = 4_000_000


def pct_key(q: float) -> str:
    """``99`` -> ``"p99"``, ``99.9`` -> ``"p99.9"`` (integer form when whole, like vllm)."""
    return f"p{int(q)}" if float(q).is_integer() else f"p{q:g}"


def describe(
    values: Any,
    name: str,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    *,
    overwrite: bool = False,
) -> dict[str, float]:
    """``mean_/median_/std_/pNN_<name>_ms`` of ``values``; NaN for an empty array.

    ``overwrite=True`` lets the percentile step reorder ``values`` in place (no copy), which
    matters for the tens of millions of pooled inter-token gaps of a large run.
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    out: dict[str, float] = {}
    n = x.size
    if n == 0:
        out[f"mean_{name}_ms"] = out[f"median_{name}_ms"] = out[f"std_{name}_ms"] = math.nan
        for q in percentiles:
            out[f"{pct_key(q)}_{name}_ms"] = math.nan
        return out
    if n > _LARGE:
        total = float(x.sum())
        mean = total / n
        # E[x²] − mean²: a single BLAS pass instead of np.std's temporaries; latencies are
        # positive with std of the order of the mean, so cancellation costs < 1e-12 relative.
        var = max(float(np.dot(x, x)) / n - mean * mean, 0.0)
        std = math.sqrt(var)
    else:
        mean = float(x.mean())
        std = float(x.std())
    qs = [50.0, *(float(q) for q in percentiles)]
    values_q = np.percentile(x, qs, overwrite_input=overwrite)
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = float(values_q[0])
    out[f"std_{name}_ms"] = std
    for q, v in zip(percentiles, values_q[1:], strict=True):
        out[f"{pct_key(q)}_{name}_ms"] = float(v)
    return out


def percentile(values: Any, q: float) -> float:
    """One numpy-linear percentile; NaN for an empty array."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if not x.size:
        return math.nan
    with np.errstate(invalid="ignore"):
        value = float(np.percentile(x, q))
    # Interpolating between two infinite values gives NaN; the percentile is unbounded.
    return math.inf if math.isnan(value) and np.isinf(x).any() else value
