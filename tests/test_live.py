"""LiveStats: the web UI's live percentiles agree with numpy on the same records."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from vprof.locustfiles.live import AGGREGATED, RELATIVE_ERROR, LiveStats, LogHistogram, Timeline
from vprof.records import RequestRecord

T0 = 1_800_000_000.0  # a wall-clock second, far from any bucket edge issue


def make_records(n: int, seed: int = 1, start_at: float = T0, span_s: float = 30.0) -> list[dict]:
    """Realistic record dicts: ms-scale TTFT, 1-10 ms ITL, a few failures."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sent_at = start_at + rng.uniform(0, span_s)
        status = "ok" if rng.random() > 0.05 else rng.choice(["error", "timeout", "cancelled"])
        rec = RequestRecord(
            request_id=str(i),
            user_class=rng.choice(["ChatUser", "CompletionsUser"]),
            endpoint="chat",
            sent_at=sent_at,
            status=status,
        )
        if status == "ok":
            ttft_s = rng.lognormvariate(math.log(0.040), 0.5)
            gaps_ms = [rng.uniform(1.0, 10.0) for _ in range(rng.randint(1, 40))]
            rec.first_token_at = sent_at + ttft_s
            rec.last_token_at = rec.first_token_at + sum(gaps_ms) / 1000.0
            rec.finished_at = rec.last_token_at + 0.0005
            rec.itl_ms = gaps_ms
            rec.completion_tokens = len(gaps_ms) + 1
            rec.finalize()
        out.append(rec.to_dict())
    return out


def within(actual: float | None, expected: float, rel: float = 0.01) -> bool:
    return actual is not None and abs(actual - expected) <= rel * abs(expected) + 1e-12


@pytest.mark.parametrize(
    "draw",
    [
        lambda r: r.uniform(1.0, 10.0),  # ITL on a CPU server
        lambda r: r.lognormvariate(math.log(50.0), 1.0),  # heavy-tailed TTFT
        lambda r: r.expovariate(1 / 300.0),
        lambda r: r.uniform(1000.0, 60_000.0),  # long E2E
    ],
)
def test_histogram_percentiles_match_numpy_within_one_percent(draw):
    rng = random.Random(7)
    values = [draw(rng) for _ in range(5000)]
    hist = LogHistogram()
    for v in values:
        hist.add(v)
    ps = [0, 1, 10, 50, 90, 95, 99, 99.9, 100]
    for p, got in zip(ps, hist.percentiles(ps), strict=True):
        assert within(got, float(np.percentile(values, p))), (p, got)
    assert hist.count == len(values)
    assert hist.mean() == pytest.approx(float(np.mean(values)))
    assert hist.max == max(values) and hist.min == min(values)


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_histogram_small_samples_match_numpy_interpolation(n):
    values = [3.0 * (i + 1) for i in range(n)]
    hist = LogHistogram()
    for v in values:
        hist.add(v)
    for p in (0, 25, 50, 90, 99, 100):
        (got,) = hist.percentiles([p])
        assert within(got, float(np.percentile(values, p)), RELATIVE_ERROR), (n, p)


def test_histogram_separates_close_millisecond_gaps_that_locust_buckets_merge():
    # Locust stores response times rounded to whole ms (and 2 significant digits above 100);
    # 7.2 ms and 7.4 ms gaps must stay distinguishable here.
    low, high = LogHistogram(), LogHistogram()
    for _ in range(100):
        low.add(7.2)
        high.add(7.4)
    (p50_low,) = low.percentiles([50])
    (p50_high,) = high.percentiles([50])
    assert p50_low == pytest.approx(7.2, rel=RELATIVE_ERROR)
    assert p50_high == pytest.approx(7.4, rel=RELATIVE_ERROR)


def test_histogram_ignores_nan_and_counts_zero_and_empty_is_none():
    hist = LogHistogram()
    assert hist.percentiles([50, 99]) == [None, None]
    assert hist.mean() is None
    hist.add(float("nan"))
    assert hist.count == 0
    hist.add(0.0)
    hist.add(0.0)
    hist.add(4.0)
    assert hist.percentiles([0, 50, 100]) == [0.0, 0.0, 4.0]


def test_merged_histograms_equal_one_histogram_of_all_values():
    rng = random.Random(3)
    a_vals = [rng.uniform(1, 10) for _ in range(1000)]
    b_vals = [rng.uniform(5, 500) for _ in range(700)]
    a, b, both = LogHistogram(), LogHistogram(), LogHistogram()
    for v in a_vals:
        a.add(v)
        both.add(v)
    for v in b_vals:
        b.add(v)
        both.add(v)
    a.merge(b)
    ps = [50, 90, 95, 99]
    assert a.percentiles(ps) == both.percentiles(ps)
    assert (a.count, a.min, a.max) == (both.count, both.min, both.max)


