"""The load generator: the shipped locustfile run by real Locust, headless, in a child process.

vprof drives Locust exactly as a user would (``locust -f <locustfile> --headless …``), so a run
from vprof and a run from plain Locust measure the same way.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def locustfile_path() -> Path:
    """Path of the shipped locustfile (Locust's ``-f`` takes a path, not a module)."""
    spec = importlib.util.find_spec("vprof.locustfiles.locustfile")
    assert spec is not None and spec.origin, "vprof.locustfiles.locustfile is not installed"
    return Path(spec.origin)


@dataclass(frozen=True)
class LoadSpec:
    url: str
    run_dir: Path
    workload: str
    traffic: str
    seed: int
    salt: str
    model: str | None = None
    tokenizer: str | None = None
    processes: int = 1
    stop_timeout_s: int = 120

    def argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(locustfile_path()),
            "--headless",
            "--host",
            self.url,
            "--workload",
            self.workload,
            "--traffic",
            self.traffic,
            "--run-dir",
            str(self.run_dir),
            "--seed",
            str(self.seed),
            "--salt",
            self.salt,
            "--stop-timeout",
            str(self.stop_timeout_s),
            "--only-summary",
            "--exit-code-on-error",
            "0",
            "--logfile",
            str(self.run_dir / "locust.log"),
        ]
        if self.model:
            argv += ["--model", self.model]
        if self.tokenizer:
            argv += ["--tokenizer", self.tokenizer]
        if self.processes > 1:
            # The forked workers dial --master-port; a port of our own keeps concurrent
            # benches (and other Locust masters on 5557) apart.
            from vprof.server.process import free_port

            port = str(free_port())
            argv += [
                "--processes",
                str(self.processes),
                "--master-bind-port",
                port,
                "--master-port",
                port,
            ]
        return argv


class LoadProcess:
    """Locust as a child in its own process group; stopped with SIGTERM so it saves records."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self._out = open(spec.run_dir / "locust.out", "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            spec.argv(),
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 60.0) -> int:
        """Ask Locust to stop (it writes what it has), then make sure its group is gone."""
        if self.running():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        return self.wait(0)

    def wait(self, timeout_s: float | None = None) -> int:
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = -9
        try:  # --processes children share the group; leave none behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not self._out.closed:
            self._out.close()
        return rc
