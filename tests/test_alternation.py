"""Alternating runs: slices cut from the records, sides read as runs, paired verdicts over
blocks that find a real shift and call A/A no difference, through a drift."""

from __future__ import annotations

import math

import pytest
from test_analysis_data import synth_alternating

from vprof.analysis import compare, load_run
from vprof.analysis.alternation import measured_windows, paired_blocks, side_views, slice_values
from vprof.analysis.run import summarize_loaded


def test_slices_are_cut_after_their_warm_up_and_sides_follow_abba(tmp_path):
    run = load_run(synth_alternating(tmp_path / "alt", blocks=3))
    rows = slice_values(run)
    assert [r["side"] for r in rows] == ["a", "b", "b", "a", "a", "b"]
    # 20 s slices at 8 req/s, the first 5 s not measured: 120 of 160 requests each
    assert all(r["requests"] == 120 for r in rows)
    assert all(r["request_throughput"] == pytest.approx(120 / 15) for r in rows)


def test_a_slice_the_load_stopped_inside_is_not_measured(tmp_path):
    run = load_run(synth_alternating(tmp_path / "alt", blocks=3, stop_early_s=3.0))
    names, blocks = paired_blocks([run])
    assert names == ["a", "b"] and len(blocks) == 2  # the last block lost its last slice


def test_a_slice_is_measured_once_the_slice_before_it_has_answered(tmp_path):
    """A user still waiting on the other side's answer is not loading this side: the measured
    part starts after the warm-up and after that answer; an answer that ran to the slice's
    end leaves it unmeasured (its block is not paired)."""
    run = load_run(synth_alternating(tmp_path / "alt", blocks=3, late_s={1: 7.5, 3: 25.0}))
    windows = {k: (low, high) for k, low, high in measured_windows(run)}
    assert sorted(windows) == [0, 1, 2, 3, 5]  # slice 3 answered past slice 4's end
    assert all(high - low == pytest.approx(15.0) for k, (low, high) in windows.items() if k != 2)
    assert windows[2][1] - windows[2][0] == pytest.approx(12.5)  # 7.5 s, not the 5-s warm-up
    rows = {r["slice"]: r for r in slice_values(run)}
    assert rows[2]["requests"] == 100 and rows[2]["measured_s"] == pytest.approx(12.5)
    _, blocks = paired_blocks([run])
    assert len(blocks) == 2  # block 2 lost slice 4
    a, b = (summarize_loaded(view) for view in side_views(run))
    assert a["requests"] == 2 * 120 and b["requests"] == 2 * 120 + 100
    # each side over its own measured time: 8 req/s, as sent
    assert a["request_throughput"] == pytest.approx(8.0) == b["request_throughput"]


def test_each_side_reads_as_a_run_of_its_measured_requests(tmp_path):
    run = load_run(synth_alternating(tmp_path / "alt", blocks=4, shift=1.5))
    a, b = side_views(run)
    sa, sb = summarize_loaded(a), summarize_loaded(b)
    assert sa["profile"] == "a" and sb["profile"] == "b"
    assert sa["requests"] == sb["requests"] == 4 * 120
    assert sa["request_throughput"] == pytest.approx(8.0, rel=1e-9)  # over its 60 measured s
    assert sb["median_ttft_ms"] / sa["median_ttft_ms"] == pytest.approx(1.5, rel=0.15)


def test_a_known_shift_is_found_through_a_drift_larger_than_it(tmp_path):
    # the host slows 2 % a slice (×2.2 over the run), b is 10 % slower throughout
    path = synth_alternating(tmp_path / "ab", blocks=20, shift=1.10, drift_per_slice=0.02)
    frame = compare([path], metrics=["median_ttft_ms", "p95_ttft_ms"], detect=10.0)
    for row in frame.itertuples():
        assert row.method == "paired t over alternating slices"
        assert row.significant and row.better == "worse", row.verdict
        assert row.ci_low_pct < 10 < row.ci_high_pct
        # p95 of 120 requests a slice is noisier than their median
        assert row.detectable_pct < (10 if row.metric.startswith("median") else 15)
        assert row.power_pct > (80 if row.metric.startswith("median") else 50)
    assert "20 paired slices" in frame.iloc[0]["verdict"]
    assert "alternating slices: 20 blocks of a / b" in frame.attrs["notes"][0]


def test_a_a_is_no_difference_through_the_same_drift(tmp_path):
    path = synth_alternating(tmp_path / "aa", blocks=20, drift_per_slice=0.02, seed=3)
    frame = compare([path], metrics=["median_ttft_ms", "p95_ttft_ms"])
    for row in frame.itertuples():
        assert not row.significant, row.verdict
        assert "could not have seen a change under" in row.verdict
        assert 0 < row.detectable_pct < 20


def test_an_alternating_run_is_not_mixed_with_ordinary_runs(tmp_path):
    from test_analysis_data import synth_records, write_run

    from vprof.common.errors import RunError

    alt = synth_alternating(tmp_path / "alt", blocks=2)
    plain = write_run(tmp_path / "plain", synth_records(50))
    with pytest.raises(RunError, match="ordinary runs"):
        compare([alt, plain])


def test_one_block_gives_no_interval(tmp_path):
    frame = compare([synth_alternating(tmp_path / "one", blocks=1)], metrics=["median_ttft_ms"])
    row = frame.iloc[0]
    assert not row["significant"] and math.isnan(row["ci_low_pct"])


def test_every_default_metric_is_judged_in_one_family(tmp_path):
    """Judged together, an A/A's metrics still show no difference, and a 10 % slowdown that
    moves every latency is still found in each (adjusted together, a change that moves many
    metrics costs little)."""
    aa = compare([synth_alternating(tmp_path / "aa", blocks=20, drift_per_slice=0.02, seed=3)])
    ab = compare([synth_alternating(tmp_path / "ab", blocks=20, shift=1.10, drift_per_slice=0.02)])
    judged = aa[aa.p_adjusted.notna()]
    assert len(judged) >= 10 and not aa.significant.any(), aa.verdict.tolist()
    assert (judged.p_adjusted >= judged.p_value).all()
    assert any(f"{len(judged)} metrics judged together" in n for n in aa.attrs["notes"])
    latency = ab[ab.metric.str.contains("ttft|tpot|itl|e2el") & ab.metric.str.startswith("median")]
    assert len(latency) == 4 and (latency.better == "worse").all(), latency.verdict.tolist()
    twice = compare([tmp_path / "aa"], metrics=["median_ttft_ms", "median_ttft_ms"])
    assert twice.metric.tolist() == ["median_ttft_ms"]  # named twice, judged once
