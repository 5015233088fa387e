"""Does sampling /metrics disturb what is measured? The same bench, with and without it.

Starts one real vLLM server (the CPU build with vprof's tiny model, `vprof launch --detach`),
then runs `vprof bench --url` against it, alternating the default sampling and `--no-metrics`
(and, for reference, a 2 s interval: the old default) for ``--repeat`` rounds, each mode first
in turn, and prints each
run's TTFT p50/p99, request throughput and the slowest scrape, then the ratio of the median
TTFT p99 with sampling to the one without (target: within 10 %).

    python benchmarks/metrics_disturbance.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VPROF = [sys.executable, "-m", "vprof.cli.main"]
MODES = {"default": [], "no-metrics": ["--no-metrics"], "every 2 s": ["--metrics-interval", "2"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--port", type=int, default=18950)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vprof-metrics-"))
    (work / "w.yaml").write_text("endpoint: completions\nprompt_tokens: 256\noutput_tokens: 64\n")
    (work / "s.yaml").write_text(
        f"kind: steady\nusers: {args.users}\nwarmup_s: 5\nduration_s: {args.seconds}\n"
    )
    launch = subprocess.run(
        [
            *VPROF,
            "launch",
            "chunked-256",
            "--detach",
            "--port",
            str(args.port),
            "--log",
            str(work / "server.log"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if launch.returncode != 0:
        sys.exit(launch.stdout + launch.stderr)
    pgid = int(launch.stdout.split("kill -TERM -")[1].split()[0])
    url = f"http://127.0.0.1:{args.port}"
    print(f"server up at {url}; {args.users} users × {args.seconds} s per run")
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        for round_ in range(1, args.repeat + 1):
            modes = list(MODES.items())
            shift = (round_ - 1) % len(modes)  # each mode goes first in turn: no order effect
            for mode, flags in modes[shift:] + modes[:shift]:
                out = work / f"{mode.replace(' ', '-')}-{round_}"
                proc = subprocess.run(
                    [
                        *VPROF,
                        "bench",
                        "tiny",
                        "--url",
                        url,
                        "--workload",
                        str(work / "w.yaml"),
                        "--traffic",
                        str(work / "s.yaml"),
                        "--out",
                        str(out),
                        "--format",
                        "json",
                        *flags,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                if proc.returncode != 0:
                    sys.exit(proc.stdout + proc.stderr)
                (summary,) = json.loads(proc.stdout)["summaries"]
                results[mode].append(summary)
                print(
                    f"  round {round_} {mode:11} TTFT p50 {summary['median_ttft_ms']:7.1f} ms  "
                    f"p99 {summary['p99_ttft_ms']:8.1f} ms  {summary['request_throughput']:6.2f} "
                    f"req/s  slowest scrape {summary.get('metrics_scrape_max_ms') or 0:6.1f} ms"
                )
    finally:
        os.killpg(pgid, signal.SIGTERM)
    p99 = {
        mode: statistics.median(s["p99_ttft_ms"] for s in runs) for mode, runs in results.items()
    }
    tp = {
        mode: statistics.median(s["request_throughput"] for s in runs)
        for mode, runs in results.items()
    }
    print("\nmedian over rounds:")
    for mode in MODES:
        print(
            f"  {mode:11} TTFT p99 {p99[mode]:8.1f} ms  {tp[mode]:6.2f} req/s  "
            f"p99 ratio to no-metrics {p99[mode] / p99['no-metrics']:.3f}"
        )


if __name__ == "__main__":
    main()
