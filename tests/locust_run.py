"""Run the shipped locustfile with real Locust, headless, as a user would (test helper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

LOCUSTFILE = Path(__file__).resolve().parents[1] / "locustfiles" / "locustfile.py"


def import_locust_unpatched() -> None:
    """Import Locust into the test process without gevent's monkey patching, for tests that
    use its classes but open no sockets through it. Earlier test modules of a session have
    imported ssl (requests, aiohttp), and gevent patching ssl after that recurses forever
    (gevent's own warning says so: https://github.com/gevent/gevent/issues/1016). The
    variable is restored at once, so the Locust subprocesses other tests start are patched
    as usual."""
    if "locust" in sys.modules:
        return
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        import locust  # noqa: F401
    finally:
        del os.environ["LOCUST_SKIP_MONKEY_PATCH"]


def run_headless(url: str, run_dir: Path, *args: str, timeout_s: float = 240) -> str:
    """``locust -f locustfile.py --headless -H URL --run-dir RUN_DIR ARGS``; its output.

    Locust runs in its own process group, killed afterwards, so forked workers never outlive
    a run that timed out. Fails the test when Locust exits non-zero.
    """
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "-H",
        url,
        "--run-dir",
        str(run_dir),
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=run_dir.parent,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, out[-6000:]
    return out
