"""The load generator's ceiling: how many chunk events/s a client takes, and how exactly.

Against ``vprof emulate`` (exact timing: first token 100 ms plus a per-request offset in
[0, 10) ms so streams are not phase-locked, then one token every 10 ms, 64 tokens; its own
processes, ``--workers``), step by step in closed-loop users, at every step one client after
another:

- ``vprof``: vprof's users, the shipped locustfile run headless as ``vprof bench --url`` runs
  it (``runs.loadgen.LoadSpec``), with 1 and 2 Locust processes (``--processes``);
- ``fasthttp``: a plain Locust ``FastHttpUser`` that only timestamps SSE lines
  (``ceiling_fasthttp.py``), the yardstick;
- ``aiohttp``: an asyncio client on aiohttp that only timestamps lines.

With 2 processes, each worker's longest event-loop pause in the window (its health samples'
largest late wake-up) and the time it spent shipping records to the master (every shipment
timed by ``ship_timing.py``, a Locust plugin added beside the locustfile) follow its row.

For each client and step, over a window after the warm-up: chunk events/s received; TTFT and
ITL errors, p50 and p99 of (measured − truth) per request and per gap, the truth being each
request's own TTFT (``emulator.timing.true_ttft_ms`` of its prompt length, which the emulator
also sends as ``x-vprof-ttft-ms``) and the 10 ms gap; the client's CPU in µs per chunk event
(its whole process tree); the emulator's CPU and how late its chunks left (from its
``/metrics``); and whether the step stayed within bounds (both errors ≤ 1 ms at p50 and
≤ 5 ms at p99). The machine is shared, so a second table gives each figure as a ratio to the
plain ``FastHttpUser`` measured at the same step of the same run.

    .venv/bin/python benchmarks/loadgen_ceiling.py             # 16..256 users, ~5 minutes
    .venv/bin/python benchmarks/loadgen_ceiling.py --quick     # 32 and 128 users, ~1 minute
    .venv/bin/python benchmarks/loadgen_ceiling.py --clients vprof,fasthttp --users 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from measure import Lateness, TreeCpu, running_emulator, stop_group

from vprof.analysis.clienterror import ClientError, TimedRequest, client_error, stamps_of

HERE = Path(__file__).resolve().parent
CLIENTS = ("vprof", "vprof-2p", "fasthttp", "aiohttp")
BASELINE = "fasthttp"


@dataclass(frozen=True)
class StepResult:
    client: str
    users: int
    processes: int
    requests: int
    events_per_s: float
    ttft_err_p50_ms: float
    ttft_err_p99_ms: float
    itl_err_p50_ms: float
    itl_err_p99_ms: float
    client_us_per_event: float
    client_cpu_pct: float
    emulator_us_per_event: float
    emulator_cpu_pct: float
    emulator_late_p99_ms: float  # upper bound of the histogram bucket holding the p99
    load_avg_1m: float
    pauses: list[str] = field(default_factory=list)  # per worker (--processes 2): see below

    @property
    def within_bounds(self) -> bool:
        """The errors within vprof's bounds (``analysis.clienterror``: ±1 ms p50, ±5 ms p99)."""
        error = ClientError(
            requests=self.requests,
            events=0,
            window_s=1.0,
            ttft_p50_ms=self.ttft_err_p50_ms,
            ttft_p99_ms=self.ttft_err_p99_ms,
            itl_p50_ms=self.itl_err_p50_ms,
            itl_p99_ms=self.itl_err_p99_ms,
        )
        return error.within_bounds


# -- the aiohttp client (run in a process of its own) --------------------------------------


async def _aiohttp_client(url: str, users: int, seconds: float, spec: dict, out: Path) -> None:
    import aiohttp

    anchor = time.time() - time.perf_counter()
    stop_at = time.perf_counter() + seconds
    requests: list[dict] = []

    async def user(session, rng: random.Random) -> None:
        while time.perf_counter() < stop_at:
            body = json.dumps(_body(spec, rng)).encode()
            stamps: list[float] = []
            sent = time.perf_counter()
            async with session.post(url, data=body, headers=_JSON) as resp:
                truth_ms = float(resp.headers.get("x-vprof-ttft-ms", "nan"))
                async for line in resp.content:
                    if line.startswith(b"data: {") and b'"choices":[]' not in line:
                        stamps.append(time.perf_counter())
            requests.append(
                {
                    "sent_at": anchor + sent,
                    "truth_ms": truth_ms,
                    "stamps": [anchor + s for s in stamps],
                }
            )

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(user(session, random.Random(i)) for i in range(users)))
    out.write_text("".join(json.dumps(r) + "\n" for r in requests))


