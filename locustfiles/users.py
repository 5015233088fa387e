"""Locust users that stream LLM completions and measure them at full precision.

Abstract bases configured by class attributes, in Locust's style::

    class MyChat(ChatUser):
        request_timeout_s = 120

Each request produces exactly one :class:`~vprof.records.RequestRecord` — success, HTTP error,
bad stream, timeout, or cut off at the end of a test (``cancelled``, from a ``finally``) — and,
in Locust's own statistics, one entry carrying the whole stream's duration (never one event
per token). Streams are read with
``requests`` (``iter_lines`` yields each SSE line as its HTTP chunk arrives) on a session of
the user's own, so Locust's time-to-headers
response time never leaks into the numbers.
"""

import locust  # noqa: F401  (first: gevent patching)
from locust import HttpUser, constant, task
from locust.exception import StopUser

import logging
import math
from typing import Any, ClassVar

import gevent
import requests

from vprof.common.clock import process_clock
from vprof.locustfiles import collect
from vprof.locustfiles.options import opt
from vprof.locustfiles.optiontable import DEFAULT_REQUEST_TIMEOUT_S
from vprof.locustfiles.stream import StreamError, StreamResult, read_ndjson, read_sse
from vprof.locustfiles.testplan import state
from vprof.records.schema import RequestRecord, Status

ENDPOINT_PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "generate": "/generate",
}
CONNECT_TIMEOUT_S = 10.0
# A closed-loop user whose requests keep failing (HTTP errors, connection failures) waits
# BACKOFF_FIRST_S after the first, twice as long after each further one, at most BACKOFF_MAX_S:
# a server that rejects everything is not hammered, and one that recovers is back in seconds.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 5.0

log = logging.getLogger(__name__)


class _RequestTimeout(Exception):
    """The whole request took longer than ``request_timeout_s``."""


