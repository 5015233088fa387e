"""Open-loop sessions: arrivals start sessions, and each later step is due a think time after
the previous step's last answer.

Users stay free while a session thinks: a session's next calls wait in a heap by their intended
send time (previous answer's end + think time), beside the arrivals of new sessions, and
whichever user is free takes the call that is due first. A call is taken only when it is due
within ``LEAD_S`` (enough to plan and encode it), so a free user never commits to an arrival
while an earlier later-turn waits. The in-flight cap is the number of users, as for other
open-loop traffic; a later turn that finds every user busy is sent late and its record's
schedule lag says so. Sessions live in the process whose share of the arrivals started them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent.event

from vprof.common.clock import process_clock

_log = logging.getLogger(__name__)
LEAD_S = 0.05  # take a call this long before it is due: planning and encoding fit in it
IDLE_POLL_S = 0.25  # a free user with nothing due looks again this often (or when woken)


@dataclass
class _Live:
    """A session in progress: the step in flight and its answers so far."""

    session: Any  # vprof.workloads.sessions.Session
    outstanding: int = 0
    answers: list[str | None] = field(default_factory=list)
    failed: bool = False
    last_end: float = -math.inf


@dataclass
class SessionCall:
    """One call to send: request ``plan`` of session ``session_id``, due at ``scheduled_at``."""

    session_id: int
    plan: Any  # RequestPlan
    scheduled_at: float
    slot: int = 0  # its place among the step's calls
    error: Exception | None = None  # the session could not be planned: one error record

    @property
    def request_id(self) -> str:
        if self.plan is None:
            return f"c{self.session_id}-t0"
        branch = f"-b{self.plan.branch}" if self.plan.branch >= 0 else ""
        return f"c{self.session_id}-t{self.plan.turn}{branch}"


class SessionQueue:
    """This process's open-loop sessions: new ones from ``arrivals`` (an OpenLoopQueue of
    session ids), later steps as their answers come in. ``start(id)`` makes a Session."""

    def __init__(self, arrivals: Any, start: Callable[[int], Any]) -> None:
        self.arrivals = arrivals
        self._start = start
        self._heap: list[tuple[float, int, SessionCall]] = []
        self._order = itertools.count()
        self._live: dict[int, _Live] = {}
        self._wake = gevent.event.Event()

    def _push(self, call: SessionCall) -> None:
        heapq.heappush(self._heap, (call.scheduled_at, next(self._order), call))
        wake, self._wake = self._wake, gevent.event.Event()
        wake.set()  # a waiting user may now have something due sooner

    def take(self, stopping: Callable[[], bool]) -> SessionCall | None:
        """The next call due (waits until one is due within ``LEAD_S``); ``None`` when the
        test is stopping or nothing is left to send."""
        clock = process_clock()
        while not stopping():
            now = clock.now()
            later_at = self._heap[0][0] if self._heap else math.inf
            arrival = self.arrivals.peek()
            arrival_at = arrival[1] if arrival is not None else math.inf
            due = min(later_at, arrival_at)
            if due == math.inf and not self._live:
                return None  # every session of this process's share is over
            if due - now <= LEAD_S:
                if later_at <= arrival_at:
                    return heapq.heappop(self._heap)[2]
                return self._begin(*self.arrivals.take())
            self._wake.wait(timeout=min(due - now - LEAD_S, IDLE_POLL_S))
        return None

    def _begin(self, session_id: int, scheduled_at: float) -> SessionCall:
        try:
            session = self._start(session_id)
            plans = session.next_step(None)
        except Exception as exc:  # noqa: BLE001 - the user records it as the session's request
            return SessionCall(session_id, None, scheduled_at, error=exc)
        live = _Live(session, outstanding=len(plans), answers=[None] * len(plans))
        self._live[session_id] = live
        calls = [SessionCall(session_id, p, scheduled_at, i) for i, p in enumerate(plans)]
        for call in calls[1:]:  # fan-out: the step's other calls wait for other users
            self._push(call)
        return calls[0]

    def give_back(self, call: SessionCall) -> None:
        """A call taken but not sent (the user is stopping): due again for someone else, or
        for the end-of-test sweep."""
        self._push(call)

    def finished(self, call: SessionCall, record: Any, answer: str | None) -> None:
        """A call's record is final: when its step is complete, plan the next step (due think
        time after the step's last answer) or end the session. Marks ``record.session_last``
        when this answer completed the session."""
        live = self._live.get(call.session_id)
        if live is None:
            return
        live.outstanding -= 1
        ok = record.status == "ok"
        live.failed |= not ok
        if ok:
            live.answers[call.slot] = answer or ""
        end = record.finished_at if not math.isnan(record.finished_at) else process_clock().now()
        live.last_end = max(live.last_end, end)
        if live.outstanding > 0:
            return
        if live.failed:  # a step without its answers cannot go on
            del self._live[call.session_id]
            return
        try:
            plans = live.session.next_step([a or "" for a in live.answers])
        except Exception:  # noqa: BLE001 - this answer's record must still be emitted
            _log.exception(
                "session %d: its next step could not be planned; it ends here", call.session_id
            )
            del self._live[call.session_id]
            return
        if not plans:
            del self._live[call.session_id]
            record.session_last = True
            return
        due = live.last_end + live.session.think_s()
        live.outstanding, live.answers = len(plans), [None] * len(plans)
        for i, plan in enumerate(plans):
            self._push(SessionCall(call.session_id, plan, due, i))

    def untaken(self) -> list[tuple[str, int, int, float]]:
        """Calls and arrivals never sent, as (request id, session id, turn, intended time);
        the queue is empty afterwards."""
        out = [
            (c.request_id, c.session_id, c.plan.turn if c.plan else 0, c.scheduled_at)
            for _, _, c in self._heap
        ]
        self._heap = []
        out += [(f"c{i}-t0", i, 0, at) for i, at in self.arrivals.untaken()]
        return sorted(out, key=lambda row: row[3])
