"""Wall time of vprof's registry commands, as a ratio to ``python -c pass``.

Each command runs N times as a fresh process (what a user waits for); the table shows the
median and the ratio to an empty interpreter start. The target is under 0.3 s each.

    .venv/bin/python benchmarks/startup_time.py            # 15 runs each
    .venv/bin/python benchmarks/startup_time.py -n 30 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.3


def _vprof() -> str:
    beside = Path(sys.executable).with_name("vprof")
    if beside.exists():
        return str(beside)
    found = shutil.which("vprof")
    if not found:
        sys.exit("vprof is not installed next to this Python or on PATH")
    return found


def _run_once(argv: list[str], cwd: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one fresh run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def measure(commands: dict[str, list[str]], runs: int, cwd: str) -> dict[str, dict[str, float]]:
    """Median and best wall/CPU seconds per command.

    Runs are interleaved (each round runs every command once) so that load from other
    processes on the machine falls on all commands alike; one unmeasured round warms caches.
    """
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for round_ in range(runs + 1):
        for name, argv in commands.items():
            result = _run_once(argv, cwd)
            if round_:
                samples[name].append(result)
    return {
        name: {
            "median_wall_s": statistics.median(w for w, _ in values),
            "best_wall_s": min(w for w, _ in values),
            "median_cpu_s": statistics.median(c for _, c in values),
        }
        for name, values in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, and exit 1 if a command misses the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    options = parser.parse_args(argv)
    vprof = _vprof()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "vprof --help": [vprof, "--help"],
        "vprof profiles": [vprof, "profiles"],
        "vprof render chunked-256": [vprof, "render", "chunked-256"],
    }
    # an empty folder, so no ./profiles/ of the caller's is read
    with tempfile.TemporaryDirectory() as cwd:
        stats = measure(commands, options.runs, cwd)
    base = stats["python -c pass"]["median_wall_s"]
    base_cpu = stats["python -c pass"]["median_cpu_s"]
    rows = [
        {
            "command": name,
            **{key: round(value, 4) for key, value in values.items()},
            "ratio_to_python": round(values["median_wall_s"] / base, 2),
            "cpu_ratio_to_python": round(values["median_cpu_s"] / base_cpu, 2),
            "under_target": values["median_wall_s"] < TARGET_S,
        }
        for name, values in stats.items()
    ]
    if options.json:
        print(json.dumps({"runs": options.runs, "target_s": TARGET_S, "rows": rows}, indent=2))
    else:
        print(
            f"{'command':<26} {'median s':>9} {'best s':>7} {'× python':>9} "
            f"{'cpu s':>7} {'cpu × py':>9}  target {TARGET_S} s"
        )
        for row in rows:
            print(
                f"{row['command']:<26} {row['median_wall_s']:>9.3f} {row['best_wall_s']:>7.3f} "
                f"{row['ratio_to_python']:>9.2f} {row['median_cpu_s']:>7.3f} "
                f"{row['cpu_ratio_to_python']:>9.2f}  {'ok' if row['under_target'] else 'SLOW'}"
            )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"({options.runs} interleaved runs each; wall medians; 1-min load average {load:.2f} "
            f"on {os.cpu_count()} CPUs — other processes inflate wall time, CPU time less so)"
        )
    return 0 if all(row["under_target"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
