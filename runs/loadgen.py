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
from typing import Any

from vprof.locustfiles.optiontable import (
    DEFAULT_BALANCE,
    DEFAULT_SLICE_S,
    DEFAULT_SLICE_WARMUP_S,
    STOP_TIMEOUT_S,
    option_argv,
)
from vprof.records.rundir import RunDir


def locustfile_path() -> Path:
    """Path of the shipped locustfile (Locust's ``-f`` takes a path, not a module)."""
    spec = importlib.util.find_spec("vprof.locustfiles.locustfile")
    assert spec is not None and spec.origin, "vprof.locustfiles.locustfile is not installed"
    return Path(spec.origin)


@dataclass(frozen=True)
class LoadSpec:
    """One headless Locust run: where to send, what, and where the records go.

    ``workload`` is a workload file and ``traffic`` a shape as JSON (``shape_to_json``): the
    parent has resolved both, so the Locust side looks nothing up by name again. With several
    ``urls`` (replicas) requests are spread over them as ``balance`` says; ``url`` is the first.
    """

    url: str
    run_dir: RunDir
    workload: str
    traffic: str
    seed: int
    salt: str
    model: str | None = None
    tokenizer: str | None = None
    processes: int = 1
    urls: tuple[str, ...] = ()
    balance: str = DEFAULT_BALANCE
    sides: tuple[int, ...] = ()  # alternating servers: the side of each of urls
    slice_s: float = DEFAULT_SLICE_S
    slice_warmup_s: float = DEFAULT_SLICE_WARMUP_S

    def options(self) -> dict[str, Any]:
        """vprof's own Locust options (by ``dest`` in ``optiontable.OPTIONS``)."""
        return {
            "workload": self.workload,
            "traffic": self.traffic,
            "run_dir": str(self.run_dir.path),
            "seed": self.seed,
            "salt": self.salt,
            "model": self.model,
            "tokenizer": self.tokenizer,
            "hosts": ",".join(self.urls) if len(self.urls) > 1 else "",
            "balance": self.balance,
            "sides": ",".join(map(str, self.sides)),
            "slice_s": self.slice_s,
            "slice_warmup_s": self.slice_warmup_s,
        }

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
            "--stop-timeout",
            str(STOP_TIMEOUT_S),
            "--only-summary",
            "--exit-code-on-error",
            "0",
            "--logfile",
            str(self.run_dir.locust_log),
            *option_argv(self.options()),
        ]
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
        self._out = open(spec.run_dir.locust_out, "ab")  # noqa: SIM115 - closed in wait()
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

    def stop(self, grace_s: float = STOP_TIMEOUT_S + 30.0) -> int:
        """Ask Locust to stop (streams in flight may finish within its stop timeout; it writes
        what it has), then make sure its group is gone."""
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
