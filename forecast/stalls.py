"""Stalls: moments when the server gives no request a token for much longer than a step while
requests are decoding — found in a run's own token times, fitted as a seeded random process,
and replayed as pauses of the engine (pure, numpy).

A *stall* is a gap in the union of every request's token times, while some request is between
its first and its last token, longer than ``STALL_FACTOR`` × the 99th percentile of such gaps
(the run's longest ordinary steps); its *pause* is the gap less the run's median inter-token
gap (the step that followed the pause). Stalls come in *episodes*: one that ends less than
``EPISODE_GAP_S`` before the next begins belongs to the same episode. The process replayed:
episodes begin at random (a Poisson process in wall time, at ``rate_per_s``); each holds one
pause, and after each pause and one ordinary step another pause follows with probability
``continue_prob``; a pause lasts ``min_ms`` plus an exponential excess of mean
``mean_excess_ms``. The rate is per second in which some request was decoding (the only time a
stall can be seen), so a process that does not depend on the load is read the same at any rate.

A run's own stalls can also be replayed where they happened (:class:`RecordedPauses`): with
them, a replay of that run differs from what it measured only by the model's steps and
scheduling, not by the stalls' chance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

STALL_FACTOR = 3.0  # a stall: a gap this many times the run's 99th-percentile step
EPISODE_GAP_S = 0.1  # stalls closer than this belong to one episode
MIN_STALLS = 5  # fewer stalls over the fitted runs fit no process


@dataclass(frozen=True)
class RunStalls:
    """The stalls of one run: each pause's start (s) and length (ms), whether the next stall
    continued its episode, and the seconds in which some request was decoding."""

    start_s: Any  # numpy float arrays, one value per stall
    pause_ms: Any
    continued: Any  # numpy bool array: the next stall belongs to this one's episode
    exposure_s: float
    threshold_ms: float

    @property
    def episodes(self) -> int:
        return int(len(self.pause_ms) - self.continued.sum())

    def paused_ms(self, lo: Any, hi: Any) -> Any:
        """The pauses' time (ms) of the stalls that begin in ``[lo, hi)`` (numpy arrays of
        times): what a window of the server's time holds beyond its steps."""
        import numpy as np

        total = np.concatenate(([0.0], np.cumsum(self.pause_ms)))
        a = np.searchsorted(self.start_s, lo, side="left")
        b = np.searchsorted(self.start_s, hi, side="left")
        return total[b] - total[a]


