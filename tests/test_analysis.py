"""Summaries against an independent recomputation from the records, SLOs, goodput, warm-up,
failures, open-loop metrics, server and load-generator samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_analysis_data import T0, synth_records, write_run

from vprof.analysis import (
    SloError,
    load_run,
    parse_slo,
    summarize,
    summarize_run,
    timeline,
    write_summary,
)
from vprof.records import read_records

PCTS = (50, 90, 95, 99, 99.9)


def _key(q: float) -> str:
    return f"p{int(q)}" if float(q).is_integer() else f"p{q}"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def test_summary_percentiles_equal_a_recomputation_from_the_records(tmp_path):
    run = write_run(tmp_path / "a", synth_records(400, fail_every=25, tokens=(1, 30)))
    df = read_records(run)
    s = summarize(df)

    # Independent recomputation, request by request, the way vllm bench serve does it.
    ok = [r for r in df.itertuples() if r.status == "ok"]
    ttft = np.array([r.ttft_ms for r in ok])
    e2el = np.array([(r.last_token_at - r.sent_at) * 1000 for r in ok])
    tpot = np.array(
        [
            ((r.last_token_at - r.sent_at) * 1000 - r.ttft_ms) / (r.completion_tokens - 1)
            for r in ok
            if r.completion_tokens > 1
        ]
    )
    itl = np.array([g for r in ok for g in r.itl_ms])
    assert s["completed"] == len(ok) == 384
    assert s["failed"] == 16
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        assert _close(s[f"mean_{name}_ms"], values.mean())
        assert _close(s[f"median_{name}_ms"], np.median(values))
        assert _close(s[f"std_{name}_ms"], values.std())
        for q in PCTS:
            assert _close(s[f"{_key(q)}_{name}_ms"], np.percentile(values, q)), (name, q)

    start = df["sent_at"].min()
    end = max(r.finished_at for r in df.itertuples())
    duration = end - start
    assert _close(s["duration"], duration)
    out_tokens = sum(r.completion_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens for r in ok)
    assert s["total_output_tokens"] == out_tokens
    assert s["total_input_tokens"] == in_tokens
    assert _close(s["request_throughput"], len(ok) / duration)
    assert _close(s["output_throughput"], out_tokens / duration)
    assert _close(s["total_token_throughput"], (in_tokens + out_tokens) / duration)

    # Peak concurrency by brute force over [send, last token) intervals.
    spans = [(r.sent_at, r.last_token_at) for r in ok]
    peak = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert s["max_concurrent_requests"] == peak
    # Peak chunks per second, reconstructed per request like vllm bench serve.
    t0 = min(r.sent_at for r in ok)
    bins: dict[int, int] = {}
    for r in ok:
        t = r.first_token_at
        times = [t]
        for gap in r.itl_ms:
            t += gap / 1000
            times.append(t)
        for t in times:
            bins[int(t - t0)] = bins.get(int(t - t0), 0) + 1
    assert s["max_output_tokens_per_s"] == max(bins.values())


def _naive_peak_chunks_per_s(records) -> int:
    ok = [r for r in records if r.status == "ok"]
    t0 = min(r.sent_at for r in ok)
    bins: dict[int, int] = {}
    for r in ok:
        t = r.first_token_at
        bins[int(t - t0)] = bins.get(int(t - t0), 0) + 1
        for gap in r.itl_ms:
            t += gap / 1000
            bins[int(t - t0)] = bins.get(int(t - t0), 0) + 1
    return max(bins.values())


@pytest.mark.parametrize("itl_ms, rate_rps", [(300.0, 2.0), (5.0, 50.0), (900.0, 0.5)])
def test_peak_chunks_per_second_matches_per_chunk_reconstruction(tmp_path, itl_ms, rate_rps):
    # Slow streams cross many whole seconds; fast ones pile into a few bins.
    records = synth_records(150, seed=8, itl_ms=itl_ms, rate_rps=rate_rps, fail_every=9)
    s = summarize(load_run(write_run(tmp_path / "p", records)).records)
    assert s["max_output_tokens_per_s"] == _naive_peak_chunks_per_s(records)


def test_arrow_table_and_dataframe_give_the_same_summary(tmp_path):
    run = write_run(tmp_path / "a", synth_records(300, fail_every=7))
    from_table = summarize(load_run(run).records)
    from_frame = summarize(read_records(run))
    assert from_table.keys() == from_frame.keys()
    for key, value in from_table.items():
        if value is None:
            assert from_frame[key] is None, key
        elif isinstance(value, float) and math.isnan(value):
            assert math.isnan(from_frame[key]), key
        else:
            assert from_frame[key] == pytest.approx(value, rel=1e-12), key


def test_warmup_requests_are_excluded_by_send_time(tmp_path):
    warm = synth_records(40, ttft_ms=5000, start=T0, rate_rps=10)
    steady = synth_records(200, seed=3, ttft_ms=50, start=T0 + 10, rate_rps=10)
    for i, rec in enumerate(steady):
        rec.request_id = f"s{i}"
    run = write_run(tmp_path / "w", warm + steady, warmup_until=T0 + 10)
    s = summarize_run(run)
    assert s["excluded_warmup"] == 40
    assert s["requests"] == s["completed"] == 200
    expected = np.percentile([r.ttft_ms for r in steady], 99)
    assert _close(s["p99_ttft_ms"], expected)
    assert s["p99_ttft_ms"] < 1000  # the slow warm-up requests are gone
    assert _close(s["duration"], max(r.finished_at for r in steady) - steady[0].sent_at)


def test_failed_and_cancelled_requests_are_counted_apart_from_latencies():
    records = synth_records(100, fail_every=10, cancel_every=25)
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in records])
    s = summarize(df)
    assert s["failed"] == 10
    assert s["cancelled"] == 2  # requests 24 and 74 (49 and 99 failed first)
    assert s["errors_by_status"] == {"cancelled": 2, "error": 10}
    assert s["completed"] == 88
    assert _close(s["error_rate"], 10 / 98)  # cancelled requests are not errors
    ok_ttft = [r.ttft_ms for r in records if r.status == "ok"]
    assert _close(s["mean_ttft_ms"], float(np.mean(ok_ttft)))


def test_open_loop_latency_from_the_schedule_includes_the_send_lag(tmp_path):
    records = synth_records(300, open_loop=True, lag_ms=40.0, seed=5)
    run = write_run(tmp_path / "o", records, open_loop=True)
    s = summarize_run(run)
    assert s["open_loop"] is True
    from_schedule = np.array([(r.first_token_at - r.scheduled_at) * 1000 for r in records])
    lag = np.array([(r.sent_at - r.scheduled_at) * 1000 for r in records])
    assert _close(s["p99_ttft_from_schedule_ms"], np.percentile(from_schedule, 99))
    assert _close(s["p50_schedule_lag_ms"], np.percentile(lag, 50))
    assert _close(s["max_schedule_lag_ms"], lag.max())
    assert s["p99_ttft_from_schedule_ms"] > s["p99_ttft_ms"]


@pytest.mark.parametrize(("held", "limited"), [(2, False), (40, True)])
def test_a_few_arrivals_held_by_the_in_flight_cap_do_not_make_the_client_the_limit(held, limited):
    # A server whose queue touched the shape's cap for moments (2 of 400 arrivals waited) fell
    # behind on its own: its SLO judges it. A cap that held a tenth of the arrivals held back
    # the load asked for: the level is the client's.
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in synth_records(400, open_loop=True, seed=3)])
    late = df.index[50 : 50 + held]
    for column in ("sent_at", "first_token_at", "last_token_at", "finished_at"):
        df.loc[late, column] += 0.05
    df.loc[late, "schedule_lag_ms"] = 50.0
    s = summarize(df, in_flight_cap=1)
    assert s["in_flight_cap_reached"] and s["held_back"] == held
    assert s["client_limited"] is limited
    assert any("in-flight cap (1)" in why for why in s["client_limited_by"]) is limited


def test_sessions_the_stop_cut_off_while_thinking_still_count_as_thinking():
    # Two closed-loop users, 3-turn conversations thinking 0.4 s: the stop kills user B in its
    # think before turn 2 (due at 1.0 s) while user A's turn 2 slips out at 1.0 s. A think is
    # read from the send after it, so B's last one had no record and the users came out short.
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in synth_records(5)])
    conversation, turn = [0, 0, 0, 1, 1], [0, 1, 2, 0, 1]
    sent = np.array([0.0, 0.5, 1.0, 0.0, 0.5]) + T0
    df["conversation_id"], df["turn"], df["sent_at"] = conversation, turn, sent
    df["first_token_at"] = sent + 0.05
    df["last_token_at"] = df["finished_at"] = sent + 0.1
    df["think_ms"] = [0.0, 400.0, 400.0, 0.0, 400.0]
    df["idle_before_ms"] = [np.nan, 400.0, 400.0, np.nan, 400.0]
    df["status"] = "ok"
    s = summarize(df, users=2)
    # two answers of 0.1 s each user before 1.0 s; B's cut-off think (0.4 s) counted
    assert s["mean_in_flight"] == pytest.approx(0.4, rel=1e-5)
    assert s["mean_thinking"] == pytest.approx(1.6, rel=1e-5)
    assert not s["client_limited_by"]


def test_open_loop_served_rate_is_the_arrival_rate_times_the_share_answered(tmp_path):
    # 40 arrivals at 4 req/s whose answers take about 2 s (100 tokens at 20 ms): vllm's
    # request_throughput divides by the time to the last answer, drain included
    records = synth_records(40, open_loop=True, rate_rps=4.0, tokens=(100, 100), cancel_every=10)
    s = summarize_run(write_run(tmp_path / "o", records, open_loop=True))
    assert _close(s["arrival_rate"], 4.0)
    assert _close(s["served_rate"], 4.0 * 36 / 40)  # every tenth was cancelled
    assert s["request_throughput"] < 0.9 * s["served_rate"]  # 36 answers over 9.75 s + ~2 s
    from vprof.analysis import plan

    def level_rate(summary: dict) -> float:
        return plan([summary], target_rps=1.0, slo="ttft_p95=100s").profiles[0].levels[0].rps

    assert _close(level_rate(s), s["served_rate"])  # what the capacity plan reads
    closed = summarize_run(write_run(tmp_path / "c", synth_records(40)))
    assert "served_rate" not in closed
    assert _close(level_rate(closed), closed["request_throughput"])


def test_closed_loop_summary_has_no_schedule_keys(tmp_path):
    s = summarize_run(write_run(tmp_path / "c", synth_records(50)))
    assert s["open_loop"] is False
    assert "p99_ttft_from_schedule_ms" not in s


def test_goodput_counts_requests_meeting_every_threshold():
    records = synth_records(500, seed=11, tokens=(1, 30), fail_every=50)
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in records])
    s = summarize(df, slo="ttft_p95=120ms,tpot_p95=25ms")
    good = [
        r
        for r in records
        if r.status == "ok"
        and r.ttft_ms <= 120
        and (0.0 if math.isnan(r.tpot_ms) else r.tpot_ms) <= 25  # ≤1 token: TPOT 0
    ]
    assert s["good_requests"] == len(good)
    assert _close(s["request_goodput"], len(good) / s["duration"])
    assert 0 < s["good_requests"] < s["completed"]
    # Without errors= a failure counts as unbounded latency: 2 % failures spoil no p95 ...
    ttft_check = next(c for c in s["slo_checks"] if c["key"] == "ttft_p95")
    with_failures = np.concatenate(
        [[r.ttft_ms for r in records if r.status == "ok"], np.full(10, np.inf)]
    )
    assert _close(ttft_check["value_ms"], np.percentile(with_failures, 95))
    assert ttft_check["met"] == (ttft_check["value_ms"] <= 120)


def test_slo_met_and_missed_are_reported_per_objective():
    import pandas as pd

    df = pd.DataFrame([r.to_dict() for r in synth_records(300, seed=2, fail_every=30)])
    loose = summarize(df, slo="ttft_p95=10s,tpot_p99=1s,errors=5%")
    assert loose["slo_met"] is True
    assert [c["met"] for c in loose["slo_checks"]] == [True, True, True]
    assert loose["slo_checks"][0]["value_ms"] == loose["p95_ttft_ms"]
    strict = summarize(df, slo="ttft_p95=10s,errors=1%")
    assert strict["slo_met"] is False
    assert strict["slo_checks"][-1] == {
        "key": "errors",
        "threshold": 0.01,
        "value": pytest.approx(10 / 300),
        "met": False,
    }
    # Without errors=, 3.3 % failed requests make p99 TTFT unbounded.
    unbounded = summarize(df, slo="ttft_p99=10s")
    assert unbounded["slo_checks"][0]["value_ms"] == math.inf
    assert unbounded["slo_met"] is False


def test_parse_slo_units_percentiles_and_errors():
    slo = parse_slo("ttft_p95=0.5s, tpot_p99.9=50ms, e2e=2s, itl_p99=40000us, errors=1%")
    assert [(t.metric, t.percentile, t.threshold_ms) for t in slo.targets] == [
        ("ttft", 95.0, 500.0),
        ("tpot", 99.9, 50.0),
        ("e2el", None, 2000.0),
        ("itl", 99.0, 40.0),
    ]
    assert slo.max_error_rate == 0.01
    assert slo.targets[1].key == "tpot_p99.9"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty SLO"),
        ("ttft_p95", "is not key=value"),
        ("speed_p95=5ms", "unknown SLO key 'speed_p95'"),
        ("ttft_p101=5ms", "percentile must be in (0, 100]"),
        ("ttft_p95=fast", "is not a duration"),
        ("ttft_p95=5ms,ttft_p95=6ms", "given twice"),
        ("errors=150%", "between 0 and 100"),
        ("errors=lots", "is not a rate"),
    ],
)
def test_parse_slo_errors_say_what_and_how(text, fragment):
    with pytest.raises(SloError) as info:
        parse_slo(text)
    message = str(info.value)
    assert fragment in message
    assert message.startswith("--slo: ")


def test_server_metrics_and_loadgen_samples_are_summarised(tmp_path):
    records = synth_records(100, rate_rps=10)
    end = max(r.finished_at for r in records)
    metrics = [
        {
            "t": T0 - 5,
            "values": {
                "vllm:prefix_cache_hits_total": 100.0,
                "vllm:prefix_cache_queries_total": 1000.0,
                "vllm:num_preemptions_total": 2.0,
            },
        },
        {
            "t": T0 + 5,
            "values": {
                "vllm:kv_cache_usage_perc": 0.4,
                "vllm:num_requests_waiting": 6.0,
                "vllm:num_requests_running": 3.0,
            },
        },
        {
            "t": end - 0.1,
            "values": {
                "vllm:prefix_cache_hits_total": 400.0,
                "vllm:prefix_cache_queries_total": 1600.0,
                "vllm:num_preemptions_total": 5.0,
                "vllm:kv_cache_usage_perc": 0.1,
                "vllm:num_requests_waiting": 2.0,
            },
        },
        {"t": end + 60, "values": {"vllm:kv_cache_usage_perc": 0.99}},  # after the run
    ]
    loadgen = [{"t": T0 + i, "worker": "w0", "cpu_percent": c} for i, c in enumerate([95, 97, 99])]
    loadgen += [{"t": T0 + i, "worker": "w1", "cpu_percent": 30.0} for i in range(3)]
    s = summarize_run(write_run(tmp_path / "m", records, metrics=metrics, loadgen=loadgen))
    assert s["prefix_cache_hit_rate"] == pytest.approx(300 / 600)
    assert s["num_preemptions"] == 3
    assert s["max_kv_cache_usage_perc"] == 0.4
    assert s["max_num_requests_waiting"] == 6.0
    assert s["mean_num_requests_waiting"] == 4.0
    assert s["loadgen_cpu"]["w0"]["mean_cpu_percent"] == pytest.approx(97.0)
    assert s["loadgen_saturated"] is True
    assert "w0" in s["loadgen_verdict"] and "saturated" in s["loadgen_verdict"]
    cached = sum(r.cached_tokens for r in records)
    prompt = sum(r.prompt_tokens for r in records)
    assert s["cached_token_share"] == pytest.approx(cached / prompt)


def test_write_summary_writes_strict_json_and_a_timeline(tmp_path):
    records = synth_records(120, rate_rps=6, fail_every=12)
    run = write_run(tmp_path / "t", records)
    before = sorted(p.name for p in run.iterdir())
    summarize_run(run)
    assert sorted(p.name for p in run.iterdir()) == before  # summarize_run writes nothing
    write_summary(run, slo="ttft_p95=1ms")
    data = json.loads((run / "summary.json").read_text(), parse_constant=_reject)
    assert data["completed"] == 110
    assert data["slo_checks"][0]["value_ms"] == "inf"
    import pandas as pd

    frame = pd.read_csv(run / "timeline.csv")
    assert frame["started"].sum() == 120
    assert frame["finished"].sum() == 110
    assert frame["failed"].sum() == 10


def _reject(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name}")


def test_timeline_intervals_add_up_and_show_per_interval_latency():
    import pandas as pd

    records = synth_records(200, rate_rps=10, seed=4)
    df = pd.DataFrame([r.to_dict() for r in records])
    frame = timeline(df, interval_s=5)
    assert list(frame["t_s"][:3]) == [0.0, 5.0, 10.0]
    assert frame["started"].sum() == 200
    assert frame["started"].iloc[0] == 50  # 10 req/s × 5 s
    first = [r.ttft_ms for r in records if r.sent_at < T0 + 5]
    assert frame["p95_ttft_ms"].iloc[0] == pytest.approx(np.percentile(first, 95))
    assert frame["request_throughput"].sum() * 5 == frame["finished"].sum()


def test_empty_run_summarises_to_zero_counts_without_crashing(tmp_path):
    s = summarize_run(write_run(tmp_path / "e", [], state="failed"))
    assert s["completed"] == 0 and s["state"] == "failed"
    assert math.isnan(s["p99_ttft_ms"])


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).lognormal(3, 0.4, 100_003),
        np.round(np.random.default_rng(1).lognormal(3, 0.4, 50_000), 1),  # many ties
        np.random.default_rng(2).normal(0, 1, 5_000),  # negatives: the fallback path
        np.array([7.0]),
        np.array([0.0, 0.0, 3.0]),
    ],
)
@pytest.mark.parametrize(
    "guess",
    [None, lambda v: v[::7], lambda v: v[: max(1, v.size // 50)] * 3.0],  # none, good, wrong
)
def test_block_quantiles_equal_numpy_percentiles(values, guess):
    from vprof.analysis.stats import BlockQuantiles

    blocks = np.array_split(values, 9)
    quantiles = BlockQuantiles()
    if guess is not None:
        quantiles.guess(guess(values), [50, *PCTS])
    for block in blocks:
        quantiles.add(block)
    if quantiles.plan([50, *PCTS]):
        for block in blocks:
            quantiles.collect(block)
    got = quantiles.describe("x", PCTS)
    assert got["median_x_ms"] == np.percentile(values, 50)
    for q in PCTS:
        assert got[f"{_key(q)}_x_ms"] == np.percentile(values, q), q
    assert got["mean_x_ms"] == pytest.approx(values.mean(), rel=1e-12)
    assert got["std_x_ms"] == pytest.approx(values.std(), rel=1e-9, abs=1e-12)


def test_prompt_token_mismatch_against_the_plan_is_reported():
    import pandas as pd

    records = synth_records(200, seed=5)
    for i, rec in enumerate(records):
        if rec.status == "ok":
            rec.prompt_tokens = 100 if i % 4 else 103  # every 4th: 3 tokens over the plan
    frame = pd.DataFrame([r.to_dict() for r in records])
    summary = summarize(frame)
    ok = frame[frame.status == "ok"]
    excess = ok.prompt_tokens - ok.expected_prompt_tokens
    assert summary["prompt_token_mismatch_rate"] == pytest.approx((excess != 0).mean())
    assert summary["mean_prompt_token_excess"] == pytest.approx(excess.mean())
    assert summary["prompt_token_mismatch_rate"] == pytest.approx(0.25, abs=0.01)


def test_load_spread_over_replicas_is_summarised_per_replica(tmp_path):
    fast = synth_records(200, seed=1, ttft_ms=40)
    slow = synth_records(200, seed=2, ttft_ms=160)
    for rec in fast:
        rec.replica = "http://10.0.0.1:8000"
    for rec in slow:
        rec.replica = "http://10.0.0.2:8000"
    s = summarize(read_records(write_run(tmp_path / "two", fast + slow)))
    assert s["replicas"] == 2
    one, two = (s["per_replica"][k] for k in ("http://10.0.0.1:8000", "http://10.0.0.2:8000"))
    assert one["completed"] == 200 and two["completed"] == 200
    assert one["median_ttft_ms"] < 60 < 120 < two["median_ttft_ms"]
    total = one["request_throughput"] + two["request_throughput"]
    assert total == pytest.approx(s["request_throughput"])


def _closed_loop(
    users: int, seconds: float, busy_s: float, idle_s: float, think_s: float = 0.0
) -> list:
    """Each user sends back to back: ``busy_s`` per answer, then ``idle_s`` before the next;
    with ``think_s``, the next is due that long after the answer (its ``scheduled_at``), and
    ``idle_s`` is how late it is sent after that."""
    from vprof.records.schema import RequestRecord

    records = []
    for user in range(users):
        t, previous_end, due = T0 + 0.01 * user, math.nan, math.nan
        while t < T0 + seconds:
            end = t + busy_s
            r = RequestRecord(
                request_id=f"{user}-{len(records)}",
                sent_at=t,
                scheduled_at=due,
                first_token_at=t + 0.05,
                last_token_at=end,
                finished_at=end,
                completion_tokens=8,
                idle_before_ms=(t - previous_end) * 1e3,
                think_ms=think_s * 1e3 if math.isfinite(due) else 0.0,
            )
            records.append(r.finalize())
            due = end + think_s if think_s else math.nan
            previous_end, t = end, end + think_s + idle_s
    return records


def test_closed_loop_mean_in_flight_is_held_against_the_users_asked_for(tmp_path):
    import pandas as pd

    busy = pd.DataFrame([r.to_dict() for r in _closed_loop(4, 30, 1.0, 0.0)])
    s = summarize(busy, users=4)
    assert s["mean_in_flight"] == pytest.approx(4.0, abs=0.01)
    assert s["in_flight_share"] == pytest.approx(1.0, abs=0.01) and s["users_asked"] == 4
    assert s["mean_idle_before_ms"] == pytest.approx(0.0, abs=1e-6)
    assert not s["client_limited"]

    idle = pd.DataFrame([r.to_dict() for r in _closed_loop(4, 30, 1.0, 0.5)])
    s = summarize(idle, users=4)
    assert s["mean_in_flight"] == pytest.approx(4 / 1.5, rel=0.03)
    assert s["mean_idle_before_ms"] == pytest.approx(500.0)
    assert s["client_limited"]
    assert any("requests in flight on average, of the 4 users" in r for r in s["client_limited_by"])

    # A run folder's steady shape names the users; a file without idle_before_ms still reads.
    run = write_run(tmp_path / "r", _closed_loop(4, 30, 1.0, 0.5))
    meta = json.loads((run / "run.json").read_text())
    meta["traffic"] = {"name": "steady", "kind": "steady", "users": 4}
    (run / "run.json").write_text(json.dumps(meta))
    assert summarize_run(run)["users_asked"] == 4 and summarize_run(run)["client_limited"]
    old = idle.drop(columns=["idle_before_ms"])
    s = summarize(old, users=4)
    assert math.isnan(s["mean_idle_before_ms"]) and s["client_limited"]


def test_a_closed_loop_short_because_requests_failed_is_not_blamed_on_the_client(tmp_path):
    """Users wait after a failure before they try again: the server saw less load by its own
    doing, and a comparison says so instead of sending the user to --processes."""
    import pandas as pd

    from vprof.analysis.compare import backed_off, client_limited, compare

    records = _closed_loop(4, 30, 1.0, 0.5)
    for r in records[::5]:
        r.status, r.error = "error", "ConnectError: cannot connect"
    s = summarize(pd.DataFrame([r.to_dict() for r in records]), users=4)
    (reason,) = s["client_limited_by"]
    assert reason.startswith("the server failed requests and their users waited")
    assert f"{len(records[::5])} failed" in reason and "of the 4 users" in reason
    assert client_limited(s) and backed_off(s)  # not judged, but not for the client's sake

    runs = []
    for name, rows in (("ok", _closed_loop(4, 30, 1.0, 0.0)), ("failing", records)):
        run = write_run(tmp_path / name, rows)
        meta = json.loads((run / "run.json").read_text())
        meta["traffic"] = {"name": "steady", "kind": "steady", "users": 4}
        (run / "run.json").write_text(json.dumps(meta))
        runs.append(run)
    (row,) = compare(runs, metrics=["request_throughput"]).itertuples()
    assert "the server failed requests and their users backed off" in row.verdict, row.verdict
    assert "load generator" not in row.verdict


def test_closed_loop_think_time_counts_beside_the_requests_in_flight():
    """A session's think time is not a user sitting idle: a user thinking 0.5 s after each
    1 s answer keeps the load asked for; one that also sends 0.3 s late does not."""
    import pandas as pd

    thinking = pd.DataFrame([r.to_dict() for r in _closed_loop(4, 30, 1.0, 0.0, think_s=0.5)])
    s = summarize(thinking, users=4)
    assert s["mean_in_flight"] == pytest.approx(4 / 1.5, rel=0.03)
    assert s["mean_thinking"] == pytest.approx(4 * 0.5 / 1.5, rel=0.03)
    assert s["mean_in_flight"] + s["mean_thinking"] == pytest.approx(4.0, abs=0.02)
    assert not s["client_limited"], s["client_limited_by"]

    late = pd.DataFrame([r.to_dict() for r in _closed_loop(4, 30, 1.0, 0.3, think_s=0.5)])
    s = summarize(late, users=4)
    assert s["mean_thinking"] == pytest.approx(4 * 0.5 / 1.8, rel=0.03)
    assert s["client_limited"]
    assert any("sessions thinking, of the 4 users" in r for r in s["client_limited_by"])
    assert (
        summarize(pd.DataFrame([r.to_dict() for r in _closed_loop(4, 30, 1.0, 0.0)]), users=4)[
            "mean_thinking"
        ]
        == 0.0
    )


def test_a_records_file_written_before_idle_before_ms_still_summarises(tmp_path):
    import pyarrow as pa

    run = write_run(tmp_path / "old", _closed_loop(2, 10, 1.0, 0.0))
    path = run / "records.arrow"
    with pa.OSFile(str(path)) as source:  # read into memory: the file is rewritten below
        table = pa.ipc.open_stream(source).read_all().drop_columns(["idle_before_ms"])
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table)
    s = summarize_run(run)
    assert s["completed"] == table.num_rows and math.isnan(s["mean_idle_before_ms"])
    assert s["mean_in_flight"] == pytest.approx(2.0, abs=0.01)


@pytest.mark.parametrize("shape", ["poisson", "ties", "steady", "unfinished"])
def test_peak_concurrency_equals_a_search_at_every_start(shape):
    from vprof.analysis.summary import _peak_concurrency

    rng = np.random.default_rng(7)
    for n in (1, 7, 9, 100, 2_000):
        if shape == "poisson":
            starts, spans = np.sort(rng.uniform(0, 10, n)), rng.exponential(1.0, n)
        elif shape == "ties":
            starts, spans = np.round(rng.uniform(0, 10, n), 1), np.round(rng.exponential(1, n), 1)
        elif shape == "steady":
            starts, spans = np.arange(n) * 0.1, np.full(n, 2.0)
        else:
            starts, spans = rng.uniform(0, 10, n), rng.choice([0.0, 1.0, np.nan, np.inf], n)
        ends = starts + spans
        good = np.isfinite(starts) & np.isfinite(ends)
        s, e = np.sort(starts[good]), np.sort(ends[good])
        at_each = np.arange(1, s.size + 1) - np.searchsorted(e, s, side="right")
        assert _peak_concurrency(starts, ends) == (int(at_each.max()) if s.size else 0)


def test_a_few_pooled_gaps_are_read_where_all_of_them_would_be(tmp_path):
    run = load_run(write_run(tmp_path / "a", synth_records(300, fail_every=7, tokens=(1, 40))))
    cols = run.columns
    rng = np.random.default_rng(3)
    for share in (1.0, 0.5, 0.05):
        mask = rng.random(cols.n) < share
        pooled = cols.gaps(mask)[0]
        assert cols.gap_count(mask) == pooled.size
        for k in (0, 1, pooled.size // 3, pooled.size):
            positions = np.sort(rng.choice(pooled.size, k, replace=False))
            assert np.array_equal(cols.gaps_at(mask, positions), pooled[positions])


@pytest.mark.parametrize(
    "values",
    [
        ["chat"] * 5,
        [None, "b", None, "a", None, None, None, "b", None],
        [None, "", None, None],
        [None] * 4,
        ["", ""],
        ["chat", "chap", "chat"],
        ["ok", "error", "ok"],
    ],
)
def test_string_columns_encode_as_arrow_dictionary_encodes_them(values):
    import pyarrow as pa
    import pyarrow.compute as pc

    from vprof.records import arrays

    column = pa.chunked_array([pa.array(["x", *values], pa.string()).slice(1)])
    labels, codes = arrays.encoded(column, "")
    encoded = pc.dictionary_encode(column.chunk(0))
    expected = [v for v in encoded.dictionary.to_pylist()]
    assert [str(v) for v in labels[: len(expected)]] == expected
    assert [str(labels[c]) for c in codes] == [v if v is not None else "" for v in values]
