"""Load from several hosts with Locust's own distributed mode.

``vprof bench … --workers-expected N --master-bind HOST:PORT`` runs the shipped locustfile as
a Locust master that binds ``HOST:PORT`` and waits for N workers; ``vprof worker --master
HOST:PORT`` on each load host runs it as a Locust worker that joins it. Nothing here is a
protocol of vprof's own: workers receive the traffic shape and options in Locust's spawn
messages, and the workload, tokenizer, seed, salt and open-loop epoch in vprof's run message
(``vprof.locustfiles.testplan``), so every host sends its share of one schedule; records and
health samples come back to the master's run folder as they do from ``--processes`` workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable

from vprof.common.errors import VprofError
from vprof.common.interrupt import die_with_parent

# How long a master waits for its workers to join before it gives up (Locust's
# --expect-workers-max-wait); a bench allows this much more time for such a run.
WORKERS_WAIT_S = 600.0
DEFAULT_MASTER_PORT = 5557  # Locust's own


def parse_address(text: str, key: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) as ``(host, port)``; ``key`` names
    the flag in the error."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or any(c.isspace() for c in host):
        raise VprofError(
            f"{text!r} is not HOST:PORT",
            key=key,
            hint=f"e.g. 0.0.0.0:{DEFAULT_MASTER_PORT} to bind, "
            f"10.0.0.5:{DEFAULT_MASTER_PORT} to join",
        )
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise VprofError(f"port {port} is not 1 to 65535", key=key)
    return host, port


def master_argv(bind: str, workers: int) -> list[str]:
    """Locust's flags for a master that binds ``bind`` and waits for ``workers`` workers."""
    if workers < 1:
        raise VprofError(f"must be at least 1, got {workers}", key="--workers-expected")
    host, port = parse_address(bind, "--master-bind")
    return [
        "--master",
        "--master-bind-host",
        host,
        "--master-bind-port",
        str(port),
        "--expect-workers",
        str(workers),
        "--expect-workers-max-wait",
        f"{WORKERS_WAIT_S:g}",
    ]


def join_hint(bind: str) -> str:
    """What to run on each load host to join a master that binds ``bind``."""
    host, port = parse_address(bind, "--master-bind")
    if host in ("0.0.0.0", "::", "*"):
        host = socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    return f"vprof worker --master {shown}:{port}"


def worker_argv(master: str, processes: int = 1) -> list[str]:
    """The Locust worker ``vprof worker --master HOST:PORT`` runs: the shipped locustfile,
    joining ``master``; ``processes`` > 1 forks that many workers (Locust's ``--processes``)."""
    from vprof.runs.loadgen import locust_argv

    host, port = parse_address(master, "--master")
    if processes < 1:
        raise VprofError(f"must be at least 1, got {processes}", key="--processes")
    argv = [
        *locust_argv(),
        "--worker",
        "--master-host",
        host,
        "--master-port",
        str(port),
    ]
    if processes > 1:
        argv += ["--processes", str(processes)]
    return argv


def run_worker(
    master: str, processes: int = 1, *, once: bool = False, say: Callable[[str], None] = print
) -> int:
    """``vprof worker``: run a Locust worker that joins ``master`` and, unless ``once``, start
    another when it ends, so a bench's runs (a master each) all find their workers; returns
    the exit status to end with.

    SIGINT and SIGTERM are passed to the worker, which finishes its streams and ships their
    records before it quits, and end the loop. A worker killed by a signal ends it too (its
    master reports it lost; a new one would join a test that has no share for it). The worker
    dies with this process: killed with it, it cannot send load for nobody.
    """

    argv = worker_argv(master, processes)
    stopping: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(signum: int, frame: object) -> None:
        stopping.append(signum)
        if child and child[0].poll() is None:
            try:  # its group: the workers --processes forked, too
                os.killpg(child[0].pid, signum)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            say(f"vprof worker: joining the Locust master at {master}")
            proc = subprocess.Popen(
                argv,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # signals reach it from here only, once
                preexec_fn=lambda: die_with_parent(signal.SIGTERM),
            )
            child[:] = [proc]
            rc = _wait(proc)
            if stopping:
                return 128 + stopping[0]
            if rc < 0:
                name = signal.Signals(-rc).name
                say(f"vprof worker: the Locust worker was killed by {name}; not joining again")
                return 128 - rc
            if once:
                return rc
            say(f"vprof worker: the Locust worker ended (exit code {rc}); joining the next test")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait(proc: subprocess.Popen) -> int:
    while True:
        try:
            return proc.wait()
        except InterruptedError:  # a signal arrived: forwarded, keep waiting
            continue
