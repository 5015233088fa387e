"""How many requests does ``vprof bench`` send to a server that answers 200 with broken streams?

A tiny HTTP server here is healthy, lists a model and answers its warm-up, but every streamed
answer is broken, in turn: not JSON, no chunk with ``choices``, no ``[DONE]``. ``vprof bench
--url`` runs a steady shape of N closed-loop users against it for D seconds; the figures are
the POSTs the server counted, the exit code and the run's reason. Users back off after
consecutive failed requests (0.05 s, doubling, at most 5 s), so the count stays at a handful
per user; without the back-off it is thousands.

    nice -n 19 .venv/bin/python benchmarks/malformed_streams.py                  # ~15 s
    nice -n 19 .venv/bin/python benchmarks/malformed_streams.py --users 8 --duration 60
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BROKEN = (
    b"data: <html>gateway</html>\n\ndata: [DONE]\n\n",  # not JSON
    b'data: {"object": "text_completion"}\n\ndata: [DONE]\n\n',  # no chunk with choices
    b'data: {"choices": [{"text": "a", "index": 0}]}\n\n',  # no [DONE]
)


class Broken(BaseHTTPRequestHandler):
    posts = [0]

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]})
        else:
            self._json({})

    def do_POST(self) -> None:
        self.posts[0] += 1
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if not body.get("stream"):  # the warm-up's plain completion
            self._json({"choices": [{"text": "ok", "index": 0}]})
            return
        stream = BROKEN[self.posts[0] % len(BROKEN)]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(stream)))
        self.end_headers()
        self.wfile.write(stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        shape = Path(tmp) / "shape.yaml"
        shape.write_text(f"kind: steady\nusers: {args.users}\nduration_s: {args.duration}\n")
        vprof = Path(sys.executable).with_name("vprof")
        started = time.monotonic()
        done = subprocess.run(
            [
                str(vprof),
                "bench",
                "dep",
                "--url",
                url,
                "--traffic",
                str(shape),
                "--workload",
                "tiny-smoke",
                "--no-metrics",
                "--out",
                str(Path(tmp) / "out"),
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wall_s = time.monotonic() - started
    server.shutdown()
    reason = next(
        (line for line in done.stderr.splitlines() if "every request failed" in line), "(none)"
    )
    print(f"{args.users} users for {args.duration:g} s against broken streams:")
    print(f"  requests the server received: {Broken.posts[0]:,} (the warm-up's included)")
    print(f"  per user per second: {Broken.posts[0] / args.users / args.duration:.2f}")
    print(f"  exit code {done.returncode}, {wall_s:.1f} s in all")
    print(f"  reason: {reason.strip()[:200]}")


if __name__ == "__main__":
    main()
