"""Run folders and the sweep's stopping rule and recommendation (pure parts)."""

from __future__ import annotations

import math

import pytest

from vprof.analysis import expand_runs
from vprof.records import RunDir
from vprof.registry.overrides import parse_ladder_values
from vprof.runs.sweep import recommend, should_stop


def test_run_folder_records_state_and_keeps_earlier_attempts(tmp_path):
    run = RunDir(tmp_path / "a--chat--steady--1234")
    run.create({"profile": {"name": "a"}})
    assert run.state == "running"
    run.set_status("failed", "server died")
    assert run.status()["reason"] == "server died"
    assert run.status()["finished_at"] >= run.status()["started_at"]
    moved = run.retire()
    assert moved.name.endswith(".attempt-1") and not run.path.exists()
    run.create({"profile": {"name": "a"}})
    assert expand_runs([tmp_path]) == [run.path]  # the retired attempt is not a run


def test_ladder_stops_at_failure_oom_or_preemption():
    assert should_stop({"state": "completed", "preemptions": 0}) is None
    assert "preemptions" in should_stop({"state": "completed", "num_preemptions": 3})
    assert "start" in should_stop({"state": "not-started"})
    assert "memory" in should_stop({"state": "completed", "oom": True})


def test_recommendation_prefers_throughput_then_ttft_and_names_evidence():
    rows = [
        {
            "rung": "r1",
            "state": "completed",
            "request_throughput": 10.0,
            "p95_ttft_ms": 90.0,
            "p95_itl_ms": 5.0,
        },
        {
            "rung": "r2",
            "state": "completed",
            "request_throughput": 12.0,
            "p95_ttft_ms": 80.0,
            "p95_itl_ms": 6.0,
        },
        {
            "rung": "r3",
            "state": "completed",
            "request_throughput": 12.2,
            "p95_ttft_ms": 70.0,
            "p95_itl_ms": 7.0,
            "num_preemptions": 2,
        },
    ]
    text = recommend(rows)
    assert text.startswith("Recommended: r2")
    assert "12.00 req/s" in text and "p95 TTFT 80 ms" in text
    assert recommend(rows, prefer="itl").startswith("Recommended: r2")  # r1 is < 90 % of best
    rows[0]["request_throughput"] = 11.5
    assert recommend(rows, prefer="itl").startswith("Recommended: r1")


def test_a_rung_whose_requests_failed_is_not_recommended():
    rows = [
        {"rung": "r1", "state": "completed", "request_throughput": 5.0, "failed": 0},
        {"rung": "r2", "state": "completed", "request_throughput": 9.0, "failed": 14},
    ]
    text = recommend(rows)
    assert text.startswith("Recommended: r1")
    assert text.endswith("Left out because requests failed: r2 (14).")


def test_a_client_limited_rung_is_left_out_with_its_own_reason():
    """A rung whose load generator fell behind is the client's to fix; one whose in-flight
    cap the server kept full is not, and the caveat says which."""
    from vprof.analysis.keys import SATURATED_FIX

    done = {"state": "completed", "failed": 0}
    rows = [
        {"rung": "r1", "request_throughput": 5.0, **done},
        {"rung": "r2", "request_throughput": 9.0, "client_limited": True, **done},
        {"rung": "r3", "request_throughput": 9.5, "client_limited": True, **done},
    ]
    rows[1]["client_limit"] = ["the load generator was the bottleneck", SATURATED_FIX]
    rows[2]["client_limit"] = [
        "the server kept the traffic's in-flight cap (64) full",
        "the rate is past what it answers in time; raise max_in_flight to measure it",
    ]
    text = recommend(rows)
    assert text.startswith("Recommended: r1")
    assert f"the load generator was the bottleneck: r2 (re-run them: {SATURATED_FIX})." in text
    assert "in-flight cap (64) full: r3 (the rate is past what it answers in time" in text
    assert "re-run them" not in text.split("r3")[1]
    # a row from before the reason was kept gets the generic advice
    del rows[1]["client_limit"]
    assert "bottleneck: r2 (re-run them: use --processes or fewer users" in recommend(rows)


def test_recommendation_is_honest_when_nothing_completed():
    text = recommend([{"rung": "r1", "state": "not-started"}])
    assert "nothing to recommend" in text


def test_ladder_values_parse_as_yaml_scalars():
    assert parse_ladder_values("128, 256,true,0.5") == [128, 256, True, 0.5]
    assert not any(isinstance(v, float) and math.isnan(v) for v in parse_ladder_values("1,2"))


