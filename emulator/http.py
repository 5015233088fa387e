"""A small HTTP/1.1 server on asyncio protocols: keep-alive, chunked responses, no frills.

Raw protocols cost far less CPU per streamed event than a web framework, and the
emulator shares two cores with the load generator it is measuring.
"""

from __future__ import annotations

import asyncio
import logging
import math
import select
import selectors
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any

from vprof.emulator.counters import Counters

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
MAX_BODY_BYTES = 64 * 1024 * 1024
_SELECT_FD_LIMIT = 1024  # FD_SETSIZE: select() takes no descriptor at or above it
log = logging.getLogger("vprof.emulator")


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool = True
    received_at: float = 0.0  # loop.time() when its first byte arrived


def frame(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (several SSE events may share one)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


END_OF_STREAM = b"0\r\n\r\n"


class _Date:
    """The ``date`` header, formatted once a second rather than once a response."""

    second = -1
    text = ""

    @classmethod
    def now(cls) -> str:
        second = int(time.time())
        if second != cls.second:
            cls.second, cls.text = second, formatdate(second, usegmt=True)
        return cls.text


class Responder:
    """Writes one response on a connection; ``closed`` turns true if the client went away."""

    __slots__ = ("transport", "keep_alive", "closed", "streaming", "done", "on_close")

    def __init__(self, transport: asyncio.Transport, keep_alive: bool) -> None:
        self.transport = transport
        self.keep_alive = keep_alive
        self.closed = False
        self.streaming = False
        self.done = False
        self.on_close: Callable[[], None] | None = None  # called once if the client goes away

    def client_gone(self) -> None:
        """The connection was lost: nothing more can be written."""
        self.closed = True
        if self.on_close is not None:
            self.on_close()

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}",
            f"date: {_Date.now()}",
            "server: vprof-emulate",
        ]
        lines += [f"{k}: {v}" for k, v in headers]
        if not self.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """A whole response with a content-length."""
        if not self.closed:
            head = [("content-type", content_type), ("content-length", str(len(body)))]
            self.transport.write(self._head(status, head + (headers or [])) + body)
        self.done = True

    def start_stream(
        self, content_type: str | None, headers: list[tuple[str, str]] | None = None
    ) -> None:
        """Send the headers now (as uvicorn does, before the first token)."""
        head = [("transfer-encoding", "chunked")]
        if content_type:
            head.insert(0, ("content-type", content_type))
        self.streaming = True
        if not self.closed:
            self.transport.write(self._head(200, head + (headers or [])))

    def write(self, framed: bytes) -> None:
        """Bytes already framed as HTTP chunks (see :func:`frame`), as they are."""
        if not self.closed:
            self.transport.write(framed)

    def chunk(self, data: bytes) -> None:
        """One HTTP chunk (several SSE events may share one write)."""
        if data:
            self.write(frame(data))

    def end_stream(self, last: list[bytes] | None = None) -> None:
        """Finish the stream; ``last`` events go out in the same write as the terminator."""
        self.write(b"".join(frame(p) for p in last or () if p) + END_OF_STREAM)
        self.done = True


Handler = Callable[[Request, Responder], Coroutine[Any, Any, None]]


