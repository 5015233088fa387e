"""Closed loop on real vLLM: do N users keep N requests in flight, as a plain Locust user does?

Starts one vLLM server (the ``chunked-256`` profile, adapted to this host: the CPU build and
vprof's tiny model) or uses ``--url``, and runs on that server, one after the other with the
order alternating between repeats, or with ``--together`` both at once (N users each, so each
client's share of the server is its share of requests in flight, and what else runs on the
machine slows both alike — the steadier ratio on a shared machine):

- ``vprof``: vprof's users as ``vprof bench --url`` runs them (``runs.loadgen.LoadSpec``), a
  steady shape of N closed-loop users, 256-token prompts, exactly 64 output tokens;
- ``fasthttp``: a plain Locust ``FastHttpUser`` (``ceiling_fasthttp.py``) with N users sending
  the same kind of prompts — text of the same exact token count, built by vprof's synthesizer
  with the tiny model's tokenizer (``--tokenizer`` for another model), a salt of its own per
  run so no prompt repeats a cached one — which reads each stream to its end and does nothing
  else.

For each run, over a window after the warm-up: requests/s finished, TTFT p50/p99, the mean
number of requests in flight (from each request's send and finish) and the share of the window
with fewer than N in flight; then vprof's throughput over the plain client's, per repeat
and as the median (target: within 5 %).

    flock /tmp/vprof-heavy.lock .venv/bin/python benchmarks/closed_loop.py            # ~6 min
    flock /tmp/vprof-heavy.lock .venv/bin/python benchmarks/closed_loop.py --together --repeat 5
    .venv/bin/python benchmarks/closed_loop.py --url http://127.0.0.1:8000 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from measure import TreeCpu, percentile, stop_group

HERE = Path(__file__).resolve().parent
CLIENTS = ("vprof", "fasthttp")


@dataclass(frozen=True)
class RunResult:
    client: str
    repeat: int
    requests: int
    request_rate: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    mean_in_flight: float
    short_share: float  # of the window with fewer than N requests in flight
    mean_idle_ms: float  # from a user's previous answer to its next send, sends in the window
    client_cpu_pct: float


def window_figures(requests: list[dict], start: float, end: float, users: int) -> dict:
    """Throughput, TTFT, requests in flight and idle time before a send over [start, end],
    from per-request times."""
    sent = np.array([r["sent_at"] for r in requests])
    done = np.array([r["finished_at"] for r in requests])
    first = np.array([r["first_at"] for r in requests])
    finished = (done >= start) & (done <= end)
    chosen = (sent >= start) & (sent <= end)
    overlap = np.clip(np.minimum(done, end) - np.maximum(sent, start), 0, None)
    # time with fewer than N in flight: sweep the sends and finishes inside the window
    events = sorted([(s, 1) for s in sent] + [(d, -1) for d in done])
    level, last, short = 0, start, 0.0
    for t, step in events:
        if t > start:
            span = min(t, end) - max(last, start)
            if span > 0 and level < users:
                short += span
            last = t
        level += step
        if t >= end:
            break
    if last < end and level < users:
        short += end - max(last, start)
    ttft = (first[chosen] - sent[chosen]) * 1e3
    idle = np.array([r["idle_ms"] for r in requests], dtype=float)[chosen]
    idle = idle[np.isfinite(idle)]  # a user's first request has no idle time before it
    return {
        "requests": int(finished.sum()),
        "request_rate": float(finished.sum()) / (end - start),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "mean_in_flight": float(overlap.sum()) / (end - start),
        "short_share": short / (end - start),
        "mean_idle_ms": float(idle.mean()) if idle.size else math.nan,
    }


def _run(argv: list[str], env: dict, timeout_s: float) -> TreeCpu:
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    cpu = TreeCpu(proc.pid)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None:
            cpu.sample()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(argv[:4])} did not finish in {timeout_s:.0f} s")
            time.sleep(0.2)
    finally:
        stop_group(proc, grace_s=5)
    if proc.returncode != 0:
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({proc.returncode}): {err[-3000:]}")
    return cpu


def run_vprof(args, url: str, work: Path, repeat: int) -> tuple[list[dict], TreeCpu]:
    from vprof.records import RunDir, read_records
    from vprof.runs.loadgen import LoadSpec
    from vprof.traffic import shape_from_dict, shape_to_json

    run_dir = work / f"vprof-{repeat}"
    run_dir.mkdir()
    shape = shape_from_dict(
        {
            "kind": "steady",
            "users": args.users,
            "spawn_rate": args.users,
            "warmup_s": args.warmup_s,
            "duration_s": _run_s(args),
            "description": "closed-loop users beside a plain FastHttpUser",
        },
        name=f"closed-loop-{args.users}",
    )
    spec = LoadSpec(
        url=url,
        run_dir=RunDir(run_dir),
        workload=str(work / "workload.yaml"),
        traffic=shape_to_json(shape),
        seed=repeat,
        salt=f"closed-loop-{repeat}",
        model=args.model,
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cpu = _run(spec.argv(), env, _run_s(args) + 180)
    frame = read_records(run_dir)
    frame = frame[frame.status == "ok"]
    requests = [
        {
            "sent_at": r.sent_at,
            "finished_at": r.finished_at,
            "first_at": r.first_token_at,
            "idle_ms": r.idle_before_ms,
        }
        for r in frame.itertuples()
    ]
    return requests, cpu


def write_prompts(args, path: Path, salt: str, n: int) -> None:
    """N prompts of the benchmark's workload as vprof builds them, as JSON lines."""
    from vprof.workloads.loading import get_workload
    from vprof.workloads.synthesis import RequestSynthesizer, load_tokenizer

    tokenizer_path = args.tokenizer
    if not tokenizer_path:
        from vprof.tinymodel.build import ensure_tiny_model

        tokenizer_path = str(ensure_tiny_model())
    workload = get_workload(str(path.parent / "workload.yaml"))
    synth = RequestSynthesizer(workload, load_tokenizer(tokenizer_path), salt=salt)
    with path.open("w") as f:
        f.writelines(json.dumps({"prompt": synth.plan(i).prompt}) + "\n" for i in range(n))


