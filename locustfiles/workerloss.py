"""The master watches its workers: one lost mid-test is news, a record, and by default the end.

A worker is *lost* when, during a test, its process ends (a worker forked by ``--processes``
is this process's child: its exit status says how it died), it stops answering Locust's
heartbeats (a worker on another host), or it leaves the test without its final records.
Each loss is logged, told to vprof on an ``EVENT_MARK`` line, and written to ``locust.json``
as ``workers_lost`` (who, when, how, and the records it had sent: what it produced since its
last shipment, at most ``SHIP_INTERVAL_S`` of records, went with it). Then, as
``--on-worker-loss`` says, the test ends (``stop``: a measurement with part of its users is
not the one asked for) or goes on with the lost worker's users spread over the others
(``continue``; an open-loop schedule's share of the lost worker is not sent).
"""

import locust  # noqa: F401  (first: gevent patching)
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner

import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gevent

from vprof.common.clock import wall_now
from vprof.locustfiles.collect import Sender, collector, finished_workers, tell_vprof
from vprof.locustfiles.options import opt
from vprof.locustfiles.optiontable import DEFAULT_ON_WORKER_LOSS

CHECK_INTERVAL_S = 0.25

log = logging.getLogger("vprof")


@dataclass(frozen=True)
class WorkerLoss:
    """One lost worker, as ``locust.json``'s ``workers_lost`` lists it."""

    worker: str  # host:pid:workerN
    client_id: str
    lost_at: float  # wall-clock seconds when the master saw it gone
    after_s: float  # seconds into the test
    how: str
    records: int  # records it had sent before
    last_records_at: float | None  # when its last shipment arrived

    def describe(self, policy: str) -> str:
        since = (
            f", the last {self.lost_at - self.last_records_at:.1f} s before"
            if self.last_records_at is not None
            else ""
        )
        then = (
            "stopping the test (--on-worker-loss stop)"
            if policy == "stop"
            else "going on with the workers left (--on-worker-loss continue)"
        )
        return (
            f"lost Locust worker {self.worker} {self.after_s:.1f} s into the test: {self.how}; "
            f"{self.records:,} records came from it{since}; {then}"
        )


def how_it_ended(status: int) -> str:
    """A process's wait status, for people: ``killed by SIGKILL``, ``exited with code 1``."""
    if os.WIFSIGNALED(status):
        return f"its process was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"its process exited with code {os.waitstatus_to_exitcode(status)}"


class WorkerWatch:
    """Master: looks at every worker each ``CHECK_INTERVAL_S`` while a test runs."""

    def __init__(self, environment: Any, on_loss: Callable[[WorkerLoss], None]) -> None:
        self.environment = environment
        self.on_loss = on_loss
        self.lost: dict[str, WorkerLoss] = {}
        self.started_at: float | None = None
        self.children: set[int] = set()  # workers forked by --processes: this process's own
        self.reaped: dict[int, int] = {}  # pid -> wait status of those seen dead

    def run(self) -> None:
        import psutil

        runner = self.environment.runner
        self.children = {child.pid for child in psutil.Process().children()}
        while True:
            gevent.sleep(CHECK_INTERVAL_S)
            self._reap()
            if runner.state not in (STATE_SPAWNING, STATE_RUNNING):
                self.started_at = None  # between tests, or stopping: workers leave as asked
                continue
            if self.started_at is None:
                self.started_at = wall_now()
            for client_id, how in self._gone():
                self._lose(client_id, how)

    def _reap(self) -> None:
        """Wait for forked workers that have ended, keeping how each one ended."""
        for pid in self.children - set(self.reaped):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done == pid:
                self.reaped[pid] = status

    def _gone(self) -> list[tuple[str, str]]:
        runner = self.environment.runner
        col = collector(self.environment)
        senders: dict[str, Sender] = col.senders if col is not None else {}
        clients = {c.id: c for c in runner.clients.all}
        host = socket.gethostname()
        gone = []
        for client_id in set(clients) | set(senders):
            if client_id in self.lost or client_id in finished_workers(self.environment):
                continue
            sender = senders.get(client_id)
            forked = sender is not None and sender.name.startswith(f"{host}:")
            status = self.reaped.get(sender.pid) if sender is not None and forked else None
            client = clients.get(client_id)
            if status is not None:
                gone.append((client_id, how_it_ended(status)))
            elif client is None:
                gone.append((client_id, "it left the test without its final records"))
            elif client.state == "missing":
                gone.append((client_id, "it stopped answering Locust's heartbeats"))
        return gone

    def _lose(self, client_id: str, how: str) -> None:
        col = collector(self.environment)
        sender = col.senders.get(client_id) if col is not None else None
        now = wall_now()
        loss = WorkerLoss(
            worker=sender.name if sender is not None else client_id,
            client_id=client_id,
            lost_at=now,
            after_s=round(now - (self.started_at or now), 3),
            how=how,
            records=sender.records if sender is not None else 0,
            last_records_at=sender.last_at if sender is not None else None,
        )
        self.lost[client_id] = loss
        self._forget(client_id)
        self.on_loss(loss)

    def _forget(self, client_id: str) -> None:
        """Take the worker out of the test as Locust does for one that says it stopped."""
        runner = self.environment.runner
        client = runner.clients.get(client_id)
        if client is None:
            return
        del runner.clients[client_id]
        dispatcher = runner._users_dispatcher  # Locust's own; its client_stopped does this
        if dispatcher is not None:
            dispatcher.remove_worker(client)


def install(environment: Any) -> None:
    """Watch a master's workers (call from ``init``; does nothing on other runners)."""
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return
    from vprof.locustfiles.shapes import end_test

    def on_loss(loss: WorkerLoss) -> None:
        policy = str(opt(environment, "on_worker_loss", DEFAULT_ON_WORKER_LOSS))
        tell_vprof(loss.describe(policy))
        col = collector(environment)
        if col is not None:
            col.write_info(workers_lost=[asdict(x) for x in watch.lost.values()])
        if policy == "stop":
            gevent.spawn(end_test, runner)
        elif runner.state == STATE_RUNNING:
            runner.start(runner.target_user_count, runner.spawn_rate)  # spread its users

    watch = WorkerWatch(environment, on_loss)
    environment._vprof_worker_watch = watch
    gevent.spawn(watch.run)
    _answer_for_reaped_workers(watch)


def lost_workers(environment: Any) -> set[str]:
    """Master: the client ids of the workers lost so far."""
    watch = getattr(environment, "_vprof_worker_watch", None)
    return set(watch.lost) if watch is not None else set()


def _answer_for_reaped_workers(watch: WorkerWatch) -> None:
    """Locust's exit handler waits for each forked worker, and for one that was already
    waited for (a lost worker, or one gevent reaped more than a minute before) it logs a
    traceback in a loop for 3 s (tens of thousands of them) and raises: answer it with the
    status this watch saw instead."""
    original = os.waitpid

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        try:
            return original(pid, options)
        except ChildProcessError:
            if pid in watch.reaped:
                return pid, watch.reaped[pid]
            raise

    os.waitpid = waitpid