def test_load_ladder_makes_one_shape_per_level_that_crosses_to_locust_unchanged():
    from vprof.runs.sweep import load_ladder
    from vprof.traffic import get_shape, shape_to_json

    open_loop = load_ladder("poisson", [2, 4.5])
    assert [s.rate_rps for s in open_loop] == [2.0, 4.5]
    assert all(s.open_loop for s in open_loop)
    closed = load_ladder("steady", [1, 16])
    assert [s.users for s in closed] == [1, 16]
    assert closed[1].duration_s == get_shape("steady").duration_s
    assert closed[1].name == "steady@users=16"
    # what the Locust side reads back from --traffic is the same shape
    for shape in open_loop + closed:
        assert get_shape(shape_to_json(shape)).to_dict() == {
            **shape.to_dict(),
            "source": "--traffic",
        }


def test_the_metrics_sampler_backs_off_after_a_slow_scrape_and_can_be_off(tmp_path):
    from vprof.runs.sampler import MAX_SHARE, MetricsSampler

    sampler = MetricsSampler("http://127.0.0.1:9", tmp_path / "m.jsonl", interval_s=5.0)
    sampler.last_scrape_s = 0.004
    assert sampler.next_wait_s() == 5.0
    sampler.last_scrape_s = 1.15  # as seen on two cores under load
    assert sampler.next_wait_s() == pytest.approx(1.15 / MAX_SHARE)
    off = MetricsSampler("http://127.0.0.1:9", tmp_path / "off.jsonl", enabled=False)
    off.start()
    off.stop()
    assert not (tmp_path / "off.jsonl").exists() and off.samples == 0


def test_the_metrics_sampler_scrapes_every_replica_and_counts_one_that_stops(tmp_path):
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator
    from vprof.records.rundir import METRICS_LINE, read_jsonl
    from vprof.runs.sampler import MetricsSampler
    from vprof.server.process import free_port

    with Emulator(EmulatorConfig(model="a")) as a, Emulator(EmulatorConfig(model="b")) as b:
        path = tmp_path / "m.jsonl"
        sampler = MetricsSampler((a.url, b.url), path)
        assert sampler.sample_once() and sampler.samples == 1
        lines = read_jsonl(path, fields=METRICS_LINE)
        assert [(line["replica"], line["pass"]) for line in lines] == [(a.url, 0), (b.url, 0)]
        running = "vllm:num_requests_running"
        assert sampler.last_values[running] == sum(line["values"][running] for line in lines)
        gone = f"http://127.0.0.1:{free_port()}"
        sampler = MetricsSampler((a.url, gone), path)
        assert not sampler.sample_once() and not sampler.sample_once()
        assert sampler.consecutive_failures == 2 and sampler.samples == 0
        assert [line["replica"] for line in read_jsonl(path)] == [a.url, b.url, a.url, a.url]
        one = tmp_path / "one.jsonl"
        assert MetricsSampler(a.url, one).sample_once()
        assert "replica" not in read_jsonl(one)[0]  # one server: lines as before


def test_with_slices_the_sampler_scrapes_early_in_each_warm_up_never_in_a_measured_part(
    tmp_path,
):
    import time

    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator
    from vprof.records.rundir import read_jsonl
    from vprof.runs.sampler import MetricsSampler
    from vprof.traffic.slices import SliceSchedule

    schedule = SliceSchedule(epoch=time.time() + 0.6, slice_s=0.8, warmup_s=0.4, sides=2)
    known: list[SliceSchedule] = []
    with Emulator(EmulatorConfig(model="a")) as a, Emulator(EmulatorConfig(model="b")) as b:
        path = tmp_path / "m.jsonl"
        sampler = MetricsSampler(
            (a.url, b.url), path, interval_s=0.05, slices=lambda: known[0] if known else None
        )
        sampler.start()
        time.sleep(0.3)  # no schedule yet: one pass at the start, then none
        assert {line["pass"] for line in read_jsonl(path)} == {0}
        known.append(schedule)
        # stop in slice 2's middle: a wake-up late by less than half a slice (a busy host)
        # still stops before slice 3's pass
        time.sleep(schedule.start(2) + schedule.slice_s / 2 - time.time())
        sampler.stop(final_sample=False)
    later = [line for line in read_jsonl(path) if line["pass"] > 0]
    slices = sorted({schedule.slice_at(line["t"]) for line in later})
    assert slices == [0, 1, 2]  # one pass a slice, not one every 0.05 s
    for line in later:
        k = schedule.slice_at(line["t"])
        assert schedule.start(k) <= line["t"] - line["scrape_s"] < schedule.window(k)[0]


