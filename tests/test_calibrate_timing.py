"""``vprof calibrate`` agrees with an independent measurement of the same client.

The independent side shares nothing with calibrate but the client under test: a small server
written here (one thread, a heap of deadlines and a selector, not the emulator) sleeps to each
token's time, writes it and notes on the wall clock when the write returned; the client's
error is worked out here from the records and that note (not with ``analysis.clienterror``):
TTFT error = the client's first-token stamp − the first write, ITL error = the client's gaps −
the writes' gaps. Calibrate's certificate at the same load must agree within 1 ms at p50 and
3 ms at p99 (TTFT p50 and p99, ITL p99), at 64 and at 256 users, or within a third of the
figure where the host's own stalls make it larger than that.

Timing-sensitive: it measures a client's latency on a shared machine, so it belongs in the
quiet group of tests that wait for every other test (``QUIET`` in ``conftest.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vprof.runs.calibrate import (
    ID_PREFIX,
    ITL_MS,
    OUTPUT_TOKENS,
    TTFT_MS,
    TTFT_SPREAD_MS,
    CalibrateSpec,
    calibrate,
    measured_window,
    run_client,
)
from vprof.server.process import free_port

pytestmark = pytest.mark.e2e  # a real client timed for half a minute: the slow tier
DURATION_S = 6.0  # measured per side; calibrate's default is 20 s
P50_AGREE_MS, P99_AGREE_MS = 1.0, 3.0
# A host whose neighbours stall it for milliseconds puts those stalls in both sides' tails, and
# two 6-s samples of such a tail differ by a share of it: a CI host measured ITL error p99
# 17.3 ms by calibrate and 13.0 ms independently (TTFT p99 7.7 and 7.6 ms) where a quiet one
# measures 0.6-1.1 ms. There the sides must agree within a third of the larger figure.
AGREE_SHARE = 1 / 3


# -- the independent exact server (run as: python this_file --serve PORT LOG) ----------------


def _serve(port: int, log_path: str) -> None:
    """One thread and a heap of deadlines: it waits on the sockets until a millisecond before
    the next token is due, sleeps the rest (``time.sleep``, to a tenth of a millisecond), writes
    every token then due, and notes on the wall clock when each write returned."""
    import heapq
    import selectors
    import socket

    sent: list[str] = []
    rng = random.Random(1)
    due: list[tuple[float, int, socket.socket, dict]] = []  # (deadline, tie, socket, request)
    buffers: dict[socket.socket, bytes] = {}
    order = 0
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    selector = selectors.DefaultSelector()
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)

    def read(conn: socket.socket) -> None:
        nonlocal order
        try:
            data = conn.recv(65536)
        except ConnectionError:
            data = b""
        if not data:
            selector.unregister(conn)
            buffers.pop(conn, None)
            conn.close()
            return
        arrived = time.time()
        buffer = buffers.get(conn, b"") + data
        head, sep, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")[1:]
        fields = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines)}
        length = int(fields.get("content-length", -1))
        if not sep or len(rest) < length:
            buffers[conn] = buffer  # the rest of the request is still on its way
            return
        buffers[conn] = rest[length:]
        tokens = int(json.loads(rest[:length]).get("max_tokens") or 16)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        first = arrived + (TTFT_MS + rng.uniform(0, TTFT_SPREAD_MS)) / 1000
        request = {
            "id": fields.get("x-request-id", ""),
            "arrived": arrived,
            "first": first,
            "tokens": tokens,
            "writes": [],
        }
        order += 1
        heapq.heappush(due, (first, order, conn, request))

    def chunk(*events: dict | str) -> bytes:
        texts = [e if isinstance(e, str) else json.dumps(e) for e in events]
        data = b"".join(b"data: " + t.encode() + b"\n\n" for t in texts)
        return b"%x\r\n%b\r\n" % (len(data), data)

    token = chunk({"choices": [{"index": 0, "text": " a", "finish_reason": None}]})
    last = {"choices": [{"index": 0, "text": " a", "finish_reason": "length"}]}

    def write(conn: socket.socket, request: dict) -> None:
        nonlocal order
        k, tokens = len(request["writes"]), request["tokens"]
        done = k == tokens - 1
        if done:  # the last token, the usage and [DONE] in one write, as vLLM sends them
            usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": tokens}}
            data = chunk(last, usage, "[DONE]") + b"0\r\n\r\n"
        try:
            conn.sendall(data if done else token)
        except OSError:
            return  # the client went away
        request["writes"].append(time.time())
        if done:
            sent.append(json.dumps({k: request[k] for k in ("id", "arrived", "first", "writes")}))
        else:
            order += 1
            deadline = request["first"] + (k + 1) * ITL_MS / 1000
            heapq.heappush(due, (deadline, order, conn, request))

    def poll(timeout: float) -> None:
        for key, _ in selector.select(timeout=timeout):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                selector.register(conn, selectors.EVENT_READ)
            else:
                read(key.fileobj)  # type: ignore[arg-type]

    while not stopping:
        now = time.time()
        while due and due[0][0] <= now:
            _, _, conn, request = heapq.heappop(due)
            write(conn, request)
        wait = (due[0][0] - time.time()) if due else 0.2
        if wait > 0.001:
            poll(wait - 0.001)
        elif wait > 0:
            time.sleep(wait)  # the last millisecond: no socket is looked at meanwhile
        else:
            poll(0)
    Path(log_path).write_text("\n".join(sent))


class ExactServer:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.log = tmp_path / "exact-sends.jsonl"
        argv = [sys.executable, __file__, "--serve", str(self.port), str(self.log)]
        self.proc = subprocess.Popen(argv)
        deadline = time.monotonic() + 30
        import socket

        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            assert time.monotonic() < deadline and self.proc.poll() is None
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> dict[str, dict]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return {row["id"]: row for row in rows}


def independent_error(tmp_path: Path, spec: CalibrateSpec) -> dict[str, float]:
    """The same client at the same load against the exact server; its error, worked out here."""
    import pyarrow.ipc as ipc

    tmp_path.mkdir(parents=True, exist_ok=True)
    server = ExactServer(tmp_path)
    try:
        run = run_client(server.url, spec, tmp_path / "independent")
    finally:
        sent = server.stop()
    with open(run.records, "rb") as stream:
        rows = ipc.open_stream(stream).read_all().to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    start, end = measured_window(spec, min(r["sent_at"] for r in ok))
    ttft, itl = [], []
    for r in ok:
        truth = sent.get(ID_PREFIX + r["request_id"])
        if truth is None or not start <= r["sent_at"] <= end:
            continue
        ttft.append(r["first_token_at"] - truth["writes"][0])  # both on this host's clock
        client_gaps = np.asarray(r["itl_ms"]) / 1e3
        server_gaps = np.diff(truth["writes"])
        if len(client_gaps) == len(server_gaps) == OUTPUT_TOKENS - 1:
            itl.extend(client_gaps - server_gaps)
    ms = 1e3
    return {
        "ttft_error_p50_ms": float(np.percentile(ttft, 50)) * ms,
        "ttft_error_p99_ms": float(np.percentile(ttft, 99)) * ms,
        "itl_error_p99_ms": float(np.percentile(itl, 99)) * ms,
        "requests": len(ttft),
    }


# At 256 users two cores overload the client itself (its TTFT error p99 ranged 41-108 ms from
# one 6-s run to the next here), so no two measurements of it agree within 3 ms; with four or
# more cores the client keeps up and the comparison means something.
MANY_CORES = pytest.mark.skipif(
    (os.cpu_count() or 1) < 4, reason="256 users overload a client on fewer than 4 cores"
)


@pytest.mark.parametrize("users", [64, pytest.param(256, marks=MANY_CORES)])
def test_calibrate_agrees_with_an_independent_exact_server(tmp_path, users):
    """One measurement each, on the quiet cores the test waits for (``QUIET``): there one
    measurement's figures moved by a tenth of the bounds at most from one to the next (four in
    the order calibrate, independent, independent, calibrate at 64 users, 2026-12-05: TTFT
    error p50 0.02-0.03 ms, p99 0.08-0.18 ms, ITL error p99 0.60-1.08 ms), so an order that
    cancels a drifting load bought nothing but 30 s."""
    spec = CalibrateSpec(users=users, duration_s=DURATION_S)
    sides = {"calibrate": calibrate(spec), "independent": independent_error(tmp_path, spec)}
    for side, result in sides.items():
        print(f"\n{users} users, {side}: {json.dumps(_figures(result))}", end="")
    assert all(r["requests"] > 0 for r in sides.values())
    for key, bound in FIGURES.items():
        ours, theirs = sides["calibrate"][key], sides["independent"][key]
        assert abs(ours - theirs) <= max(bound, AGREE_SHARE * max(abs(ours), abs(theirs))), key


FIGURES = {
    "ttft_error_p50_ms": P50_AGREE_MS,
    "ttft_error_p99_ms": P99_AGREE_MS,
    "itl_error_p99_ms": P99_AGREE_MS,
}


def _figures(result: dict) -> dict:
    keys = ("requests", "ttft_error_p50_ms", "ttft_error_p99_ms", "itl_error_p99_ms")
    return {k: round(result[k], 2) if isinstance(result[k], float) else result[k] for k in keys}


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    _serve(int(sys.argv[2]), sys.argv[3])
