"""What ``/metrics`` counts, kept where every worker process can read it.

Each worker writes only its own slot of one shared int64 array (no locks: one writer per
slot, aligned 64-bit stores); a scrape, whichever worker it lands on, sums all slots. The
emulator also counts how late each chunk left against its deadline, so a benchmark can show
that an error it measured is the client's and not the emulator's.
"""

from __future__ import annotations

import array
import bisect
from typing import Any

_FIELDS = (
    "running",
    "prompt_tokens",
    "generation_tokens",
    "finished_length",
    "finished_abort",
    "connections_open",
    "connections_opened",
    "chunks",
    "lateness_sum_ns",
)
# Upper bounds (seconds) of the lateness histogram; a last bucket holds everything above.
LATENESS_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
_WIDTH = len(_FIELDS) + len(LATENESS_BUCKETS_S) + 1
(_RUNNING, _PROMPT, _GENERATED, _LENGTH, _ABORT, _OPEN, _OPENED, _CHUNKS, _LATE_NS) = range(
    len(_FIELDS)
)
_BUCKET0 = len(_FIELDS)


def shared_buffer(slots: int) -> Any:
    """Zeroed int64 memory for ``slots`` workers that child processes inherit (spawn or fork)."""
    import multiprocessing

    return multiprocessing.RawArray("q", slots * _WIDTH)


class Counters:
    """One worker's counters in slot ``slot`` of ``buffer`` (its own buffer when none is given)."""

    def __init__(self, buffer: Any = None, slot: int = 0) -> None:
        if buffer is None:
            buffer = array.array("q", bytes(8 * _WIDTH))
        self._all = memoryview(buffer).cast("B").cast("q")
        self._slots = len(self._all) // _WIDTH
        if not 0 <= slot < self._slots:
            raise ValueError(f"slot {slot} is not in 0..{self._slots - 1}")
        self._base = slot * _WIDTH

    @property
    def workers(self) -> int:
        """How many workers' slots the buffer holds."""
        return self._slots

    def request_started(self, prompt_tokens: int) -> None:
        self._all[self._base + _RUNNING] += 1
        self._all[self._base + _PROMPT] += prompt_tokens

    def request_finished(self, generated_tokens: int, reason: str) -> None:
        """``reason`` is ``length`` (ran to its end) or ``abort`` (client gone, server stopping)."""
        base = self._base
        self._all[base + _RUNNING] -= 1
        self._all[base + _GENERATED] += generated_tokens
        self._all[base + (_LENGTH if reason == "length" else _ABORT)] += 1

    def connection_opened(self) -> None:
        self._all[self._base + _OPEN] += 1
        self._all[self._base + _OPENED] += 1

    def connection_closed(self) -> None:
        self._all[self._base + _OPEN] -= 1

    def chunk_sent(self, lateness_s: float) -> None:
        """A streamed chunk left ``lateness_s`` after its deadline."""
        base = self._base
        self._all[base + _CHUNKS] += 1
        self._all[base + _LATE_NS] += int(lateness_s * 1e9)
        self._all[base + _BUCKET0 + bisect.bisect_left(LATENESS_BUCKETS_S, lateness_s)] += 1

    def totals(self) -> dict[str, int]:
        """Every field summed over all workers."""
        return {name: self._sum(i) for i, name in enumerate(_FIELDS)}

    def lateness_buckets(self) -> list[int]:
        """Chunks per lateness bucket (not cumulative), summed over all workers."""
        return [self._sum(_BUCKET0 + i) for i in range(len(LATENESS_BUCKETS_S) + 1)]

    def _sum(self, index: int) -> int:
        return sum(self._all[slot * _WIDTH + index] for slot in range(self._slots))
