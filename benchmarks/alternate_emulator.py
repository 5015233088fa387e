"""`vprof bench --alternate --precision` against two emulators: how often a 10 % TTFT shift is
found, how often two identical servers are called different, and how long a trial takes.

Each trial starts two emulated servers (first token after ``--ttft-ms`` and, on side B in A/B
trials, 10 % later; ``--jitter-ms`` per token and ``--spread-ms`` per request, so streams are
not in lockstep), then runs the real CLI as a user would::

    vprof bench --alternate --url a=URL_A --url b=URL_B --precision 3% --time-budget 3m

with 8 closed-loop users, and reads its JSON comparison. Found: median TTFT significant and
raised. A/A: any headline metric significant is a false positive.

    python benchmarks/alternate_emulator.py --trials 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vprof.analysis.alternation import HEADLINE_METRICS
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator


def trial(shift: float, args, folder: Path, seed: int) -> tuple[dict, float]:
    """One trial: its comparison rows by metric, and its wall time."""
    configs = [
        EmulatorConfig(
            ttft_ms=args.ttft_ms * factor,
            itl_ms=args.itl_ms,
            jitter_ms=args.jitter_ms,
            ttft_spread_ms=args.spread_ms,
            model="tiny",
        )
        for factor in (1.0, 1.0 + shift)
    ]
    shape = folder / "steady.yaml"
    shape.write_text(f"kind: steady\nusers: {args.users}\nduration_s: 600\n")
    with Emulator(configs[0]) as a, Emulator(configs[1]) as b:
        argv = [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "bench",
            "--alternate",
            "--url",
            f"a={a.url}",
            "--url",
            f"b={b.url}",
            "--workload",
            args.workload,
            "--traffic",
            str(shape),
            "--slice",
            f"{args.slice_s:g}s",
            "--precision",
            f"{args.precision:g}%",
            "--time-budget",
            args.budget,
            "--seed",
            str(seed),
            "--out",
            str(folder / "out"),
            "--format",
            "json",
        ]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"trial failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = {r["metric"]: r for r in json.loads(proc.stdout)["comparison"]}
    return rows, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--jitter-ms", type=float, default=2.0)
    parser.add_argument("--spread-ms", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--workload", default="tiny-smoke")
    parser.add_argument("--slice-s", type=float, default=10.0)
    parser.add_argument("--precision", type=float, default=3.0)
    parser.add_argument("--budget", default="3m")
    parser.add_argument("--shift", type=float, default=0.10)
    args = parser.parse_args()
    print(
        f"{args.trials} A/B trials (TTFT {args.ttft_ms:g} vs {args.ttft_ms * (1 + args.shift):g} "
        f"ms) and {args.trials} A/A trials; {args.users} users, {args.slice_s:g} s slices, "
        f"--precision {args.precision:g}% --time-budget {args.budget}"
    )
    found = false_positives = 0
    walls = {"A/B": [], "A/A": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            for kind, shift in (("A/B", args.shift), ("A/A", 0.0)):
                folder = Path(tmp) / f"{kind.replace('/', '')}{i}"
                folder.mkdir()
                rows, wall = trial(shift, args, folder, seed=i)
                walls[kind].append(wall)
                ttft = rows["median_ttft_ms"]
                if kind == "A/B":
                    hit = bool(ttft["significant"] and ttft["diff_pct"] > 0)
                    found += hit
                    print(f"  A/B {i + 1}: {ttft['verdict']} — {wall:.0f} s")
                else:
                    called = [m for m in HEADLINE_METRICS if rows.get(m, {}).get("significant")]
                    false_positives += bool(called)
                    shown = ", ".join(called) or "nothing significant"
                    print(f"  A/A {i + 1}: {shown} ({ttft['verdict']}) — {wall:.0f} s")
    n = args.trials
    print(
        f"found the shift in {found} of {n} (target ≥ 8); A/A significant in {false_positives} "
        f"of {n} (target ≤ 1); wall per trial: A/B {min(walls['A/B']):.0f}–"
        f"{max(walls['A/B']):.0f} s, A/A {min(walls['A/A']):.0f}–{max(walls['A/A']):.0f} s "
        "(target ≤ 180 s)"
    )


if __name__ == "__main__":
    main()
