"""vprof emulate --workers N: processes sharing one port, counted together, never orphaned."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import requests

from vprof.emulator.counters import Counters, shared_buffer
from vprof.server.process import free_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT")


def start(port: int, *extra: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "emulate",
        "--port",
        str(port),
        "--ttft-ms",
        "5",
        "--itl-ms",
        "1",
        *extra,
    ]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_ready(proc: subprocess.Popen, timeout_s: float = 60) -> int:
    """Read the supervisor's ready line (printed once every worker listens); its port."""
    deadline = time.monotonic() + timeout_s
    line = ""
    while "Ctrl-C" not in line:
        assert time.monotonic() < deadline and proc.poll() is None, "emulate did not start"
        line = proc.stderr.readline() if proc.stderr else ""
    return int(line.split("127.0.0.1:")[1].split(" ")[0])


def wait_gone(pids: list[int], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids):
        assert time.monotonic() < deadline, f"still running: {pids}"
        time.sleep(0.05)


def workers_of(proc: subprocess.Popen) -> list[psutil.Process]:
    """The supervisor's emulator workers (its spawned children, not multiprocessing's helper)."""
    children = psutil.Process(proc.pid).children()
    return [c for c in children if "spawn_main" in " ".join(c.cmdline())]


def scrape(port: int) -> dict[str, float]:
    values = {}
    for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0] + ("/abort" if "abort" in name else "")] = float(value)
    return values


@pytest.fixture
def two_workers():
    port = free_port()
    proc = start(port, "--workers", "2")
    try:
        assert wait_ready(proc) == port
        yield port, proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_counters_of_all_slots_are_summed():
    buffer = shared_buffer(3)
    first, third = Counters(buffer, 0), Counters(buffer, 2)
    first.request_started(10)
    third.request_started(5)
    third.request_finished(7, "length")
    third.chunk_sent(0.0003)
    totals = Counters(buffer, 1).totals()
    assert totals["running"] == 1 and totals["prompt_tokens"] == 15
    assert totals["generation_tokens"] == 7 and totals["finished_length"] == 1
    assert Counters(buffer, 1).lateness_buckets()[2] == 1  # 0.25 ms < 0.3 ms <= 0.5 ms
    assert Counters(buffer, 1).workers == 3


def test_both_workers_serve_and_metrics_count_for_all(two_workers):
    port, proc = two_workers
    workers = workers_of(proc)
    assert len(workers) == 2
    body = {"prompt": "a b c", "max_tokens": 4, "stream": True}
    sessions = [requests.Session() for _ in range(16)]
    try:
        for session in sessions:  # 16 keep-alive connections, spread by the kernel
            with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as resp:
                assert resp.status_code == 200 and b"data: [DONE]" in resp.content
        established = [
            sum(c.status == psutil.CONN_ESTABLISHED for c in w.net_connections("tcp"))
            for w in workers
        ]
        assert all(n > 0 for n in established), established
        values = scrape(port)  # lands on either worker: both answer for both
        assert values["vllm:request_success_total"] == 16
        assert values["vllm:generation_tokens_total"] == 64
        assert values["vllm:prompt_tokens_total"] == 48
        assert values["vprof_emulator_workers"] == 2
        assert values["vprof_emulator_chunk_lateness_seconds_count"] == 64
    finally:
        for session in sessions:
            session.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_supervisor_stops_every_worker(two_workers, sig):
    port, proc = two_workers
    pids = [w.pid for w in workers_of(proc)]
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C in a terminal reaches the whole group
    else:
        proc.send_signal(sig)
    assert proc.wait(timeout=20) == 0, proc.stderr.read() if proc.stderr else ""
    wait_gone(pids)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_workers_stop_by_themselves_when_the_supervisor_is_killed(two_workers):
    _, proc = two_workers
    pids = [w.pid for w in workers_of(proc)]
    proc.send_signal(signal.SIGKILL)  # no chance to clean up
    proc.wait()
    wait_gone(pids)


def test_a_dead_worker_stops_the_rest_with_an_error(two_workers):
    _, proc = two_workers
    workers = workers_of(proc)
    workers[0].kill()
    assert proc.wait(timeout=20) == 2
    assert "exited with code -9" in proc.stderr.read()
    wait_gone([w.pid for w in workers])


def test_a_port_in_use_is_refused_before_any_worker_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start(port, "--workers", "2")
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_port_zero_gives_all_workers_one_free_port():
    proc = start(0, "--workers", "2")
    try:
        port = wait_ready(proc)
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).ok
        assert scrape(port)["vprof_emulator_workers"] == 2
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
