"""A client's own timing error against a server whose timing is known exactly.

Each request brings the client's stamps (when it sent, when each content chunk arrived) and
the truth (how long after arriving the server sent its first token, and the gaps between its
chunks). The error is measured − truth: per request for TTFT, per gap for ITL. What the
server's truth is differs by source — the emulator's deadlines (``emulator.timing``), or the
moments its writes returned (``emulator.sendlog``, what ``vprof calibrate`` uses) — and the
maths here is the same for both (``benchmarks/loadgen_ceiling.py`` uses it too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Within bounds: the error is at most this at the median and at p99, either way (ms).
P50_BOUND_MS, P99_BOUND_MS = 1.0, 5.0


@dataclass(frozen=True)
class TimedRequest:
    """One request as the client saw it and as the server sent it.

    ``stamps`` are wall-clock seconds (the first chunk with content, then each next one);
    ``truth_gaps_ms`` are the server's gaps between chunks, or empty when every gap was
    ``ClientError``'s nominal one.
    """

    sent_at: float
    stamps: Sequence[float]
    truth_ttft_ms: float
    truth_gaps_ms: Sequence[float] = ()


@dataclass(frozen=True)
class ClientError:
    """The client's error over a window: its median and p99, in ms, for TTFT and ITL."""

    requests: int  # sent in the window, with a first token
    events: int  # chunks that arrived in the window
    window_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    gaps_left_out: int = 0  # requests whose chunk count differed from the server's

    @property
    def events_per_s(self) -> float:
        return self.events / self.window_s if self.window_s > 0 else math.nan

    @property
    def within_bounds(self) -> bool:
        """Both errors within ±``P50_BOUND_MS`` at the median and ±``P99_BOUND_MS`` at p99."""
        checks = (
            (self.ttft_p50_ms, P50_BOUND_MS),
            (self.itl_p50_ms, P50_BOUND_MS),
            (self.ttft_p99_ms, P99_BOUND_MS),
            (self.itl_p99_ms, P99_BOUND_MS),
        )
        return self.requests > 0 and all(abs(v) <= bound for v, bound in checks)

    @property
    def bound_ms(self) -> float:
        """The largest p99 error either way: the client's error is at most this, 99 % of the
        time, at this load."""
        return max(abs(self.ttft_p99_ms), abs(self.itl_p99_ms))


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's linear percentile; NaN for no values."""
    return float(np.percentile(values, q)) if len(values) else math.nan


def stamps_of(first_token_at: float, itl_ms: Sequence[float]) -> list[float]:
    """A record's chunk arrival times: its first token, then each gap after it."""
    return [float(first_token_at), *(first_token_at + np.cumsum(itl_ms) / 1e3)]


def client_error(
    requests: Iterable[TimedRequest], start_s: float, end_s: float, nominal_gap_ms: float = math.nan
) -> ClientError:
    """The error of the requests sent in [start, end] (and every chunk that arrived in it)
    against their truth; a request without ``truth_gaps_ms`` is held to ``nominal_gap_ms``."""
    events, ttft, itl, left_out = 0, [], [], 0
    chosen = 0
    for r in requests:
        events += sum(start_s <= s <= end_s for s in r.stamps)
        if not (start_s <= r.sent_at <= end_s and r.stamps):
            continue
        chosen += 1
        ttft.append((r.stamps[0] - r.sent_at) * 1e3 - r.truth_ttft_ms)
        gaps = [(b - a) * 1e3 for a, b in zip(r.stamps, r.stamps[1:], strict=False)]
        if r.truth_gaps_ms:
            if len(r.truth_gaps_ms) != len(gaps):
                left_out += 1
                continue
            itl += [g - t for g, t in zip(gaps, r.truth_gaps_ms, strict=True)]
        else:
            itl += [g - nominal_gap_ms for g in gaps]
    return ClientError(
        requests=chosen,
        events=events,
        window_s=end_s - start_s,
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p99_ms=percentile(ttft, 99),
        itl_p50_ms=percentile(itl, 50),
        itl_p99_ms=percentile(itl, 99),
        gaps_left_out=left_out,
    )


def certificate_line(cert: Mapping[str, Any]) -> str:
    """A certificate (``vprof calibrate``'s) as the summary and report show it beside the
    latencies: ``≤ 2.1 ms at this load (64 users, 1 process)``."""
    bound = cert.get("client_error_ms")
    if cert.get("rate_rps"):
        load = f"{cert['rate_rps']:g} req/s"
    else:
        load = f"{cert.get('users')} users"
    processes = cert.get("processes") or 1
    load += f", {processes} process{'es' if processes > 1 else ''}"
    if bound is None:
        return f"not measured ({load})"
    return f"≤ {bound:.1f} ms at this load ({load})"
