"""Wall time of vprof's registry commands, as a ratio to ``python -c pass``.

Each command runs N times as a fresh process (what a user waits for); the table shows the
median and the ratio to an empty interpreter start. The target is under 0.3 s each.

    .venv/bin/python benchmarks/startup_time.py            # 15 runs each
    .venv/bin/python benchmarks/startup_time.py -n 30 --json
"""

from __future__ import annotations

import argparse
import json
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


def time_command(argv: list[str], runs: int, cwd: str) -> list[float]:
    """Wall seconds of ``runs`` fresh runs of ``argv`` (after one unmeasured warm-up)."""
    samples = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(
            argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        if i:  # the first run warms the page cache and .pyc files
            samples.append(time.perf_counter() - start)
    return samples


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
        medians = {
            name: statistics.median(time_command(cmd, options.runs, cwd))
            for name, cmd in commands.items()
        }
    base = medians["python -c pass"]
    rows = [
        {
            "command": name,
            "median_s": round(seconds, 4),
            "ratio_to_python": round(seconds / base, 2),
            "under_target": seconds < TARGET_S,
        }
        for name, seconds in medians.items()
    ]
    if options.json:
        print(json.dumps({"runs": options.runs, "target_s": TARGET_S, "rows": rows}, indent=2))
    else:
        print(f"{'command':<26} {'median s':>9} {'× python':>9}  target {TARGET_S} s")
        for row in rows:
            mark = "ok" if row["under_target"] else "SLOW"
            print(
                f"{row['command']:<26} {row['median_s']:>9.3f} {row['ratio_to_python']:>9.2f}"
                f"  {mark}"
            )
        print(f"({options.runs} runs each, median; machine load affects absolute numbers)")
    return 0 if all(row["under_target"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
