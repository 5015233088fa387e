"""The load generator's ceiling: streamed events per second one Locust process sustains.

Against ``vprof emulate`` (its own process, fixed TTFT and inter-token delay), step the
number of concurrent streams up and measure, for ONE Locust process running vprof's
locustfile and for a plain asyncio/aiohttp streaming client, in the same run:

- content events per second received (one SSE chunk per token);
- TTFT and ITL errors = measured minus configured, p50 and p99 of |error| (ms);
- the client's CPU % (of one core) and the emulator's, over the same window.

A step is *within bound* while |error| stays within 1 ms at p50 and 5 ms at p99 for both
TTFT and ITL; the ceiling is the highest events/s measured within bound. The two clients
alternate at every step so both see the same background load. On a 2-core machine the
emulator, the client and anything else running share the cores: read the CPU columns.

Measured here, one stream alone already misses the TTFT bound for both clients: building
and sending a request and two process wake-ups cost about 1-2 ms on this VM. So a second
ceiling is printed with TTFT counted above each client's own one-stream floor: how far
concurrency can rise before load, not fixed cost, breaks the bounds.

Example::

    .venv/bin/python benchmarks/loadgen_ceiling.py --users 1,4,16,32,64 --step-s 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "locustfiles" / "locustfile.py"
P50_BOUND_MS, P99_BOUND_MS = 1.0, 5.0


@dataclass(frozen=True)
class StepResult:
    client: str
    users: int
    requests: int
    events_per_s: float
    ttft_err_p50_ms: float
    ttft_err_p99_ms: float
    itl_err_p50_ms: float
    itl_err_p99_ms: float
    client_cpu_pct: float
    emulator_cpu_pct: float
    load_avg_1m: float

    @property
    def within_bound(self) -> bool:
        return self.within(0.0, 0.0)

    def within(self, ttft_floor_p50_ms: float, ttft_floor_p99_ms: float) -> bool:
        """Errors within bounds, TTFT counted above a floor (0: the bounds as stated)."""
        return (
            self.requests > 0
            and self.ttft_err_p50_ms - ttft_floor_p50_ms <= P50_BOUND_MS
            and self.itl_err_p50_ms <= P50_BOUND_MS
            and self.ttft_err_p99_ms - ttft_floor_p99_ms <= P99_BOUND_MS
            and self.itl_err_p99_ms <= P99_BOUND_MS
        )


# -- the plain client ---------------------------------------------------------------------


async def _aiohttp_stream(session, url: str, body: dict, anchor: float) -> dict:
    """One streamed request, timed like vllm bench: TTFT to the first chunk with choices."""
    sent = time.perf_counter()
    stamps: list[float] = []
    async with session.post(url, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                break
            if json.loads(payload).get("choices"):
                stamps.append(time.perf_counter())
    return {
        "sent_at": anchor + sent,
        "first_token_at": anchor + stamps[0],
        "ttft_ms": (stamps[0] - sent) * 1000.0,
        "itl_ms": [(b - a) * 1000.0 for a, b in zip(stamps, stamps[1:], strict=False)],
    }


async def _aiohttp_client(url: str, users: int, seconds: float, body: dict, out: Path) -> None:
    import aiohttp

    anchor = time.time() - time.perf_counter()
    stop_at = time.perf_counter() + seconds
    records: list[dict] = []

    async def user(session) -> None:
        while time.perf_counter() < stop_at:
            records.append(await _aiohttp_stream(session, url, body, anchor))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(user(session) for _ in range(users)))
    out.write_text("\n".join(json.dumps(r) for r in records))


# -- measuring one step -------------------------------------------------------------------


class CpuSampler:
    """CPU seconds of a process over time, sampled from the parent (psutil)."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        try:
            times = self.process.cpu_times()
        except Exception:  # noqa: BLE001 - the process just ended
            return
        self.samples.append((time.time(), times.user + times.system))

    def percent(self, start: float, end: float) -> float:
        """CPU % of one core between two wall-clock times (interpolated)."""
        import numpy as np

        if len(self.samples) < 2 or end <= start:
            return math.nan
        wall, cpu = np.array(self.samples).T
        used = np.interp(end, wall, cpu) - np.interp(start, wall, cpu)
        return float(100.0 * used / (end - start))


def _run_sampled(argv: list[str], samplers: list[CpuSampler], timeout_s: float) -> None:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = CpuSampler(proc.pid)
    samplers.insert(0, client)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None:
            for sampler in samplers:
                sampler.sample()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not finish in {timeout_s:.0f} s")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:  # interrupted or too slow: leave nothing running
            proc.kill()
            proc.wait()
    for sampler in samplers[1:]:
        sampler.sample()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {proc.stderr.read()[-2000:]}")