@dataclass(frozen=True)
class StallProcess:
    """The fitted stall process (see the module's text)."""

    rate_per_s: float  # episodes per second
    continue_prob: float  # after a pause and one step, another pause of the same episode
    min_ms: float  # the shortest pause
    mean_excess_ms: float  # a pause's mean length beyond ``min_ms`` (exponential)

    def to_json(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @property
    def mean_pause_ms(self) -> float:
        return self.min_ms + self.mean_excess_ms

    def text(self) -> str:
        per = 1.0 / max(1.0 - self.continue_prob, 1e-9)
        return (
            f"{self.rate_per_s:.2f} stall episodes/s of {per:.2f} pauses, "
            f"{self.min_ms:.0f} ms + {self.mean_excess_ms:.0f} ms (exponential) each"
        )


STALL_FIELDS = tuple(StallProcess.__dataclass_fields__)


def token_times(first_s: Any, gaps_ms: Any, lengths: Any) -> list[Any]:
    """Every token's time of each request, from its first token's time and its inter-token
    gaps (``gaps_ms`` flat, ``lengths`` per request: the records' ``itl_ms``)."""
    import numpy as np

    cuts = np.cumsum(lengths)[:-1]
    return [
        f + np.concatenate(([0.0], np.cumsum(g) * 1e-3))
        for f, g in zip(first_s, np.split(np.asarray(gaps_ms, dtype=np.float64), cuts), strict=True)
    ]


def find_stalls(times: Sequence[Any]) -> RunStalls | None:
    """The stalls in one run's token times (one array per answered request, each starting at
    its first token); None when fewer than two requests decoded."""
    import numpy as np

    times = [t for t in times if len(t) >= 2 and np.isfinite(t).all()]
    if len(times) < 2:
        return None
    first = np.sort([float(t[0]) for t in times])
    last = np.sort([float(t[-1]) for t in times])
    union = np.sort(np.concatenate(times))
    gaps = np.diff(union)
    # some request is decoding across the gap: it had its first token, not yet its last
    decoding = (
        np.searchsorted(first, union[:-1], side="right")
        - np.searchsorted(last, union[1:], side="left")
    ) > 0
    if decoding.sum() < 100:
        return None
    busy = gaps[decoding]
    threshold = STALL_FACTOR * float(np.percentile(busy, 99))
    step = float(np.median(np.concatenate([np.diff(t) for t in times])))
    at = np.flatnonzero(decoding & (gaps > threshold))
    start = union[at]
    end = union[at + 1]
    continued = np.zeros(len(at), dtype=bool)
    if len(at) > 1:
        continued[:-1] = start[1:] - end[:-1] < EPISODE_GAP_S
    return RunStalls(
        start_s=start,
        pause_ms=np.maximum(gaps[at] - step, 0.0) * 1e3,
        continued=continued,
        exposure_s=float(busy.sum()),
        threshold_ms=threshold * 1e3,
    )


def fit_stalls(runs: Sequence[RunStalls]) -> StallProcess | None:
    """The process of the stalls of these runs pooled (maximum likelihood: the episode rate
    per decoding second, the continuation's share, a shifted exponential length); None when
    they hold fewer than ``MIN_STALLS``."""
    import numpy as np

    pauses = np.concatenate([r.pause_ms for r in runs]) if runs else np.empty(0)
    if pauses.size < MIN_STALLS:
        return None
    # episodes begin in the time between them (the replay draws the next from the last's end)
    exposure = sum(r.exposure_s for r in runs) - float(pauses.sum()) * 1e-3
    episodes = sum(r.episodes for r in runs)
    continued = sum(int(r.continued.sum()) for r in runs)
    # an episode that began within EPISODE_GAP_S of the last one's end was read as its
    # continuation: the rate seen is rate · exp(−rate · gap); solve for the rate, and give the
    # continuations back the episodes they took
    seen = episodes / max(exposure, 1e-9)
    rate = seen
    for _ in range(50):
        rate = seen * math.exp(min(rate * EPISODE_GAP_S, 50.0))
    merged = rate * exposure * (1.0 - math.exp(-rate * EPISODE_GAP_S))
    low = float(pauses.min())
    return StallProcess(
        rate_per_s=rate,
        continue_prob=min(max(continued - merged, 0.0) / pauses.size, 0.99),
        min_ms=low,
        mean_excess_ms=float(pauses.mean()) - low,
    )


class _Pauses:
    """What :class:`PauseClock` and :class:`RecordedPauses` share: a run of consecutive steps
    shifted by the pauses that fall in them, found by each one's ``_first_held``."""

    def step_end(self, start: float, end: float) -> float:
        raise NotImplementedError

    def _first_held(self, ends: Any, j: int) -> int:
        """The index (from ``j``) of the first of ``ends``' steps a pause may touch;
        ``len(ends)``: none."""
        raise NotImplementedError

    def shift_ends(self, t: float, ends: Any, until: float = math.inf) -> Any:
        """``ends`` (numpy, consecutive steps from ``t``) with the pauses that fall in the steps
        that begin before ``until`` (the later ones are not the replay's yet)."""
        k = len(ends)
        j = self._first_held(ends, 0)
        while j < k:
            begin = float(ends[j - 1]) if j else t
            if begin >= until:
                break
            new = self.step_end(begin, float(ends[j]))
            if new != ends[j]:
                ends[j:] += new - float(ends[j])
            j = self._first_held(ends, j + 1)
        return ends


class PauseClock(_Pauses):
    """The stall process replayed: :meth:`step_end` turns a step's end as costed into its end
    with any pause that fell in it (a pause that began and ended while the engine was idle is
    not seen). Seeded: a replay with the same seed pauses at the same times."""

    def __init__(self, process: StallProcess, seed: int) -> None:
        import numpy as np

        self.p = process
        # the gaps between episodes and the pauses are drawn from streams of their own, a
        # pause's length and whether its episode goes on together, seen or not: which pauses a
        # replay meets does not change the ones after them (common random numbers)
        self.gaps = np.random.default_rng([seed, 0x57A11])
        self.pauses = np.random.default_rng([seed, 0x57A11, 1])
        self.armed = False  # the next step runs, then a pause of the same episode begins
        self.start = self._after(0.0)
        self._next_pause()

    def _after(self, t: float) -> float:
        rate = self.p.rate_per_s
        return t + float(self.gaps.exponential(1.0 / rate)) if rate > 0 else math.inf

    def _next_pause(self) -> None:
        excess = self.pauses.exponential(self.p.mean_excess_ms) if self.p.mean_excess_ms else 0
        self.length = (self.p.min_ms + float(excess)) * 1e-3
        self.goes_on = float(self.pauses.random()) < self.p.continue_prob

    def step_end(self, start: float, end: float) -> float:
        """The end of a step that began at ``start`` and would end at ``end`` without pauses."""
        if self.armed:
            self.armed = False
            self.start = end  # this step runs; the pause holds the next one
            return end
        while self.start + self.length <= start:
            # it came and went while the engine was idle (its episode with it)
            self.start = self._after(self.start + self.length)
            self._next_pause()
        if self.start >= end:
            return end
        shift = self.start + self.length - start if self.start < start else self.length
        end += shift
        goes_on = self.goes_on
        self._next_pause()
        if goes_on:
            self.armed = True
            self.start = math.inf
        else:
            self.start = self._after(end)
        return end

    def due_before(self, end: float) -> bool:
        """Whether a pause may touch a step ending before ``end`` (False: none can)."""
        return self.armed or self.start < end

    def _first_held(self, ends: Any, j: int) -> int:
        if self.armed:
            return j
        import numpy as np

        return max(j, int(np.searchsorted(ends, self.start, side="right")))


class RecordedPauses(_Pauses):
    """A run's own stalls replayed at their times (:class:`PauseClock`'s interface). A stall
    was found after the last token before a gap: its pause holds the first step that begins
    at or after that time, for its measured length, so the step in progress then still
    delivers its tokens (a first token among them) on time; one that began while the engine
    was idle holds the next step only for what is left of it, and one that came and went
    unseen is not replayed."""

    def __init__(self, stalls: RunStalls) -> None:
        self.start = [float(t) for t in stalls.start_s]
        self.length = [float(ms) * 1e-3 for ms in stalls.pause_ms]
        self.next = 0  # the first pause not yet met
        self.owed: list[float] = []  # pauses that began during a step: each holds one after it

    def step_end(self, start: float, end: float) -> float:
        """The end of a step that began at ``start`` and would end at ``end`` without pauses."""
        starts, lengths = self.start, self.length
        n, i = len(starts), self.next
        if self.owed:
            end += self.owed.pop(0)
        else:
            while i < n and starts[i] + lengths[i] <= start:
                i += 1  # it came and went while the engine was idle
            if i < n and starts[i] <= start:
                end += starts[i] + lengths[i] - start  # what is left of it
                i += 1
        while i < n and starts[i] < end:
            self.owed.append(lengths[i])  # it began during this step: it holds the next
            i += 1
        self.next = i
        return end

    def due_before(self, end: float) -> bool:
        """Whether a pause may touch a step ending before ``end`` (False: none can)."""
        return bool(self.owed) or (self.next < len(self.start) and self.start[self.next] < end)

    def _first_held(self, ends: Any, j: int) -> int:
        if self.owed:
            return j
        if self.next >= len(self.start):
            return len(ends)
        import numpy as np

        # the step in progress at its start (it holds the one after)
        return max(j, int(np.searchsorted(ends, self.start[self.next], side="right")))
