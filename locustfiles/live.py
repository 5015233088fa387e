"""Live LLM percentiles for the web UI: mergeable fine-resolution histograms over record dicts.

Pure: no locust, numpy or pandas. Locust's own statistics round response times to about two
significant digits (a 7 ms inter-token gap and an 8 ms one share a bucket), which is too coarse
for ITL and TPOT, so this module keeps its own histograms with log-spaced buckets whose
representative value is within ``RELATIVE_ERROR`` of every value it holds.

Percentiles interpolate linearly between order statistics, as ``numpy.percentile`` does by
default (and hence ``vllm bench serve``), so a live figure differs from the offline summary of
the same records by at most ``RELATIVE_ERROR``.

:class:`LiveStats` keeps the tables' rows (cumulative and over the last seconds);
:class:`Timeline` keeps the same figures per interval of time, for charts.

The live view is for watching a test; published numbers come from the run's records.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import stat_key
from vprof.records.schema import Status

# Half-width of a bucket relative to its representative value. 0.5% keeps the interpolated
# percentiles inside the promised 1% with room to spare, at ~460 buckets per decade of range.
RELATIVE_ERROR = 0.005
_GAMMA = (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
# Values at or below this (in the metric's unit) count as zero; 1 ns is far below any timing.
_ZERO_BELOW = 1e-6

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
# Metric key in the record -> name used in row keys (vllm bench's spelling: e2el, not e2e).
METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "ttft"),
    ("tpot_ms", "tpot"),
    ("itl_ms", "itl"),
    ("e2e_ms", "e2el"),
)
AGGREGATED = "Aggregated"  # Locust's name for the total row
FAILED_STATUSES = frozenset({Status.ERROR.value, Status.TIMEOUT.value})
CANCELLED_STATUS = Status.CANCELLED.value


def percentile_key(p: int) -> str:
    """How a percentile is spelled in row keys, as ``vllm bench serve`` does: median, p90, p99."""
    return "median" if p == 50 else f"p{p}"


class LogHistogram:
    """A sparse histogram with log-spaced buckets; exact count, sum, min and max.

    Two histograms merge by adding bucket counts, so per-second or per-process histograms
    combine into exact-up-to-resolution percentiles (percentiles are never averaged).
    """

    __slots__ = ("buckets", "zeros", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        """Count one value; NaN is ignored, negatives count as zero."""
        if value != value:  # NaN: a metric the record does not have
            return
        self.count += 1
        self.total += value
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        if value <= _ZERO_BELOW:
            self.zeros += 1
            return
        index = math.ceil(math.log(value) / _LOG_GAMMA)
        self.buckets[index] = self.buckets.get(index, 0) + 1

    def merge(self, other: LogHistogram) -> None:
        """Add another histogram's counts into this one."""
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.zeros += other.zeros
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def percentiles(self, ps: Iterable[float]) -> list[float | None]:
        """Values at percentiles ``ps`` (0..100), interpolated like ``numpy.percentile``."""
        ps = list(ps)
        if not self.count:
            return [None] * len(ps)
        # Ranks (0-based order statistics) each percentile needs, resolved in one sorted walk.
        wanted: set[int] = set()
        plan: list[tuple[int, int, float]] = []
        for p in ps:
            h = (self.count - 1) * p / 100.0
            lo = math.floor(h)
            hi = min(lo + 1, self.count - 1)
            plan.append((lo, hi, h - lo))
            wanted.update((lo, hi))
        at_rank = self._values_at_ranks(sorted(wanted))
        return [at_rank[lo] + frac * (at_rank[hi] - at_rank[lo]) for lo, hi, frac in plan]

    def _values_at_ranks(self, ranks: list[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        i = 0
        seen = self.zeros
        while i < len(ranks) and ranks[i] < seen:
            out[ranks[i]] = 0.0
            i += 1
        for index in sorted(self.buckets):
            if i >= len(ranks):
                break
            seen += self.buckets[index]
            value = 2.0 * _GAMMA**index / (_GAMMA + 1.0)
            while i < len(ranks) and ranks[i] < seen:
                out[ranks[i]] = value
                i += 1
        # The extremes are known exactly; clamping also keeps a one-bucket histogram honest.
        out = {r: min(max(v, self.min), self.max) for r, v in out.items()}
        if 0 in out:
            out[0] = self.min
        if self.count - 1 in out:
            out[self.count - 1] = self.max
        return out


class _Slot:
    """Everything counted about one group of records: latency histograms and counters."""

    __slots__ = ("hists", "requests", "completed", "failed", "cancelled", "output_tokens")

    def __init__(self) -> None:
        self.hists = {name: LogHistogram() for _, name in METRICS}
        self.requests = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.output_tokens = 0

    def add(self, record: Mapping[str, Any]) -> None:
        self.requests += 1
        status = record.get("status", Status.OK.value)
        if status in FAILED_STATUSES:
            self.failed += 1
            return
        if status == CANCELLED_STATUS:
            self.cancelled += 1
            return
        self.completed += 1
        tokens = record.get("completion_tokens")
        if isinstance(tokens, int) and tokens > 0:
            self.output_tokens += tokens
        for field, name in METRICS:
            value = record.get(field)
            hist = self.hists.get(name)  # none once a timeline interval is sealed
            if value is None or hist is None:
                continue
            if field == "itl_ms":
                for gap in value:
                    hist.add(float(gap))
            else:
                hist.add(float(value))

    def merge(self, other: _Slot) -> None:
        for name, hist in other.hists.items():
            self.hists[name].merge(hist)
        self.requests += other.requests
        self.completed += other.completed
        self.failed += other.failed
        self.cancelled += other.cancelled
        self.output_tokens += other.output_tokens


class _Group:
    """One row of the table: cumulative counts plus per-second slots for the recent window."""

    __slots__ = ("total", "seconds")

    def __init__(self) -> None:
        self.total = _Slot()
        self.seconds: dict[int, _Slot] = {}

    def add(self, record: Mapping[str, Any], second: int | None) -> None:
        self.total.add(record)
        if second is not None:
            slot = self.seconds.get(second)
            if slot is None:
                slot = self.seconds[second] = _Slot()
            slot.add(record)

    def merge(self, other: _Group) -> None:
        self.total.merge(other.total)
        for second, slot in other.seconds.items():
            mine = self.seconds.get(second)
            if mine is None:
                mine = self.seconds[second] = _Slot()
            mine.merge(slot)

    def prune(self, keep_from: int) -> None:
        for second in [s for s in self.seconds if s < keep_from]:
            del self.seconds[second]


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and value == value and not math.isinf(value):
        return float(value)
    return None


class LiveStats:
    """Live TTFT, TPOT, ITL and E2E percentiles and throughput from record dicts.

    Records are grouped by ``user_class`` (or ``endpoint`` when that is empty) with an
    ``Aggregated`` row over all of them. "Current" figures cover the ``window_s`` whole
    seconds that ended ``lag_s`` ago, by each record's ``finished_at``; the lag leaves time for
    workers' batches (shipped every few seconds) to arrive, as Locust's own current RPS does.
    """

    def __init__(self, window_s: int = 10, lag_s: int = 2) -> None:
        self.window_s = window_s
        self.lag_s = lag_s
        self.reset()

    def reset(self) -> None:
        """Forget everything (Locust's stats reset and a new test start call this)."""
        self._groups: dict[str, _Group] = {}
        self._aggregated = _Group()
        self._first_sent_at: float | None = None
        self._last_finished_at: float | None = None
        self._newest_second: int | None = None

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Count a batch of record dicts (``RequestRecord.to_dict()`` shape)."""
        for record in records:
            finished_at = _finite(record.get("finished_at"))
            started_at = _finite(record.get("sent_at"))
            if started_at is None:
                started_at = _finite(record.get("scheduled_at"))
            if started_at is not None and (
                self._first_sent_at is None or started_at < self._first_sent_at
            ):
                self._first_sent_at = started_at
            second = None
            if finished_at is not None:
                second = math.floor(finished_at)
                if self._last_finished_at is None or finished_at > self._last_finished_at:
                    self._last_finished_at = finished_at
                if self._newest_second is None or second > self._newest_second:
                    self._newest_second = second
            name = record.get("user_class") or record.get("endpoint") or "(unnamed)"
            group = self._groups.get(name)
            if group is None:
                group = self._groups[name] = _Group()
            group.add(record, second)
            self._aggregated.add(record, second)
        self._prune()

    def merge(self, other: LiveStats) -> None:
        """Add another LiveStats' counts (e.g. from another process) into this one."""
        for name, group in other._groups.items():
            self._groups.setdefault(name, _Group()).merge(group)
        self._aggregated.merge(other._aggregated)
        for attr, pick in (("_first_sent_at", min), ("_last_finished_at", max)):
            values = [v for v in (getattr(self, attr), getattr(other, attr)) if v is not None]
            setattr(self, attr, pick(values) if values else None)
        seconds = [s for s in (self._newest_second, other._newest_second) if s is not None]
        self._newest_second = max(seconds) if seconds else None
        self._prune()

    def _prune(self) -> None:
        # Bounded memory on long runs: per-second slots older than any window we may report.
        if self._newest_second is None:
            return
        keep_from = self._newest_second - self.window_s - self.lag_s - 1
        for group in (*self._groups.values(), self._aggregated):
            group.prune(keep_from)

    @property
    def requests(self) -> int:
        """Records counted so far, whatever their status."""
        return self._aggregated.total.requests

    def rows(self, now: float | None = None) -> list[dict[str, Any]]:
        """One dict per group, sorted by name, then the ``Aggregated`` row.

        Keys follow ``vllm bench serve`` (``median_ttft_ms``, ``p99_itl_ms``,
        ``request_throughput``, ``output_throughput``); ``current_*`` keys cover the recent
        window. Missing values are ``None`` (never NaN, which JSON cannot carry).
        """
        now = time.time() if now is None else now
        window_end = math.floor(now) - self.lag_s  # exclusive
        window_start = window_end - self.window_s
        if self._first_sent_at is not None:
            # Early in a test the window is only as long as the test so far.
            window_start = max(window_start, math.floor(self._first_sent_at))
        window_len_s = max(window_end - window_start, 0)
        items = sorted(self._groups.items()) + [(AGGREGATED, self._aggregated)]
        return [self._row(name, g, window_start, window_end, window_len_s) for name, g in items]

    def _row(
        self, name: str, group: _Group, window_start: int, window_end: int, window_len_s: int
    ) -> dict[str, Any]:
        total = group.total
        recent = _Slot()
        for second, slot in group.seconds.items():
            if window_start <= second < window_end:
                recent.merge(slot)
        duration_s = None
        if self._first_sent_at is not None and self._last_finished_at is not None:
            duration_s = self._last_finished_at - self._first_sent_at
        row: dict[str, Any] = {
            "name": name,
            K.REQUESTS: total.requests,
            K.COMPLETED: total.completed,
            K.FAILED: total.failed,
            K.CANCELLED: total.cancelled,
            K.TOTAL_OUTPUT_TOKENS: total.output_tokens,
            "duration_s": duration_s,
            K.REQUEST_THROUGHPUT: total.completed / duration_s if duration_s else None,
            K.OUTPUT_THROUGHPUT: total.output_tokens / duration_s if duration_s else None,
            "current_requests": recent.requests,
            "current_failed": recent.failed,
            "current_request_throughput": (
                recent.completed / window_len_s if window_len_s else None
            ),
            "current_output_throughput": (
                recent.output_tokens / window_len_s if window_len_s else None
            ),
        }
        for _, metric in METRICS:
            hist = total.hists[metric]
            row[f"count_{metric}"] = hist.count
            row[stat_key("mean", metric)] = hist.mean()
            for p, value in zip(PERCENTILES, hist.percentiles(PERCENTILES), strict=True):
                row[stat_key(percentile_key(p), metric)] = value
            row[f"max_{metric}_ms"] = hist.max if hist.count else None
            current = recent.hists[metric]
            row[f"current_count_{metric}"] = current.count
            for p, value in zip(PERCENTILES, current.percentiles(PERCENTILES), strict=True):
                row["current_" + stat_key(percentile_key(p), metric)] = value
        return row


class _Interval:
    """One interval of a :class:`Timeline`: its records' counters, histograms, in-flight time."""

    __slots__ = ("slot", "in_flight_s", "frozen")

    def __init__(self) -> None:
        self.slot = _Slot()
        self.in_flight_s = 0.0  # request-seconds in flight inside this interval
        self.frozen: dict[str, float | None] | None = None  # percentiles, once sealed

    def percentiles(self) -> dict[str, float | None]:
        if self.frozen is not None:
            return self.frozen
        out: dict[str, float | None] = {}
        for _, metric in METRICS:
            values = self.slot.hists[metric].percentiles(PERCENTILES)
            for p, value in zip(PERCENTILES, values, strict=True):
                out[stat_key(percentile_key(p), metric)] = value
        return out

    def seal(self) -> None:
        self.frozen = self.percentiles()
        self.slot.hists = {}  # the bulk of the memory; counters keep adding up


class Timeline:
    """LLM figures over time, for charts: one point per ``interval_s`` of wall-clock time.

    A point covers the records that *finished* in its interval, as Locust's charts and the
    run's offline timeline count throughput: TTFT, TPOT, ITL and E2E percentiles, completed
    requests and output tokens per second; and ``in_flight``, the mean number of requests in
    flight over the interval, from every record's send and finish times (a request is known
    only once it has finished, so the newest points rise as long requests end). Rates are per
    second of the interval that lies inside the test (first send to last finish), so the
    first and last points are not diluted by the time before and after it.

    Records reach the master in batches (workers report every 3 s), so a point is provisional
    (``final`` false) and recomputed until records ``seal_after_s`` newer than its end have
    arrived; then its percentiles are fixed and its histograms dropped, which bounds memory on
    long runs. Its counts, tokens and in-flight time still add up after that: they are sums.
    At most ``max_points`` intervals are kept (the oldest go first).
    """

    def __init__(
        self,
        interval_s: float = 5.0,
        lag_s: float = 2.0,
        seal_after_s: float = 30.0,
        max_points: int = 8640,  # 12 h at 5 s
    ) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be a positive number of seconds, not {interval_s}")
        self.interval_s = float(interval_s)
        self.lag_s = lag_s
        self.seal_after_s = seal_after_s
        self.max_points = max_points
        self.generation = 0  # counts resets: a chart holding an earlier one's points drops them
        self.reset()

    def reset(self) -> None:
        """Forget everything (with Locust's stats reset and a new test start)."""
        self.generation += 1
        self._intervals: dict[int, _Interval] = {}
        self._open: set[int] = set()  # intervals not sealed yet
        self._first_sent_at: float | None = None
        self._newest_finished_at: float | None = None
        self._oldest_kept = -(2**62)  # index of the oldest interval still kept

    def _interval(self, index: int) -> _Interval | None:
        if index < self._oldest_kept:
            return None
        interval = self._intervals.get(index)
        if interval is None:
            interval = self._intervals[index] = _Interval()
            self._open.add(index)
        return interval

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Count a batch of record dicts (``RequestRecord.to_dict()`` shape)."""
        width = self.interval_s
        for record in records:
            finished_at = _finite(record.get("finished_at"))
            if finished_at is None:
                continue  # never sent (an open-loop arrival cut at the end): no time to place
            sent_at = _finite(record.get("sent_at"))
            interval = self._interval(math.floor(finished_at / width))
            if interval is not None:
                interval.slot.add(record)
            if sent_at is not None and finished_at > sent_at:
                first, last = math.floor(sent_at / width), math.floor(finished_at / width)
                for index in range(max(first, self._oldest_kept), last + 1):
                    start = index * width
                    overlap = min(finished_at, start + width) - max(sent_at, start)
                    spanned = self._interval(index)
                    if spanned is not None and overlap > 0:
                        spanned.in_flight_s += overlap
            if self._newest_finished_at is None or finished_at > self._newest_finished_at:
                self._newest_finished_at = finished_at
            if sent_at is not None and (
                self._first_sent_at is None or sent_at < self._first_sent_at
            ):
                self._first_sent_at = sent_at
        self._seal_and_prune()

    def _seal_and_prune(self) -> None:
        if self._newest_finished_at is None:
            return
        seal_before = self._newest_finished_at - self.seal_after_s  # interval ends up to here
        for index in [i for i in self._open if (i + 1) * self.interval_s <= seal_before]:
            self._intervals[index].seal()
            self._open.discard(index)
        if len(self._intervals) > self.max_points:
            keep = sorted(self._intervals)[-self.max_points :]
            self._oldest_kept = keep[0]
            self._intervals = {index: self._intervals[index] for index in keep}
            self._open.intersection_update(self._intervals)

    def points(self, now: float | None = None, since: float | None = None) -> list[dict[str, Any]]:
        """The points whose interval ended ``lag_s`` before ``now``, oldest first.

        ``since`` (epoch seconds) leaves out intervals that start before it, so a chart can
        fetch what is new (and what may still change) instead of the whole run. Intervals
        without records between the first and the last are points with zero throughput.
        """
        if not self._intervals:
            return []
        now = time.time() if now is None else now
        width = self.interval_s
        last = math.floor((now - self.lag_s) / width) - 1  # the newest interval that ended
        first = min(self._intervals)
        if since is not None and math.isfinite(since):
            first = max(first, math.ceil(since / width))
        last = min(last, max(self._intervals))
        empty = _Interval()
        return [
            self._point(index, self._intervals.get(index, empty))
            for index in range(first, last + 1)
        ]

    def _point(self, index: int, interval: _Interval) -> dict[str, Any]:
        start, end = index * self.interval_s, (index + 1) * self.interval_s
        # The test's first and last intervals are only partly inside it: rates are per second
        # of the test, so a test that starts or ends mid-interval shows no false dip there.
        if self._first_sent_at is not None:
            start = max(start, self._first_sent_at)
        if self._newest_finished_at is not None:
            end = min(end, self._newest_finished_at)
        width = end - start if end > start else self.interval_s
        slot = interval.slot
        point: dict[str, Any] = {
            "t": index * self.interval_s,
            "final": interval.frozen is not None,
            K.REQUESTS: slot.requests,
            K.COMPLETED: slot.completed,
            K.FAILED: slot.failed,
            K.REQUEST_THROUGHPUT: slot.completed / width,
            "failures_per_s": slot.failed / width,
            K.OUTPUT_THROUGHPUT: slot.output_tokens / width,
            "in_flight": interval.in_flight_s / width,
        }
        point.update(interval.percentiles())
        return point
