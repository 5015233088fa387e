"""HTTP/1.1 for streamed answers on gevent sockets: one keep-alive connection per Locust user.

Locust's own ``geventhttpclient`` provides the parts: its connection pool (connect timeout, TLS
checked against a CA bundle, a ``CONNECT`` tunnel through a proxy) and its C response parser
(llhttp, which also undoes the chunked framing). This module drives them so that every piece of
a body is handed on with the moment its bytes came off the socket, before anything else is done
with them, and so that no socket wait runs under a timer of its own (the caller bounds a whole
request once). Proxies and the CA bundle come from the environment the way ``requests`` reads
them: ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` with ``NO_PROXY``, and
``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE``.

Nothing here imports Locust: the module works in any gevent program.
"""

from __future__ import annotations

import base64
import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPParseError, HTTPResponse

RECV_BYTES = 65536
ERROR_BODY_BYTES = 2048  # of an error answer's body, kept for the record's message
USER_AGENT = "vprof"

Sink = Callable[[bytearray, float], None]


class ConnectError(Exception):
    """The server could not be reached: refused, unknown name, TLS or proxy failure."""


class ConnectTimeout(ConnectError):
    """Connecting took longer than the connect timeout."""


class ResponseError(Exception):
    """The connection broke during the exchange, or the answer was not readable HTTP/1.1."""


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    user: str | None = None  # credentials from the proxy's URL
    password: str | None = None

    @property
    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` header's value, when the URL carries credentials."""
        if self.user is None:
            return None
        pair = f"{self.user}:{self.password or ''}"
        return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


@dataclass(frozen=True)
class Target:
    """Where requests go and how: resolved once per user from the URL and the environment."""

    scheme: str
    host: str
    port: int
    base_path: str
    proxy: Proxy | None
    ca_bundle: str | None

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def target(url: str) -> Target:
    """Resolve ``url`` (``http(s)://host[:port][/base]``) with the environment's proxy and CA
    bundle settings. Raises ``ValueError`` for a URL or proxy it cannot use."""
    from requests.utils import get_environ_proxies, select_proxy

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxy_url = select_proxy(url, get_environ_proxies(url))
    ca_bundle = None
    if parts.scheme == "https":
        ca_bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if not ca_bundle:
            from requests.utils import DEFAULT_CA_BUNDLE_PATH

            ca_bundle = DEFAULT_CA_BUNDLE_PATH
    return Target(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        base_path=parts.path.rstrip("/"),
        proxy=_proxy(proxy_url) if proxy_url else None,
        ca_bundle=ca_bundle,
    )


def _proxy(url: str) -> Proxy:
    parts = urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"proxy {url!r}: only http:// proxies are supported")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return Proxy(parts.hostname, parts.port or 80, user, password)


class _Parser(HTTPResponse):
    """llhttp's callbacks: the body goes to the sink with the time its bytes arrived."""

    def __init__(self, sink: Sink) -> None:
        super().__init__("POST")
        self.at_s = 0.0
        self._sink = sink
        self.error_body = bytearray()

    def _on_headers_complete(self) -> int | bool | None:
        skip = super()._on_headers_complete()
        if self.get_code() < 200:
            return skip  # an interim answer (100 Continue): the real one follows
        if self.get_code() != 200:
            self._sink = self._keep_error
        return skip

    def _on_body(self, buf: bytearray) -> None:
        self._sink(buf, self.at_s)

    def _keep_error(self, buf: bytearray, at_s: float) -> None:
        room = ERROR_BODY_BYTES - len(self.error_body)
        if room > 0:
            self.error_body += buf[:room]


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    error_body: str  # the start of the body when the status is not 200
    finished_at: float  # ``now()`` when the answer's last bytes arrived


class Connection:
    """One keep-alive HTTP/1.1 connection to a server, opened on first use and reopened when
    the server closed it. ``connect_timeout_s`` bounds connecting (and TLS, and a proxy's
    tunnel); reads wait without a timer: bound the whole exchange from outside."""

    def __init__(
        self, url: str, *, connect_timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> None:
        self.target = target(url)
        t = self.target
        # network_timeout None: reads wait without a timer (one Timeout per wait costs CPU)
        common: dict[str, Any] = {
            "size": 1,
            "connection_timeout": connect_timeout_s,
            "network_timeout": None,
        }
        if t.proxy:  # for https, a CONNECT tunnel with the URL's credentials
            common |= {
                "use_proxy": True,
                "proxy_user": t.proxy.user,
                "proxy_password": t.proxy.password,
            }
        connect_host, connect_port = (t.proxy.host, t.proxy.port) if t.proxy else (t.host, t.port)
        self._pool: ConnectionPool
        if t.scheme == "https":
            self._pool = SSLConnectionPool(
                connect_host,
                connect_port,
                t.host,
                t.port,
                ssl_options={"ca_certs": t.ca_bundle},
                **common,
            )
        else:
            self._pool = ConnectionPool(connect_host, connect_port, t.host, t.port, **common)
        lines = [f"Host: {t.authority}", f"User-Agent: {USER_AGENT}", "Accept: */*"]
        if t.proxy and t.scheme == "http" and t.proxy.authorization:
            lines.append(f"Proxy-Authorization: {t.proxy.authorization}")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._headers = "\r\n".join(lines)
        # A plain-HTTP proxy is sent the absolute URL; a tunnel (https) the path.
        prefix = f"http://{t.authority}" if t.proxy and t.scheme == "http" else ""
        self._prefix = prefix + t.base_path
        self._returned = False  # the last exchange left its connection open for the next
        self._last_socket: object = None
        self.connections_opened = 0

    def request_bytes(
        self,
        path: str,
        body: bytes,
        content_type: str = "application/json",
        request_id: str | None = None,
    ) -> bytes:
        """A whole ``POST`` (head and body), built ahead of time so sending costs one write;
        ``request_id`` goes in an ``X-Request-Id`` header (printable ASCII, checked by the
        caller)."""
        named = f"X-Request-Id: {request_id}\r\n" if request_id else ""
        head = (
            f"POST {self._prefix}{path} HTTP/1.1\r\n{self._headers}\r\n{named}"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    def exchange(self, payload: bytes, sink: Sink, now: Callable[[], float]) -> Answer:
        """Send ``payload`` and read the answer; a 200 body goes to ``sink(bytes, at_s)`` piece
        by piece, ``at_s`` being ``now()`` right after the bytes were received.

        A kept-alive connection the server had closed is reopened once, when nothing of the
        answer had arrived. Raises :class:`ConnectError` or :class:`ResponseError`.
        """
        for attempt in (1, 2):
            reused = self._returned and attempt == 1
            sock = self._socket()
            parser = _Parser(sink)
            keep = False
            try:
                try:
                    sock.sendall(payload)
                    while not parser.message_complete:
                        data = sock.recv(RECV_BYTES)
                        parser.at_s = now()
                        if not data:
                            if reused and not parser.message_begun:
                                break  # closed while idle: once more on a new connection
                            _end_of_input(parser)
                            break
                        parser.feed(data)
                except OSError as exc:
                    if reused and not parser.message_begun and _is_reset(exc):
                        continue
                    raise ResponseError(f"{type(exc).__name__}: {exc}") from exc
                except HTTPParseError as exc:
                    raise ResponseError(f"not a readable HTTP/1.1 answer: {exc}") from exc
                if not parser.message_complete:
                    continue  # the stale connection above
                keep = not parser.should_close()
                headers = {k.lower(): v for k, v in parser.items()}
                error = parser.error_body.decode("utf-8", "replace")
                return Answer(parser.get_code(), headers, error, parser.at_s)
            finally:
                self._returned = keep
                if keep:
                    self._pool.return_socket(sock)
                else:
                    self._pool.release_socket(sock)
        raise ResponseError("the server closed the connection twice before answering")

    def _socket(self):  # -> gevent socket
        try:
            sock = self._pool.get_socket()
        except TimeoutError as exc:
            raise ConnectTimeout(f"no connection to {self._where()} in time: {exc}") from None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a proxy refused the tunnel
            raise ConnectError(f"cannot connect to {self._where()}: {exc}") from None
        if sock is not self._last_socket:  # the pool hands back the same one while it lives
            self.connections_opened += 1
            self._last_socket = sock
        return sock

    def _where(self) -> str:
        t = self.target
        via = f" via proxy {t.proxy.host}:{t.proxy.port}" if t.proxy else ""
        return f"{t.scheme}://{t.authority}{via}"

    def close(self) -> None:
        self._pool.close()


def _end_of_input(parser: _Parser) -> None:
    """The server closed the connection: that completes a body that runs to the close."""
    try:
        parser.feed(b"")
    except HTTPParseError:
        pass
    if not parser.message_complete:
        raise ResponseError("the server closed the connection before the end of the answer")


def _is_reset(exc: OSError) -> bool:
    return exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED)
