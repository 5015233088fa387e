"""`vprof bench` end to end when things go wrong: real vLLM (CPU build), real Locust.

Each test launches its own server through the CLI (a killed server, Ctrl-C), so they are among
the slowest in the suite; they use the tiny workload and short traffic so that each run takes
seconds once the server is up. A bench of a server vprof did not launch is test_bench_url_e2e's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from ports import worker_port

from vprof.records import read_records

pytestmark = pytest.mark.e2e

FAST = ["--workload", "tiny-smoke", "--set", "enforce-eager=true", "--set", "max-model-len=2048"]


def vprof(*args: str) -> list[str]:
    return [sys.executable, "-m", "vprof.cli.main", *args]


def run_dirs(out: Path) -> list[Path]:
    return sorted(p.parent for p in out.glob("*/run.json"))


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def long_traffic(tmp_path: Path, seconds: int = 120) -> str:
    path = tmp_path / "long.yaml"
    path.write_text(
        f"description: long enough to interrupt\nkind: steady\nusers: 2\nduration_s: {seconds}\n"
    )
    return str(path)


class Watcher:
    """Start a command and remember every process it ever spawned."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.seen: set[int] = set()

    def descendants(self) -> list[psutil.Process]:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update(c.pid for c in children)
        return children

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.descendants()
            if predicate():
                return
            assert self.proc.poll() is None, f"vprof exited early while waiting for {what}"
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}")

    def finish(self, timeout_s: float = 300) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self.log.close()
        return rc

    def leftovers(self) -> list[int]:
        alive = []
        for pid in self.seen:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive


def records_arriving(out: Path):
    def check() -> bool:
        return any(
            (r / "records.arrow").exists() and (r / "records.arrow").stat().st_size > 2000
            for r in run_dirs(out)
        )

    return check


def launch_and_run(out: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`vprof ARGS` with the fast settings, launching servers on a free port, runs in ``out``."""
    port = worker_port(18900, 18999)
    return subprocess.run(
        vprof(*args, *FAST, "--port", str(port), "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def start_long_bench(tmp_path: Path, *args: str) -> tuple[Watcher, Path]:
    """A bench long enough to interrupt, watched until its first records are on disk."""
    out = tmp_path / "runs"
    port = worker_port(18900, 18999)
    watcher = Watcher(
        vprof(
            "bench",
            *args,
            "--traffic",
            long_traffic(tmp_path),
            *FAST,
            "--port",
            str(port),
            "--out",
            str(out),
        ),
        tmp_path / "bench.log",
    )
    watcher.wait_for(records_arriving(out), 600, "the first records")
    return watcher, out


def test_killing_the_server_mid_run_fails_that_run_keeps_records_and_leaves_no_process(tmp_path):
    watcher, out = start_long_bench(tmp_path, "chunked-256", "chunked-512", "--on-failure", "stop")
    servers = [
        p
        for p in watcher.descendants()
        if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())
    ]
    assert servers, "the vLLM server process was not found"
    servers[0].send_signal(signal.SIGKILL)
    rc = watcher.finish()
    log = (tmp_path / "bench.log").read_text()
    assert rc == 1, log
    (run,) = run_dirs(out)  # --on-failure stop: chunked-512 never started
    state = status(run)
    assert state["state"] == "failed" and "vLLM exited" in state["reason"], state
    assert len(read_records(run)) > 0
    assert "chunked-512" in log and "not-started" in log
    assert watcher.leftovers() == []


def test_ctrl_c_stops_cleanly_keeps_the_partial_run_and_leaves_no_process(tmp_path):
    watcher, out = start_long_bench(tmp_path, "chunked-256")
    watcher.proc.send_signal(signal.SIGINT)
    rc = watcher.finish()
    assert rc == 130, (tmp_path / "bench.log").read_text()
    (run,) = run_dirs(out)
    assert status(run)["state"] == "interrupted"
    records = read_records(run)
    assert len(records) > 0 and (records.status == "ok").any()
    assert watcher.leftovers() == []
