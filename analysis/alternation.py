"""Alternating runs (``vprof bench A B --alternate``): slices, sides and their paired verdict.

One alternating run holds the records of every side: its ``locust.json`` has the slice
schedule (:class:`vprof.traffic.slices.SliceSchedule`), its ``run.json`` an ``alternate``
section naming each side's profile and servers, and each record its slice. A run made with
``--swap`` has a second phase (``…--p2``) whose servers were started with the profiles
exchanged; its blocks count like the first phase's.

- :func:`measured_windows` — each slice's measured part: after its warm-up and after the
  slice before it has answered its last request;
- :func:`slice_values` — each measured slice's statistics (the requests sent in its measured
  part, throughput over that window);
- :func:`paired_blocks` — the blocks in which every side has a slice, per side the values;
- :func:`side_views` — one :class:`~vprof.analysis.run.Run` per side, holding only its
  measured requests, so summaries, plans and reports read a side like any run.

The verdict is a paired t over the blocks' log differences (ABBA order cancels a linear drift
within two blocks, and every block shares its host state): :mod:`vprof.analysis.designs`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.analysis.keys import HEADLINE_KEYS
from vprof.analysis.keys import SummaryKey as K

if TYPE_CHECKING:
    from vprof.analysis.run import Run
    from vprof.traffic.slices import SliceSchedule

# What precision and --precision judge by default: the figures a user picks settings on.
HEADLINE_METRICS = HEADLINE_KEYS
SLICE_METRICS: tuple[str, ...] = (
    K.MEDIAN_TTFT_MS,
    K.P95_TTFT_MS,
    K.P99_TTFT_MS,
    K.MEDIAN_TPOT_MS,
    K.P95_TPOT_MS,
    K.MEDIAN_ITL_MS,
    K.P95_ITL_MS,
    K.P99_ITL_MS,
    K.MEDIAN_E2EL_MS,
    K.P95_E2EL_MS,
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.ERROR_RATE,
)
_LATENCY_STATS = {"median": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


@dataclass(frozen=True)
class Side:
    """One side of an alternating run: the profile it stands for and its servers."""

    name: str
    urls: tuple[str, ...]
    profile: Mapping[str, Any]  # the profile as run.json describes it


@dataclass(frozen=True)
class Alternation:
    """What made a run alternating: its schedule and sides, in side order."""

    schedule: SliceSchedule
    sides: tuple[Side, ...]
    phase: int = 1
    swapped: bool = False


def alternation(run: Run) -> Alternation | None:
    """The run's slice schedule and sides, or ``None`` for an ordinary run."""
    section = run.meta.get("alternate")
    slices = run.locust.get("slices")
    if not isinstance(section, dict) or not isinstance(slices, dict):
        return None
    # here, not at the top: every summary asks, and only an alternating run needs the
    # traffic package (and PyYAML under it) to read its schedule
    from vprof.traffic.slices import SliceSchedule

    sides = tuple(
        Side(str(s.get("name")), tuple(str(u) for u in s.get("urls") or ()), s.get("profile") or {})
        for s in section.get("sides") or ()
    )
    return Alternation(
        SliceSchedule.from_dict(slices),
        sides,
        int(section.get("phase") or 1),
        bool(section.get("swapped")),
    )


def is_alternating(run: Run) -> bool:
    return alternation(run) is not None


def _stopped_at(run: Run, cols: Any) -> float:
    """When the load ended: Locust's stop time, else the last send."""
    import numpy as np

    stopped = run.locust.get("stopped_at")
    if isinstance(stopped, (int, float)) and math.isfinite(stopped):
        return float(stopped)
    sent = cols.floats["sent_at"]
    return float(np.nanmax(sent)) if np.isfinite(sent).any() else -math.inf


def _times(cols: Any) -> tuple[Any, Any]:
    """When each request started (sent, else scheduled) and ended (finished, else its last
    token)."""
    import numpy as np

    f = cols.floats
    started = np.where(np.isnan(f["sent_at"]), f["scheduled_at"], f["sent_at"])
    ends = np.where(np.isnan(f["finished_at"]), f["last_token_at"], f["finished_at"])
    return started, ends


