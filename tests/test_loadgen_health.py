"""The load generator measures itself: event-loop lag decides whether it kept time."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from locust_run import run_headless

from vprof.analysis import summarize_run
from vprof.analysis.samples import LAG_P99_LIMIT_MS, loadgen_stats
from vprof.records.schema import LOOP_LAG_BUCKETS_MS
from vprof.server.process import free_port


def _sample(
    t: float,
    worker: str,
    p99: float,
    *,
    cpu: float = 30.0,
    n: int = 400,
    late: float = 0.01,
    wait: float | None = None,
) -> dict:
    histogram = [0] * (len(LOOP_LAG_BUCKETS_MS) + 1)
    histogram[0] = n - int(n * late)
    histogram[next(i for i, edge in enumerate(LOOP_LAG_BUCKETS_MS) if edge >= p99)] += int(n * late)
    return {
        "t": t,
        "worker": worker,
        "cpu_percent": cpu,
        "loop_lag_p50_ms": 0.1,
        "loop_lag_p99_ms": p99,
        "loop_lag_max_ms": p99 * 2,
        "loop_probes": n,
        "loop_lag_histogram": histogram,
        "machine_cpu_percent": 60.0,
        "steal_percent": 0.0,
        "wait_percent": wait,
    }


def test_verdict_rests_on_event_loop_lag_not_cpu():
    calm = [_sample(i, "w0", 1.5, cpu=95.0) for i in range(20)]  # busy but on time
    stats = loadgen_stats(calm)
    assert not stats["loadgen_saturated"]
    assert stats["loadgen_verdict"].startswith("load generator healthy: event-loop lag p99")
    assert stats["loadgen_max_cpu_percent"] <= 100.0
    late = [_sample(i, "w0", 40.0, cpu=45.0) for i in range(20)]  # mostly idle, yet late
    stats = loadgen_stats(late)
    assert stats["loadgen_saturated"]
    verdict = stats["loadgen_verdict"]
    assert "40.0 ms" in verdict and f"{LAG_P99_LIMIT_MS:g} ms" in verdict
    assert "--processes" in verdict


def test_a_late_loop_that_waited_for_a_core_is_named_as_held_back_by_the_machine():
    # the CPU build beside the client: 5 % of a core used, 50 % of the time waiting for one
    starved = [_sample(i, "w0", 300.0, cpu=5.0, wait=50.0) for i in range(20)]
    stats = loadgen_stats(starved)
    assert stats["loadgen_saturated"] and stats["loadgen_starved"]  # its timing is still late
    verdict = stats["loadgen_verdict"]
    assert verdict.startswith("load generator held back by this machine")
    assert "waited 50 %" in verdict and "--processes" not in verdict
    # a loop busy with its own work is overloaded, however long it also waited
    busy = [_sample(i, "w0", 300.0, cpu=90.0, wait=95.0) for i in range(20)]
    stats = loadgen_stats(busy)
    assert stats["loadgen_saturated"] and not stats["loadgen_starved"]
    assert "--processes" in stats["loadgen_verdict"]
    # and so is one that ran more than it waited
    ran = [_sample(i, "w0", 300.0, cpu=40.0, wait=10.0) for i in range(20)]
    assert not loadgen_stats(ran)["loadgen_starved"]


def _watch_warning(tmp_path: Path, samples: list[dict]) -> str | None:
    import json

    from vprof.records.rundir import RunDir
    from vprof.runs.clientwatch import ClientWatch

    run = RunDir(tmp_path)
    run.locust_json.write_text(json.dumps({"warmup_until": 0.0}))
    run.loadgen_jsonl.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return ClientWatch(run).check()


def test_the_live_warning_names_the_cause_the_summary_will(tmp_path):
    from vprof.runs.clientwatch import LATE_SAMPLES

    busy = [_sample(i, "w0", 40.0, cpu=97.0, wait=3.0) for i in range(1, LATE_SAMPLES + 1)]
    held = [_sample(i, "w0", 40.0, cpu=6.0, wait=45.0) for i in range(1, LATE_SAMPLES + 1)]
    (tmp_path / "busy").mkdir()
    (tmp_path / "held").mkdir()
    warning = _watch_warning(tmp_path / "busy", busy)
    assert warning and "--processes" in warning
    warning = _watch_warning(tmp_path / "held", held)
    assert warning and "other processes on this machine" in warning
    assert "--processes" not in warning
    assert loadgen_stats(held)["loadgen_starved"] and not loadgen_stats(busy)["loadgen_starved"]


def test_the_live_warning_waits_for_late_samples_in_a_row(tmp_path):
    from vprof.runs.clientwatch import LATE_SAMPLES

    broken = [_sample(i, "w0", 40.0 if i % 2 else 1.0) for i in range(1, 4 * LATE_SAMPLES)]
    assert _watch_warning(tmp_path, broken) is None


def test_one_late_moment_is_not_an_overloaded_client():
    samples = [_sample(i, "w0", 1.0) for i in range(19)] + [_sample(19, "w0", 80.0)]
    assert not loadgen_stats(samples)["loadgen_saturated"]


def test_lag_outside_the_measured_window_does_not_count():
    warm_up = [_sample(i, "w0", 200.0) for i in range(10)]  # tokenizer loading, say
    measured = [_sample(10 + i, "w0", 1.0) for i in range(10)]
    assert not loadgen_stats(warm_up + measured, 10.0, 20.0)["loadgen_saturated"]


def test_pooled_lag_percentile_is_the_bucket_edge_over_every_worker():
    samples = [_sample(i, "w0", 1.0) for i in range(5)]
    samples += [_sample(i, "w1", 30.0, late=0.05) for i in range(5)]
    stats = loadgen_stats(samples)
    assert stats["loadgen_loop_lag_p50_ms"] == LOOP_LAG_BUCKETS_MS[0]
    assert stats["loadgen_loop_lag_p99_ms"] == 30.0
    assert set(stats["loadgen_cpu"]) == {"w0", "w1"}


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    """`vprof emulate` in its own process, so it does not share the test's interpreter."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "emulate",
        "--port",
        str(port),
        "--ttft-ms",
        "50",
        "--itl-ms",
        "5",
        "--model",
        "tiny",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        import requests

        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "emulator did not start"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _run(url: str, run_dir: Path, users: int, seconds: int) -> dict:
    run_dir.parent.mkdir(parents=True)
    shape = run_dir.parent / f"steady-{users}.yaml"
    shape.write_text(f"kind: steady\nusers: {users}\nduration_s: {seconds}\nwarmup_s: 4\n")
    run_headless(
        url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "--traffic",
        str(shape),
        "--stop-timeout",
        "10",
        timeout_s=seconds + 120,
    )
    return summarize_run(run_dir)


