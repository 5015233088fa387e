"""The users' HTTP/1.1 transport against small loopback servers: keep-alive, stamps per piece,
error answers, broken connections, connect timeouts, TLS with the environment's CA bundle, and
proxies from the environment (plain forwarding and CONNECT tunnels, with credentials)."""

from __future__ import annotations

import base64
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from vprof.locustfiles.stream import SseScanner
from vprof.locustfiles.transport import (
    ConnectError,
    Connection,
    ConnectTimeout,
    ResponseError,
    target,
)

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_answer(*texts: str) -> list[bytes]:
    """An SSE answer as pieces: the head with the first event, then one event per piece."""
    events = [b'data: {"choices":[{"index":0,"text":"%s"}]}\n\n' % t.encode() for t in texts]
    events.append(b"data: [DONE]\n\n")
    pieces = [SSE_HEAD + chunk(events[0])] + [chunk(e) for e in events[1:]]
    pieces[-1] += b"0\r\n\r\n"
    return pieces


@dataclass
class Seen:
    request_lines: list[bytes] = field(default_factory=list)
    heads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    connections: int = 0


class CannedServer:
    """A threaded loopback HTTP/1.1 server: each request gets ``answer(n)``'s pieces (``n``
    counts requests), keep-alive unless a piece is ``None`` (then it hangs up). Between pieces
    it waits for ``step`` when one is given, so a test decides when the next bytes leave."""

    def __init__(
        self,
        answer: Callable[[int], list[bytes | None]],
        tls: ssl.SSLContext | None = None,
        step: threading.Semaphore | None = None,
    ) -> None:
        self.seen = Seen()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                if tls is not None:
                    sock = tls.wrap_socket(sock, server_side=True)
                outer.seen.connections += 1
                buf = b""
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = sock.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(buf) < length:
                        buf += sock.recv(65536)
                    body, buf = buf[:length], buf[length:]
                    outer.seen.request_lines.append(head.split(b"\r\n")[0])
                    outer.seen.heads.append(head)
                    outer.seen.bodies.append(body)
                    for i, piece in enumerate(answer(len(outer.seen.bodies))):
                        if piece is None:
                            sock.close()
                            return
                        if step is not None and i > 0:
                            step.acquire(timeout=10)
                        sock.sendall(piece)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Proxy:
    """A loopback forward proxy: ``CONNECT`` opens a tunnel; any other request is passed on,
    head and all, to the host of its absolute URL. It keeps each first request line and its
    ``Proxy-Authorization``."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes | None]] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                client = self.request
                buf = b""
                while b"\r\n\r\n" not in buf:
                    data = client.recv(65536)
                    if not data:
                        return
                    buf += data
                head = buf.split(b"\r\n\r\n")[0].split(b"\r\n")
                auth = next(
                    (
                        line.split(b":", 1)[1].strip()
                        for line in head[1:]
                        if line.lower().startswith(b"proxy-authorization:")
                    ),
                    None,
                )
                outer.requests.append((head[0], auth))
                method, where, _ = head[0].split(b" ")
                if method == b"CONNECT":
                    host, _, port = where.decode().rpartition(":")
                    upstream = socket.create_connection((host, int(port)))
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    buf = buf.split(b"\r\n\r\n", 1)[1]
                else:
                    authority = where.split(b"/")[2].decode()
                    host, _, port = authority.rpartition(":")
                    upstream = socket.create_connection((host, int(port)))
                if buf:
                    upstream.sendall(buf)
                pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                pump.start()
                _pipe(client, upstream)
                pump.join(timeout=5)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def no_proxy_env(monkeypatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def canned(no_proxy_env) -> Iterator[Callable[..., CannedServer]]:
    servers: list[CannedServer] = []

    def make(*args, **kwargs) -> CannedServer:
        servers.append(CannedServer(*args, **kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def exchange(conn: Connection, body: bytes = b"{}", now: Callable[[], float] | None = None):
    scanner = SseScanner()
    payload = conn.request_bytes("/v1/completions", body)
    answer = conn.exchange(payload, scanner.feed, now or (lambda: 0.0))
    return answer, scanner


def test_keep_alive_serves_every_answer_on_one_connection(canned):
    server = canned(lambda n: sse_answer("a", "b", "c"))
    conn = Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5)
    for body in (b'{"n":1}', b'{"n":2}', b'{"n":3}'):
        answer, scanner = exchange(conn, body)
        assert answer.status == 200 and answer.headers["content-type"] == "text/event-stream"
        result = scanner.result()
        assert result.text == "abc" and result.done
    assert server.seen.connections == 1 and conn.connections_opened == 1
    assert server.seen.bodies == [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    head = server.seen.heads[0].decode()
    assert head.startswith("POST /v1/completions HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}" in head and "Content-Length: 7" in head


def test_each_piece_of_the_body_carries_the_moment_it_was_received(canned):
    # The server sends the next piece only after the client read the clock, so each receive
    # holds exactly one piece: the stamps must be the readings right after each receive.
    step = threading.Semaphore(0)
    server = canned(lambda n: sse_answer("a", "b", "c"), step=step)
    readings: list[float] = []

    def now() -> float:
        readings.append(float(len(readings) + 1))
        step.release()
        return readings[-1]

    conn = Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5)
    answer, scanner = exchange(conn, now=now)
    result = scanner.result()
    assert scanner.stamps == [1.0, 2.0, 3.0]  # one reading per receive, in order
    assert result.first_token_s == 1.0 and result.itl_ms == [1000.0, 1000.0]
    assert answer.finished_at == readings[-1]


def test_an_error_answer_keeps_its_body_and_the_connection(canned):
    body = b'{"error": "The model `x` does not exist."}'
    answers = {
        1: [b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)],
        2: sse_answer("ok"),
    }
    server = canned(lambda n: answers[n])
    conn = Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5)
    answer, scanner = exchange(conn)
    assert answer.status == 404 and "does not exist" in answer.error_body
    assert scanner.datas == []  # an error body never reaches the stream's scanner
    answer, scanner = exchange(conn)
    assert answer.status == 200 and scanner.result().text == "ok"
    assert server.seen.connections == 1


def test_a_connection_the_server_closed_after_answering_is_opened_again(canned):
    server = canned(lambda n: [*sse_answer("x"), None])  # answers, then hangs up
    conn = Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5)
    for _ in range(3):
        answer, scanner = exchange(conn)
        assert answer.status == 200 and scanner.result().text == "x"
    assert server.seen.connections == 3 and conn.connections_opened == 3


def test_an_answer_cut_off_mid_body_is_a_response_error(canned):
    server = canned(lambda n: [sse_answer("a", "b")[0], None])
    conn = Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5)
    with pytest.raises(ResponseError, match="closed the connection before the end"):
        exchange(conn)


def test_a_refused_connection_is_a_connect_error(no_proxy_env):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    conn = Connection(f"http://127.0.0.1:{port}", connect_timeout_s=5)
    with pytest.raises(ConnectError, match=f"cannot connect to http://127.0.0.1:{port}"):
        exchange(conn)


def test_connecting_longer_than_the_connect_timeout_is_a_connect_timeout(no_proxy_env):
    # A listening socket that never accepts, with its backlog filled: connects hang.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    try:
        conn = Connection(f"http://127.0.0.1:{port}", connect_timeout_s=0.2)
        with pytest.raises(ConnectTimeout, match="in time"):
            exchange(conn)
    finally:
        filler.close()
        sock.close()


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    """A CA (its bundle on disk) and a server context with a certificate for 127.0.0.1."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    bundle = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return bundle, context