def test_live_rows_match_numpy_over_successful_records():
    records = make_records(2000)
    live = LiveStats()
    live.add(records[:700])
    live.add(records[700:])
    rows = live.rows(now=T0 + 1000)
    assert [r["name"] for r in rows] == ["ChatUser", "CompletionsUser", AGGREGATED]
    agg = rows[-1]
    ok = [r for r in records if r["status"] == "ok"]
    assert agg["requests"] == len(records)
    assert agg["completed"] == len(ok)
    assert agg["failed"] == sum(r["status"] in ("error", "timeout") for r in records)
    assert agg["cancelled"] == sum(r["status"] == "cancelled" for r in records)
    series = {
        "ttft": [r["ttft_ms"] for r in ok],
        "tpot": [r["tpot_ms"] for r in ok if not math.isnan(r["tpot_ms"])],
        "itl": [g for r in ok for g in r["itl_ms"]],
        "e2el": [r["e2e_ms"] for r in ok],
    }
    for metric, values in series.items():
        assert agg[f"count_{metric}"] == len(values)
        for key, p in (("median", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
            expected = float(np.percentile(values, p))
            assert within(agg[f"{key}_{metric}_ms"], expected), (metric, key)
        assert agg[f"mean_{metric}_ms"] == pytest.approx(float(np.mean(values)))
    # Per-group rows partition the aggregate.
    assert sum(r["requests"] for r in rows[:-1]) == agg["requests"]
    chat_ttft = [r["ttft_ms"] for r in ok if r["user_class"] == "ChatUser"]
    assert within(rows[0]["median_ttft_ms"], float(np.percentile(chat_ttft, 50)))


def test_overall_throughput_is_completed_and_tokens_over_the_span():
    records = make_records(500)
    live = LiveStats()
    live.add(records)
    agg = live.rows(now=T0 + 1000)[-1]
    ok = [r for r in records if r["status"] == "ok"]
    first = min(r["sent_at"] for r in records)
    last = max(r["finished_at"] for r in ok)
    assert agg["duration_s"] == pytest.approx(last - first)
    assert agg["request_throughput"] == pytest.approx(len(ok) / (last - first))
    tokens = sum(r["completion_tokens"] for r in ok)
    assert agg["total_output_tokens"] == tokens
    assert agg["output_throughput"] == pytest.approx(tokens / (last - first))


def _ok(sent_at: float, ttft_ms: float, tokens: int = 5) -> dict:
    rec = RequestRecord(request_id="x", user_class="U", sent_at=sent_at, completion_tokens=tokens)
    rec.first_token_at = sent_at + ttft_ms / 1000
    rec.last_token_at = rec.first_token_at + 0.01 * (tokens - 1)
    rec.finished_at = rec.last_token_at
    rec.itl_ms = [10.0] * (tokens - 1)
    return rec.finalize().to_dict()


def test_current_window_covers_recent_seconds_only():
    live = LiveStats(window_s=10, lag_s=2)
    # Old traffic: TTFT 500 ms, 100 s before "now"; recent traffic: TTFT 20 ms, one per second.
    live.add([_ok(T0 + i * 0.1, 500.0) for i in range(50)])
    recent = [_ok(T0 + 100 + i, 20.0, tokens=11) for i in range(20)]
    live.add(recent)
    now = T0 + 120.5  # window = whole seconds [T0+108, T0+118)
    agg = live.rows(now=now)[-1]
    in_window = [r for r in recent if T0 + 108 <= math.floor(r["finished_at"]) < T0 + 118]
    assert agg["current_count_ttft"] == len(in_window) == 10
    assert agg["current_requests"] == 10 and agg["current_failed"] == 0
    assert agg["requests"] == 70
    assert agg["current_median_ttft_ms"] == pytest.approx(20.0, rel=0.01)
    assert agg["median_ttft_ms"] == pytest.approx(500.0, rel=0.01)  # 50 old vs 20 new
    assert agg["current_request_throughput"] == pytest.approx(1.0)
    assert agg["current_output_throughput"] == pytest.approx(11.0)
    # After traffic stops, the current figures fall to nothing.
    idle = live.rows(now=T0 + 200)[-1]
    assert idle["current_count_ttft"] == 0
    assert idle["current_request_throughput"] == 0
    assert idle["current_median_ttft_ms"] is None


def test_current_window_is_not_longer_than_the_test_so_far():
    live = LiveStats(window_s=10, lag_s=2)
    live.add([_ok(T0 + i * 0.25, 20.0) for i in range(16)])  # 4 s of traffic, 4 req/s
    agg = live.rows(now=T0 + 6.5)[-1]  # window [T0, T0+4): 4 s, not 10
    assert agg["current_request_throughput"] == pytest.approx(4.0)


def test_per_second_slots_are_pruned_on_long_runs():
    live = LiveStats(window_s=10, lag_s=2)
    for second in range(600):
        live.add([_ok(T0 + second, 20.0)])
    assert len(live._aggregated.seconds) <= 10 + 2 + 2
    assert live.requests == 600


def test_merge_of_two_processes_equals_one_stats_over_all_records():
    records = make_records(1200, seed=5)
    one, a, b = LiveStats(), LiveStats(), LiveStats()
    one.add(records)
    a.add(records[::2])
    b.add(records[1::2])
    a.merge(b)
    now = T0 + 25
    # Equal up to float summation order (means and sums add in a different order).
    assert a.rows(now=now) == [pytest.approx(row) for row in one.rows(now=now)]


def test_reset_forgets_everything():
    live = LiveStats()
    live.add(make_records(100))
    live.reset()
    agg = live.rows(now=T0)[-1]
    assert live.requests == 0
    assert [r["name"] for r in live.rows(now=T0)] == [AGGREGATED]
    assert agg["requests"] == 0 and agg["median_ttft_ms"] is None
    assert agg["request_throughput"] is None


def test_rows_are_strict_json_even_with_failures_and_missing_fields():
    live = LiveStats()
    live.add(make_records(50))
    live.add([{"request_id": "bare", "status": "error"}, {"status": "ok", "ttft_ms": None}])
    text = json.dumps(live.rows(now=T0 + 100), allow_nan=False)
    assert "(unnamed)" in text


def test_live_module_imports_no_heavy_libraries():
    import subprocess
    import sys

    code = (
        "import sys, vprof.locustfiles.live; "
        "print(sorted(m for m in ('locust','numpy','pandas','pyarrow','gevent') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- Timeline: the charts' points ---------------------------------------------------------


def _spread(n: int, seed: int = 11, span_s: float = 60.0) -> list[dict]:
    """Records over ``span_s`` seconds, failures with a finish time as the users produce them."""
    rng = random.Random(seed)
    out = []
    for i, rec in enumerate(make_records(n, seed=seed, span_s=span_s)):
        if rec["status"] != "ok":
            rec["finished_at"] = rec["sent_at"] + rng.uniform(0.001, 0.5)
        out.append(rec)
        rec["request_id"] = str(i)
    return out


def test_timeline_points_match_numpy_over_the_records_finished_in_each_interval():
    # In finish order, in batches, as the processes ship them.
    records = sorted(_spread(3000), key=lambda r: r["finished_at"])
    timeline = Timeline(interval_s=5.0, lag_s=2.0, seal_after_s=30.0)
    for start in range(0, len(records), 250):
        timeline.add(records[start : start + 250])
    points = timeline.points(now=T0 + 1000)
    first_sent = min(r["sent_at"] for r in records)
    last_finished = max(r["finished_at"] for r in records)
    assert points[0]["t"] == math.floor(first_sent / 5) * 5
    assert points[-1]["t"] == math.floor(last_finished / 5) * 5
    assert [b["t"] - a["t"] for a, b in zip(points, points[1:], strict=False)] == [5.0] * (
        len(points) - 1
    )
    assert sum(p["requests"] for p in points) == len(records)
    sealed = [p for p in points if p["final"]]
    assert sealed and not points[-1]["final"]  # newest points are still provisional
    for point in points:
        t = point["t"]
        inside = [r for r in records if t <= r["finished_at"] < t + 5]
        ok = [r for r in inside if r["status"] == "ok"]
        start, end = max(t, first_sent), min(t + 5, last_finished)
        assert point["completed"] == len(ok)
        assert point["failed"] == sum(r["status"] in ("error", "timeout") for r in inside)
        assert point["request_throughput"] == pytest.approx(len(ok) / (end - start))
        tokens = sum(r["completion_tokens"] for r in ok)
        assert point["output_throughput"] == pytest.approx(tokens / (end - start))
        # Mean requests in flight: request-seconds inside the interval over its length.
        busy = sum(max(0.0, min(r["finished_at"], end) - max(r["sent_at"], start)) for r in records)
        assert point["in_flight"] == pytest.approx(busy / (end - start))
        series = {
            "ttft": [r["ttft_ms"] for r in ok],
            "itl": [g for r in ok for g in r["itl_ms"]],
            "tpot": [r["tpot_ms"] for r in ok if not math.isnan(r["tpot_ms"])],
        }
        for metric, values in series.items():
            for key, p in (("median", 50), ("p90", 90), ("p99", 99)):
                got = point[f"{key}_{metric}_ms"]
                if not values:
                    assert got is None
                else:
                    assert within(got, float(np.percentile(values, p))), (t, metric, key)


def test_timeline_shows_only_intervals_that_ended_lag_s_ago_and_since_trims():
    timeline = Timeline(interval_s=5.0, lag_s=2.0)
    timeline.add([_ok(T0 + i * 0.5, 20.0) for i in range(40)])  # T0 .. T0+20
    assert [p["t"] for p in timeline.points(now=T0 + 11.9)] == [T0]  # [T0+5, +10) ends +12
    assert [p["t"] for p in timeline.points(now=T0 + 12.0)] == [T0, T0 + 5]
    assert [p["t"] for p in timeline.points(now=T0 + 500)] == [T0, T0 + 5, T0 + 10, T0 + 15]
    assert [p["t"] for p in timeline.points(now=T0 + 500, since=T0 + 10)] == [T0 + 10, T0 + 15]
    assert [p["t"] for p in timeline.points(now=T0 + 500, since=T0 + 7)] == [T0 + 10, T0 + 15]


def test_timeline_fills_quiet_intervals_and_counts_long_requests_in_flight_throughout():
    timeline = Timeline(interval_s=5.0, lag_s=0.0)
    long = _ok(T0, 100.0, tokens=2)
    long["finished_at"] = T0 + 19.9  # one request in flight for 20 s
    timeline.add([_ok(T0 + 0.1, 20.0), long])
    points = timeline.points(now=T0 + 100)
    assert [p["t"] for p in points] == [T0, T0 + 5, T0 + 10, T0 + 15]
    assert [p["completed"] for p in points] == [1, 0, 0, 1]  # the long one ends at T0+19.9
    assert [p["in_flight"] for p in points[1:]] == [pytest.approx(1.0)] * 3
    assert points[1]["median_ttft_ms"] is None  # nothing finished there: no percentile


def test_sealed_intervals_keep_their_percentiles_and_drop_their_histograms():
    timeline = Timeline(interval_s=5.0, lag_s=0.0, seal_after_s=10.0)
    timeline.add([_ok(T0 + 0.5 + i * 0.1, 30.0) for i in range(10)])
    before = timeline.points(now=T0 + 100)[0]
    assert not before["final"]
    timeline.add([_ok(T0 + 16.0, 90.0)])  # newer than T0+5 by more than 10 s: seals [T0, +5)
    sealed = timeline.points(now=T0 + 100)[0]
    assert sealed["final"] and timeline._intervals[math.floor(T0 / 5)].slot.hists == {}
    assert sealed["median_ttft_ms"] == before["median_ttft_ms"]
    # A straggler for a sealed interval still counts, but cannot move fixed percentiles.
    timeline.add([_ok(T0 + 1.0, 500.0)])
    late = timeline.points(now=T0 + 100)[0]
    assert late["completed"] == 11 and late["median_ttft_ms"] == before["median_ttft_ms"]


def test_timeline_keeps_at_most_max_points_and_reset_starts_a_new_generation():
    timeline = Timeline(interval_s=1.0, lag_s=0.0, seal_after_s=5.0, max_points=50)
    for second in range(200):
        timeline.add([_ok(T0 + second + 0.2, 20.0)])
    points = timeline.points(now=T0 + 1000)
    assert len(points) == 50 and points[-1]["t"] == T0 + 199
    assert len(timeline._open) <= 7  # only the last seal_after_s are histograms
    generation = timeline.generation
    timeline.reset()
    assert timeline.points(now=T0 + 1000) == [] and timeline.generation == generation + 1


def test_timeline_points_are_strict_json():
    timeline = Timeline()
    timeline.add(_spread(200))
    timeline.add([{"status": "ok"}, {"status": "error", "finished_at": None}])  # nothing to place
    json.dumps(timeline.points(now=T0 + 1000), allow_nan=False)
    with pytest.raises(ValueError):
        Timeline(interval_s=0)
