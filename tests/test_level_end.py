"""Requests cut off in flight at a level's end: counted cancelled, out of the percentiles, and
judged by SLO checks only where their age already tells the outcome."""

from __future__ import annotations

import math

from test_analysis_data import T0, synth_records, write_run

from vprof.analysis import summarize_run
from vprof.records.schema import CUT_AT_END


def _run_with_cuts(tmp_path, ages_ms, *, first_token_ms=None):
    """40 open-loop requests answered in 100 ms TTFT, and one cut request per age."""
    records = synth_records(40, open_loop=True, ttft_ms=100.0, rate_rps=4.0)
    end = T0 + 10.5
    for i, age in enumerate(ages_ms):
        cut = synth_records(1, open_loop=True, start=end - age / 1000.0)[0]
        cut.request_id = f"cut{i}"
        cut.status, cut.error = "cancelled", CUT_AT_END
        cut.first_token_at = (
            math.nan if first_token_ms is None else cut.sent_at + first_token_ms / 1e3
        )
        cut.last_token_at, cut.finished_at = math.nan, end
        cut.ttft_ms = cut.e2e_ms = cut.tpot_ms = math.nan
        cut.itl_ms = []
        records.append(cut)
    return write_run(tmp_path / "run", records, open_loop=True)


def _check(summary, key):
    return next(c for c in summary["slo_checks"] if c["key"] == key)


def test_requests_cut_young_are_left_out_and_old_ones_missed_the_slo(tmp_path):
    # p90 TTFT ≤ 500 ms over 40 answered requests (~100 ms): 4 cut at 50 ms of age say
    # nothing; 5 cut at 2 s of age certainly missed 500 ms: 5 of 45 beyond it, p90 is not met.
    summary = summarize_run(_run_with_cuts(tmp_path, [50] * 4 + [2000] * 5), slo="ttft_p90=500ms")
    assert summary["cancelled"] == 9
    assert summary["completed"] == 40
    assert "unanswered_counted_as_unbounded" not in _check(summary, "ttft_p90")
    assert _check(summary, "ttft_p90")["value_ms"] == math.inf
    assert not summary["slo_met"]


def test_young_cuts_alone_leave_the_check_and_the_served_rate_as_without_them(tmp_path):
    with_cuts = summarize_run(_run_with_cuts(tmp_path, [50] * 4), slo="ttft_p90=500ms")
    without = summarize_run(_run_with_cuts(tmp_path / "b", []), slo="ttft_p90=500ms")
    assert with_cuts["slo_met"] and without["slo_met"]
    assert _check(with_cuts, "ttft_p90")["value_ms"] == _check(without, "ttft_p90")["value_ms"]
    assert with_cuts["p90_ttft_ms"] == without["p90_ttft_ms"]  # out of the percentiles
    # served = arrivals x the share answered of those whose outcome is known
    answered = with_cuts["served_rate"] / with_cuts["arrival_rate"]
    assert answered == 1.0


def test_a_cut_request_whose_first_token_came_counts_its_ttft(tmp_path):
    summary = summarize_run(
        _run_with_cuts(tmp_path, [2000] * 10, first_token_ms=120.0), slo="ttft_p90=500ms"
    )
    assert summary["slo_met"]  # their TTFT (120 ms) is known, and within 500 ms
