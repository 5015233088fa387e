"""Records leave the Locust processes and land in the run folder as they arrive.

Every process (local runner, master, worker) buffers the record dicts its users produce and
samples its own health (event-loop lag and CPU, ``vprof.locustfiles.health``) every ~2 s.
Workers ship both to the master in a custom message every ``SHIP_INTERVAL_S`` and when their
test stops, each message naming the worker (host, pid), so a worker that dies takes at most
that long of records with it and the master knows what each one sent (``Collector.senders``).
The master or the local runner appends records to ``<run-dir>/records.arrow`` with
:class:`RecordWriter` (bounded memory: only the current batch is held), health samples to
``loadgen.jsonl``, and describes the test in ``locust.json``. Callbacks given to
:func:`subscribe` see each list of record dicts as it arrives (the web UI's live table uses
this).

A write that fails (a full disk) stops the test at once: :func:`stop_for_fault` tells the
parent why on a ``FAULT_MARK`` line, the records file keeps its complete batches, and nothing
more is written.
"""

import locust  # noqa: F401  (first: gevent patching)
from locust.runners import (
    STATE_RUNNING,
    STATE_SPAWNING,
    LocalRunner,
    MasterRunner,
    WorkerRunner,
)

import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent

from vprof.common.clock import wall_now
from vprof.common.errors import os_reason
from vprof.locustfiles.health import PAUSES, run_sampler
from vprof.locustfiles.optiontable import EVENT_MARK, FAULT_EXIT_CODE, FAULT_MARK
from vprof.records.rundir import LOADGEN_ANSWERED, LOADGEN_FAILED, RunDir, append_jsonl
from vprof.records.schema import Status
from vprof.records.store import RecordWriter

RECORDS_MESSAGE = "vprof_records"
ABORT_MESSAGE = "vprof_abort"  # master -> workers: stop now, answers in flight cut off
LOCAL_FLUSH_INTERVAL_S = 1.0
# How often a worker ships what it has: what a worker that dies takes with it at most.
SHIP_INTERVAL_S = 0.5
# Packing and sending a shipment holds the worker's event loop (and every stream's clock): it
# goes in pieces of about this many values (a record's fields and gaps), a message each, the
# loop free between them: about 0.5 ms a piece (msgpack, ~25 ns a value).
SHIP_PIECE_VALUES = 20_000

log = logging.getLogger("vprof")

Callback = Callable[[list[dict[str, Any]]], None]


def process_name(environment: Any) -> str:
    """A stable name for this Locust process: host, pid and worker index."""
    runner = environment.runner
    index = getattr(runner, "worker_index", 0)
    role = "worker" if isinstance(runner, WorkerRunner) else "local"
    if isinstance(runner, MasterRunner):
        role = "master"
    return f"{socket.gethostname()}:{os.getpid()}:{role}{index if role == 'worker' else ''}"


