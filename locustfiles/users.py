"""Locust users that stream LLM completions and measure them at full precision.

Abstract bases configured by class attributes, in Locust's style::

    class MyChat(ChatUser):
        request_timeout_s = 120

Each request produces exactly one :class:`~vprof.records.RequestRecord` — success, HTTP error,
bad stream, timeout, or cut off at the end of a test (``cancelled``, from a ``finally``) — and,
in Locust's own statistics, one entry carrying the whole stream's duration (never one event
per token).

The stream is read on the user's own keep-alive HTTP/1.1 connection on gevent sockets
(:mod:`vprof.locustfiles.transport`): every piece of the body is stamped as it comes off the
socket and only split into messages while the stream runs; decoding and the record wait until
it ended. What a request costs besides reading it is kept out of the way of other streams: the
synthesizer and the model name are ready before the first arrival is due, the whole request is
encoded before its clock starts, and a closed-loop user plans and encodes its next request while
the current one streams, when the event loop has nothing else to do.
"""

import locust  # noqa: F401  (first: gevent patching)
from locust import User, constant, task
from locust.exception import StopUser

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import gevent

from vprof.common.clock import process_clock, wall_now
from vprof.common.errors import VprofError
from vprof.locustfiles import collect
from vprof.locustfiles.balance import Balancer, make_balancer, parse_hosts
from vprof.locustfiles.options import opt
from vprof.locustfiles.optiontable import DEFAULT_BALANCE, DEFAULT_REQUEST_TIMEOUT_S
from vprof.locustfiles.stream import NdjsonScanner, SseScanner, StreamError, StreamResult
from vprof.locustfiles.testplan import state
from vprof.locustfiles.transport import ConnectError, Connection, ConnectTimeout, ResponseError
from vprof.records.schema import CUT_AT_END, FIELDS, RequestRecord, Status
from vprof.traffic.slices import parse_sides
from vprof.workloads.sessions import start_session

ENDPOINT_PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "generate": "/generate",
}
CONNECT_TIMEOUT_S = 10.0
# A closed-loop user whose requests keep failing (HTTP errors, connection failures, broken
# streams) waits BACKOFF_FIRST_S after the first, twice as long after each further one, at most
# BACKOFF_MAX_S: a server that rejects everything is not hammered, and one that recovers is
# back in seconds.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0

log = logging.getLogger(__name__)


class _RequestTimeout(Exception):
    """The whole request took longer than ``request_timeout_s``."""


@dataclass
class _Prepared:
    """One request, planned and encoded before its clock starts (or what stopped that)."""

    index: int
    endpoint: str
    plan: Any = None
    payload: bytes = b""  # the whole HTTP request (one server; empty with several)
    path: str = ""  # with several replicas the request is framed for the one picked at send
    body: bytes = b""
    request_id: str | None = None  # its X-Request-Id (with --request-id-prefix)
    prompt: str = ""  # /generate repeats it at the front of its text
    error: Exception | None = None
    think_s: float = 0.0  # closed-loop sessions: due this long after the user's last answer


