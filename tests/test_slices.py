"""Alternating slices: ABBA order, one request stream per block, measured windows."""

from __future__ import annotations

import pytest

from vprof.common.errors import RunError
from vprof.traffic.shape import TrafficShape
from vprof.traffic.slices import (
    STRIDE,
    SliceSchedule,
    alternating_arrivals,
    parse_sides,
    whole_blocks,
)


def test_two_sides_alternate_abba():
    s = SliceSchedule(epoch=100.0, slice_s=20.0, warmup_s=5.0, sides=2)
    assert [s.side_of(k) for k in range(8)] == [0, 1, 1, 0, 0, 1, 1, 0]
    assert [s.block_of(k) for k in range(4)] == [0, 0, 1, 1]
    assert s.slice_at(99.0) == -1 and s.slice_at(100.0) == 0 and s.slice_at(139.99) == 1
    assert s.window(1) == (125.0, 140.0)


def test_three_sides_reverse_every_other_block():
    s = SliceSchedule(epoch=0.0, slice_s=10.0, warmup_s=2.0, sides=3)
    assert [s.side_of(k) for k in range(9)] == [0, 1, 2, 2, 1, 0, 0, 1, 2]


def test_slices_of_a_block_plan_the_same_requests_blocks_differ():
    s = SliceSchedule(epoch=0.0, slice_s=10.0, warmup_s=2.0, sides=2)
    assert s.plan_index(0 * STRIDE + 7) == s.plan_index(1 * STRIDE + 7) == 7
    assert s.plan_index(2 * STRIDE + 7) == s.plan_index(3 * STRIDE + 7) == STRIDE + 7
    assert s.salt("x", 0) == s.salt("x", 1) != s.salt("x", 2)


def test_open_loop_arrivals_repeat_within_a_block():
    s = SliceSchedule(epoch=0.0, slice_s=10.0, warmup_s=2.0, sides=2)
    shape = TrafficShape(name="p", kind="open-loop", rate_rps=5.0, process="poisson", duration_s=99)
    arrivals = alternating_arrivals(shape, 3, s, 4)
    per_slice = [[t - k * 10.0 for i, t in arrivals if i // STRIDE == k] for k in range(4)]
    assert all(len(x) == 50 for x in per_slice)
    assert per_slice[0] == pytest.approx(per_slice[1]) and per_slice[2] == pytest.approx(
        per_slice[3]
    )
    assert per_slice[0] != pytest.approx(per_slice[2])
    assert [t for _, t in arrivals] == sorted(t for _, t in arrivals)


@pytest.mark.parametrize("bad", [dict(sides=1), dict(slice_s=0), dict(warmup_s=20.0)])
def test_a_bad_schedule_is_refused(bad):
    with pytest.raises(ValueError):
        SliceSchedule(**{"epoch": 0.0, "slice_s": 20.0, "warmup_s": 5.0, "sides": 2, **bad})


def test_sides_are_parsed_per_host():
    assert parse_sides("0,1", 2) == (0, 1)
    assert parse_sides("0,0,1,1", 4) == (0, 0, 1, 1)
    assert parse_sides("", 3) == ()
    for text, hosts in (("0,1", 3), ("0,2", 2), ("0,0", 2), ("a,b", 2)):
        with pytest.raises(RunError):
            parse_sides(text, hosts)


def test_whole_blocks():
    assert whole_blocks(600, 20, 2) == 15 and whole_blocks(10, 20, 2) == 1