def run_fasthttp(args, url: str, work: Path, repeat: int) -> tuple[list[dict], TreeCpu]:
    out = work / f"fasthttp-{repeat}"
    prompts = work / f"prompts-{repeat}.jsonl"  # written by measure() before either starts
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
        str(args.users),
        "-r",
        str(args.users),
        "-t",
        f"{math.ceil(_run_s(args))}s",
        "--stop-timeout",
        "30",
        "--only-summary",
        "--loglevel",
        "WARNING",
    ]
    settings = {
        "OUT": out,
        "SEED": repeat,
        "PROMPTS": prompts,
        "OUTPUT_TOKENS": args.output_tokens,
        "MODEL": args.model,
    }
    env = {**os.environ, **{f"CEILING_{k}": str(v) for k, v in settings.items()}}
    cpu = _run(argv, env, _run_s(args) + 180)
    requests = [
        json.loads(line)
        for path in work.glob(out.name + ".*.jsonl")
        for line in path.read_text().splitlines()
    ]
    for r in requests:
        r["first_at"] = r["stamps"][0]
        r["idle_ms"] = math.nan if r["idle_ms"] is None else r["idle_ms"]  # a user's first
    return requests, cpu


# Run together, the two clients start a few seconds apart (Locust's and vprof's start-up):
# each runs this much longer, so the common window lies inside both.
START_SLACK_S = 15.0


def _run_s(args) -> float:
    return args.warmup_s + args.seconds + args.tail_s + (START_SLACK_S if args.together else 0)


def measure(args, clients: tuple[str, ...], url: str, work: Path, repeat: int) -> list[RunResult]:
    """Run ``clients`` at the same time (one: alone) and measure each over one common window:
    the warm-up after the last of them sent its first request, then ``--seconds``."""
    from concurrent.futures import ThreadPoolExecutor

    runners = {"vprof": run_vprof, "fasthttp": run_fasthttp}
    if "fasthttp" in clients:
        # more than the run can send: at most about 100 req/s on this machine's tiny model
        salt = f"closed-loop-fasthttp-{repeat}"
        write_prompts(args, work / f"prompts-{repeat}.jsonl", salt, int(100 * _run_s(args)))
    with ThreadPoolExecutor(len(clients)) as pool:
        futures = [pool.submit(runners[c], args, url, work, repeat) for c in clients]
        ran = [f.result() for f in futures]
    for client, (requests, _) in zip(clients, ran, strict=True):
        if not requests:
            raise RuntimeError(f"{client} recorded no request")
    start = max(min(r["sent_at"] for r in requests) for requests, _ in ran) + args.warmup_s
    end = start + args.seconds
    results = []
    for client, (requests, cpu) in zip(clients, ran, strict=True):
        if max(r["finished_at"] for r in requests) < end:
            raise RuntimeError(f"{client} stopped before the window's end: raise --tail-s")
        figures = window_figures(requests, start, end, args.users)
        cpu_pct = 100 * cpu.seconds(start, end) / args.seconds
        results.append(RunResult(client=client, repeat=repeat, **figures, client_cpu_pct=cpu_pct))
    return results