def test_https_trusts_the_ca_bundle_named_by_the_environment(canned, tls_pair, monkeypatch):
    bundle, context = tls_pair
    server = canned(lambda n: sse_answer("secure"), tls=context)
    url = f"https://127.0.0.1:{server.port}"
    with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        exchange(Connection(url, connect_timeout_s=5))  # the default bundle does not know it
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    conn = Connection(url, connect_timeout_s=5)
    for _ in range(2):
        answer, scanner = exchange(conn)
        assert answer.status == 200 and scanner.result().text == "secure"
    assert conn.connections_opened == 1


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy()
    yield p
    p.close()


def test_http_goes_through_the_environment_proxy_with_its_credentials(canned, proxy, monkeypatch):
    server = canned(lambda n: sse_answer("via", "proxy"))
    monkeypatch.setenv("HTTP_PROXY", f"http://me:s%40cret@127.0.0.1:{proxy.port}")
    conn = Connection(f"http://127.0.0.1:{server.port}/base", connect_timeout_s=5)
    answer, scanner = exchange(conn)
    assert answer.status == 200 and scanner.result().text == "viaproxy"
    line, auth = proxy.requests[0]
    assert line == f"POST http://127.0.0.1:{server.port}/base/v1/completions HTTP/1.1".encode()
    assert auth == b"Basic " + base64.b64encode(b"me:s@cret")


def test_https_tunnels_through_the_environment_proxy(canned, proxy, tls_pair, monkeypatch):
    bundle, context = tls_pair
    server = canned(lambda n: sse_answer("tunnel"), tls=context)
    monkeypatch.setenv("HTTPS_PROXY", f"http://me:pw@127.0.0.1:{proxy.port}")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    conn = Connection(f"https://127.0.0.1:{server.port}", connect_timeout_s=5)
    for _ in range(2):  # the tunnel stays up for the next request
        answer, scanner = exchange(conn)
        assert answer.status == 200 and scanner.result().text == "tunnel"
    assert proxy.requests == [
        (
            f"CONNECT 127.0.0.1:{server.port} HTTP/1.1".encode(),
            b"Basic " + base64.b64encode(b"me:pw"),
        )
    ]
    assert server.seen.request_lines == [b"POST /v1/completions HTTP/1.1"] * 2


def test_no_proxy_sends_straight_to_the_server(canned, proxy, monkeypatch):
    server = canned(lambda n: sse_answer("direct"))
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    answer, scanner = exchange(Connection(f"http://127.0.0.1:{server.port}", connect_timeout_s=5))
    assert scanner.result().text == "direct" and proxy.requests == []


def test_urls_and_proxies_it_cannot_use_are_refused_by_name(no_proxy_env, monkeypatch):
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        target("ftp://example.com")
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="only http:// proxies"):
        target("https://example.com")
    monkeypatch.delenv("HTTPS_PROXY")
    t = target("https://example.com/")
    assert t.authority == "example.com" and t.base_path == "" and t.port == 443