class Connections(set):
    """The open connections, so that stopping can close them all."""


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler, connections: Connections, counters: Counters) -> None:
        self._handler = handler
        self._connections = connections
        self._counters = counters
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._responder: Responder | None = None
        self._task: asyncio.Task | None = None
        self._first_byte_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._connections.add(self)
        # clients that do not reuse connections pay a TCP handshake per request, in their TTFT
        self._counters.connection_opened()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # small SSE events must leave at once, not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._counters.connection_closed()
        if self._responder is not None:
            self._responder.client_gone()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._task is not None:
            self._task.cancel()

    def data_received(self, data: bytes) -> None:
        if not self._buffer:
            # a request's clock starts when it arrives, as a server's TTFT does
            self._first_byte_at = asyncio.get_running_loop().time()
        self._buffer += data
        if self._task is None:
            self._next()

    def _next(self) -> None:
        request = self._parse()
        if request is None:
            return
        assert self._transport is not None
        self._responder = Responder(self._transport, request.keep_alive)
        self._task = asyncio.get_running_loop().create_task(self._handler(request, self._responder))
        self._task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        responder = self._responder
        self._task = None
        self._responder = None
        if task.cancelled() or responder is None or self._transport is None:
            return
        exc = task.exception()
        if exc is not None:
            log.error("emulator handler failed", exc_info=exc)
        if exc is not None and not responder.closed:
            if responder.streaming:  # headers are out: all we can do is cut the stream
                self._transport.close()
                return
            responder.send(
                500,
                f'{{"error":{{"message":"{type(exc).__name__}"}}}}'.encode(),
                "application/json",
            )
        if not responder.keep_alive or responder.closed:
            self._transport.close()
        elif self._buffer:
            self._next()

    def _parse(self) -> Request | None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = head[0].split(" ", 2)
        except ValueError:
            self._reject(400)
            return None
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._reject(411)  # no client of an LLM API chunks its request body
            return None
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._reject(413 if length > 0 else 400)
            return None
        if len(self._buffer) < end + 4 + length:
            return None  # wait for the rest of the body
        body = bytes(self._buffer[end + 4 : end + 4 + length])
        del self._buffer[: end + 4 + length]
        received_at = self._first_byte_at
        if self._buffer:  # a pipelined request follows: it is here already
            self._first_byte_at = asyncio.get_running_loop().time()
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
        path = target.split("?", 1)[0]
        return Request(method.upper(), path, headers, body, keep_alive, received_at)

    def _reject(self, status: int) -> None:
        assert self._transport is not None
        Responder(self._transport, keep_alive=False).send(status, b"", "text/plain")
        self._buffer.clear()
        self._transport.close()


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll whose waits end on time instead of up to 1 ms late, and still wake for I/O.

    epoll counts in whole milliseconds and the stock selector rounds every wait up, so each
    token would leave up to 1 ms late. Here a wait is done by ``select()`` on the epoll
    descriptor itself (an epoll fd is readable while any fd it watches has I/O), whose
    timeout counts in microseconds: tokens leave within tens of microseconds of their
    deadline, no CPU is spent spinning, and a request that arrives during the wait is read
    at once. Past ``select()``'s descriptor limit it falls back to rounding the epoll wait
    down and sleeping the sub-millisecond rest (I/O then waits for that rest).
    """

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None or timeout <= 0:
            return super().select(timeout)
        fd = self.fileno()
        if fd < _SELECT_FD_LIMIT:
            readable, _, _ = select.select([fd], [], [], timeout)
            # timed out with nothing readable: no second syscall to learn there is no I/O
            return super().select(0) if readable else []
        if timeout < 1e-3:
            ready = super().select(0)
            if ready:
                return ready
            time.sleep(timeout)
            return super().select(0)
        # just under whole_ms, so the parent's ceil() keeps it and we wake before the deadline
        return super().select(math.floor(timeout * 1e3) * 1e-3 - 1e-7)


def new_event_loop(precise: bool = True) -> asyncio.AbstractEventLoop:
    """An event loop whose timers fire on time (see ``PreciseEpollSelector``)."""
    if precise and hasattr(selectors, "EpollSelector"):
        return asyncio.SelectorEventLoop(PreciseEpollSelector())
    return asyncio.new_event_loop()


async def start_server(
    handler: Handler, host: str, port: int, counters: Counters, reuse_port: bool = False
) -> tuple[asyncio.Server, Connections]:
    """Listen on ``host:port`` and serve ``handler``; returns the server and its connections.

    ``reuse_port``: share the port with other processes that listen on it the same way
    (``SO_REUSEPORT``: the kernel spreads new connections over them).
    """
    connections = Connections()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(handler, connections, counters),
        host,
        port,
        backlog=1024,
        reuse_address=True,
        reuse_port=reuse_port or None,
    )
    return server, connections
