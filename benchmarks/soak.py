"""The soak: a long ``vprof bench --url`` against ``vprof emulate``, checked for loss and leaks.

One steady run of ``--users`` closed-loop users (the ``tiny-smoke`` workload: 64 tokens in,
16 out; the emulator's default timing, 20 ms to the first token and 10 ms between tokens)
for ``--minutes``, then:

- records against the server: requests the emulator answered in full (its own
  ``/metrics`` count, vprof's 4 warm-up requests left out) and the records that say so, and
  every record the run wrote;
- memory per process (vprof, the Locust master or local runner, each worker): resident size
  at the end of the first quarter of the run (at most a minute in) and at the end, its growth
  in MB and MB per minute;
- gaps: the longest stretch of the run with no answer recorded, and the seconds with none.

    nice -n 19 .venv/bin/python benchmarks/soak.py                 # 15 minutes, 64 users
    nice -n 19 .venv/bin/python benchmarks/soak.py --minutes 2 --processes 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import running_emulator

WARMUP_REQUESTS = 4  # vprof.runs.warmup.warm_up


def answered(url: str) -> int:
    """Requests the emulator finished in full (``finished_reason="length"``)."""
    import requests

    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:request_success_total") and 'finished_reason="length"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise RuntimeError("the emulator's /metrics has no request_success_total")


def memory_mb(root: int) -> dict[str, float]:
    """Resident size of vprof and every process under it, by role (pid in the name)."""
    import psutil

    try:
        top = psutil.Process(root)
        tree = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for proc in tree:
        try:
            rss = proc.memory_info().rss / 2**20
            parent = proc.ppid()
        except psutil.NoSuchProcess:
            continue
        role = "vprof" if proc.pid == root else "locust" if parent == root else "worker"
        out[f"{role}:{proc.pid}"] = rss
    return out


def gaps(run: Path) -> tuple[float, int, float]:
    """The longest time with no answer finished, seconds with none, and the span, over the
    run's records (from the first answer to the last)."""
    import numpy as np
    import pyarrow.compute as pc

    from vprof.records.store import read_records_file

    table = read_records_file(run / "records.arrow").table
    ok = pc.equal(table.column("status"), "ok")
    finished = np.sort(table.filter(ok).column("finished_at").to_numpy(zero_copy_only=False))
    if len(finished) < 2:
        return float("nan"), 0, 0.0
    span = float(finished[-1] - finished[0])
    seconds = np.bincount((finished - finished[0]).astype(int))
    return float(np.diff(finished).max()), int((seconds == 0).sum()), span


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="length of the run")
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--processes", type=int, default=1, help="Locust processes")
    parser.add_argument("--port", type=int, default=18731)
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    with (
        tempfile.TemporaryDirectory(prefix="vprof-soak-") as tmp,
        running_emulator(args.port, ["--model", "tiny"]),
    ):
        url = f"http://127.0.0.1:{args.port}"
        work = Path(tmp)
        traffic = work / "soak.yaml"
        traffic.write_text(f"kind: steady\nusers: {args.users}\nduration_s: {seconds:g}\n")
        out = work / "out"
        before = answered(url)
        bench = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vprof.cli.main",
                "bench",
                "soak",
                "--url",
                url,
                "--workload",
                "tiny-smoke",
                "--traffic",
                str(traffic),
                "--out",
                str(out),
                "--processes",
                str(args.processes),
                "--metrics-interval",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(work / "bench.log").open("w"),
        )
        started = time.monotonic()
        first_at = min(60.0, seconds / 4)
        first: dict[str, float] = {}
        last: dict[str, float] = {}
        first_s = last_s = 0.0  # when each was sampled, from the start
        while bench.poll() is None:
            time.sleep(2.0)
            sample = memory_mb(bench.pid)
            if len(sample) > 1:  # the Locust processes are up
                last, last_s = sample, time.monotonic() - started
                if not first and last_s >= first_at:
                    first, first_s = sample, last_s
        rc = bench.wait()
        took = time.monotonic() - started
        server = answered(url) - before - WARMUP_REQUESTS
        (run,) = [p.parent for p in out.glob("*/run.json")]
        from vprof.records.store import read_records_file

        table = read_records_file(run / "records.arrow").table
        ok = table.column("status").to_pylist().count("ok")
        longest_gap, empty_seconds, span = gaps(run)
        state = json.loads((run / "status.json").read_text())["state"]
    memory = {
        name: {
            "first_mb": round(first[name], 1),
            "last_mb": round(last[name], 1),
            "growth_mb": round(last[name] - first[name], 2),
            "growth_mb_per_min": round(
                (last[name] - first[name]) / max(1e-9, (last_s - first_s) / 60), 3
            ),
        }
        for name in sorted(first)
        if name in last
    }
    figures = {
        "minutes": args.minutes,
        "users": args.users,
        "processes": args.processes,
        "exit_code": rc,
        "state": state,
        "wall_s": round(took, 1),
        "server_answered": server,
        "records": table.num_rows,
        "records_ok": ok,
        "answered_without_record": server - ok,
        "requests_per_s": round(ok / span, 1) if span else None,
        "longest_gap_s": round(longest_gap, 3),
        "seconds_without_an_answer": empty_seconds,
        "memory": memory,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"soak: {args.minutes:g} min, {args.users} users, {args.processes} Locust process(es)")
    print(f"  run: {state} (exit {rc}) in {took:.0f} s")
    print(
        f"  server answered {server:,}; records {table.num_rows:,}, of them ok {ok:,}; "
        f"answered without a record: {server - ok:,}"
    )
    print(
        f"  {figures['requests_per_s']} answers/s; longest gap {longest_gap:.3f} s; "
        f"seconds without an answer: {empty_seconds}"
    )
    print(f"  memory from {first_s:.0f} s to {last_s:.0f} s:")
    for name, m in memory.items():
        print(
            f"    {name:18} {m['first_mb']:7.1f} -> {m['last_mb']:7.1f} MB  "
            f"{m['growth_mb']:+6.2f} MB  ({m['growth_mb_per_min']:+.3f} MB/min)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
