"""vprof's locustfile: LLM traffic that measures serving at full precision.

Run it with plain Locust::

    locust -f locustfile.py -H http://127.0.0.1:8000 --workload chat --traffic steady
    locust -f locustfile.py -H http://127.0.0.1:8000 --headless -u 4 -t 30s --processes 2

Records land in ``--run-dir`` (default ``./vprof-runs/<time>-locust``): ``records.arrow`` (one
row per request), ``locust.json`` (what ran) and ``loadgen.jsonl`` (the load generator's CPU).
"""

import locust  # noqa: F401  (first: gevent patching)
from locust import events
from locust.runners import MasterRunner, WorkerRunner

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import gevent

from vprof.common.clock import wall_now
from vprof.common.errors import VprofError
from vprof.locustfiles import collect, health, lifeline, testplan, workerloss
from vprof.locustfiles.balance import parse_hosts
from vprof.locustfiles.options import effective_shape, opt
from vprof.locustfiles.optiontable import STOP_TIMEOUT_S
from vprof.locustfiles.shapes import TrafficShapeBase, drain, end_test
from vprof.locustfiles.users import LLMUser
from vprof.records.schema import RequestRecord, Status

log = logging.getLogger("vprof")


class WorkloadUser(LLMUser):
    """Streams the workload's endpoint (``--workload``; ``--endpoint`` overrides it)."""


class TrafficShape(TrafficShapeBase):
    """Follows ``--traffic`` (or ``-u/-r/-t`` when no traffic shape is given)."""


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    cut_s = float(opt(environment, "cut_in_flight_s", -1.0))
    if cut_s >= 0:
        # A level of a ladder: answers still in flight shortly after its end are cut off
        # (cancelled) so the next level starts on a server with nothing running.
        environment.stop_timeout = cut_s
    elif environment.stop_timeout == 0:
        # Let streams in flight finish at the end of a test instead of killing them mid-answer.
        environment.stop_timeout = STOP_TIMEOUT_S
    if environment.runner is None:
        return
    collect.install(environment)
    health.install(environment)
    testplan.install(environment)
    workerloss.install(environment)
    lifeline.install(environment)
    _graceful_exit(environment)
    if not isinstance(environment.runner, WorkerRunner):
        _check_options(environment)
        _announce_workers(environment)
        from vprof.locustfiles import webui

        webui.install(environment)  # the LLM tabs and charts; the LLM part of --html and --csv


def _graceful_exit(environment: Any) -> None:
    """Ctrl-C/SIGTERM keep in-flight streams and their records.

    A worker stops its users gracefully and ships its final records *before* Locust tells the
    master it quits (quitting listeners fire newest first, and this one is newer). A headless
    master or local runner gets a SIGTERM handler: Locust installs its own only after a shape
    test has ended, so until then SIGTERM would kill it with the records in flight.
    """
    runner = environment.runner
    if isinstance(runner, WorkerRunner):

        @environment.events.quitting.add_listener
        def _worker_quitting(**_: Any) -> None:
            if runner.state in ("running", "spawning"):
                runner.stop()
                return
            # Already stopping (the master asked us to drain): wait for that stop to finish.
            deadline = wall_now() + float(environment.stop_timeout or 0) + 5.0
            while runner.state in ("stopping", "cleanup") and wall_now() < deadline:
                gevent.sleep(0.1)

        return
    if not opt(environment, "headless", False):
        return

    def _on_sigterm() -> None:
        log.info("vprof: SIGTERM: finishing requests in flight, then quitting")
        end_test(runner)

    gevent.signal_handler(signal.SIGTERM, lambda: gevent.spawn(_on_sigterm))


def _check_options(environment: Any) -> None:
    """Fail fast on a bad --workload or --traffic instead of failing every request."""
    try:
        effective_shape(environment)
        parse_hosts(str(opt(environment, "hosts", "") or ""))
        testplan.check_slices(environment)
        testplan.state(environment).workload()
        testplan.check_shipping(environment)
    except VprofError as exc:
        log.error("vprof: %s", exc.format())
        if opt(environment, "headless", False):
            sys.exit(2)  # the web UI stays up: the form can still fix it


def _announce_workers(environment: Any) -> None:
    """A master of workers on other hosts tells vprof each worker that joins (an
    ``EVENT_MARK`` line): the person starting them sees the count grow."""
    if not testplan.ships(environment):
        return
    expected = int(opt(environment, "expect_workers", 1) or 1)

    @environment.events.worker_connect.add_listener
    def _joined(client_id: str, **_: Any) -> None:
        # fired before Locust adds it (and again if it says it is ready twice)
        count = len(set(environment.runner.clients) | {client_id})
        collect.tell_vprof(f"Locust worker {client_id} joined ({count} of {expected})")


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    config = testplan.decide(environment)
    col = collect.collector(environment)
    if col is not None:
        given = str(opt(environment, "run_dir", "") or "")
        col.open(Path(given) if given else collect.default_run_dir())
        shape = effective_shape(environment)
        warmup_s = shape.warmup_s if shape else 0.0
        runner = environment.runner
        col.write_info(
            workload=testplan.state(environment).workload().to_dict(),
            traffic=shape.to_dict() if shape else None,
            seed=config.seed,
            salt=config.salt,
            open_loop=bool(shape and shape.open_loop),
            epoch=config.epoch,
            workers=len(config.workers) if isinstance(runner, MasterRunner) else 1,
            worker_ids=config.workers,
            locust_version=locust.__version__,
            host=environment.host,
            started_at=config.started_at,
            stopped_at=None,
            warmup_until=config.epoch + warmup_s,
            slices=config.slices,
            options={
                k: v
                for k, v in vars(environment.parsed_options or {}).items()
                if isinstance(v, (str, int, float, bool, type(None)))
            },
        )
        log.info("vprof: writing records to %s", col.run_dir.path if col.run_dir else "?")
    testplan.broadcast(environment, config)


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    st = testplan.state(environment)
    if st.queue is not None:
        # Arrivals (and sessions' later calls) that were due but never sent (the generator
        # fell behind) still count; a later call due after the end was never scheduled.
        now = wall_now()
        if st.sessions is not None:
            untaken = st.sessions.untaken()
        else:
            untaken = [(str(i), -1, 0, at) for i, at in st.queue.untaken()]
        for request_id, session_id, turn, scheduled_at in untaken:
            slice_k = st.slice_of(int(request_id)) if session_id < 0 else -1
            if scheduled_at <= now:
                record = RequestRecord(
                    request_id=request_id,
                    user_class="WorkloadUser",
                    worker=collect.process_name(environment),
                    open_loop=True,
                    conversation_id=session_id,
                    turn=turn,
                    scheduled_at=scheduled_at,
                    slice=slice_k,
                    status=Status.CANCELLED.value,
                    error="not sent: the test ended before a user was free",
                )
                collect.emit(environment, record.to_dict())
    st.config = None
    if isinstance(environment.runner, WorkerRunner):
        collect.ship_to_master(environment)
        return
    collect.flush_local(environment)
    col = collect.collector(environment)
    if col is not None:
        col.write_info(stopped_at=wall_now())


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    # Ctrl-C or SIGTERM on a master: let workers finish their streams and ship their records
    # before Locust tells them to quit.
    if environment.runner is not None:
        drain(environment.runner)
