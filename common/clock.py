"""Monotonic timing anchored to wall-clock once per process.

Durations come from ``perf_counter`` so they never jump; wall-clock stamps are the
anchor plus elapsed monotonic time, so records from several processes line up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Clock:
    anchor_wall_s: float = field(default_factory=time.time)
    anchor_mono_s: float = field(default_factory=time.perf_counter)

    def now(self) -> float:
        """Wall-clock seconds since the epoch, advanced by the monotonic clock."""
        return self.anchor_wall_s + (time.perf_counter() - self.anchor_mono_s)

    def to_wall(self, mono_s: float) -> float:
        """Convert a ``perf_counter`` reading taken in this process to wall-clock seconds."""
        return self.anchor_wall_s + (mono_s - self.anchor_mono_s)


_PROCESS_CLOCK = Clock()


def reanchor() -> None:
    """Anchor this process's clock again, now (a process that waited before its work)."""
    global _PROCESS_CLOCK
    _PROCESS_CLOCK = Clock()


def wall_now() -> float:
    """Wall-clock seconds from this process's anchored monotonic clock."""
    return _PROCESS_CLOCK.now()


def process_clock() -> Clock:
    return _PROCESS_CLOCK