class LLMUser(User):
    """Streams one request per task from the workload (``--workload``) and records it.

    Closed loop by default: a user sends its next request when the last one finished. With
    open-loop traffic (``--traffic`` of kind open-loop, or ``--rate-rps``) each user takes the
    next arrival of its process's share of the schedule, sleeps until its intended time, then
    sends; the record's ``scheduled_at`` is that intended time.
    """

    abstract = True
    wait_time = constant(0)

    endpoint: ClassVar[str | None] = None
    """``completions``, ``chat`` or ``generate``; ``None``: ``--endpoint``, else the workload's."""
    request_timeout_s: ClassVar[float | None] = None
    """Give up on a request after this long (``None``: ``--request-timeout-s``)."""
    connect_timeout_s: ClassVar[float] = CONNECT_TIMEOUT_S
    """Give up connecting (TCP, TLS, a proxy's tunnel) after this long."""
    temperature: ClassVar[float | None] = None
    """Sent when set; otherwise the server's default sampling applies."""
    headers: ClassVar[dict[str, str]] = {}
    """Extra HTTP headers on every request (an ``Authorization``, say)."""

    def on_start(self) -> None:
        try:
            self._hosts = parse_hosts(str(opt(self.environment, "hosts", "") or ""))
        except VprofError as exc:
            raise StopUser(exc.format()) from None
        self._hosts = self._hosts or ((str(self.host),) if self.host else ())
        if not self._hosts:
            raise StopUser("no host: pass -H http://server:port (or set host on the class)")
        try:
            # one keep-alive connection per replica; each opens on its first request
            self._conns = [
                Connection(host, connect_timeout_s=self.connect_timeout_s, headers=self.headers)
                for host in self._hosts
            ]
        except ValueError as exc:
            raise StopUser(f"cannot send to {' or '.join(self._hosts)}: {exc}") from None
        self._conn = self._conns[0]
        self._id_prefix = str(opt(self.environment, "request_id_prefix", "") or "")
        if not all(" " < c <= "~" for c in self._id_prefix):
            raise StopUser("--request-id-prefix: only printable ASCII without spaces")
        self._balancer = _shared_balancer(self.environment, self._hosts)
        try:  # alternating servers: the hosts of each side
            sides = parse_sides(str(opt(self.environment, "sides", "") or ""), len(self._hosts))
        except VprofError as exc:
            raise StopUser(exc.format()) from None
        self._side_hosts = [
            [i for i, side in enumerate(sides) if side == s]
            for s in range(max(sides, default=-1) + 1)
        ]
        # closed loop: this user's session, its step's calls not yet sent, their answers
        self._session: Any = None
        self._pending: list[Any] = []
        self._answers: list[str] = []
        self._last_text: str | None = None
        self._failures = 0  # consecutive HTTP errors or connection failures (closed loop)
        # the next closed-loop request's index and the greenlet preparing it
        self._next: tuple[int, gevent.Greenlet] | None = None
        self._last_finished_at = math.nan  # this user's previous answer, for idle_before_ms
        self._worker = collect.process_name(self.environment)

    def on_stop(self) -> None:
        if self._next is not None:
            self._next[1].kill(block=False)
            self._next = None
        for conn in getattr(self, "_conns", ()):
            conn.close()

    # -- what to send --------------------------------------------------------------------
    def _endpoint(self) -> str:
        run = state(self.environment)
        name = self.endpoint or str(opt(self.environment, "endpoint", "") or "")
        return name or str(run.workload().endpoint)

    def _next_plan(self, index: int) -> tuple[Any, float]:
        """The next request's plan and the think time it is due after this user's last
        answer (0: at once)."""
        run = state(self.environment)
        synth = run.synthesizer()
        if not synth.workload.sessions or run.open_loop:
            # Open-loop sessions are planned by their SessionQueue, which hands its calls in.
            return run.plan(index), 0.0
        # Closed loop: keep one session per user until it ends, sending its calls one after
        # another (a fan-out step's calls in turn, the step's think time before the first);
        # a failed call's answer counts as empty. A new session starts at once.
        if self._session is not None:
            self._answers.append(self._last_text or "")
            think_s = 0.0
            if not self._pending:
                self._pending, self._answers = self._session.next_step(self._answers), []
                think_s = self._session.think_s() if self._pending else 0.0
            if self._pending:
                return self._pending.pop(0), think_s
        self._session, self._answers = start_session(synth, index), []
        self._pending = self._session.next_step(None)
        self._last_text = None
        return self._pending.pop(0), 0.0

    def body(self, plan: Any, endpoint: str) -> dict[str, Any]:
        """The JSON body: always streaming, usage requested, fixed lengths when asked."""
        if endpoint == "generate":
            body: dict[str, Any] = {
                "prompt": plan.prompt or _flatten(plan.messages),
                "max_tokens": plan.max_tokens,
                "stream": True,
            }
        else:
            body = {
                "model": state(self.environment).model(self._hosts[0]),
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_tokens": plan.max_tokens,
            }
            if endpoint == "chat":
                body["messages"] = plan.messages or [{"role": "user", "content": plan.prompt}]
            else:
                body["prompt"] = plan.prompt if plan.prompt is not None else _flatten(plan.messages)
        if plan.min_tokens is not None:
            body["min_tokens"] = plan.min_tokens
        if plan.ignore_eos:
            body["ignore_eos"] = True
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _prepare(self, index: int, plan: Any = None) -> _Prepared:
        """Plan request ``index`` (or take ``plan``) and encode it whole; a failure is kept
        for its record."""
        endpoint = self._endpoint()
        prepared = _Prepared(index, endpoint)
        try:
            if plan is None:
                plan, prepared.think_s = self._next_plan(index)
            body = self.body(plan, endpoint)
            prepared.plan = plan
            prepared.prompt = body["prompt"] if endpoint == "generate" else ""
            encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            prepared.path, prepared.body = ENDPOINT_PATHS[endpoint], encoded
            if self._id_prefix:
                prepared.request_id = self._id_prefix + record_id(index, plan)
            if self._balancer is None:  # several servers: framed for the one picked at send
                prepared.payload = self._conn.request_bytes(
                    prepared.path, encoded, request_id=prepared.request_id
                )
        except Exception as exc:  # noqa: BLE001 - recorded (and re-raised) by send()
            prepared.error = exc
        return prepared

    def _prepare_next(self) -> None:
        """Closed loop: plan and encode the next request while this one streams, in a greenlet
        that waits for a moment when the event loop has nothing else to do."""
        run = state(self.environment)
        if run.open_loop or self._next is not None:
            return
        try:
            if run.synthesizer().workload.sessions:
                return  # the next turn needs this one's answer
        except Exception:  # noqa: BLE001 - send() records it
            return
        index = run.next_index()
        self._next = (index, gevent.spawn(self._prepare_when_idle, index))

    def _prepare_when_idle(self, index: int) -> _Prepared:
        gevent.idle()
        return self._prepare(index)

    def _take_next(self) -> _Prepared:
        """The next closed-loop request: the one prepared during the last stream, if any."""
        if self._next is None:
            return self._prepare(state(self.environment).next_index())
        (index, pending), self._next = self._next, None
        run = state(self.environment)
        if run.slices is not None and run.slice_of(index) != run.slices.slice_at(wall_now()):
            # prepared during the last slice: this slice sends its own requests
            pending.kill(block=False)
            return self._prepare(run.next_index())
        if not pending.ready():
            pending.kill()  # still waiting for an idle moment: prepare it now
        if isinstance(pending.value, _Prepared):  # a killed greenlet's value is its GreenletExit
            return pending.value
        return self._prepare(index)

    # -- the task ------------------------------------------------------------------------
    @task
    def llm_request(self) -> None:
        run = state(self.environment)
        config = run.wait_config(stopping=lambda: self._state == "stopping")
        if config is None:
            return  # the test ended before it began here
        scheduled_at = math.nan
        if run.sessions is not None:
            self._session_request(run.sessions, config.salt)
            return
        if run.open_loop:
            assert run.queue is not None
            job = run.queue.take()
            if job is None:  # this process's share is all sent: idle until the test ends
                gevent.sleep(0.5)
                return
            index, scheduled_at = job
            try:
                prepared = self._prepare(index)  # before it is due, not after
                due = self._sleep_until(scheduled_at)
            except BaseException:  # killed before it was due: the end-of-test sweep decides
                run.queue.give_back(index)
                raise
            if not due:
                run.queue.give_back(index)  # stopping before it was due: leave it to the end
                return
        else:
            prepared = self._take_next()
            if prepared.think_s > 0 and math.isfinite(self._last_finished_at):
                # a session's later step: due its think time after this user's last answer,
                # which is its intended send time (the record's scheduled_at, as in open loop)
                scheduled_at = self._last_finished_at + prepared.think_s
                if not self._sleep_until(scheduled_at):
                    return  # stopping while the session thought
        record = self.send(
            prepared.index,
            scheduled_at,
            open_loop=run.open_loop,
            salt=config.salt,
            prepared=prepared,
        )
        if not run.open_loop:  # open-loop arrivals keep their schedule; lag records the delay
            self._back_off(record)

    def _session_request(self, sessions: Any, salt: str) -> None:
        """Open-loop sessions: send the call that is due first — a new session's first, or a
        later step's, due think time after the answers it needs — and hand its answer back."""
        call = sessions.take(stopping=lambda: self._state == "stopping")
        if call is None:
            if self._state != "stopping":
                gevent.sleep(0.5)  # this process's sessions are all over: idle until the end
            return
        try:
            prepared = self._prepare(call.session_id, plan=call.plan)
            if call.error is not None:
                prepared.error = call.error
            due = self._sleep_until(call.scheduled_at)
        except BaseException:  # killed before it was due: the end-of-test sweep decides
            sessions.give_back(call)
            raise
        if not due:
            sessions.give_back(call)  # stopping before it was due: leave it to the end
            return

        def _done(record: RequestRecord) -> None:
            sessions.finished(call, record, self._last_text)

        self.send(
            call.session_id,
            call.scheduled_at,
            open_loop=True,
            salt=salt,
            prepared=prepared,
            on_record=_done,
        )

    def _back_off(self, record: RequestRecord) -> None:
        """Wait before the next request after consecutive failures (bounded exponential),
        and say so in the log once per streak; a stopping test cuts the wait short. Every
        failed request counts alike: an HTTP error, a connection failure, and an HTTP 200
        whose stream is broken (not JSON, no chunk with choices, no [DONE])."""
        if record.status != Status.ERROR.value:
            if self._failures > 1:
                name = type(self).__name__
                log.warning("%s: the server answers again after %d failures", name, self._failures)
            self._failures = 0
            return
        self._failures += 1
        delay_s = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(self._failures - 1, 20))
        if self._failures == 2:
            log.warning(
                "%s: requests keep failing (%s); backing off, up to %g s between requests",
                type(self).__name__,
                record.error[:120],
                BACKOFF_MAX_S,
            )
        self._sleep_until(process_clock().now() + delay_s)

    def _sleep_until(self, wall_s: float) -> bool:
        clock = process_clock()
        while True:
            if self._state == "stopping":
                return False
            left = wall_s - clock.now()
            if left <= 0:
                return True
            gevent.sleep(min(left, 0.25))

    def send(
        self,
        index: int,
        scheduled_at: float,
        *,
        open_loop: bool,
        salt: str = "",
        prepared: _Prepared | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> RequestRecord:
        """Send request ``index``, time its stream, emit its record and Locust stats, and
        return the record. ``on_record`` sees the final record just before it is emitted."""
        clock = process_clock()
        if prepared is None or prepared.index != index:
            prepared = self._prepare(index)
        endpoint = prepared.endpoint
        record = RequestRecord(
            request_id=str(index),
            user_class=type(self).__name__,
            endpoint=endpoint,
            worker=self._worker,
            open_loop=open_loop,
            scheduled_at=scheduled_at,
            think_ms=prepared.think_s * 1000.0,
        )
        scanner: SseScanner | NdjsonScanner | None = None
        result: StreamResult | None = None
        self._last_text = None  # this request's answer, once it is in
        timeout_s = self.request_timeout_s or float(
            opt(self.environment, "request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)
        )
        replica = -1  # the replica picked for this request (several servers only)
        try:
            if prepared.error is not None:
                raise prepared.error
            plan = prepared.plan
            record.request_id = record_id(index, plan)
            record.prefix_group = plan.prefix_group
            record.conversation_id = plan.conversation_id
            record.turn = plan.turn
            record.expected_prompt_tokens = plan.expected_prompt_tokens
            record.expected_output_tokens = plan.max_tokens if plan.ignore_eos else -1
            scanner = NdjsonScanner() if endpoint == "generate" else SseScanner()
            conn, payload = self._conn, prepared.payload
            if self._balancer is not None:  # several servers: pick one now, as a balancer would
                among = None
                if self._side_hosts:  # alternating: the side whose slice this request is in
                    run = state(self.environment)
                    record.slice = run.slice_of(index)
                    among = self._side_hosts[run.slices.side_of(max(record.slice, 0))]  # type: ignore[union-attr]
                replica = self._balancer.pick(among)
                conn, record.replica = self._conns[replica], self._hosts[replica]
                payload = conn.request_bytes(
                    prepared.path, prepared.body, request_id=prepared.request_id
                )
            with gevent.Timeout(timeout_s, _RequestTimeout):
                record.sent_at = clock.now()
                if not open_loop:
                    record.idle_before_ms = (record.sent_at - self._last_finished_at) * 1000.0
                    self._prepare_next()  # runs once this greenlet waits for the answer
                answer = conn.exchange(payload, scanner.feed, clock.now)
            record.finished_at = answer.finished_at
            record.http_status = answer.status
            if answer.status != 200:
                record.status = Status.ERROR.value
                record.error = f"HTTP {answer.status}: {answer.error_body[:300]}"
            else:
                scanner.close(answer.finished_at)
                result = StreamResult()
                if isinstance(scanner, NdjsonScanner):
                    scanner.result(result, prompt=prepared.prompt)
                else:
                    scanner.result(result)
                self._fill(record, result, endpoint)
        except _RequestTimeout:
            record.status, record.error = Status.TIMEOUT.value, f"no full answer in {timeout_s:g} s"
        except ConnectTimeout as exc:
            record.status, record.error = Status.TIMEOUT.value, f"{type(exc).__name__}: {exc}"
        except ConnectError as exc:
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
        except VprofError as exc:  # no request could be made (the model lookup, a tokenizer)
            record.status, record.error = Status.ERROR.value, f"not sent: {exc}"
        except (ResponseError, StreamError, OSError, ValueError) as exc:
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug: still one record, and Locust shows the traceback
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
            raise
        except BaseException as exc:  # GreenletExit at the end of a test, Ctrl-C
            record.status = Status.CANCELLED.value
            ended = isinstance(exc, gevent.GreenletExit)
            record.error = CUT_AT_END if ended else f"cut off: {type(exc).__name__}"
            raise
        finally:
            if replica >= 0:
                self._balancer.done(replica)  # type: ignore[union-attr]
            if math.isnan(record.finished_at):
                record.finished_at = clock.now()
            if record.status != Status.OK.value and scanner is not None:
                # Cut off, timed out or broken half-way: keep what was measured.
                partial = result if result is not None else _partial(scanner)
                if partial.first_token_s is not None:
                    record.first_token_at = partial.first_token_s
                    record.last_token_at = partial.last_token_s  # type: ignore[assignment]
                    record.itl_ms = partial.itl_ms
            record.finalize()
            self._last_finished_at = record.finished_at
            if on_record is not None:
                on_record(record)
            collect.emit(self.environment, _as_dict(record))
            if record.status != Status.CANCELLED.value:
                self._report(record, ENDPOINT_PATHS[endpoint])
        return record

    def _fill(self, record: RequestRecord, result: StreamResult, endpoint: str) -> None:
        if result.first_token_s is not None:
            record.first_token_at = result.first_token_s
            record.last_token_at = result.last_token_s  # type: ignore[assignment]
        record.itl_ms = result.itl_ms
        record.prompt_tokens = result.prompt_tokens
        record.completion_tokens = result.completion_tokens
        record.cached_tokens = result.cached_tokens
        if endpoint == "generate" and record.completion_tokens < 0:
            # The legacy API sends no usage: count the generated text with the tokenizer.
            tokenizer = state(self.environment).synthesizer().tokenizer
            record.completion_tokens = len(tokenizer.encode(result.text)) if result.text else 0
        self._last_text = result.text
        if result.error:
            record.status, record.error = Status.ERROR.value, f"in stream: {result.error}"
        elif result.first_token_s is None:
            record.status, record.error = Status.ERROR.value, "never received a chunk with choices"
        elif endpoint != "generate" and not result.done:
            record.status, record.error = Status.ERROR.value, "stream ended without [DONE]"

    def _report(self, record: RequestRecord, name: str) -> None:
        """Locust stats: one entry per request, carrying the whole stream's duration.

        Only one event per request, so Locust's RPS, Statistics tab, charts, CSV and HTML
        report count requests, not requests plus metrics. TTFT, TPOT and ITL are shown by
        vprof's LLM tabs and the LLM section it adds to Locust's report, from the records.
        """
        failed = record.status != Status.OK.value
        duration_ms = (
            (record.finished_at - record.sent_at) * 1000.0
            if not math.isnan(record.sent_at)
            else 0.0
        )
        self.environment.events.request.fire(
            request_type="POST",
            name=name,
            response_time=duration_ms,
            response_length=max(record.completion_tokens, 0),  # output tokens, not bytes
            response=None,
            context={"request_id": record.request_id},
            start_time=record.sent_at,
            url=name,
            exception=RuntimeError(record.error) if failed else None,
        )


def record_id(index: int, plan: Any) -> str:
    """A request's id in its record (and, with ``--request-id-prefix``, its X-Request-Id):
    its index, or for a session's call the session, turn and branch."""
    if plan.conversation_id >= 0:
        branch = f"-b{plan.branch}" if plan.branch >= 0 else ""
        return f"c{plan.conversation_id}-t{plan.turn}{branch}"
    return str(index)


def _shared_balancer(environment: Any, hosts: tuple[str, ...]) -> Balancer | None:
    """The one balancer of this process's users (``None`` for one server), so least-outstanding
    counts every request in flight from this process, not just one user's."""
    if len(hosts) < 2:
        return None
    policy = str(opt(environment, "balance", DEFAULT_BALANCE) or DEFAULT_BALANCE)
    kept = getattr(environment, "_vprof_balancer", None)
    if kept is None or kept.replicas != hosts or kept.policy != policy:
        kept = make_balancer(policy, hosts)
        environment._vprof_balancer = kept
    return kept


def _partial(scanner: SseScanner | NdjsonScanner) -> StreamResult:
    """The timings of a stream that did not end well, as far as its messages can be read."""
    result = StreamResult()
    try:
        scanner.result(result)
    except (StreamError, ValueError, TypeError, AttributeError):
        pass  # a message that is not what a server sends: keep the timings before it
    return result


def _as_dict(record: RequestRecord) -> dict[str, Any]:
    """The record as a flat dict (``dataclasses.asdict`` deep-copies, at ~20 µs a record)."""
    return {name: getattr(record, name) for name in FIELDS}


def _flatten(messages: list[dict[str, str]] | None) -> str:
    return "\n".join(m.get("content", "") for m in messages or [])


class CompletionsUser(LLMUser):
    """Streams ``/v1/completions``."""

    abstract = True
    endpoint = "completions"


class ChatUser(LLMUser):
    """Streams ``/v1/chat/completions``."""

    abstract = True
    endpoint = "chat"


class GenerateUser(LLMUser):
    """Streams the legacy ``/generate`` API (NDJSON, cumulative text, tokens counted locally)."""

    abstract = True
    endpoint = "generate"
