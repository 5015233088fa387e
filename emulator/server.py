"""The emulated vLLM server: OpenAI-compatible and legacy routes with configurable timing."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vprof.common.errors import VprofError
from vprof.emulator import wire
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.counters import LATENESS_BUCKETS_S, Counters
from vprof.emulator.http import (
    END_OF_STREAM,
    Request,
    Responder,
    frame,
    new_event_loop,
    start_server,
)
from vprof.emulator.prompts import chat_prompt_text, load_counter, output_vocabulary
from vprof.emulator.sendlog import SendLog
from vprof.emulator.timing import token_deadlines, true_ttft_ms

SSE_TYPE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"
TTFT_HEADER = "x-vprof-ttft-ms"  # the request's true TTFT (before jitter), for clients to check
PARENT_CHECK_S = 0.5  # how often a worker looks whether its supervisor is still there


class _BadRequest(Exception):
    def __init__(
        self,
        message: str,
        status: int = 400,
        kind: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param


@dataclass(frozen=True)
class _Plan:
    prompt: str
    prompt_tokens: int
    output_tokens: int
    stream: bool
    include_usage: bool


class _App:
    def __init__(self, config: EmulatorConfig, counters: Counters | None = None) -> None:
        self.config = config
        self.count_tokens = load_counter(config.tokenizer_path)
        self.vocabulary = output_vocabulary(config.tokenizer_path, wire.VOCABULARY)
        self.counters = counters or Counters()
        self.rng = random.Random(config.seed)
        self.sends = SendLog(config.send_log) if config.send_log else None
        self.started_at = int(time.time())
        self.routes: dict[tuple[str, str], Callable[..., Any]] = {
            ("GET", "/health"): self.health,
            ("GET", "/ping"): self.health,
            ("GET", "/v1/models"): self.models,
            ("GET", "/version"): self.version,
            ("GET", "/metrics"): self.metrics,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/generate"): self.generate,
        }

    async def __call__(self, request: Request, out: Responder) -> None:
        route = self.routes.get((request.method, request.path))
        if route is None:
            known = {path for _, path in self.routes}
            status = 405 if request.path in known else 404
            out.send(
                status,
                json.dumps(
                    {"detail": "Not Found" if status == 404 else "Method Not Allowed"}
                ).encode(),
                JSON_TYPE,
            )
            return
        try:
            await route(request, out)
        except _BadRequest as exc:
            body = wire.error_body(str(exc), exc.status, exc.kind, exc.param)
            out.send(exc.status, wire.dumps(body).encode(), JSON_TYPE)

    # -- operational routes -------------------------------------------------------------

    async def health(self, request: Request, out: Responder) -> None:
        out.send(200, b"", JSON_TYPE)

    async def version(self, request: Request, out: Responder) -> None:
        out.send(200, b'{"version":"vprof-emulate"}', JSON_TYPE)

    async def models(self, request: Request, out: Responder) -> None:
        model = self.config.model
        card = {
            "id": model,
            "object": "model",
            "created": self.started_at,
            "owned_by": "vllm",
            "root": model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [],
        }
        out.send(200, wire.dumps({"object": "list", "data": [card]}).encode(), JSON_TYPE)

    async def metrics(self, request: Request, out: Responder) -> None:
        out.send(200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def metrics_text(self) -> str:
        """Prometheus text with the vLLM metric names vprof's tooling reads (all workers')."""
        c = self.counters.totals()
        labels = f'engine="0",model_name="{self.config.model}"'
        rows: list[tuple[str, str, dict[str, float]]] = [
            ("gauge", "vllm:num_requests_running", {"": c["running"]}),
            ("gauge", "vllm:num_requests_waiting", {"": 0}),
            ("gauge", "vllm:kv_cache_usage_perc", {"": 0.0}),
            ("counter", "vllm:num_preemptions_total", {"": 0}),
            ("counter", "vllm:prompt_tokens_total", {"": c["prompt_tokens"]}),
            ("counter", "vllm:generation_tokens_total", {"": c["generation_tokens"]}),
            # no prefix cache is emulated: every prompt token is a query, none a hit
            ("counter", "vllm:prefix_cache_queries_total", {"": c["prompt_tokens"]}),
            ("counter", "vllm:prefix_cache_hits_total", {"": 0}),
            (
                "counter",
                "vllm:request_success_total",
                {
                    ',finished_reason="length"': c["finished_length"],
                    ',finished_reason="abort"': c["finished_abort"],
                },
            ),
        ]
        rows += [  # the emulator's own, outside vLLM's namespace
            ("gauge", "vprof_emulator_workers", {"": self.counters.workers}),
            ("gauge", "vprof_emulator_connections_open", {"": c["connections_open"]}),
            ("counter", "vprof_emulator_connections_opened_total", {"": c["connections_opened"]}),
        ]
        lines = []
        for kind, name, samples in rows:
            base = name.removesuffix("_total")
            lines.append(f"# HELP {base} Emulated by vprof emulate.")
            lines.append(f"# TYPE {base} {kind}")
            for extra, value in samples.items():
                lines.append(f"{name}{{{labels}{extra}}} {float(value)}")
        # how late streamed chunks left against their deadlines: the emulator's own error
        name = "vprof_emulator_chunk_lateness_seconds"
        lines.append(f"# HELP {name} How late each streamed chunk left its deadline.")
        lines.append(f"# TYPE {name} histogram")
        cumulative = 0
        bounds = [*(repr(b) for b in LATENESS_BUCKETS_S), "+Inf"]
        for bound, count in zip(bounds, self.counters.lateness_buckets(), strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {float(cumulative)}')
        lines.append(f"{name}_sum{{{labels}}} {c['lateness_sum_ns'] / 1e9}")
        lines.append(f"{name}_count{{{labels}}} {float(c['chunks'])}")
        return "\n".join(lines) + "\n"

    async def tokenize(self, request: Request, out: Responder) -> None:
        body = self._json(request)
        if "messages" in body:
            text = self._chat_text(body)
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise _BadRequest("give 'prompt' (a string) or 'messages'", param="prompt")
        count = self.count_tokens(text)
        # the estimate has no vocabulary: its ids are positions, only the count is meaningful
        reply = {
            "count": count,
            "max_model_len": self.config.max_model_len,
            "tokens": list(range(count)),
            "token_strs": None,
        }
        out.send(200, wire.dumps(reply).encode(), JSON_TYPE)

    # -- generation routes --------------------------------------------------------------

    async def completions(self, request: Request, out: Responder) -> None:
        body = self._json(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            text, prompt_tokens = " ".join(map(str, prompt)), len(prompt)
        elif isinstance(prompt, str):
            text, prompt_tokens = prompt, self.count_tokens(prompt)
        else:
            raise _BadRequest(
                "'prompt' must be one string or one list of token ids "
                "(the emulator serves one prompt per request)",
                param="prompt",
            )
        plan = self._plan(body, text, prompt_tokens, max_keys=("max_tokens",))
        await self._stream_openai(request, out, body, plan, "completions")

    async def chat(self, request: Request, out: Responder) -> None:
        body = self._json(request)
        text = self._chat_text(body)
        plan = self._plan(
            body, text, self.count_tokens(text), max_keys=("max_completion_tokens", "max_tokens")
        )
        await self._stream_openai(request, out, body, plan, "chat")

    async def generate(self, request: Request, out: Responder) -> None:
        """The legacy ``api_server``: NDJSON lines of prompt + cumulative text, no usage."""
        body = self._json(request)
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise _BadRequest("'prompt' must be a string", param="prompt")
        plan = self._plan(
            {**body, "max_tokens": body.get("max_tokens", 16)},
            prompt,
            self.count_tokens(prompt),
            max_keys=("max_tokens",),
        )
        vocabulary = self.vocabulary
        text: list[str] = []

        def line(k: int) -> bytes:  # cumulative: each line is new, encoded once when it is due
            text.append(wire.token_text(k, vocabulary))
            return frame(wire.generate_line(prompt, "".join(text)))

        def whole() -> bytes:
            words = "".join(wire.token_text(k, vocabulary) for k in range(plan.output_tokens))
            return json.dumps({"text": [prompt + words]}).encode()

        def tail() -> bytes:
            return line(plan.output_tokens - 1) + END_OF_STREAM

        await self._run(request, out, plan, None, line, tail, whole)

    # -- shared steps -------------------------------------------------------------------

    def _json(self, request: Request) -> dict[str, Any]:
        try:
            body = json.loads(request.body or b"{}")
        except ValueError as exc:
            raise _BadRequest(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest("the body must be a JSON object")
        return body

    def _model(self, body: dict[str, Any]) -> str:
        return body.get("model") or self.config.model

    def _chat_text(self, body: dict[str, Any]) -> str:
        try:
            return chat_prompt_text(body.get("messages"))
        except ValueError as exc:
            raise _BadRequest(str(exc), param="messages") from None

    def _plan(
        self, body: dict[str, Any], prompt: str, prompt_tokens: int, max_keys: tuple[str, ...]
    ) -> _Plan:
        """Validate a generation request the way vLLM does and fix its output length."""
        model = body.get("model")
        if model is not None and model != self.config.model:
            raise _BadRequest(f"The model `{model}` does not exist.", 404, "NotFoundError", "model")
        if (body.get("n") or 1) != 1:
            raise _BadRequest("the emulator serves n=1 only", param="n")
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        if options is not None and not stream:
            raise _BadRequest(
                "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        limit = self.config.max_model_len
        requested = next((body[k] for k in max_keys if body.get(k) is not None), None)
        if requested is None:
            output_tokens = max(1, min(self.config.default_max_tokens, limit - prompt_tokens))
        elif not isinstance(requested, int) or requested < 1:
            raise _BadRequest(
                f"{max_keys[0]} must be at least 1, got {requested}.", param=max_keys[0]
            )
        else:
            output_tokens = requested
        if prompt_tokens + output_tokens > limit:
            raise _BadRequest(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the "
                f"messages, {output_tokens} in the completion). Please reduce the length of "
                "the messages or completion.",
                param=max_keys[0],
            )
        min_tokens = body.get("min_tokens") or 0
        if min_tokens > output_tokens:
            raise _BadRequest(
                "min_tokens must be less than or equal to max_tokens, got "
                f"{min_tokens} > {output_tokens}.",
                param="min_tokens",
            )
        # The emulator never samples an EOS, so every request runs to its length:
        # exactly what ignore_eos + min_tokens ask vLLM for.
        include_usage = bool(stream and isinstance(options, dict) and options.get("include_usage"))
        return _Plan(prompt, prompt_tokens, output_tokens, stream, include_usage)

    def _begin(self, plan: _Plan, request: Request) -> list[float]:
        """Count the request in and schedule its tokens from when it arrived."""
        self.counters.request_started(plan.prompt_tokens)
        start = request.received_at or asyncio.get_running_loop().time()
        rng = self.rng if self.config.jitter_ms else None
        return token_deadlines(self.config, start, plan.prompt_tokens, plan.output_tokens, rng)

    async def _stream_openai(
        self, request: Request, out: Responder, body: dict[str, Any], plan: _Plan, kind: str
    ) -> None:
        """Serve a completions or chat request: the same timing, each with its own wire format."""
        id_prefix, chunks_class, response = _OPENAI_KINDS[kind]
        rid = wire.new_request_id(id_prefix, request.headers.get("x-request-id"))
        model = self._model(body)
        chunks = chunks_class(rid, int(time.time()), model)
        vocabulary, n = self.vocabulary, plan.output_tokens
        # Every chunk framed once per request: the text cycles through the vocabulary, so
        # token k carries the bytes of position k mod its size; chat's role-only event
        # rides with the first token, as vLLM sends both in one step.
        cycle = [frame(chunks.token(word, False)) for word in vocabulary[: min(len(vocabulary), n)]]
        first = frame(chunks.first(vocabulary[0], False))

        def token(k: int) -> bytes:
            return first if k == 0 else cycle[k % len(cycle)]

        def tail() -> bytes:
            # vLLM yields the last token, the usage chunk and [DONE] back to back
            last_word = wire.token_text(n - 1, vocabulary)
            events = [chunks.first(last_word, True) if n == 1 else chunks.token(last_word, True)]
            if plan.include_usage:
                events.append(chunks.usage(plan.prompt_tokens, n))
            events.append(wire.DONE)
            return b"".join(frame(event) for event in events) + END_OF_STREAM

        def whole() -> bytes:
            text = "".join(wire.token_text(k, vocabulary) for k in range(n))
            return wire.dumps(
                response(rid, int(time.time()), model, text, plan.prompt_tokens, n)
            ).encode()

        await self._run(request, out, plan, SSE_TYPE, token, tail, whole)

    async def _run(
        self,
        request: Request,
        out: Responder,
        plan: _Plan,
        content_type: str | None,
        token: Callable[[int], bytes],
        tail: Callable[[], bytes],
        whole: Callable[[], bytes],
    ) -> None:
        """Send one answer on time: streamed as ``token(k)`` then ``tail()``, or ``whole()``."""
        deadlines = self._begin(plan, request)
        headers = [(TTFT_HEADER, f"{true_ttft_ms(self.config, plan.prompt_tokens):.6f}")]
        sent = 0
        try:
            if not plan.stream:
                await _sleep_until(deadlines[-1])
                if not out.closed:
                    out.send(200, whole(), JSON_TYPE, headers)
                    sent = plan.output_tokens
                return
            out.start_stream(content_type, headers)
            writes: list[float] | None = [] if self.sends is not None else None
            stream = _Stream(out, deadlines, token, tail, self.counters, writes)
            try:
                await stream.run()
            finally:
                sent = stream.sent
            if self.sends is not None and writes is not None and sent == plan.output_tokens:
                arrived = request.received_at or deadlines[0]
                self.sends.add(request.headers.get("x-request-id", ""), arrived, writes)
        finally:
            reason = "length" if sent == plan.output_tokens else "abort"
            self.counters.request_finished(sent, reason)


class _Stream:
    """Writes one streamed answer from timer callbacks, each chunk at its deadline.

    One ``call_at`` per token and bytes framed in advance: no task switch and no encoding
    between a deadline and its write. The answer's task only waits for the end.
    """

    __slots__ = (
        "_loop",
        "_out",
        "_deadlines",
        "_token",
        "_tail",
        "_counters",
        "_handle",
        "_end",
        "sent",
        "_writes",
    )

    def __init__(
        self,
        out: Responder,
        deadlines: list[float],
        token: Callable[[int], bytes],
        tail: Callable[[], bytes],
        counters: Counters,
        writes: list[float] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._out, self._deadlines, self._token, self._tail = out, deadlines, token, tail
        self._counters = counters
        self._writes = writes  # exact timing: when each write returned (loop.time())
        self._handle: asyncio.TimerHandle | None = None
        self._end: asyncio.Future[None] = self._loop.create_future()
        self.sent = 0

    async def run(self) -> None:
        """Send every chunk on time; returns when the last is out or the client has gone."""
        self._handle = self._loop.call_at(self._deadlines[0], self._due)
        self._out.on_close = self._finish  # a hang-up aborts the request at once, as vLLM does
        try:
            await self._end
        finally:  # ended, or cancelled because the server is stopping: no chunk after this
            self._out.on_close = None
            if self._handle is not None:
                self._handle.cancel()

    def _due(self) -> None:
        out = self._out
        if out.closed:  # the client hung up: the request is aborted
            self._finish()
            return
        k = self.sent
        self._counters.chunk_sent(self._loop.time() - self._deadlines[k])
        self.sent = k + 1
        if self.sent < len(self._deadlines):
            out.write(self._token(k))
            if self._writes is not None:
                self._writes.append(self._loop.time())
            self._handle = self._loop.call_at(self._deadlines[k + 1], self._due)
        else:
            out.write(self._tail())
            if self._writes is not None:
                self._writes.append(self._loop.time())
            out.done = True
            self._finish()

    def _finish(self) -> None:
        if not self._end.done():
            self._end.set_result(None)


async def _sleep_until(deadline: float) -> None:
    """Sleep to an absolute ``loop.time()`` deadline (no drift from relative sleeps)."""
    loop = asyncio.get_running_loop()
    if deadline <= loop.time():
        return
    future = loop.create_future()
    handle = loop.call_at(deadline, _wake, future)
    try:
        await future
    finally:
        handle.cancel()


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Emulator:
    """An emulated vLLM server on a background thread.

    Example::

        with Emulator(EmulatorConfig(ttft_ms=50, itl_ms=10)) as emu:
            requests.post(emu.url + "/v1/completions", json={...})
    """

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        counters: Counters | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.config = config or EmulatorConfig()
        self._app = _App(self.config, counters)
        self._reuse_port = reuse_port  # one of several worker processes on the same port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.port: int = self.config.port

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        return f"http://{self.config.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> Emulator:
        """Start serving on a daemon thread; returns once the port is listening."""
        self._thread = threading.Thread(target=self._main, name="vprof-emulate", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise VprofError(f"the emulator did not start within {timeout_s} s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and join the thread."""
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self) -> None:
        loop = new_event_loop(self.config.precise_timers)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(lambda: None))
        except BaseException as exc:  # surfaced to start()
            self._error = _bind_error(exc, self.config)
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self, on_ready: Callable[[], None]) -> None:
        self._stop = asyncio.Event()
        server, connections = await start_server(
            self._app, self.config.host, self.config.port, self._app.counters, self._reuse_port
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        on_ready()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for connection in list(connections):
                connection.close()
            await server.wait_closed()
            if self._app.sends is not None:
                self._app.sends.write()

    def serve_forever(
        self,
        on_ready: Callable[[str], None] | None = None,
        *,
        stop_signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
        parent_pid: int | None = None,
    ) -> None:
        """Serve on this thread until one of ``stop_signals`` (what ``vprof emulate`` runs).

        With ``parent_pid``, also stop as soon as that process is gone (a worker never
        outlives its supervisor, even one killed with SIGKILL).
        """
        loop = new_event_loop(self.config.precise_timers)
        self._loop = loop

        def watch_parent() -> None:
            assert self._stop is not None
            if os.getppid() != parent_pid:
                self._stop.set()
            else:
                loop.call_later(PARENT_CHECK_S, watch_parent)

        def ready() -> None:
            assert self._stop is not None
            # What start-up built (modules, tokenizer) lives on: moved out of the collector's
            # sight, a full collection no longer stalls every stream for milliseconds.
            gc.freeze()
            for sig in stop_signals:
                loop.add_signal_handler(sig, self._stop.set)
            if parent_pid is not None:
                watch_parent()
            if on_ready is not None:
                on_ready(self.url)

        try:
            loop.run_until_complete(self._serve(ready))
        except OSError as exc:
            raise _bind_error(exc, self.config) from None
        finally:
            loop.close()


def _bind_error(exc: BaseException, config: EmulatorConfig) -> BaseException:
    if isinstance(exc, OSError):
        return VprofError(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror}",
            key="--port",
            hint="pick a free port, or 0 for any",
        )
    return exc


# kind -> (request-id prefix, streamed chunks, non-streamed body), as vLLM names and shapes them
_OPENAI_KINDS: dict[
    str, tuple[str, type[wire.CompletionChunks | wire.ChatChunks], Callable[..., dict]]
] = {
    "completions": ("cmpl", wire.CompletionChunks, wire.completion_response),
    "chat": ("chatcmpl", wire.ChatChunks, wire.chat_response),
}