class LLMUser(HttpUser):
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
    temperature: ClassVar[float | None] = None
    """Sent when set; otherwise the server's default sampling applies."""

    def on_start(self) -> None:
        if not self.host:
            raise StopUser("no host: pass -H http://server:port (or set host on the class)")
        # Our own session: Locust's HttpSession would fire a time-to-headers event per request.
        self._session = requests.Session()
        self._conversation: Any = None
        self._last_text: str | None = None
        self._failures = 0  # consecutive HTTP errors or connection failures (closed loop)
        self._settings: dict[str, Any] | None = None

    def _send_settings(self, url: str) -> dict[str, Any]:
        """Proxy, TLS and netrc settings from the environment, looked up once per user.

        ``requests`` reads them (and stats ~/.netrc) on every call otherwise — about a
        millisecond inside the measured time.
        """
        if self._settings is None:
            self._settings = self._session.merge_environment_settings(url, {}, True, None, None)
            self._settings.pop("stream", None)
            self._session.trust_env = False  # already merged above
        return self._settings

    def on_stop(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            session.close()

    # -- what to send --------------------------------------------------------------------
    def _endpoint(self) -> str:
        run = state(self.environment)
        name = self.endpoint or str(opt(self.environment, "endpoint", "") or "")
        return name or str(run.workload().endpoint)

    def _next_plan(self, index: int) -> Any:
        run = state(self.environment)
        synth = run.synthesizer()
        if synth.workload.conversation is None or run.open_loop:
            # Open-loop arrivals are independent requests: a multi-turn workload sends the
            # first turn of conversation ``index`` (later turns need the reply: closed loop).
            return synth.plan(index)
        # Multi-turn (closed loop): keep one conversation per user until it ends.
        if self._conversation is not None:
            plan = self._conversation.next_turn(self._last_text)
            if plan is not None:
                return plan
        self._conversation = synth.start_conversation(index)
        self._last_text = None
        return self._conversation.next_turn(None)

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
                "model": state(self.environment).model(self.host),
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

    # -- the task ------------------------------------------------------------------------
    @task
    def llm_request(self) -> None:
        run = state(self.environment)
        config = run.wait_config(stopping=lambda: self._state == "stopping")
        if config is None:
            return  # the test ended before it began here
        scheduled_at = math.nan
        self._warm_up()
        if run.open_loop:
            assert run.queue is not None
            job = run.queue.take()
            if job is None:  # this process's share is all sent: idle until the test ends
                gevent.sleep(0.5)
                return
            index, scheduled_at = job
            try:
                due = self._sleep_until(scheduled_at)
            except BaseException:  # killed before it was due: the end-of-test sweep decides
                run.queue.give_back(index)
                raise
            if not due:
                run.queue.give_back(index)  # stopping before it was due: leave it to the end
                return
        else:
            index = run.next_index()
        record = self.send(index, scheduled_at, open_loop=run.open_loop, salt=config.salt)
        if not run.open_loop:  # open-loop arrivals keep their schedule; lag records the delay
            self._back_off(record)

    def _back_off(self, record: RequestRecord) -> None:
        """Wait before the next request after consecutive rejections (bounded exponential),
        and say so in the log once per streak; a stopping test cuts the wait short."""
        if record.status != Status.ERROR.value or record.http_status == 200:
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
                type(self).__name__, record.error[:120], BACKOFF_MAX_S,
            )  # fmt: skip
        self._sleep_until(process_clock().now() + delay_s)

    def _warm_up(self) -> None:
        # Tokenizer, prefixes and the model name are built before the first arrival is due,
        # so their one-off cost does not show up as schedule lag. A failure here shows up
        # again, as an error record, when the request is sent.
        run = state(self.environment)
        try:
            run.synthesizer()
            if self._endpoint() != "generate":
                run.model(self.host)
        except Exception:  # noqa: BLE001 - reported per request by send()
            pass

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
        self, index: int, scheduled_at: float, *, open_loop: bool, salt: str = ""
    ) -> RequestRecord:
        """Send request ``index``, time its stream, emit its record and Locust stats, and
        return the record."""
        clock = process_clock()
        endpoint = self._endpoint()
        record = RequestRecord(
            request_id=str(index),
            user_class=type(self).__name__,
            endpoint=endpoint,
            worker=collect.process_name(self.environment),
            open_loop=open_loop,
            scheduled_at=scheduled_at,
        )
        result = StreamResult()  # filled as the stream arrives: a cut-off keeps its timings
        timeout_s = self.request_timeout_s or float(
            opt(self.environment, "request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S)
        )
        response = None
        try:
            plan = self._next_plan(index)
            if plan.conversation_id >= 0:
                record.request_id = f"c{plan.conversation_id}-t{plan.turn}"
            record.prefix_group = plan.prefix_group
            record.conversation_id = plan.conversation_id
            record.turn = plan.turn
            record.expected_prompt_tokens = plan.expected_prompt_tokens
            record.expected_output_tokens = plan.max_tokens if plan.ignore_eos else -1
            body = self.body(plan, endpoint)
            url = str(self.host).rstrip("/") + ENDPOINT_PATHS[endpoint]  # on_start checked it
            # Encode the body before the clock starts: TTFT is the server's time, not ours.
            prepared = self._session.prepare_request(requests.Request("POST", url, json=body))
            with gevent.Timeout(timeout_s, _RequestTimeout):
                mono = clock  # stamps: monotonic readings anchored to wall-clock
                record.sent_at = mono.now()
                response = self._session.send(
                    prepared, stream=True, timeout=(CONNECT_TIMEOUT_S, timeout_s),
                    **self._send_settings(url),
                )  # fmt: skip
                record.http_status = response.status_code
                if response.status_code != 200:
                    record.status = Status.ERROR.value
                    record.error = f"HTTP {response.status_code}: {response.text[:300]}"
                elif endpoint == "generate":
                    read_ndjson(
                        response.iter_lines(), now=mono.now, prompt=body["prompt"], into=result
                    )
                else:
                    read_sse(response.iter_lines(), now=mono.now, into=result)
            record.finished_at = clock.now()
            if record.http_status == 200:
                self._fill(record, result, endpoint)
        except _RequestTimeout:
            record.status, record.error = Status.TIMEOUT.value, f"no full answer in {timeout_s:g} s"
        except requests.Timeout as exc:
            record.status, record.error = Status.TIMEOUT.value, f"{type(exc).__name__}: {exc}"
        except requests.ConnectionError as exc:
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
        except (requests.RequestException, StreamError, OSError, ValueError) as exc:
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug: still one record, and Locust shows the traceback
            record.status, record.error = Status.ERROR.value, f"{type(exc).__name__}: {exc}"
            raise
        except BaseException as exc:  # GreenletExit at the end of a test, Ctrl-C
            record.status = Status.CANCELLED.value
            record.error = f"cut off: {type(exc).__name__}"
            raise
        finally:
            if response is not None:
                _release(response, keep=record.status == Status.OK.value)
            if math.isnan(record.finished_at):
                record.finished_at = clock.now()
            if record.status != Status.OK.value and result.first_token_s is not None:
                # Cut off, timed out or broken half-way: keep what was measured.
                record.first_token_at = result.first_token_s
                record.last_token_at = result.last_token_s  # type: ignore[assignment]
                record.itl_ms = result.itl_ms
            record.finalize()
            collect.emit(self.environment, record.to_dict())
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


def _release(response: requests.Response, *, keep: bool) -> None:
    """Hand the connection back for keep-alive after a complete answer; close it otherwise."""
    if keep:
        try:
            response.raw.drain_conn()  # whatever follows [DONE] (the chunked terminator)
            response.raw.release_conn()
            return
        except Exception:  # noqa: BLE001 - a connection we cannot reuse is simply closed
            pass
    response.close()


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
