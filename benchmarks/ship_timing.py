"""A Locust plugin for the benchmarks: on each worker, times every message that ships records
to the master (packing and sending it, all inside the worker's event loop) and writes the
timings (wall and the loop thread's own CPU time, which a busy machine does not inflate), one
JSON line per message, to ``$VPROF_SHIP_TIMING_DIR/<pid>.jsonl`` when the
process quits. With ``$VPROF_BLOCKED_MS`` it also runs gevent's monitor thread, which reports
every stretch the event loop was blocked longer than that, with the code that blocked it
(``<pid>.blocked.jsonl``). Added beside the locustfile (``-f locustfile.py,ship_timing.py``);
it changes nothing else, so it times the code of any vprof version alike."""

import locust  # noqa: F401  (first: gevent patching)
from locust import events
from locust.runners import WorkerRunner

import json
import os
import time
from pathlib import Path
from typing import Any

from vprof.common.clock import wall_now


@events.init.add_listener
def _time_shipments(environment: Any, **_: Any) -> None:
    runner = environment.runner
    folder = os.environ.get("VPROF_SHIP_TIMING_DIR")
    if not isinstance(runner, WorkerRunner) or not folder:
        return
    send = runner.send_message
    shipments: list[dict[str, Any]] = []

    def timed(msg_type: str, data: Any = None, client_id: Any = None) -> Any:
        started, cpu = time.perf_counter(), time.thread_time()
        result = send(msg_type, data, client_id)
        if msg_type == "vprof_records":
            records = len((data or {}).get("records") or ())
            ms = (time.perf_counter() - started) * 1000.0
            cpu_ms = (time.thread_time() - cpu) * 1000.0  # without the time other processes ran
            shipments.append({"t": wall_now(), "ms": ms, "cpu_ms": cpu_ms, "records": records})
        return result

    runner.send_message = timed
    blocked: list[dict[str, Any]] = []
    if os.environ.get("VPROF_BLOCKED_MS"):
        import gevent
        import gevent.events
        import zope.event

        gevent.config.max_blocking_time = float(os.environ["VPROF_BLOCKED_MS"]) / 1000.0
        gevent.get_hub().start_periodic_monitoring_thread()

        def _blocked(event: Any) -> None:
            if isinstance(event, gevent.events.EventLoopBlocked):
                where = [line.strip() for line in event.info if line.strip().startswith("File")]
                blocked.append(
                    {"t": wall_now(), "ms": event.blocking_time * 1000.0, "where": where[-8:]}
                )

        zope.event.subscribers.append(_blocked)

    @environment.events.quitting.add_listener
    def _write(**_: Any) -> None:
        path = Path(folder) / f"{os.getpid()}.jsonl"
        path.write_text("".join(json.dumps(s) + "\n" for s in shipments))
        if blocked:
            path = Path(folder) / f"{os.getpid()}.blocked.jsonl"
            path.write_text("".join(json.dumps(b) + "\n" for b in blocked))
