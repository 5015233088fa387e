"""Alternating slices: one load switched between several live servers (``bench --alternate``).

Time from the schedule's ``epoch`` is cut into slices of ``slice_s``; slice *k* sends all the
load to one *side* (a profile's server or servers). Slices come in *blocks* of one slice per
side; block 0 visits the sides in order, block 1 in reverse, and so on (A B | B A | A B …, the
ABBA design), so a linear drift of the host hits every side alike. Every slice of a block sends
the same request stream (the same request indices and arrival offsets, the same salt), and each
block its own (fresh indices and a salt of its own, so no side's prefix cache carries over from
one block to the next). The first ``warmup_s`` of a slice are not measured: requests still in
flight on the previous side drain, and the new side's queue fills.

Pure and stdlib only: the Locust side picks sides with it, the parent decides when a block is
complete with it, and the analysis cuts records into slices with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vprof.common.errors import RunError

# Request indices of slice k are k·STRIDE + i: unique over the test, and a slice's i-th request
# is planned as block·STRIDE + i, the same in every slice of its block.
STRIDE = 1_000_000


@dataclass(frozen=True)
class SliceSchedule:
    """When each slice starts, which side it loads, and which part of it is measured."""

    epoch: float  # wall-clock start of slice 0
    slice_s: float
    warmup_s: float
    sides: int

    def __post_init__(self) -> None:
        if self.sides < 2:
            raise ValueError("alternating slices need at least two sides")
        if not (math.isfinite(self.slice_s) and self.slice_s > 0):
            raise ValueError("a slice must last a positive, finite time")
        if not (0 <= self.warmup_s < self.slice_s):
            raise ValueError("a slice's warm-up must be shorter than the slice")

    @property
    def block_s(self) -> float:
        return self.slice_s * self.sides

    def slice_at(self, t: float) -> int:
        """The slice running at wall-clock ``t`` (-1 before the epoch)."""
        if t < self.epoch:
            return -1
        return int((t - self.epoch) // self.slice_s)

    def block_of(self, k: int) -> int:
        return k // self.sides

    def side_of(self, k: int) -> int:
        """Which side slice ``k`` loads: forward in even blocks, reversed in odd ones."""
        position = k % self.sides
        return position if self.block_of(k) % 2 == 0 else self.sides - 1 - position

    def start(self, k: int) -> float:
        return self.epoch + k * self.slice_s

    def window(self, k: int) -> tuple[float, float]:
        """The measured part of slice ``k``: requests sent in [low, high) count."""
        return self.start(k) + self.warmup_s, self.start(k + 1)

    def salt(self, salt: str, k: int) -> str:
        """The prompt salt of slice ``k``: one per block."""
        return f"{salt}.b{self.block_of(k)}"

    def plan_index(self, index: int) -> int:
        """What request ``index`` (of slice ``index // STRIDE``) is planned as: the same
        request in every slice of a block."""
        k, i = divmod(index, STRIDE)
        return self.block_of(k) * STRIDE + i

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SliceSchedule:
        return cls(
            epoch=float(data["epoch"]),
            slice_s=float(data["slice_s"]),
            warmup_s=float(data["warmup_s"]),
            sides=int(data["sides"]),
        )


def default_warmup_s(slice_s: float) -> float:
    """A quarter of a slice, at most 5 s: time for the previous side's answers to drain."""
    return min(5.0, slice_s / 4.0)


def whole_blocks(total_s: float, slice_s: float, sides: int) -> int:
    """How many whole blocks fit in ``total_s`` (at least one)."""
    return max(1, int(total_s // (slice_s * sides)))


def parse_sides(text: str, hosts: int, key: str = "--sides") -> tuple[int, ...]:
    """``--sides 0,1,1``: the side of each host (in ``--hosts`` order); every side from 0 up
    has a host. Empty: no alternation."""

    if not text.strip():
        return ()
    try:
        sides = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise RunError(
            f"{text!r} is not a list of side numbers", key=key, hint="e.g. 0,1"
        ) from None
    if len(sides) != hosts:
        raise RunError(
            f"{len(sides)} sides for {hosts} hosts: give one side per host",
            key=key,
            hint="e.g. 0,1",
        )
    if sorted(set(sides)) != list(range(max(sides) + 1)) or max(sides) < 1:
        raise RunError(
            f"{text!r}: sides are numbered 0, 1, … and there must be two or more",
            key=key,
            hint="e.g. 0,1 (or 0,0,1,1 for two replicas a side)",
        )
    return sides


def alternating_arrivals(
    shape: Any, seed: int, schedule: SliceSchedule, slices: int
) -> list[tuple[int, float]]:
    """An open-loop shape's arrivals over ``slices`` slices: (request index, seconds from the
    schedule's epoch), in time order. Each block draws its own arrival offsets for one slice
    (from ``seed`` and the block), and every slice of the block repeats them."""
    from dataclasses import replace

    from vprof.traffic.shape import arrival_offsets

    one_slice = replace(shape, duration_s=schedule.slice_s, warmup_s=0.0)
    drawn: dict[int, list[float]] = {}
    out: list[tuple[int, float]] = []
    for k in range(slices):
        block = schedule.block_of(k)
        if block not in drawn:
            drawn[block] = arrival_offsets(one_slice, seed * 7919 + block)
        start = k * schedule.slice_s
        out += [(k * STRIDE + i, start + t) for i, t in enumerate(drawn[block])]
    return out