def _summarise(
    client: str,
    users: int,
    records: list[dict],
    window: tuple[float, float],
    ttft_ms: float,
    itl_ms: float,
    cpu: tuple[float, float],
) -> StepResult:
    import numpy as np

    start, end = window
    chosen = [r for r in records if start <= r["sent_at"] <= end]
    events = 0
    for r in records:  # every content event received inside the window counts
        at = r["first_token_at"]
        events += start <= at <= end
        for gap in r["itl_ms"]:
            at += gap / 1000.0
            events += start <= at <= end
    ttft_err = np.abs(np.array([r["ttft_ms"] for r in chosen]) - ttft_ms)
    gaps = [g for r in chosen for g in r["itl_ms"]]
    itl_err = np.abs(np.array(gaps) - itl_ms) if gaps else np.array([math.nan])

    def pct(values, q: float) -> float:
        return float(np.percentile(values, q)) if len(values) else math.nan

    return StepResult(
        client=client,
        users=users,
        requests=len(chosen),
        events_per_s=events / (end - start),
        ttft_err_p50_ms=pct(ttft_err, 50),
        ttft_err_p99_ms=pct(ttft_err, 99),
        itl_err_p50_ms=pct(itl_err, 50),
        itl_err_p99_ms=pct(itl_err, 99),
        client_cpu_pct=cpu[0],
        emulator_cpu_pct=cpu[1],
        load_avg_1m=os.getloadavg()[0],
    )


def _window(records: list[dict], warmup_s: float, step_s: float) -> tuple[float, float]:
    first = min(r["sent_at"] for r in records)
    return first + warmup_s, first + warmup_s + step_s


def run_locust_step(args, url: str, users: int, workload: Path, work: Path, emulator_pid: int):
    """One Locust process, ``users`` streams, vprof's locustfile; its records give the times."""
    from vprof.records import read_records

    run_dir = work / f"locust-{users}"
    argv = [
        str(Path(sys.executable).with_name("locust")),
        "-f", str(LOCUSTFILE), "-H", url, "--headless",
        "-u", str(users), "-r", str(users), "-t", f"{args.warmup_s + args.step_s + 1:.0f}s",
        "--workload", str(workload), "--run-dir", str(run_dir),
        "--only-summary", "--stop-timeout", "30", "--loglevel", "WARNING",
    ]  # fmt: skip
    samplers = [CpuSampler(emulator_pid)]
    _run_sampled(argv, samplers, timeout_s=args.warmup_s + args.step_s + 120)
    frame = read_records(run_dir)
    frame = frame[frame.status == "ok"]
    records = [
        {"sent_at": r.sent_at, "first_token_at": r.first_token_at, "ttft_ms": r.ttft_ms,
         "itl_ms": list(r.itl_ms)}
        for r in frame.itertuples()
    ]  # fmt: skip
    return _finish("locust", users, records, args, samplers)