def test_server_stats_of_several_replicas_add_counters_and_keep_the_busiest_peak():
    from vprof.analysis.samples import server_stats

    def line(replica, t, hits, queries, preempted, kv, waiting):
        values = {
            "vllm:prefix_cache_hits_total": hits,
            "vllm:prefix_cache_queries_total": queries,
            "vllm:num_preemptions_total": preempted,
            "vllm:kv_cache_usage_perc": kv,
            "vllm:num_requests_waiting": waiting,
        }
        return {"t": t, "scrape_s": 0.001, "values": values, "replica": replica}

    samples = [
        line("A", 10, 0, 0, 0, 0.1, 0),
        line("A", 20, 50, 100, 0, 0.2, 2),
        line("A", 30, 80, 200, 0, 0.3, 0),
        line("B", 10, 0, 0, 1, 0.1, 0),
        line("B", 20, 0, 100, 2, 0.9, 6),
        line("B", 30, 20, 200, 4, 0.5, 4),
    ]
    stats = server_stats(samples, 10.0, 30.0)
    assert stats["num_preemptions"] == 3  # B's 1 → 4; A's none
    assert stats["prefix_cache_hit_rate"] == pytest.approx((80 + 20) / (200 + 200))
    assert stats["max_kv_cache_usage_perc"] == 0.9 and stats["max_num_requests_waiting"] == 6
    assert stats["mean_num_requests_waiting"] == pytest.approx(2 / 3 + 10 / 3)
    assert stats["metrics_samples"] == 6
    by = stats["per_replica_server"]
    assert by["A"] == {
        "num_preemptions": 0,
        "max_kv_cache_usage_perc": 0.3,
        "prefix_cache_hit_rate": 0.4,
    }
    assert by["B"]["num_preemptions"] == 3 and by["B"]["prefix_cache_hit_rate"] == 0.1
    one = server_stats([{k: v for k, v in s.items() if k != "replica"} for s in samples[3:]])
    assert one["num_preemptions"] == 3 and "per_replica_server" not in one


def test_replicas_samples_merge_into_one_per_pass_for_the_deployment_charts():
    from vprof.analysis.samples import KV_USAGE, RUNNING, deployment_samples

    lines = [
        {"t": 1.0, "values": {RUNNING: 2, KV_USAGE: 0.2}, "replica": "A", "pass": 0},
        {"t": 1.1, "values": {RUNNING: 3, KV_USAGE: 0.7}, "replica": "B", "pass": 0},
        {"t": 6.2, "values": {RUNNING: 0, KV_USAGE: 0.0}, "replica": "B", "pass": 1},  # A did not
        {"t": 11.0, "values": {RUNNING: 1, KV_USAGE: 0.1}, "replica": "A", "pass": 2},
        {"t": 11.1, "values": {RUNNING: 4, KV_USAGE: 0.4}, "replica": "B", "pass": 2},
    ]
    merged = deployment_samples(list(reversed(lines)))
    assert [(m["t"], m["values"][RUNNING], m["values"][KV_USAGE]) for m in merged] == [
        (1.1, 5, 0.7),
        (6.2, 0, 0.0),
        (11.1, 5, 0.4),
    ]
    one = [{k: v for k, v in line.items() if k != "replica"} for line in lines[:2]]
    assert deployment_samples(one) == one


def test_slow_scrapes_are_reported_and_warned_about():
    from vprof.analysis.samples import server_stats

    samples = [{"t": 10.0 + 5 * i, "scrape_s": 0.004, "values": {}} for i in range(6)]
    stats = server_stats(samples, 10.0, 40.0)
    assert stats["metrics_scrape_max_ms"] == pytest.approx(4.0)
    assert "metrics_warning" not in stats
    samples[3]["scrape_s"] = 0.9
    stats = server_stats(samples, 10.0, 40.0)
    assert stats["metrics_scrape_share"] > 0.03
    assert "900 ms" in stats["metrics_warning"] and "--no-metrics" in stats["metrics_warning"]


def test_a_level_waits_for_answers_as_long_as_its_slo_threshold():
    """A level cut sooner than its SLO's TTFT or E2E threshold would leave out the slowest
    answers of an overloaded level (neither met nor missed): it waits that long, and for the
    shortest cut when no such target is set."""
    from vprof.locustfiles.optiontable import CUT_IN_FLIGHT_S
    from vprof.runs.spec import level_cut_s

    assert level_cut_s(None) == level_cut_s("tpot_p95=50ms") == CUT_IN_FLIGHT_S
    assert level_cut_s("ttft_p95=1500ms") == 1.5
    assert level_cut_s("ttft_p95=500ms,e2el_p99=4s,tpot_p95=50ms") == 4.0
    assert level_cut_s("ttft_p95=100ms") == CUT_IN_FLIGHT_S
