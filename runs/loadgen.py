"""The load generator: the shipped locustfile run by real Locust, headless, in a child process.

vprof drives Locust exactly as a user would (``locust -f <locustfile> --headless …``), so a run
from vprof and a run from plain Locust measure the same way.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import os_reason
from vprof.locustfiles.optiontable import (
    DEFAULT_BALANCE,
    DEFAULT_ON_WORKER_LOSS,
    DEFAULT_SLICE_S,
    DEFAULT_SLICE_WARMUP_S,
    EVENT_MARK,
    FAULT_MARK,
    FINISH_GRACE_S,
    PARENT_PID_ENV,
    STOP_TIMEOUT_S,
    option_argv,
)
from vprof.records.rundir import RunDir


def locustfile_path() -> Path:
    """Path of the shipped locustfile (Locust's ``-f`` takes a path, not a module)."""
    spec = importlib.util.find_spec("vprof.locustfiles.locustfile")
    assert spec is not None and spec.origin, "vprof.locustfiles.locustfile is not installed"
    return Path(spec.origin)


def locust_argv() -> list[str]:
    """Real Locust on the shipped locustfile, in this Python (the start of every such argv)."""
    return [sys.executable, "-m", "locust", "-f", str(locustfile_path())]


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
    on_worker_loss: str = DEFAULT_ON_WORKER_LOSS
    # Locust workers on other hosts (vprof worker) to wait for, joining at master_bind
    # (HOST:PORT): see runs.distributed; instead of processes
    workers_expected: int = 0
    master_bind: str = ""
    request_id_prefix: str = ""  # X-Request-Id on every request (vprof calibrate matches them)
    cut_in_flight_s: float = -1.0  # see optiontable.CUT_IN_FLIGHT_S; -1: wait for answers

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
            "on_worker_loss": self.on_worker_loss,
            "request_id_prefix": self.request_id_prefix,
            "cut_in_flight_s": self.cut_in_flight_s,
        }

    def argv(self) -> list[str]:
        argv = [
            *locust_argv(),
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
        if self.workers_expected:
            from vprof.runs.distributed import master_argv

            argv += master_argv(self.master_bind, self.workers_expected)
        elif self.processes > 1:
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


# A Locust process already started, waiting for its argv (locustfiles.spare), and the
# environment it was started with: the next level of a ladder takes it instead of paying
# Locust's start-up between levels.
_spare: subprocess.Popen[bytes] | None = None
_spare_env: dict[str, str] = {}


def _load_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_PID_ENV: str(os.getpid())}


def start_spare() -> None:
    """Start a Locust process for the next test now (one at most; unused, it ends with this
    process): a ladder calls this as a level's Locust starts, before its schedule's epoch, so
    the imports are done before the level drains instead of at the next level's start."""
    global _spare, _spare_env
    if _spare is not None and _spare.poll() is None:
        return
    _spare_env = _load_env()
    _spare = subprocess.Popen(
        [sys.executable, "-m", "vprof.locustfiles.spare"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=_spare_env,
    )


def _take_spare(argv: list[str]) -> subprocess.Popen[bytes] | None:
    """The spare, handed ``argv`` (None when there is none alive, or it cannot run ``argv``
    as a cold start would: another Python or module, or the environment changed since)."""
    global _spare
    proc, _spare = _spare, None
    if proc is None or proc.stdin is None:
        return None
    head = [sys.executable, "-m", "locust"]
    if argv[: len(head)] != head or _load_env() != _spare_env:
        _end(proc)
        return None
    try:
        if proc.poll() is not None:
            raise BrokenPipeError
        proc.stdin.write((json.dumps(argv[len(head) :]) + "\n").encode())
        proc.stdin.close()
        proc.stdin = None  # as a cold start's (its stdin is not a pipe)
    except OSError:  # ended (a broken pipe): start one cold
        _end(proc)
        return None
    return proc


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End a spare that was handed nothing (it has started no test: nothing to save)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def stop_spare() -> None:
    """End the spare, if any (it is not needed)."""
    global _spare
    proc, _spare = _spare, None
    if proc is not None:
        _end(proc)


atexit.register(stop_spare)


class LoadProcess:
    """Locust as a child in its own process group; stopped with SIGTERM so it saves records.

    Its output (stdout and stderr) comes through a pipe: a thread copies it into
    ``locust.out``, so a file that cannot be written (a full disk) is noticed here and never
    blocks Locust, and picks out the lines Locust addresses to vprof — why it stopped at once
    (``fault``) and news such as a lost worker (``events``). Locust watches this process and
    stops its load when it dies (``PARENT_PID_ENV``).
    """

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.output_error = ""  # why locust.out could not be written
        self.fault = ""  # why Locust stopped its test at once (its FAULT_MARK line)
        self.fault_details: dict[str, str] = {}
        self.events: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._out: Any = open(spec.run_dir.locust_out, "ab")  # noqa: SIM115 - closed by the pump
        argv = spec.argv()
        self.proc = _take_spare(argv) or subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=_load_env(),
        )
        self._pump = threading.Thread(target=self._copy_output, name="vprof-locust-out")
        self._pump.daemon = True
        self._pump.start()

    def _copy_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.decode("utf-8", "replace")
            if text.startswith(FAULT_MARK) and not self.fault:
                reason, *details = text[len(FAULT_MARK) :].rstrip("\n").split("; ")
                self.fault_details = dict(d.partition("=")[::2] for d in details if "=" in d)
                self.fault = reason
            elif text.startswith(EVENT_MARK):
                self.events.put(text[len(EVENT_MARK) :].rstrip("\n"))
            if self._out is None:
                continue  # keep reading: a full pipe would stall Locust
            try:
                self._out.write(line)
                self._out.flush()
            except OSError as exc:
                path = self.spec.run_dir.locust_out
                self.output_error = f"could not write {path.name} in {path.parent}: " + (
                    os_reason(exc)
                )
                self._close_out()
        self._close_out()

    def _close_out(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except OSError:
                pass

    def running(self) -> bool:
        return self.proc.poll() is None

    def running_after(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for Locust to end (returning as soon as it does); True when
        it still runs."""
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return True
        return False

    def stop(self, grace_s: float | None = None) -> int:
        """Ask Locust to stop (streams in flight may finish within its stop timeout; it writes
        what it has), then make sure its group is gone after ``grace_s`` (default: the stop
        timeout and the grace of ``FINISH_GRACE_S``)."""
        if grace_s is None:
            grace_s = STOP_TIMEOUT_S + FINISH_GRACE_S
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
        self._pump.join(timeout=5)  # the group is gone: the pipe ends
        return rc
