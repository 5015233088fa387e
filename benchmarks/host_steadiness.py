"""How steady this host's CPU pace is: the noise floor of any capacity measured on it.

A pure-Python loop pinned to one core counts its iterations in 0.5 s slices while the machine
is otherwise idle; each slice's pace is shown as a share of the fastest slice, then averaged
over windows as long as a rate-search level (10 s) and a minute. On a VM whose host is shared,
the pace drifts although nothing in the guest runs (the guest's steal counter may not show
it). A server's capacity follows that pace, so two capacities measured minutes apart differ
by about the spread of the windows printed here, whatever vprof does.

    .venv/bin/python benchmarks/host_steadiness.py              # 120 s on each core
    .venv/bin/python benchmarks/host_steadiness.py -s 60 --cores 0 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

SLICE_S = 0.5
WINDOWS_S = (10.0, 60.0)


def paces(core: int, seconds: float) -> list[int]:
    """Iterations per slice of a loop pinned to ``core``, for ``seconds``."""
    os.sched_setaffinity(0, {core})
    counts = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < SLICE_S:
            for _ in range(1000):
                pass
            n += 1
        counts.append(n)
    return counts


def windows(counts: list[int], window_s: float) -> list[float]:
    """Mean pace of consecutive whole windows, as a share of the fastest slice."""
    best = max(counts)
    per = max(1, round(window_s / SLICE_S))
    return [
        statistics.fmean(counts[i : i + per]) / best for i in range(0, len(counts) - per + 1, per)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-s", "--seconds", type=float, default=120.0, help="per core")
    every = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    parser.add_argument("--cores", default=every, help="comma-separated, one after another")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cores = [int(c) for c in args.cores.split(",")]
    allowed = os.sched_getaffinity(0)
    result = {}
    for core in cores:
        counts = paces(core, args.seconds)
        os.sched_setaffinity(0, allowed)
        result[core] = {f"{w:g}s": windows(counts, w) for w in (SLICE_S, *WINDOWS_S)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for core, by in result.items():
        print(f"core {core}, pace as a share of its fastest {SLICE_S:g} s slice:")
        for name, values in by.items():
            if not values:
                continue
            spread = max(values) / min(values) if min(values) > 0 else float("inf")
            shown = " ".join(f"{v:.2f}" for v in values) if len(values) <= 24 else ""
            print(
                f"  {name:>5} windows: min {min(values):.2f}, median "
                f"{statistics.median(values):.2f}, max {max(values):.2f} "
                f"(max/min {spread:.2f})  {shown}"
            )


if __name__ == "__main__":
    main()
