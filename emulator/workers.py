"""Several emulator processes on one port (``SO_REUSEPORT``), under one supervisor.

The kernel spreads new connections over the workers' listening sockets, so streams are
served by as many cores as there are workers; ``/metrics`` counts for all of them from
shared memory (``counters``). The supervisor (the process that called :func:`serve_workers`)
starts the workers, waits until every one listens, and stops them all on SIGINT or SIGTERM;
a worker that dies takes the others down with an error, and a worker whose supervisor
vanished (even by SIGKILL) stops by itself, so none is ever left behind.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from vprof.common.errors import VprofError
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.counters import Counters, shared_buffer

START_TIMEOUT_S = 60.0  # spawned workers import Python afresh, and may load a tokenizer
STOP_GRACE_S = 10.0


def _worker_main(config: EmulatorConfig, slot: int, buffer: Any, report: Any, parent: int) -> None:
    from vprof.emulator.server import Emulator

    emulator = Emulator(config, counters=Counters(buffer, slot), reuse_port=True)
    try:
        emulator.serve_forever(
            on_ready=lambda url: report.send(("ready", "")),
            stop_signals=(signal.SIGTERM,),
            parent_pid=parent,
        )
    except VprofError as exc:
        report.send(("error", str(exc)))
        sys.exit(2)


def _reserve_port(config: EmulatorConfig) -> socket.socket:
    """Refuse a port someone listens on, then hold it (``SO_REUSEPORT``) for the workers."""
    if config.port:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            # without SO_REUSEPORT: fails if anyone listens here, even another reuse-port group
            probe.bind((config.host, config.port))
        except OSError as exc:
            raise _port_error(config, exc) from None
        finally:
            probe.close()
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((config.host, config.port))  # bound, never listening: gets no connections
    except OSError as exc:
        holder.close()
        raise _port_error(config, exc) from None
    return holder


def _port_error(config: EmulatorConfig, exc: OSError) -> VprofError:
    return VprofError(
        f"cannot listen on {config.host}:{config.port}: {exc.strerror}",
        key="--port",
        hint="pick a free port, or 0 for any",
    )


def serve_workers(
    config: EmulatorConfig, workers: int, on_ready: Callable[[str], None] | None = None
) -> None:
    """Serve ``config`` from ``workers`` processes sharing its port until SIGINT or SIGTERM."""
    if not 1 <= workers <= 256:
        raise VprofError(f"must be 1 to 256, got {workers}", key="--workers")
    if not sys.platform.startswith("linux") or not hasattr(socket, "SO_REUSEPORT"):
        raise VprofError(
            "several workers need Linux's SO_REUSEPORT (the kernel spreads connections)",
            key="--workers",
            hint="run one worker here",
        )
    holder = _reserve_port(config)
    config = dataclasses.replace(config, port=holder.getsockname()[1])
    context = multiprocessing.get_context("spawn")  # nothing inherited but what is passed
    buffer = shared_buffer(workers)
    parent = multiprocessing.current_process().pid
    processes: list[BaseProcess] = []
    reports: list[Connection] = []
    stopping: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopping.append(signum)

    # Workers start with SIGINT ignored (Python then installs no KeyboardInterrupt handler):
    # Ctrl-C reaches the whole process group, and only the supervisor decides who stops.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for slot in range(workers):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker_main,
                args=(config, slot, buffer, send, parent),
                name=f"vprof-emulate-{slot}",
                daemon=True,
            )
            process.start()
            send.close()
            processes.append(process)
            reports.append(receive)
        for sig in previous:
            signal.signal(sig, stop)
        _wait_ready(processes, reports, stopping)
        holder.close()  # the workers hold the port now
        if stopping:
            return
        if on_ready is not None:
            on_ready(f"http://{config.host}:{config.port}")
        while not stopping:
            ended = multiprocessing.connection.wait([p.sentinel for p in processes], timeout=0.5)
            if ended and not stopping:
                dead = next(p for p in processes if p.sentinel == ended[0])
                dead.join(STOP_GRACE_S)  # its sentinel can close a moment before it is reaped
                raise VprofError(
                    f"emulator worker {dead.name} exited with code {dead.exitcode}; "
                    "stopped the others"
                )
    finally:
        holder.close()
        _stop_all(processes)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_ready(
    processes: list[BaseProcess], reports: list[Connection], stopping: list[int]
) -> None:
    """Until every worker listens; a worker's own error (port in use, bad tokenizer) is raised."""
    pending: dict[Connection, BaseProcess] = dict(zip(reports, processes, strict=True))
    deadline = time.monotonic() + START_TIMEOUT_S
    while pending and not stopping:
        left = deadline - time.monotonic()
        if left <= 0:
            raise VprofError(f"the emulator workers did not start within {START_TIMEOUT_S:g} s")
        for ready in multiprocessing.connection.wait(list(pending), timeout=min(left, 0.5)):
            report = next(r for r in pending if r is ready)
            process = pending.pop(report)
            try:
                kind, message = report.recv()
            except EOFError:
                process.join(STOP_GRACE_S)
                kind, message = "error", f"exited with code {process.exitcode} before listening"
            if kind != "ready":
                raise VprofError(f"emulator worker {process.name}: {message}")


def _stop_all(processes: list[BaseProcess]) -> None:
    """SIGTERM every worker, wait for them, then kill any that did not stop."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
