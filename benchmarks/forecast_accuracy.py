"""How well ``vprof forecast`` predicts real vLLM runs it was not fitted on (CPU build).

**Recording** (``--record``): one profile's server, real vLLM with the tiny model, measured by
``vprof sweep load`` at open-loop Poisson rates for three workloads — ``chat`` (the fit's
workload: lognormal prompts and answers), ``fixed-800-64`` and ``rag-shared-prefix`` (held out:
other prompt and output lengths, a shared-prefix cache). Each sweep takes the heavy-work lock
on its own. Resumable: the run folders stay in ``--runs``.

**Analysis** (the default): a model is fitted on ``chat`` at the ``FIT_RATES`` only; every other
run (``chat`` at higher rates, one past the knee; the held-out workloads at every rate) is
predicted from its workload, traffic shape and seed, and set beside what was measured. Printed:
the per-run table, the median absolute error per metric (targets: ≤ 10 % on throughput, p50
TTFT and p50 TPOT, ≤ 20 % on p95 TTFT), and per workload the sustainable rate under ``SLO``
planned from the measured levels against the one planned from the predicted levels at the
same rates (target: within 10 %).

    python benchmarks/forecast_accuracy.py --record --runs /work/notes/forecast-runs
    python benchmarks/forecast_accuracy.py --runs /work/notes/forecast-runs
"""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAFFIC = HERE / "data" / "forecast" / "poisson-40s.yaml"
LOCK = "/tmp/vprof-heavy.lock"
PROFILE = "chunked-512"
SET = ("enforce-eager=true",)
FIT_WORKLOAD = "chat"
FIT_RATES = (2.0, 4.0, 6.0)
LADDERS = {
    "chat": (2.0, 4.0, 6.0, 8.0, 11.0),
    "fixed-800-64": (5.0, 10.0, 15.0, 22.0),
    "rag-shared-prefix": (5.0, 10.0, 15.0, 22.0),
}
SLO = "ttft_p95=1000ms"
TARGETS = {
    "request_throughput": 10.0,
    "median_ttft_ms": 10.0,
    "median_tpot_ms": 10.0,
    "p95_ttft_ms": 20.0,
}


def record(runs: Path, workloads: list[str]) -> None:
    runs.mkdir(parents=True, exist_ok=True)
    for workload in workloads:
        levels = ",".join(f"{r:g}" for r in LADDERS[workload])
        argv = [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "sweep",
            "load",
            PROFILE,
            "--traffic",
            str(TRAFFIC),
            "--workload",
            workload,
            "--levels",
            levels,
            "--out",
            str(runs / workload),
            "--slo",
            SLO,
            "--port",
            "18947",
            *[a for s in SET for a in ("--set", s)],
        ]
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            began = time.monotonic()
            print(f"recording {workload} at {levels} req/s", flush=True)
            subprocess.run(argv, check=False)
            print(f"  {workload}: {time.monotonic() - began:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="measure the runs on this machine")
    parser.add_argument("--runs", type=Path, default=Path("vprof-forecast-runs"))
    parser.add_argument("--workload", action="append", help="record only these workloads")
    args = parser.parse_args()
    if args.record:
        record(args.runs, args.workload or list(LADDERS))


if __name__ == "__main__":
    main()