def run_aiohttp_step(args, url: str, users: int, work: Path, emulator_pid: int):
    """The plain client in its own process, same body, same emulator."""
    out = work / f"aiohttp-{users}.jsonl"
    body = {
        "model": args.model, "prompt": " ".join(["hello"] * args.prompt_tokens),
        "max_tokens": args.output_tokens, "min_tokens": args.output_tokens,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    argv = [
        sys.executable, __file__, "--plain-client", url + "/v1/completions", str(users),
        str(args.warmup_s + args.step_s + 1), json.dumps(body), str(out),
    ]  # fmt: skip
    samplers = [CpuSampler(emulator_pid)]
    _run_sampled(argv, samplers, timeout_s=args.warmup_s + args.step_s + 120)
    records = [json.loads(line) for line in out.read_text().splitlines() if line]
    return _finish("aiohttp", users, records, args, samplers)


def _finish(client: str, users: int, records: list[dict], args, samplers) -> StepResult:
    if not records:
        raise RuntimeError(f"{client} with {users} users recorded nothing")
    window = _window(records, args.warmup_s, args.step_s)
    cpu = (samplers[0].percent(*window), samplers[1].percent(*window))
    return _summarise(client, users, records, window, args.ttft_ms, args.itl_ms, cpu)


# -- the whole benchmark ------------------------------------------------------------------


def start_emulator(args) -> subprocess.Popen:
    import requests

    argv = [
        sys.executable, "-m", "vprof.cli.main", "emulate", "--port", str(args.port),
        "--model", args.model, "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
        "--max-model-len", "8192",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{args.port}/health", timeout=1).ok:
                return proc
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the emulator did not start on port {args.port}")
        time.sleep(0.1)


HEADER = (
    f"{'client':8} {'users':>5} {'reqs':>6} {'events/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
    f"{'ITL p50':>8} {'ITL p99':>8} {'client CPU':>10} {'emu CPU':>8} {'load':>5}  bound"
)


def row(r: StepResult) -> str:
    return (
        f"{r.client:8} {r.users:>5} {r.requests:>6} {r.events_per_s:>9.0f} "
        f"{r.ttft_err_p50_ms:>9.2f} {r.ttft_err_p99_ms:>9.2f} {r.itl_err_p50_ms:>8.2f} "
        f"{r.itl_err_p99_ms:>8.2f} {r.client_cpu_pct:>9.0f}% {r.emulator_cpu_pct:>7.0f}% "
        f"{r.load_avg_1m:>5.1f}  {'ok' if r.within_bound else 'BROKEN'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18310)
    parser.add_argument("--model", default="emulated")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--users", default="1,4,16,32,64,128", help="concurrency steps")
    parser.add_argument("--step-s", type=float, default=10.0, help="measured seconds per step")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--clients", default="locust,aiohttp")
    parser.add_argument(
        "--stop-early", action="store_true", help="stop a client at its first step out of bounds"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write results as JSON")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="vprof-ceiling-"))
    workload = work / "ceiling.yaml"
    workload.write_text(
        "description: fixed lengths for the load generator ceiling\n"
        f"endpoint: completions\nseed: 0\nprompt_tokens: {args.prompt_tokens}\n"
        f"output_tokens: {args.output_tokens}\nfixed_output: true\n"
    )
    url = f"http://127.0.0.1:{args.port}"
    emulator = start_emulator(args)
    results: list[StepResult] = []
    broken: set[str] = set()
    clients = [c for c in args.clients.split(",") if c]
    print(
        f"emulator: ttft {args.ttft_ms:g} ms, itl {args.itl_ms:g} ms, {args.output_tokens} "
        f"tokens per request; {os.cpu_count()} cores; window {args.step_s:g} s per step"
    )
    print(HEADER, flush=True)
    try:
        for users in (int(u) for u in args.users.split(",")):
            for client in clients:
                if client in broken and args.stop_early:
                    continue
                if client == "locust":
                    result = run_locust_step(args, url, users, workload, work, emulator.pid)
                else:
                    result = run_aiohttp_step(args, url, users, work, emulator.pid)
                results.append(result)
                print(row(result), flush=True)
                if not result.within_bound:
                    broken.add(client)
            if len(broken) == len(clients) and args.stop_early:
                break
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)

    ceilings: dict[str, float] = {}
    over_floor: dict[str, float] = {}
    for client in clients:
        steps = [r for r in results if r.client == client]
        ok = [r.events_per_s for r in steps if r.within_bound]
        ceilings[client] = max(ok) if ok else 0.0
        # The fixed cost of one stream (request building, sending, wake-ups) is a TTFT floor
        # no load removes; the second reading bounds what load adds on top of it.
        floor = steps[0]
        ok = [
            r.events_per_s
            for r in steps
            if r.within(floor.ttft_err_p50_ms, max(0.0, floor.ttft_err_p99_ms - P99_BOUND_MS))
        ]
        over_floor[client] = max(ok) if ok else 0.0
        print(
            f"ceiling {client}: {ceilings[client]:.0f} events/s within the bounds as stated; "
            f"{over_floor[client]:.0f} events/s with TTFT counted above its {floor.users}-user "
            f"floor (p50 {floor.ttft_err_p50_ms:.2f} ms)"
        )
    bounds = {
        "TTFT p50": ("ttft_err_p50_ms", P50_BOUND_MS),
        "TTFT p99": ("ttft_err_p99_ms", P99_BOUND_MS),
        "ITL p50": ("itl_err_p50_ms", P50_BOUND_MS),
        "ITL p99": ("itl_err_p99_ms", P99_BOUND_MS),
    }
    for client in clients:
        steps = [r for r in results if r.client == client]
        held = []
        for label, (key, bound) in bounds.items():
            ok = [r.events_per_s for r in steps if getattr(r, key) <= bound]
            held.append(f"{label} {max(ok) if ok else 0:.0f}")
        print(f"{client}: highest events/s each bound alone holds: " + ", ".join(held))
    if ceilings.get("aiohttp") and "locust" in ceilings:
        print(f"locust / aiohttp (as stated): {ceilings['locust'] / ceilings['aiohttp']:.2f}")
    if over_floor.get("aiohttp") and "locust" in over_floor:
        print(f"locust / aiohttp (above floor): {over_floor['locust'] / over_floor['aiohttp']:.2f}")
    if args.out:
        payload = {
            "config": {k: str(v) for k, v in vars(args).items()},
            "ceilings": ceilings,
            "steps": [asdict(r) | {"within_bound": r.within_bound} for r in results],
        }
        args.out.write_text(json.dumps(payload, indent=2))
    return 0


def _terminate_on_sigterm() -> None:
    import signal

    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    _terminate_on_sigterm()
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-client":
        _, _, url, users, seconds, body, out = sys.argv
        asyncio.run(_aiohttp_client(url, int(users), float(seconds), json.loads(body), Path(out)))
    else:
        sys.exit(main())