def served_model(url: str) -> str:
    """The first model the server lists at ``/v1/models`` (what both clients ask for)."""
    import urllib.request

    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return str(json.load(response)["data"][0]["id"])


def _vllm(args, log: Path):
    """The chunked-256 profile on this host (vLLM's CPU build runs vprof's tiny model)."""
    from vprof.registry import resolve_profile
    from vprof.server import plan_server, start_server
    from vprof.server.process import free_port

    profile = resolve_profile(args.profile, port=free_port())
    plan = plan_server(profile, model_overridden=False)
    return start_server(plan, log_path=log, timeout_s=900, say=print)


HEADER = (
    f"{'client':9} {'rep':>3} {'reqs':>5} {'req/s':>6} {'TTFT p50/p99 ms':>16} "
    f"{'in flight':>9} {'<N share':>8} {'idle ms':>7} {'CPU':>5}"
)


def row(r: RunResult) -> str:
    return (
        f"{r.client:9} {r.repeat:>3} {r.requests:>5} {r.request_rate:>6.2f} "
        f"{r.ttft_p50_ms:>7.1f}/{r.ttft_p99_ms:>8.1f} {r.mean_in_flight:>9.3f} "
        f"{100 * r.short_share:>7.1f}% {r.mean_idle_ms:>7.2f} {r.client_cpu_pct:>4.0f}%"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="", help="a running tiny-model server (default: start)")
    parser.add_argument("--profile", default="chunked-256")
    parser.add_argument("--model", default="", help="the served model (default: ask the server)")
    parser.add_argument("--tokenizer", default="", help="its tokenizer (default: the tiny model)")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=40.0, help="measured per run")
    parser.add_argument("--tail-s", type=float, default=3.0, help="run on after the window")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--together",
        action="store_true",
        help="run both clients at once, N users each, on the one server: each one's share of "
        "the server is its share of requests in flight, and the machine's noise hits both alike",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write results as JSON")
    args = parser.parse_args(argv)
    if args.users < 1 or args.repeat < 1 or args.seconds <= 0 or args.warmup_s < 0:
        parser.error("--users and --repeat at least 1, --seconds > 0, --warmup-s >= 0")

    work = Path(tempfile.mkdtemp(prefix="vprof-closed-loop-"))
    (work / "workload.yaml").write_text(
        "description: the closed-loop benchmark's requests\nendpoint: completions\nseed: 0\n"
        f"prompt_tokens: {args.prompt_tokens}\noutput_tokens: {args.output_tokens}\n"
        "fixed_output: true\n"
    )
    server = None
    url = args.url.rstrip("/")
    started = time.monotonic()
    results: list[RunResult] = []
    try:
        if not url:
            server = _vllm(args, work / "vllm.log")
            url = server.url
        args.model = args.model or served_model(url)
        print(
            f"server {url}; {args.users} closed-loop users, {args.prompt_tokens}-token "
            f"prompts, {args.output_tokens} output tokens; {args.warmup_s:g} s warm-up, "
            f"{args.seconds:g} s measured per run; {os.cpu_count()} cores"
        )
        print(HEADER, flush=True)
        for repeat in range(args.repeat):
            if args.together:
                results.extend(measure(args, CLIENTS, url, work, repeat))
                print("\n".join(row(r) for r in results[-2:]), flush=True)
                continue
            for client in CLIENTS if repeat % 2 == 0 else CLIENTS[::-1]:
                results.extend(measure(args, (client,), url, work, repeat))
                print(row(results[-1]), flush=True)
    finally:
        if server is not None:
            server.process.stop()
    ratios = []
    for repeat in range(args.repeat):
        mine, base = (
            next(r for r in results if r.client == c and r.repeat == repeat) for c in CLIENTS
        )
        ratios.append(mine.request_rate / base.request_rate)
    print(
        "\nvprof's req/s over the plain FastHttpUser's, per repeat: "
        + ", ".join(f"{x:.3f}" for x in ratios)
        + f"; median {statistics.median(ratios):.3f} (target ≥ 0.95)"
    )
    for client in CLIENTS:
        mine = [r for r in results if r.client == client]
        print(
            f"{client}: mean in flight {statistics.median(r.mean_in_flight for r in mine):.3f} "
            f"of {args.users} (median over repeats)"
        )
    print(f"({time.monotonic() - started:.0f} s)")
    if args.out:
        payload = {
            "config": {k: str(v) for k, v in vars(args).items()},
            "runs": [asdict(r) for r in results],
            "ratios": ratios,
        }
        args.out.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    import signal

    def _stop(signum, frame):  # noqa: ARG001 - SIGTERM unwinds like Ctrl-C: nothing orphaned
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    sys.exit(main())
