"""Where vprof's client spends its CPU per chunk event: a py-spy profile of one Locust process.

Starts ``vprof emulate`` (the ceiling benchmark's timing), runs vprof's users as
``vprof bench --url`` does (one Locust process, closed loop), and after the warm-up samples
that process with py-spy for a while. Each CPU sample is put in the bucket of the innermost
frame that names a part of the stack (JSON decoding, vprof's SSE reader, the HTTP stack,
gevent's sockets and hub, vprof's records, Locust), and the table gives each part's share of
the CPU and its cost in µs per chunk event; then the functions that burn the most themselves.

    .venv/bin/python benchmarks/profile_client.py --users 128 --seconds 10

Needs py-spy (a dev dependency) and permission to trace the process (root, or
ptrace_scope 0).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from measure import TreeCpu, running_emulator, stop_group

# innermost matching frame wins; (bucket, substrings of "function (file:line)")
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("json.loads of each chunk", ("json/decoder.py", "json/__init__.py")),
    ("vprof SSE reader (stream.py)", ("locustfiles/stream.py",)),
    ("gevent socket recv/send", ("gevent/_socket", "gevent/_socketcommon")),
    ("requests/urllib3/http.client", ("urllib3/", "requests/", "http/client.py")),
    ("vprof record, stats, emit", ("locustfiles/", "records/", "common/clock")),
    ("Locust runner and stats", ("locust/",)),
    ("gevent hub and greenlets", ("gevent/",)),
)


def phase_of(stack: list[str]) -> str:
    """Which part of a request's life a sample belongs to."""
    text = ";".join(stack)
    if "iter_lines" in text or "read_sse" in text:
        return "per chunk: reading the stream"
    if "LLMUser.send" in text or "LLMUser.llm_request" in text:
        return "per request: plan, send, record"
    if "Hub.run" in text and len(stack) <= 2:
        return "gevent's loop (wakeups, switches)"
    return "elsewhere (Locust, vprof's flushers)"


def bucket_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, needles in BUCKETS:
            if any(n in frame for n in needles):
                return name
    return "other (interpreter, selectors, ...)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=18312)
    parser.add_argument("--users", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0, help="profiled seconds")
    parser.add_argument("--warmup-s", type=float, default=4.0)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--emulator-workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the folded stacks")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy (it is in the dev extras)")

    from vprof.records import RunDir, read_records
    from vprof.runs.loadgen import LoadSpec
    from vprof.traffic import shape_from_dict, shape_to_json

    work = Path(tempfile.mkdtemp(prefix="vprof-profile-"))
    (work / "w.yaml").write_text(
        "description: profiled requests\nendpoint: completions\nseed: 0\n"
        "prompt_tokens: {kind: uniform, min: 32, max: 288}\noutput_tokens: 64\n"
        "fixed_output: true\n"
    )
    total_s = args.warmup_s + args.seconds + 3
    shape = shape_from_dict(
        {"kind": "steady", "users": args.users, "spawn_rate": args.users, "duration_s": total_s},
        name="profiled",
    )
    run_dir = work / "run"
    run_dir.mkdir()
    url = f"http://127.0.0.1:{args.port}"
    options = [
        "--ttft-ms",
        "100",
        "--ttft-spread-ms",
        "10",
        "--itl-ms",
        "10",
        "--max-model-len",
        "8192",
        "--workers",
        str(args.emulator_workers),
    ]
    spec = LoadSpec(
        url=url,
        run_dir=RunDir(run_dir),
        workload=str(work / "w.yaml"),
        traffic=shape_to_json(shape),
        seed=0,
        salt="profile",
    )
    folded = work / "profile.txt"
    with running_emulator(args.port, options, nice=-10):
        locust = subprocess.Popen(
            spec.argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            cpu = TreeCpu(locust.pid)
            time.sleep(args.warmup_s)
            cpu.sample()
            start = time.time()
            spy = subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(locust.pid),
                    "--rate",
                    str(args.rate),
                    "--duration",
                    f"{args.seconds:g}",
                    "--format",
                    "raw",
                    "--output",
                    str(folded),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            while spy.poll() is None:
                cpu.sample()
                time.sleep(0.1)
            end = time.time()
            cpu.sample()
            if spy.returncode != 0:
                sys.exit(f"py-spy failed: {spy.stderr.read() if spy.stderr else ''}")
            locust.wait(timeout=total_s + 60)
        finally:
            stop_group(locust)

    frame = read_records(run_dir)
    events = 0
    for r in frame[frame.status == "ok"].itertuples():
        stamps = r.first_token_at + np.concatenate([[0.0], np.cumsum(r.itl_ms)]) / 1e3
        events += int(((stamps >= start) & (stamps <= end)).sum())
    cpu_s = cpu.seconds(start, end)
    us_per_event = 1e6 * cpu_s / events
    buckets: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in folded.read_text().splitlines():
        stack_text, _, count = line.rpartition(" ")
        stack = stack_text.split(";")  # root first, the sampled frame last
        buckets[bucket_of(stack)] += int(count)
        phases[phase_of(stack)] += int(count)
        leaves[stack[-1] if stack else "?"] += int(count)
    samples = sum(buckets.values())
    print(
        f"{args.users} users, {events / (end - start):,.0f} chunk events/s, Locust process at "
        f"{100 * cpu_s / (end - start):.0f}% CPU = {us_per_event:.1f} µs per chunk event "
        f"({samples} samples)"
    )
    print(f"{'part of the stack':36} {'share':>6} {'µs/event':>8}")
    for name, n in buckets.most_common():
        print(f"{name:36} {100 * n / samples:>5.1f}% {us_per_event * n / samples:>8.1f}")
    print(f"\n{'when':36} {'share':>6} {'µs/event':>8}")
    for name, n in phases.most_common():
        print(f"{name:36} {100 * n / samples:>5.1f}% {us_per_event * n / samples:>8.1f}")
    print("\nfunctions by their own samples:")
    for leaf, n in leaves.most_common(20):
        print(f"{100 * n / samples:>5.1f}%  {leaf}")
    if args.keep:
        print(f"\nthe folded stacks: {folded}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