class _Buffer:
    """What one process has produced and not yet handed on."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.health: list[dict[str, Any]] = []
        self.answered = self.failed = 0  # so far, for the live progress

    def take(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        records, health = self.records, self.health
        self.records, self.health = [], []
        return records, health


class Sender:
    """What one worker has shipped to the master: who it is, how many records, and when."""

    def __init__(self, name: str, pid: int) -> None:
        self.name, self.pid = name, pid
        self.records = 0
        self.last_at: float | None = None  # wall-clock time of its last shipment

    def heard(self, records: int) -> None:
        self.records += records
        self.last_at = wall_now()


class Collector:
    """On the master or local runner: writes what arrives into the run folder."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.callbacks: list[Callback] = []
        self.run_dir: RunDir | None = None
        self.writer: RecordWriter | None = None
        self.info: dict[str, Any] = {}
        self.received = 0
        self.fault = ""  # why writing stopped (a full disk); nothing is written after it
        self.senders: dict[str, Sender] = {}  # master: each worker's shipments, by client id

    def open(self, run_dir: Path) -> None:
        if self.writer is not None or self.fault:
            return  # a second test in the same process (web UI) appends to the same run
        self.run_dir = RunDir(run_dir)
        self.run_dir.path.mkdir(parents=True, exist_ok=True)
        self._write(
            self.run_dir.records,
            lambda: setattr(self, "writer", RecordWriter(self.run_dir.records, batch_size=500)),  # type: ignore[union-attr]
        )

    def add(self, records: list[dict[str, Any]], health: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        if records:
            self.received += len(records)
            writer = self.writer
            if writer is not None:
                # every arrival is complete on disk; batches stay small
                self._write(writer.path, lambda: (writer.extend(records), writer.flush()))
            for callback in list(self.callbacks):
                callback(records)
        if health and self.run_dir is not None:
            path = self.run_dir.loadgen_jsonl
            self._write(path, lambda: append_jsonl(path, health))

    def write_info(self, **updates: Any) -> None:
        self.info.update(updates)
        if self.run_dir is None:
            return
        self.info["records"] = self.received
        run_dir = self.run_dir
        self._write(run_dir.locust_json, lambda: run_dir.write_locust_info(self.info))

    def _write(self, path: Path, write: Callable[[], object]) -> None:
        """Run one write; the first that fails stops the test (nothing is written after it)."""
        if self.fault:
            return
        try:
            write()
        except OSError as exc:
            written = self.writer.written if self.writer is not None else 0
            self.writer = None
            reason = os_reason(exc)
            self.fault = f"could not write {path.name} in {path.parent}: {reason}"
            stop_for_fault(self.environment, self.fault, records_written=written)

    def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            self._write(writer.path, writer.close)


def stop_for_fault(environment: Any, reason: str, **details: Any) -> None:
    """Stop this Locust process's test at once because it cannot go on (``reason``): its
    parent reads the ``FAULT_MARK`` line (``details`` as ``key=value`` after the reason), and
    Locust exits with ``FAULT_EXIT_CODE``. Streams in flight are cut off: their records could
    not be kept anyway."""
    line = reason + "".join(f"; {key}={value}" for key, value in details.items())
    _tell_vprof(FAULT_MARK, line)
    log.error("vprof: stopping the test: %s", reason)
    environment.process_exit_code = FAULT_EXIT_CODE
    environment.stop_timeout = 0
    environment._vprof_fault = reason
    if isinstance(environment.runner, MasterRunner):
        environment.runner.send_message(ABORT_MESSAGE, {"reason": reason})
    gevent.spawn(environment.runner.quit)


def _on_abort(environment: Any, msg: Any, **_: Any) -> None:
    """Worker: the master stopped its test at once; stop ours the same way (its
    ``test_stop`` ships what was recorded)."""
    environment.stop_timeout = 0
    if environment.runner.state in (STATE_SPAWNING, STATE_RUNNING):
        environment.runner.stop()


def tell_vprof(news: str) -> None:
    """News for the person watching (a worker joined or lost): logged, and written on an
    ``EVENT_MARK`` line that vprof shows as it comes."""
    log.warning("vprof: %s", news)
    _tell_vprof(EVENT_MARK, news)


def _tell_vprof(mark: str, line: str) -> None:
    try:
        sys.stderr.write(f"{mark}{line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no reader left: the log has it


def fault(environment: Any) -> str:
    """Why this process stopped its test at once (``""``: it did not)."""
    return str(getattr(environment, "_vprof_fault", "") or "")


def _buffer(environment: Any) -> _Buffer:
    buf = getattr(environment, "_vprof_buffer", None)
    if buf is None:
        buf = _Buffer()
        environment._vprof_buffer = buf
    return buf


def collector(environment: Any) -> Collector | None:
    """The collector of this process, or ``None`` on a worker."""
    return getattr(environment, "_vprof_collector", None)


def subscribe(environment: Any, callback: Callback) -> None:
    """Call ``callback(list_of_record_dicts)`` on the master/local runner as records arrive."""
    col = collector(environment)
    if col is None:
        col = Collector(environment)
        environment._vprof_collector = col
    col.callbacks.append(callback)


def emit(environment: Any, record: dict[str, Any]) -> None:
    """Hand one finished record (a dict) to this process's buffer."""
    buffer = _buffer(environment)
    buffer.records.append(record)
    status = record.get("status")
    if status == Status.OK:
        buffer.answered += 1
    elif status in (Status.ERROR, Status.TIMEOUT):
        buffer.failed += 1


def default_run_dir() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / "vprof-runs" / f"{stamp}-locust"


def _emit_health(environment: Any, sample: dict[str, Any]) -> None:
    buffer = _buffer(environment)
    sample |= {LOADGEN_ANSWERED: buffer.answered, LOADGEN_FAILED: buffer.failed}
    col = collector(environment)
    if col is not None and not isinstance(environment.runner, WorkerRunner):
        col.add([], [sample])
    else:
        _buffer(environment).health.append(sample)


def flush_local(environment: Any) -> None:
    """Move this process's buffer into its own collector (local runner, master)."""
    col = collector(environment)
    if col is None:
        return
    started = time.perf_counter()
    records, health = _buffer(environment).take()
    col.add(records, health)
    if records and not isinstance(environment.runner, MasterRunner):  # a local runner's users
        PAUSES.add("ship", (time.perf_counter() - started) * 1000.0)


def ship_to_master(environment: Any, *, final: bool = True) -> None:
    """Worker: send the buffer to the master now, in pieces of about ``SHIP_PIECE_VALUES``
    (the last carries the health samples and ``final``: its test has stopped), yielding to
    the streams between pieces; each piece's time is a ``ship`` pause of the health samples."""
    records, health = _buffer(environment).take()
    pieces, piece, values = [], [], 0
    for record in records:
        piece.append(record)
        values += len(record) + len(record.get("itl_ms") or ())
        if values >= SHIP_PIECE_VALUES:
            pieces.append(piece)
            piece, values = [], 0
    pieces.append(piece)
    name, pid = process_name(environment), os.getpid()
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        started = time.perf_counter()
        message = {"records": piece, "health": health if last else [], "final": final and last}
        environment.runner.send_message(RECORDS_MESSAGE, message | {"worker": name, "pid": pid})
        PAUSES.add("ship", (time.perf_counter() - started) * 1000.0)
        if not last:
            gevent.sleep(0)


def finished_workers(environment: Any) -> set[str]:
    """Master: the workers that have sent their final records for the current test."""
    done = getattr(environment, "_vprof_final", None)
    if done is None:
        done = environment._vprof_final = set()
    return done


def _warm_arrow() -> None:
    """Pay pyarrow's one-off start-up before any test runs: its first conversion of Python
    values imports pandas (about 0.3 s), which would stall every stream of the first flush."""
    import pyarrow as pa

    from vprof.records.schema import FIELDS, arrow_schema

    pa.RecordBatch.from_pydict({name: [] for name in FIELDS}, schema=arrow_schema())


def install(environment: Any) -> None:
    """Wire collection into a runner (call from the ``init`` event, once per process)."""
    runner = environment.runner
    gevent.spawn(
        run_sampler,
        lambda: process_name(environment),
        lambda sample: _emit_health(environment, sample),
    )
    if isinstance(runner, WorkerRunner):

        def _shipper() -> None:
            # Empty shipments too: the master learns who this worker is before it has records.
            while True:
                gevent.sleep(SHIP_INTERVAL_S)
                ship_to_master(environment, final=False)

        gevent.spawn(_shipper)
        runner.register_message(ABORT_MESSAGE, _on_abort, concurrent=True)
        return

    if collector(environment) is None:
        environment._vprof_collector = Collector(environment)
    col = collector(environment)
    assert col is not None
    _warm_arrow()

    if isinstance(runner, MasterRunner):

        def _on_records(environment: Any, msg: Any, **_: Any) -> None:
            records = msg.data.get("records") or []
            col.add(records, msg.data.get("health") or [])
            sender = col.senders.get(msg.node_id)
            if sender is None:
                name, pid = str(msg.data.get("worker") or msg.node_id), msg.data.get("pid")
                sender = col.senders[msg.node_id] = Sender(name, int(pid or 0))
            sender.heard(len(records))
            if msg.data.get("final"):
                finished_workers(environment).add(msg.node_id)

        @environment.events.test_start.add_listener
        def _new_test(**_: Any) -> None:
            finished_workers(environment).clear()

        runner.register_message(RECORDS_MESSAGE, _on_records)
    elif isinstance(runner, LocalRunner):

        def _flusher() -> None:
            while True:
                gevent.sleep(LOCAL_FLUSH_INTERVAL_S)
                flush_local(environment)

        gevent.spawn(_flusher)

    @environment.events.quit.add_listener
    def _on_quit(**_: Any) -> None:
        flush_local(environment)
        col.write_info()
        col.close()
