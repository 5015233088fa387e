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


@pytest.mark.parametrize(
    ("fit_slice", "blocks", "slice_s"),
    [(True, 6, 19.7), (False, 5, 20.0)],
)
def test_a_time_budget_shortens_slices_so_whole_blocks_fill_it(
    tmp_path, fit_slice, blocks, slice_s
):
    import time

    from vprof.records import RunDir
    from vprof.runs.alternate import AlternateSpec, AlternatingBench, _Phase

    bench = AlternatingBench.__new__(AlternatingBench)  # the budget arithmetic alone
    spec = AlternateSpec(20.0, 5.0, time_budget_s=600.0, swap=True, fit_slice=fit_slice)
    bench.alt, bench.sides, bench.start_s = spec, [None, None], 53.0
    bench.began = time.monotonic() - 53.0  # the servers took 53 s to start
    said: list[str] = []
    bench.say = said.append
    phase = _Phase(RunDir(tmp_path / "run"), 1, 7)
    bench._fit_to_budget(phase)
    # each phase gets (600 − 53 − 10 − 53 − 10) / 2 = 237 s: five blocks of 2 × 20 s leave
    # 37 s unused, six blocks of 2 × 19.7 s fill it
    assert (phase.blocks, bench.alt.slice_s) == (blocks, slice_s), said
    second = _Phase(RunDir(tmp_path / "run2"), 2, blocks)
    bench._fit_to_budget(second)  # the second phase keeps the first one's slices
    assert bench.alt.slice_s == slice_s
