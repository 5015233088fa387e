"""How much wall time does each level of `vprof sweep load` take beyond its warm-up and
measured time? (target: at most 2 s more)

Starts ``vprof emulate`` with long answers (``--itl-ms 50``, 256 output tokens: about 13 s a
request) and runs ``vprof sweep load`` against it (``--url``) over a few open-loop rates of a
short shape (``--warmup-s`` + ``--measure-s``). Each level's wall time is taken from its run
folder: from the moment the run folder was made (``run.json``'s ``created_at``) to the moment
the next one was (the last: to the command's end), so it holds the load generator's start,
the shape, the end of the test, the summary and the wait before the next level. Prints each
level's wall time, its excess over warm-up + measured time, and the requests counted
``cancelled`` (cut off at the level's end).

    .venv/bin/python benchmarks/level_walltime.py
    .venv/bin/python benchmarks/level_walltime.py --levels 2,4 --measure-s 10
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import running_emulator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="2,4,6", help="request rates, req/s")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--measure-s", type=float, default=30.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vprof-levels-"))
    workload = work / "long-answers.yaml"
    workload.write_text(
        "description: short prompts, long answers\nendpoint: completions\nseed: 0\n"
        f"prompt_tokens: 64\noutput_tokens: {args.tokens}\nfixed_output: true\n"
    )
    traffic = work / "short-levels.yaml"
    traffic.write_text(
        "description: short open-loop levels\nkind: open-loop\nprocess: poisson\n"
        f"rate_rps: 2\nmax_in_flight: 512\nduration_s: {args.measure_s:g}\n"
        f"warmup_s: {args.warmup_s:g}\n"
    )
    port = free_port()
    emulate = ["--itl-ms", str(args.itl_ms), "--ttft-ms", "50", "--max-model-len", "4096"]
    out = work / "runs"
    with running_emulator(port, emulate):
        command = [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "sweep",
            "load",
            "emulated",
            "--url",
            f"http://127.0.0.1:{port}",
            "--traffic",
            str(traffic),
            "--workload",
            str(workload),
            "--levels",
            args.levels,
            "--out",
            str(out),
        ]
        started = time.time()
        done = subprocess.run(command, capture_output=True, text=True)
        ended = time.time()
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:])
        raise SystemExit(f"vprof sweep load exited with {done.returncode}")
    folders = [p.parent for p in out.rglob("run.json")]
    runs = sorted((json.loads((p / "run.json").read_text())["created_at"], p) for p in folders)
    budget = args.warmup_s + args.measure_s
    print(
        f"vprof sweep load, levels {args.levels} req/s, {args.tokens} tokens at {args.itl_ms:g} ms"
        f" (~{args.tokens * args.itl_ms / 1000:.0f} s an answer); warm-up + measured = "
        f"{budget:g} s a level; command {ended - started:.1f} s in all"
    )
    for i, (created, path) in enumerate(runs):
        until = runs[i + 1][0] if i + 1 < len(runs) else ended
        summary = json.loads((path / "summary.json").read_text())
        print(
            f"  {path.name[:60]:60} {until - created:5.1f} s wall, "
            f"{until - created - budget:+5.1f} s beyond warm-up + measured; "
            f"completed {summary.get('completed')}, cancelled {summary.get('cancelled')}"
        )
    print(f"  (first level started {runs[0][0] - started:.1f} s after the command)")


if __name__ == "__main__":
    main()
