"""The emulator's own cost: CPU per streamed chunk event, and how exact its timing stays.

Starts ``vprof emulate`` and drives it, step by step in concurrent streams, with the
cheapest client Python has (asyncio protocols on raw keep-alive sockets, counting
``data: {`` per read, no parsing) in a process of its own. For each step it prints the
chunk events/s received, the emulator's CPU (its whole process tree) in µs per chunk event
and as % of one core, and the client-side TTFT and ITL errors (an upper bound on the
emulator's own: they include this client's wake-ups).

    .venv/bin/python benchmarks/emulator_cpu.py                       # 32,128,256 streams
    .venv/bin/python benchmarks/emulator_cpu.py --emulate "--workers 2 --ttft-spread-ms 10"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import Lateness, TreeCpu, percentile, running_emulator

_TRUTH = b"x-vprof-ttft-ms: "


class _Stream(asyncio.Protocol):
    """One keep-alive connection sending the same streamed request again and again."""

    def __init__(self, requests: list[bytes], stop_at: float, done: asyncio.Future) -> None:
        self.requests, self.stop_at, self.done = requests, stop_at, done
        self.transport: asyncio.Transport | None = None
        self.records: list[tuple[float, float, list[float]]] = []  # sent, true TTFT, stamps
        self._truth_ms = float("nan")
        self._carry = b""
        self._stamps: list[float] = []
        self._sent = 0.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self._stamps = []
        self._truth_ms = float("nan")
        self._sent = time.perf_counter()
        # prompts of every length in turn: with --ttft-spread-ms, first tokens spread out
        self.transport.write(self.requests[len(self.records) % len(self.requests)])

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        joined = self._carry + data
        if self._truth_ms != self._truth_ms and _TRUTH in joined:  # NaN: not read yet
            self._truth_ms = float(joined.split(_TRUTH, 1)[1].split(b"\r\n", 1)[0])
        # the 6 carried bytes are shorter than the pattern: no event is counted twice
        self._stamps += [now] * joined.count(b"data: {")
        self._carry = joined[-6:]
        if joined.endswith(b"\r\n0\r\n\r\n"):  # the chunked terminator: this answer is complete
            self.records.append((self._sent, self._truth_ms, self._stamps))
            self._carry = b""
            if now < self.stop_at:
                self._send()
            elif not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc) -> None:  # type: ignore[override]
        if not self.done.done():
            self.done.set_result(None)


async def _client(
    port: int, streams: int, seconds: float, tokens: int, itl_ms: float, out: Path
) -> None:
    requests = []
    for words in range(1, 65):
        body = json.dumps(
            {"prompt": " ".join(["x"] * words), "max_tokens": tokens, "stream": True}
        ).encode()
        requests.append(
            b"POST /v1/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json"
            b"\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
        )
    loop = asyncio.get_running_loop()
    anchor = time.time() - time.perf_counter()
    stop_at = time.perf_counter() + seconds
    start, spacing_s = time.perf_counter(), itl_ms / 1000.0 / streams
    protocols: list[_Stream] = []
    for i in range(streams):
        # spread the starts over one inter-token gap, so chunks are not all due at once
        await asyncio.sleep(max(0.0, start + i * spacing_s - time.perf_counter()))
        done = loop.create_future()
        _, protocol = await loop.create_connection(
            lambda done=done, i=i: _Stream(requests[i % 64 :] + requests[: i % 64], stop_at, done),
            "127.0.0.1",
            port,
        )
        protocols.append(protocol)
    await asyncio.gather(*(p.done for p in protocols))
    records = [
        {"sent_at": anchor + sent, "truth_ms": truth, "stamps": [anchor + s for s in stamps]}
        for p in protocols
        for sent, truth, stamps in p.records
    ]
    out.write_text(json.dumps(records))


def run_step(args, streams: int, work: Path, emulator_pid: int) -> dict:
    out = work / f"raw-{streams}.json"
    seconds = args.warmup_s + args.step_s
    argv = [
        sys.executable,
        __file__,
        "--client",
        str(args.port),
        str(streams),
        str(seconds),
        str(args.tokens),
        str(args.itl_ms),
        str(out),
    ]
    emulator_cpu = TreeCpu(emulator_pid)
    late = Lateness(f"http://127.0.0.1:{args.port}")
    late.sample()
    proc = subprocess.Popen(argv)
    client_cpu = TreeCpu(proc.pid)
    deadline = time.monotonic() + args.warmup_s + args.step_s + 60
    for tick in range(sys.maxsize):
        if proc.poll() is not None:
            break
        emulator_cpu.sample()
        client_cpu.sample()
        if tick % 5 == 0 and not args.no_scrape:
            late.sample()
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the client did not finish")
        time.sleep(0.1)
    emulator_cpu.sample()
    late.sample()
    if proc.returncode != 0:
        raise RuntimeError(f"the client failed with code {proc.returncode}")
    records = json.loads(out.read_text())
    start = min(r["sent_at"] for r in records) + args.warmup_s
    end = start + args.step_s
    events = sum(start <= s <= end for r in records for s in r["stamps"])
    chosen = [r for r in records if start <= r["sent_at"] <= end and r["stamps"]]
    # the emulator names each request's true TTFT; one without the header has no spread
    truth = [args.ttft_ms if math.isnan(r["truth_ms"]) else r["truth_ms"] for r in chosen]
    ttft_err = [
        (r["stamps"][0] - r["sent_at"]) * 1e3 - t for r, t in zip(chosen, truth, strict=True)
    ]
    itl_err = [
        (b - a) * 1e3 - args.itl_ms
        for r in chosen
        for a, b in zip(r["stamps"], r["stamps"][1:], strict=False)
    ]
    emu_s = emulator_cpu.seconds(start, end)
    return {
        "streams": streams,
        "events_per_s": events / args.step_s,
        "emulator_us_per_event": 1e6 * emu_s / events if events else float("nan"),
        "emulator_cpu_pct": 100 * emu_s / args.step_s,
        "client_cpu_pct": 100 * client_cpu.seconds(start, end) / args.step_s,
        "ttft_err_p50_ms": percentile(ttft_err, 50),
        "ttft_err_p99_ms": percentile(ttft_err, 99),
        "itl_err_p50_ms": percentile(itl_err, 50),
        "itl_err_p99_ms": percentile(itl_err, 99),
        "emulator_late_p99_ms": late.p99_ms(start, end),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18311)
    parser.add_argument("--streams", default="32,128,256", help="concurrency steps")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--step-s", type=float, default=5.0, help="measured seconds per step")
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--emulate", default="", help="more `vprof emulate` options, quoted")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument(
        "--no-scrape", action="store_true", help="read /metrics only before and after a step"
    )
    args = parser.parse_args(argv)

    options = ["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)]
    options += shlex.split(args.emulate)
    work = Path(tempfile.mkdtemp(prefix="vprof-emucpu-"))
    results = []
    print(f"vprof emulate {' '.join(options)}; {args.tokens} tokens per request")
    print(
        f"{'streams':>7} {'events/s':>9} {'emu µs/ev':>9} {'emu CPU':>8} {'client CPU':>10} "
        f"{'TTFT err p50/p99':>17} {'ITL err p50/p99':>16} {'emu late p99':>12}"
    )
    with running_emulator(args.port, options) as emulator:
        for streams in (int(s) for s in args.streams.split(",")):
            r = run_step(args, streams, work, emulator.pid)
            results.append(r)
            print(
                f"{streams:>7} {r['events_per_s']:>9.0f} {r['emulator_us_per_event']:>9.1f} "
                f"{r['emulator_cpu_pct']:>7.0f}% {r['client_cpu_pct']:>9.0f}% "
                f"{r['ttft_err_p50_ms']:>+8.2f}/{r['ttft_err_p99_ms']:>+7.2f} "
                f"{r['itl_err_p50_ms']:>+7.2f}/{r['itl_err_p99_ms']:>+7.2f} "
                f"{'≤ {:g} ms'.format(r['emulator_late_p99_ms']):>12}",
                flush=True,
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _, _, port, streams, seconds, tokens, itl, out = sys.argv
        asyncio.run(
            _client(int(port), int(streams), float(seconds), int(tokens), float(itl), Path(out))
        )
    else:
        sys.exit(main())
