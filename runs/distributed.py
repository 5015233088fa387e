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

import socket

from vprof.common.errors import VprofError

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