@pytest.mark.e2e  # a real client at 256 users for half a minute: the slow tier
def test_a_few_users_are_called_healthy_and_256_users_overloaded(emulator, tmp_path):
    calm = _run(emulator, tmp_path / "calm" / "run", 4, 6)
    assert calm["completed"] > 0 and calm["loadgen_loop_lag_p99_ms"] is not None
    assert not calm["client_limited"], calm["loadgen_verdict"]
    assert calm["loadgen_verdict"].startswith("load generator healthy: event-loop lag")
    busy = _run(emulator, tmp_path / "busy" / "run", 512, 9)
    assert busy["client_limited"], busy["loadgen_verdict"]
    assert busy["loadgen_verdict"].startswith("load generator overloaded: event-loop lag p99")
    # Per core, never above 100 % for one process (the main loop's own thread).
    assert 0 < busy["loadgen_max_cpu_percent"] <= 100.0


def test_the_verdict_names_the_longest_loop_pause_and_the_pause_behind_it():
    samples = [_sample(i, "w0", 1.5) for i in range(10)] + [
        _sample(i, "w1", 1.5) for i in range(10)
    ]
    samples[13] |= {"loop_lag_max_ms": 24.0}
    for s in samples:
        s |= {"gc_ms": 1.0, "gc_max_ms": 0.4, "ship_ms": 2.0, "ship_max_ms": 0.3}
    samples[13] |= {"gc_max_ms": 22.5}
    stats = loadgen_stats(samples)
    assert stats["loadgen_verdict"].endswith(
        "longest loop pause 24.0 ms in w1 (garbage collection took up to 22.5 ms)"
    )
    assert stats["loadgen_cpu"]["w1"]["pauses"] == {"gc": 22.5, "ship": 0.3}
    # samples from before pauses were timed: the verdict as it was
    assert (
        "longest loop pause"
        not in loadgen_stats([_sample(i, "w0", 1.5) for i in range(9)])["loadgen_verdict"]
    )


def test_a_worker_ships_its_records_in_pieces_the_last_one_final():
    import gc

    from vprof.locustfiles import collect
    from vprof.locustfiles.health import PAUSES

    sent: list[dict] = []

    class Runner:
        def send_message(self, kind: str, data: dict) -> None:
            assert kind == collect.RECORDS_MESSAGE
            sent.append(data)

    class Environment:
        runner = Runner()

    environment = Environment()
    records = [{"request_id": f"r{i}", "itl_ms": [1.0] * 64, "status": "ok"} for i in range(700)]
    for record in records:
        collect.emit(environment, record)
    collect._buffer(environment).health.append({"t": 1.0})
    PAUSES.take()
    collect.ship_to_master(environment, final=True)
    assert len(sent) > 1  # 700 records of 64 gaps: more than one piece
    assert [r for message in sent for r in message["records"]] == records  # all, in order
    per_piece = [sum(len(r) + len(r["itl_ms"]) for r in m["records"]) for m in sent]
    assert max(per_piece) < collect.SHIP_PIECE_VALUES + 70
    assert [m["final"] for m in sent] == [False] * (len(sent) - 1) + [True]
    assert [bool(m["health"]) for m in sent] == [False] * (len(sent) - 1) + [True]
    gc.collect()
    pauses = PAUSES.take()
    assert pauses["ship_ms"] > 0 and pauses["ship_max_ms"] <= pauses["ship_ms"]
    assert pauses["gc_ms"] > 0 and pauses["gc_max_ms"] <= pauses["gc_ms"]