def measured_windows(run: Run, alt: Alternation | None = None) -> list[tuple[int, float, float]]:
    """(slice, low, high) for every slice the load ran through to its end: requests sent in
    [low, high) count. A slice's measured part starts after its warm-up, and not before the
    last answer of the slice ahead of it: until then a user still waits on that answer and
    does not load this side (a 4.8-s answer after a switch once left a side's slice 2.90 of 4
    users in flight and the run judged client-limited). A slice whose predecessor answered
    to its end has no measured part and is left out."""
    import numpy as np

    alt = alt or alternation(run)
    if alt is None:
        return []
    schedule = alt.schedule
    cols = run.columns
    _, ends = _times(cols)
    slice_of = cols.ints["slice"]
    stop = _stopped_at(run, cols)
    windows = []
    for k in range(int(slice_of.max()) + 1 if cols.n else 0):
        low, high = schedule.window(k)
        if high > stop + 1e-6:
            break  # the load stopped inside this slice: it is not a whole measurement
        before = ends[(slice_of == k - 1) & np.isfinite(ends)]
        low = max(low, float(before.max())) if before.size else low
        if low < high:
            windows.append((k, low, high))
    return windows


def slice_values(run: Run, metrics: Sequence[str] = SLICE_METRICS) -> list[dict[str, Any]]:
    """One row per measured slice (:func:`measured_windows`): ``slice``, ``block``, ``side``
    (its name), ``requests``, ``completed``, ``measured_s`` and each metric over the slice's
    measured part."""

    from vprof.records.schema import Status

    alt = alternation(run)
    if alt is None:
        return []
    schedule = alt.schedule
    cols = run.columns
    f = cols.floats
    started, _ = _times(cols)
    slice_of = cols.ints["slice"]
    ok_status = cols.status.isin(Status.OK.value)
    failed_status = cols.status.isin(Status.ERROR.value, Status.TIMEOUT.value)
    latencies = {
        "ttft": f["ttft_ms"],
        "tpot": f["tpot_ms"],
        "e2el": f["e2e_ms"],
        "ttft_from_schedule": (f["first_token_at"] - f["scheduled_at"]) * 1000.0,
        "e2el_from_schedule": (f["last_token_at"] - f["scheduled_at"]) * 1000.0,
    }
    rows = []
    for k, low, high in measured_windows(run, alt):
        keep = (slice_of == k) & (started >= low) & (started < high)
        ok = keep & ok_status
        row: dict[str, Any] = {
            "slice": k,
            "block": schedule.block_of(k),
            "side": alt.sides[schedule.side_of(k)].name,
            "phase": alt.phase,
            K.REQUESTS: int(keep.sum()),
            K.COMPLETED: int(ok.sum()),
            "measured_s": (window_s := high - low),
        }
        for metric in metrics:
            row[metric] = _slice_metric(metric, cols, keep, ok, failed_status, latencies, window_s)
        rows.append(row)
    return rows


def _slice_metric(
    metric: str,
    cols: Any,
    keep: Any,
    ok: Any,
    failed: Any,
    latencies: Mapping[str, Any],
    window_s: float,
) -> float:
    import numpy as np

    if metric == K.REQUEST_THROUGHPUT:
        return float(ok.sum()) / window_s
    if metric == K.OUTPUT_THROUGHPUT:
        return float(np.maximum(cols.ints["completion_tokens"][ok], 0).sum()) / window_s
    if metric == K.ERROR_RATE:
        attempted = int(ok.sum() + (keep & failed).sum())
        return float((keep & failed).sum()) / attempted if attempted else math.nan
    stat, _, rest = metric.partition("_")
    family = rest.removesuffix("_ms")
    q = _LATENCY_STATS.get(stat)
    if q is None or (family != "itl" and family not in latencies):
        raise KeyError(metric)
    if family == "itl":
        values, _ = cols.gaps(ok)
    else:
        values = latencies[family][ok]
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if values.size else math.nan