_JSON = {"content-type": "application/json"}


def _body(spec: dict, rng: random.Random) -> dict:
    """The plain clients' request: a prompt of random length (so TTFT offsets vary)."""
    words = rng.randrange(spec["prompt_min"], spec["prompt_max"])
    tokens = spec["output_tokens"]
    return {
        "model": spec["model"],
        "prompt": " ".join(["hello"] * words),
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# -- running one client for one step ------------------------------------------------------


def _run_sampled(
    argv: list[str], emulator_pid: int, timeout_s: float, url: str, env: dict | None = None
) -> tuple[TreeCpu, TreeCpu, Lateness]:
    """Run a client to its end, sampling its CPU and the emulator's; no process is left."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    client, emulator, late = TreeCpu(proc.pid), TreeCpu(emulator_pid), Lateness(url)
    deadline = time.monotonic() + timeout_s
    try:
        for tick in range(sys.maxsize):
            if proc.poll() is not None:
                break
            client.sample()
            emulator.sample()
            if tick % 5 == 0:
                late.sample()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(argv[:4])} did not finish in {timeout_s:.0f} s")
            time.sleep(0.1)
        emulator.sample()
        late.sample()
    finally:
        stop_group(proc, grace_s=5)  # --processes children share the group
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({proc.returncode}): {err[-3000:]}")
    return client, emulator, late


def run_vprof(args, url: str, users: int, processes: int, work: Path, emulator_pid: int):
    """vprof's users, launched the way ``vprof bench --url`` launches them."""
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.timing import true_ttft_ms
    from vprof.records import RunDir, read_records
    from vprof.runs.loadgen import LoadSpec
    from vprof.traffic import shape_from_dict, shape_to_json

    run_dir = work / f"vprof-{users}u-{processes}p"
    run_dir.mkdir()
    shape = shape_from_dict(
        {
            "kind": "steady",
            "users": users,
            "spawn_rate": users,
            "warmup_s": args.warmup_s,
            "duration_s": args.step_s + args.tail_s,
            "description": f"{users} closed-loop users for the ceiling benchmark",
        },
        name=f"ceiling-{users}",
    )
    spec = LoadSpec(
        url=url,
        run_dir=RunDir(run_dir),
        workload=str(work.parent / "ceiling.yaml"),
        traffic=shape_to_json(shape),
        seed=0,
        salt="ceiling",
        processes=processes,
    )
    # ship_timing.py beside the locustfile times each shipment of records on each worker
    (run_dir / "ship").mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VPROF_SHIP_TIMING_DIR": str(run_dir / "ship")}
    argv = spec.argv()
    at = argv.index("-f") + 1
    argv[at] = f"{argv[at]},{HERE / 'ship_timing.py'}"
    cpu = _run_sampled(argv, emulator_pid, _run_s(args) + 120, url, env)
    config = EmulatorConfig(ttft_ms=args.ttft_ms, ttft_spread_ms=args.spread_ms, seed=args.seed)
    frame = read_records(run_dir)
    frame = frame[frame.status == "ok"]
    requests = [
        {
            "sent_at": r.sent_at,
            "truth_ms": true_ttft_ms(config, int(r.prompt_tokens)),
            "stamps": stamps_of(r.first_token_at, r.itl_ms),
        }
        for r in frame.itertuples()
    ]
    return requests, cpu


def run_fasthttp(args, url: str, users: int, work: Path, emulator_pid: int):
    out = work / f"fasthttp-{users}"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(HERE / "ceiling_fasthttp.py"),
        "--headless",
        "-H",
        url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{math.ceil(_run_s(args))}s",
        "--stop-timeout",
        "15",
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    settings = {
        "OUT": out,
        "SEED": args.seed,
        "PROMPT_MIN": args.prompt_min,
        "PROMPT_MAX": args.prompt_max,
        "OUTPUT_TOKENS": args.output_tokens,
        "MODEL": args.model,
    }
    env = {**os.environ, **{f"CEILING_{k}": str(v) for k, v in settings.items()}}
    cpu = _run_sampled(argv, emulator_pid, _run_s(args) + 120, url, env)
    requests = [
        json.loads(line)
        for path in work.glob(out.name + ".*.jsonl")
        for line in path.read_text().splitlines()
    ]
    return requests, cpu


def run_aiohttp(args, url: str, users: int, work: Path, emulator_pid: int):
    out = work / f"aiohttp-{users}.jsonl"
    argv = [
        sys.executable,
        __file__,
        "--aiohttp-client",
        url + "/v1/completions",
        str(users),
        str(_run_s(args)),
        json.dumps(_spec(args)),
        str(out),
    ]
    cpu = _run_sampled(argv, emulator_pid, _run_s(args) + 120, url)
    return [json.loads(line) for line in out.read_text().splitlines()], cpu


def _run_s(args) -> float:
    """How long a client runs: warm-up, the measured window, and a tail after it, so that
    requests sent inside the window finish before the test's own end (where a Locust test
    cuts off or sweeps up streams) and no end-of-test work falls inside it."""
    return args.warmup_s + args.step_s + args.tail_s


def _spec(args) -> dict:
    return {
        "model": args.model,
        "prompt_min": args.prompt_min,
        "prompt_max": args.prompt_max,
        "output_tokens": args.output_tokens,
    }


# -- reading a step -----------------------------------------------------------------------


def summarise(client, users, processes, requests, args, sampled) -> StepResult:
    if not requests:
        raise RuntimeError(f"{client} with {users} users recorded nothing")
    start = min(r["sent_at"] for r in requests) + args.warmup_s
    end = start + args.step_s
    timed = [TimedRequest(r["sent_at"], r["stamps"], r["truth_ms"]) for r in requests]
    error = client_error(timed, start, end, nominal_gap_ms=args.itl_ms)
    events = error.events
    client_cpu, emulator_cpu, late = sampled
    client_s = client_cpu.seconds(start, end)
    emulator_s = emulator_cpu.seconds(start, end)
    return StepResult(
        client=client,
        users=users,
        processes=processes,
        requests=error.requests,
        events_per_s=error.events_per_s,
        ttft_err_p50_ms=error.ttft_p50_ms,
        ttft_err_p99_ms=error.ttft_p99_ms,
        itl_err_p50_ms=error.itl_p50_ms,
        itl_err_p99_ms=error.itl_p99_ms,
        client_us_per_event=1e6 * client_s / events if events else math.nan,
        client_cpu_pct=100 * client_s / args.step_s,
        emulator_us_per_event=1e6 * emulator_s / events if events else math.nan,
        emulator_cpu_pct=100 * emulator_s / args.step_s,
        emulator_late_p99_ms=late.p99_ms(start, end),
        load_avg_1m=os.getloadavg()[0],
    )


def worker_pauses(run_dir: Path, start: float, end: float) -> list[str]:
    """Per Locust worker over [start, end]: its longest event-loop pause (the health samples'
    largest late wake-up) and the time spent shipping records to the master (ship_timing.py:
    in all, the longest shipment, and their count)."""
    health: dict[int, list[dict]] = {}
    path = run_dir / "loadgen.jsonl"
    for line in path.read_text().splitlines() if path.exists() else ():
        sample = json.loads(line)
        name = str(sample.get("worker", ""))
        if "worker" in name and start <= sample["t"] <= end + 2.0:  # a sample covers 2 s
            health.setdefault(int(name.split(":")[1]), []).append(sample)
    lines = []
    for pid in sorted(health):
        pause = max(float(s.get("loop_lag_max_ms") or 0.0) for s in health[pid])
        shipped = run_dir / "ship" / f"{pid}.jsonl"
        ships = (
            [json.loads(x) for x in shipped.read_text().splitlines()] if shipped.exists() else []
        )
        ships = [s for s in ships if start <= s["t"] <= end]
        spent = sum(s["ms"] for s in ships)
        longest = max((s["ms"] for s in ships), default=0.0)
        cpu = sum(s.get("cpu_ms", math.nan) for s in ships)
        cpu_longest = max((s.get("cpu_ms", math.nan) for s in ships), default=0.0)
        lines.append(
            f"    worker {pid}: longest loop pause {pause:6.2f} ms; shipping records "
            f"{spent:7.1f} ms in all ({100 * spent / 1000 / (end - start):.2f} % of the window), "
            f"{cpu:6.1f} ms of CPU; longest shipment {longest:5.2f} ms ({cpu_longest:4.2f} ms "
            f"of CPU), {len(ships)} shipments of {sum(s['records'] for s in ships)} records"
        )
        lines += _blockers(run_dir / "ship" / f"{pid}.blocked.jsonl", start, end)
    return lines


def _blockers(path: Path, start: float, end: float, top: int = 4) -> list[str]:
    """What blocked a worker's loop (VPROF_BLOCKED_MS): the innermost frames, most time first."""
    if not path.exists():
        return []
    by_where: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if start <= event["t"] <= end and event["where"]:
            frame = event["where"][-1].replace(str(HERE.parent), "")[:110]
            by_where.setdefault(frame, []).append(event["ms"])
    ranked = sorted(by_where.items(), key=lambda kv: -sum(kv[1]))[:top]
    return [f"      blocked {len(ms)}x, up to {max(ms):.1f} ms: {where}" for where, ms in ranked]


def run_step(args, client: str, users: int, url: str, work: Path, emulator_pid: int, repeat: int):
    processes = 2 if client == "vprof-2p" else 1
    work = work / f"r{repeat}"
    work.mkdir(exist_ok=True)
    if client.startswith("vprof"):
        requests, sampled = run_vprof(args, url, users, processes, work, emulator_pid)
    elif client == "fasthttp":
        requests, sampled = run_fasthttp(args, url, users, work, emulator_pid)
    else:
        requests, sampled = run_aiohttp(args, url, users, work, emulator_pid)
    result = summarise(client, users, processes, requests, args, sampled)
    if processes > 1:
        start = min(r["sent_at"] for r in requests) + args.warmup_s
        lines = worker_pauses(work / f"vprof-{users}u-{processes}p", start, start + args.step_s)
        result.pauses.extend(lines)
    return result


def medians(results: list[StepResult], clients: list[str], steps: list[int]) -> list[StepResult]:
    """Per client and step, the median of each figure over the repeats."""
    merged = []
    for users in steps:
        for client in clients:
            runs = [r for r in results if r.client == client and r.users == users]
            names = [k for k in asdict(runs[0]) if k not in ("client", "users", "processes")]
            fields = {k: float(np.median([getattr(r, k) for r in runs])) for k in names}
            fields["requests"] = int(fields["requests"])
            merged.append(
                StepResult(client=client, users=users, processes=runs[0].processes, **fields)  # type: ignore[arg-type]
            )
    return merged


# -- the tables ---------------------------------------------------------------------------


HEADER = (
    f"{'client':9} {'users':>5} {'reqs':>5} {'events/s':>8} {'TTFT err p50/p99':>16} "
    f"{'ITL err p50/p99':>15} {'client µs/ev':>12} {'CPU':>5} {'emu µs/ev':>9} {'emu CPU':>7} "
    f"{'emu late p99':>12} {'load':>4}  bounds"
)


def row(r: StepResult) -> str:
    return (
        f"{r.client:9} {r.users:>5} {r.requests:>5} {r.events_per_s:>8.0f} "
        f"{r.ttft_err_p50_ms:>+7.2f}/{r.ttft_err_p99_ms:>+8.2f} "
        f"{r.itl_err_p50_ms:>+6.2f}/{r.itl_err_p99_ms:>+8.2f} {r.client_us_per_event:>12.1f} "
        f"{r.client_cpu_pct:>4.0f}% {r.emulator_us_per_event:>9.1f} {r.emulator_cpu_pct:>6.0f}% "
        f"{f'≤ {r.emulator_late_p99_ms:g} ms':>12} {r.load_avg_1m:>4.1f}  "
        f"{'ok' if r.within_bounds else 'OUT'}"
    )


def ratio_table(results: list[StepResult]) -> list[str]:
    """Each client's figures over the plain FastHttpUser's at the same step."""
    lines = [
        f"Ratios to the plain FastHttpUser at the same step (>1: more events, more CPU, "
        f"larger error):\n{'client':9} {'users':>5} {'events/s':>8} {'µs/event':>8} "
        f"{'TTFT p50':>8} {'TTFT p99':>8} {'ITL p99':>8}"
    ]
    base = {r.users: r for r in results if r.client == BASELINE}

    def div(a: float, b: float) -> str:
        # errors near zero make wild ratios: floor the yardstick at 0.1 ms
        return f"{a / b:>8.2f}" if b and not math.isnan(a) and not math.isnan(b) else f"{'-':>8}"

    for r in results:
        b = base.get(r.users)
        if b is None or r.client == BASELINE:
            continue
        lines.append(
            f"{r.client:9} {r.users:>5} {div(r.events_per_s, b.events_per_s)} "
            f"{div(r.client_us_per_event, b.client_us_per_event)} "
            f"{div(max(r.ttft_err_p50_ms, 0.1), max(b.ttft_err_p50_ms, 0.1))} "
            f"{div(max(r.ttft_err_p99_ms, 0.1), max(b.ttft_err_p99_ms, 0.1))} "
            f"{div(max(r.itl_err_p99_ms, 0.1), max(b.itl_err_p99_ms, 0.1))}"
        )
    return lines


def summary_lines(results: list[StepResult], clients: list[str]) -> list[str]:
    lines = []
    for client in clients:
        steps = [r for r in results if r.client == client]
        ok = [r for r in steps if r.within_bounds]
        best = max(ok, key=lambda r: r.events_per_s) if ok else None
        lines.append(
            f"ceiling {client}: "
            + (
                f"{best.events_per_s:,.0f} events/s within bounds ({best.users} users)"
                if best
                else "no step within bounds"
            )
        )
    return lines


# -- the whole benchmark ------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18310)
    parser.add_argument("--model", default="emulated")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--spread-ms", type=float, default=10.0, help="TTFT offset range")
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--prompt-min", type=int, default=32, help="prompt length range")
    parser.add_argument("--prompt-max", type=int, default=288)
    parser.add_argument("--users", default="16,32,64,128,256", help="closed-loop user steps")
    parser.add_argument("--step-s", type=float, default=5.0, help="measured seconds per step")
    parser.add_argument("--warmup-s", type=float, default=3.0, help="left out of each step")
    parser.add_argument("--tail-s", type=float, default=2.0, help="run on after the window")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=", ".join(CLIENTS))
    parser.add_argument("--emulator-workers", type=int, default=2)
    parser.add_argument(
        "--emulator-nice", type=int, default=-10, help="its priority (negative: root only)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="run every step this often")
    parser.add_argument("--quick", action="store_true", help="32 and 128 users, 3 s each")
    parser.add_argument("--out", type=Path, default=None, help="also write results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.users, args.step_s, args.warmup_s, args.tail_s = "32,128", 3.0, 2.0, 1.5
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    steps = [int(u) for u in args.users.split(",")]
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not steps or min(steps) < 1 or args.step_s <= 0 or min(args.warmup_s, args.tail_s) < 0:
        parser.error("users must be positive, --step-s > 0, --warmup-s and --tail-s >= 0")

    work = Path(tempfile.mkdtemp(prefix="vprof-ceiling-"))
    (work / "ceiling.yaml").write_text(  # read by every repeat's vprof runs
        "description: the ceiling benchmark's requests\nendpoint: completions\nseed: 0\n"
        f"prompt_tokens: {{kind: uniform, min: {args.prompt_min}, max: {args.prompt_max}}}\n"
        f"output_tokens: {args.output_tokens}\nfixed_output: true\n"
    )
    url = f"http://127.0.0.1:{args.port}"
    options = [
        "--model",
        args.model,
        "--ttft-ms",
        str(args.ttft_ms),
        "--ttft-spread-ms",
        str(args.spread_ms),
        "--itl-ms",
        str(args.itl_ms),
        "--seed",
        str(args.seed),
        "--max-model-len",
        "8192",
        "--workers",
        str(args.emulator_workers),
    ]
    results: list[StepResult] = []
    started = time.monotonic()
    with running_emulator(args.port, options, nice=args.emulator_nice) as emulator:
        import psutil

        print(
            f"emulator: ttft {args.ttft_ms:g} ms + [0, {args.spread_ms:g}) ms per prompt "
            f"length, itl {args.itl_ms:g} ms, {args.output_tokens} tokens, "
            f"{args.emulator_workers} workers at nice {psutil.Process(emulator.pid).nice()}; "
            f"{os.cpu_count()} cores; {args.warmup_s:g} s warm-up + {args.step_s:g} s measured "
            "per step; errors are measured − truth (ms)"
        )
        print(HEADER, flush=True)
        for repeat in range(args.repeat):
            for users in steps:
                # every other repeat reverses the order, so drifting load favours no client
                for client in clients if repeat % 2 == 0 else clients[::-1]:
                    result = run_step(args, client, users, url, work, emulator.pid, repeat)
                    results.append(result)
                    print(row(result), flush=True)
                    for line in result.pauses:
                        print(line, flush=True)
    if args.repeat > 1:
        results = medians(results, clients, steps)
        print(f"\nMedians over {args.repeat} repeats:\n{HEADER}")
        for r in results:
            print(row(r))
    print()
    for line in ratio_table(results) + [""] + summary_lines(results, clients):
        print(line)
    print(f"({time.monotonic() - started:.0f} s)")
    if args.out:
        payload = {
            "config": {k: str(v) for k, v in vars(args).items()},
            "steps": [asdict(r) | {"within_bounds": r.within_bounds} for r in results],
        }
        args.out.write_text(json.dumps(payload, indent=2))
    return 0


def _interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the emulator and clients are stopped, not orphaned."""
    import signal

    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


if __name__ == "__main__":
    _interrupt_on_sigterm()
    if len(sys.argv) > 1 and sys.argv[1] == "--aiohttp-client":
        _, _, url, users, seconds, spec, out = sys.argv
        asyncio.run(_aiohttp_client(url, int(users), float(seconds), json.loads(spec), Path(out)))
    else:
        sys.exit(main())
