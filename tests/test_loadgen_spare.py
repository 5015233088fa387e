"""A ladder's next level takes a Locust process started before it (imports done, waiting for
its argv): it runs Locust with exactly the argv a cold start would, and a spare that is gone
is replaced by a cold start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vprof.runs import loadgen


@pytest.fixture
def no_spare():
    loadgen.stop_spare()
    yield
    loadgen.stop_spare()


def _fake_spare(script: str) -> subprocess.Popen[bytes]:
    loadgen._spare_env = loadgen._load_env()  # started in this environment
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def test_the_spare_gets_the_argv_after_python_m_locust(no_spare):
    echo = "import sys; sys.stdout.write(sys.stdin.readline())"
    loadgen._spare = _fake_spare(echo)
    argv = [*loadgen.locust_argv(), "--headless", "--host", "http://x:1", "--workload", "a b"]
    proc = loadgen._take_spare(argv)
    assert proc is not None and loadgen._spare is None
    out, _ = proc.communicate(timeout=10)
    assert json.loads(out) == argv[3:] and argv[3] == "-f"


def test_a_spare_started_in_another_environment_or_for_another_command_is_not_used(
    no_spare, monkeypatch
):
    argv = [*loadgen.locust_argv(), "--headless"]
    loadgen._spare = spare = _fake_spare("import time; time.sleep(30)")
    monkeypatch.setenv("VPROF_SPARE_TEST", "changed since the spare started")
    assert loadgen._take_spare(argv) is None and loadgen._spare is None
    assert spare.poll() is not None  # ended, not left waiting
    monkeypatch.delenv("VPROF_SPARE_TEST")
    loadgen._spare = spare = _fake_spare("import time; time.sleep(30)")
    assert loadgen._take_spare(["python", "-m", "other", "--headless"]) is None
    assert spare.poll() is not None


def test_a_spare_that_ended_leaves_a_cold_start(no_spare):
    loadgen._spare = _fake_spare("pass")
    loadgen._spare.wait(timeout=10)
    assert loadgen._take_spare([*loadgen.locust_argv(), "--headless"]) is None
    assert loadgen._spare is None


def test_a_real_spare_runs_locust_with_the_argv_it_is_handed(no_spare):
    loadgen.start_spare()
    proc = loadgen._take_spare([*loadgen.locust_argv(), "--version"])
    assert proc is not None
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and b"locust" in out.lower()


def test_an_unused_spare_is_ended(no_spare):
    loadgen.start_spare()
    spare = loadgen._spare
    assert spare is not None
    loadgen.stop_spare()
    assert spare.returncode is not None and loadgen._spare is None