def paired_blocks(
    runs: Sequence[Run], metrics: Sequence[str] = SLICE_METRICS
) -> tuple[list[str], list[dict[str, dict[str, Any]]]]:
    """(the side names in order, the complete blocks): per block, per side name, its slice's
    row. The runs are the phases of one alternating run (``--swap`` makes two)."""
    names: list[str] = []
    blocks: list[dict[str, dict[str, Any]]] = []
    for run in runs:
        alt = alternation(run)
        if alt is None:
            continue
        for side in alt.sides:
            if side.name not in names:
                names.append(side.name)
        by_block: dict[int, dict[str, dict[str, Any]]] = {}
        for row in slice_values(run, metrics):
            by_block.setdefault(row["block"], {})[row["side"]] = row
        blocks += [b for _, b in sorted(by_block.items()) if len(b) == len(alt.sides)]
    return names, blocks


def side_views(run: Run) -> list[Run]:
    """One run per side of an alternating run: the side's measured requests only (sent after
    a slice's warm-up, in its own slices), its servers' /metrics samples, and
    ``measured_s`` (the length of its measured windows, which throughputs divide by)."""
    import numpy as np
    import pyarrow as pa

    alt = alternation(run)
    if alt is None:
        return [run]
    windows = measured_windows(run, alt)
    cols = run.columns
    started, ends = _times(cols)
    slice_of = cols.ints["slice"]
    timed = np.isfinite(started) & np.isfinite(ends)
    views = []
    for index, side in enumerate(alt.sides):
        mine = [(k, low, high) for k, low, high in windows if alt.schedule.side_of(k) == index]
        keep = np.zeros(cols.n, dtype=bool)
        measured_s = in_flight_s = 0.0
        for k, low, high in mine:
            keep |= (slice_of == k) & (started >= low) & (started < high)
            measured_s += high - low
            # every request of the slice, its time in flight clipped to the window
            of_slice = (slice_of == k) & timed
            clipped = np.minimum(ends[of_slice], high) - np.maximum(started[of_slice], low)
            in_flight_s += float(np.maximum(clipped, 0.0).sum())
        urls = set(side.urls)
        meta = {
            **run.meta,
            "name": f"{run.name} [{side.name}]",
            "profile": {**side.profile, "name": side.name},
        }
        views.append(
            replace(
                run,
                path=Path(f"{run.path}#{side.name}"),
                meta=meta,
                records=run.records.filter(pa.array(keep)),
                gap_blocks=(),  # the whole run's: the side's are read from its records
                metrics=tuple(
                    m for m in run.metrics if not m.get("replica") or m["replica"] in urls
                ),
                measured_s=measured_s or None,
                in_flight_s=in_flight_s if measured_s else None,
            )
        )
    return views


def blocks_interval(
    blocks: Sequence[Mapping[str, Mapping[str, Any]]], base: str, other: str, metric: str
) -> tuple[Any, int]:
    """The interval of ``other`` against ``base`` on ``metric`` over paired blocks, and how
    many blocks it rests on: a paired t within one phase; over a swapped second phase, the
    crossover interval (each phase carries the instances' offset with the other sign, so it
    cancels instead of widening the interval). ``None`` with too few blocks."""
    from vprof.analysis import designs

    pairs = [
        (b[base][metric], b[other][metric], b[base]["phase"])
        for b in blocks
        if math.isfinite(b[base][metric]) and math.isfinite(b[other][metric])
    ]
    phases = sorted({p for _, _, p in pairs})
    if len(phases) > 1:
        split = [
            ([a for a, _, q in pairs if q == p], [b for _, b, q in pairs if q == p]) for p in phases
        ]
        found = designs.crossover(split)
        if found is not None:
            return found, len(pairs)
    return designs.paired([a for a, _, _ in pairs], [b for _, b, _ in pairs]), len(pairs)
