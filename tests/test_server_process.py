"""ServerProcess on real non-vLLM children: health polling, failing fast, stopping trees."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from vprof.common.errors import LaunchError
from vprof.server.process import ServerProcess, free_port

# A parent that starts two children: one ignores SIGTERM, one leaves the process group.
TREE = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    kids = [
        subprocess.Popen([sys.executable, "-c", stubborn]),
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True),
    ]
    print("children", *[k.pid for k in kids], flush=True)
    time.sleep(600)
    """
)


def _wait_for(predicate, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_leaves_no_descendant_even_stubborn_or_detached(tmp_path: Path) -> None:
    server = ServerProcess(
        [sys.executable, "-c", TREE], log_path=tmp_path / "log", port=free_port()
    )
    server.start()
    _wait_for(lambda: "children" in server.log_text())
    kids = [int(pid) for pid in server.log_text().split()[1:3]]
    assert server.alive() and all(psutil.pid_exists(pid) for pid in kids)

    started = time.monotonic()
    server.stop(grace_s=1.0)
    assert time.monotonic() - started < 10
    assert not server.alive()
    assert all(_gone(pid) for pid in [server.pid, *kids])


def test_wait_healthy_fails_fast_with_the_processs_own_error(tmp_path: Path) -> None:
    crash = "print('loading config', flush=True); raise ValueError('max_num_seqs must be > 0')"
    server = ServerProcess(
        [sys.executable, "-c", crash], log_path=tmp_path / "log", port=free_port()
    )
    server.start()
    started = time.monotonic()
    with pytest.raises(LaunchError) as caught:
        server.wait_healthy(timeout_s=120)
    assert time.monotonic() - started < 30  # did not wait for the deadline
    message = str(caught.value)
    assert "exited with code 1 before it became healthy" in message
    assert "ValueError: max_num_seqs must be > 0" in message
    assert "loading config" in message  # the last log lines are shown
    assert not server.alive()


def test_wait_healthy_returns_once_health_answers_200(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "health").write_text("ok")  # http.server answers GET /health with this file
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    argv += ["--directory", str(site)]
    with ServerProcess(argv, log_path=tmp_path / "log", port=port) as server:
        server.wait_healthy(timeout_s=60)
        assert server.alive()
        assert server.url == f"http://127.0.0.1:{port}"
    assert not server.alive()


def test_a_port_answered_by_another_process_is_no_healthy_server(tmp_path: Path) -> None:
    """Two servers given one port at once both start (vLLM binds long before it listens);
    the one that listens first must not pass for the other."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "health").write_text("ok")
    port = free_port()
    ours = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        log_path=tmp_path / "log",
        port=port,
    )
    ours.start()
    other = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(site),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with pytest.raises(LaunchError, match=f"answered by pid {other.pid}, not by the server"):
            ours.wait_healthy(timeout_s=60)
        assert not ours.alive()  # stopped, not left behind
        assert other.poll() is None  # and the other one left alone
    finally:
        other.kill()
        other.wait()


def test_wait_healthy_gives_up_at_the_deadline_and_stops_the_child(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-c",
        "import time; print('still importing', flush=True); time.sleep(600)",
    ]
    server = ServerProcess(argv, log_path=tmp_path / "log", port=free_port())
    server.start()
    with pytest.raises(LaunchError, match="did not become healthy within 1.5 s"):
        server.wait_healthy(timeout_s=1.5)
    assert not server.alive()


def test_log_of_a_reused_file_shows_only_this_run(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("an old run's ValueError: stale\n")
    server = ServerProcess([sys.executable, "-c", "print('fresh')"], log_path=log, port=free_port())
    server.start()
    assert server.wait(30) == 0
    assert server.log_tail() == ["fresh"]
    server.stop()


def test_stop_kills_what_outlives_an_exited_main_process(tmp_path: Path) -> None:
    orphan = (
        "import signal, subprocess, sys\n"
        "code = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        'print("ready", flush=True); time.sleep(600)\'\n'
        "child = subprocess.Popen([sys.executable, '-c', code])\n"
        "print('orphan', child.pid, flush=True)\n"
    )
    server = ServerProcess(
        [sys.executable, "-c", orphan], log_path=tmp_path / "log", port=free_port()
    )
    server.start()
    _wait_for(lambda: "ready" in server.log_text())
    assert server.wait(30) == 0  # the main process is gone, its child is not
    child = int(server.log_text().split()[1])
    assert not _gone(child)
    server.stop(grace_s=1.0)
    assert _gone(child)


def test_a_lower_priority_reaches_the_server_and_what_it_starts_later(tmp_path: Path) -> None:
    import os

    later = "import subprocess, sys, time; time.sleep(0.3); "
    later += "k = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    later += "print('child', k.pid, flush=True); time.sleep(60)"
    server = ServerProcess(
        [sys.executable, "-c", later], log_path=tmp_path / "log", port=free_port(), niceness=7
    )
    server.start()
    try:
        _wait_for(lambda: "child" in server.log_text())
        child = int(server.log_text().split()[1])
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == 7
        assert os.getpriority(os.PRIO_PROCESS, child) == 7  # inherited
        group = Path(f"/proc/{child}/autogroup")
        if group.exists():  # Linux with autogroup: the session's priority too
            assert group.read_text().split()[-1] == "7"
    finally:
        server.stop(grace_s=1.0)
