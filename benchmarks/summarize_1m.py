"""How long does summarising one million request records take, and how much memory?

Targets: ``vprof summarize RUN`` under 1.5 s wall in a fresh interpreter (start-up
included) and under 600 MB peak resident memory; the library call under 1 s.

Writes a run folder with one million realistic records through ``RecordWriter`` (open
loop at 200 req/s with schedule lag, lognormal TTFT, 64 inter-token gaps per completed
request — 65 output tokens — 1 % failures with no gaps, Arrow batches of 1000 as the
Locust side writes them). Then runs ``vprof summarize RUN`` as a user would (a fresh
interpreter; wall time and the child's peak resident set, which counts the pages of the
memory-mapped records file it touched), beside a fixed reference workload measured in the same
moment (numpy work in a fresh interpreter, see ``measure.reference_s``) whose ratio compares
figures taken while the shared machine was busy or quiet; and times ``summarize_run``
in-process with its two halves: reading the folder (``load_run``) and computing
(``summarize``).

    .venv/bin/python benchmarks/summarize_1m.py                 # write (once) and time
    .venv/bin/python benchmarks/summarize_1m.py --records 200000 --repeat 5

The records file is kept in ``--dir`` (default: a folder under the system temp dir) and
reused on the next run unless ``--rewrite`` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from measure import timed_runs

T0 = 1_800_000_000.0


def write_run(path: Path, n: int, gaps: int, seed: int = 0) -> float:
    """Write ``n`` records to ``path``; returns the seconds it took."""
    import numpy as np

    from vprof.records import RecordWriter, RunDir, RunState

    started = time.perf_counter()
    run = RunDir(path)
    meta = {"name": "summarize-1m", "profile": {"name": "synthetic"}, "open_loop": True}
    run.create(meta)
    rng = np.random.default_rng(seed)
    rate_rps, batch = 200.0, 1000
    with RecordWriter(run.records, batch_size=batch) as writer:
        for start in range(0, n, batch):
            k = min(batch, n - start)
            scheduled = T0 + (start + np.arange(k)) / rate_rps
            sent = scheduled + rng.exponential(2.0, k) / 1000.0
            ttft_ms = rng.lognormal(np.log(120.0), 0.5, k)
            itl = rng.lognormal(np.log(25.0), 0.35, (k, gaps))
            failed = rng.random(k) < 0.01
            first = sent + ttft_ms / 1000.0
            last = first + itl.sum(axis=1) / 1000.0
            prompt = rng.integers(200, 1200, k)
            for i in range(k):
                row = {
                    "request_id": f"r{start + i}",
                    "user_class": "ChatUser",
                    "endpoint": "chat",
                    "worker": f"w{i % 2}",
                    "open_loop": True,
                    "prefix_group": int(i % 8),
                    "scheduled_at": float(scheduled[i]),
                    "sent_at": float(sent[i]),
                    "schedule_lag_ms": float((sent[i] - scheduled[i]) * 1000.0),
                    "expected_prompt_tokens": int(prompt[i]),
                    "expected_output_tokens": gaps + 1,
                }
                if failed[i]:
                    row.update(
                        status="error",
                        http_status=503,
                        error="Service Unavailable",
                        finished_at=float(sent[i] + 0.02),
                        itl_ms=[],
                    )
                else:
                    e2e = (last[i] - sent[i]) * 1000.0
                    row.update(
                        status="ok",
                        http_status=200,
                        first_token_at=float(first[i]),
                        last_token_at=float(last[i]),
                        finished_at=float(last[i] + 0.001),
                        ttft_ms=float(ttft_ms[i]),
                        e2e_ms=float(e2e),
                        tpot_ms=float((e2e - ttft_ms[i]) / gaps),
                        itl_ms=itl[i],
                        prompt_tokens=int(prompt[i]),
                        completion_tokens=gaps + 1,
                        cached_tokens=int(prompt[i] // 2) if i % 8 else 0,
                    )
                writer.add(row)
    run.write_locust_info({"warmup_until": T0 + 10.0, "open_loop": True})
    run.set_status(RunState.COMPLETED)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--gaps", type=int, default=64, help="inter-token gaps per request")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "vprof-1m")
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()

    from vprof.analysis import load_run, summarize, summarize_run
    from vprof.records import RunDir, RunState

    folder = RunDir(args.dir / f"{args.records}x{args.gaps}")
    run = folder.path
    if args.rewrite or folder.state != RunState.COMPLETED:
        print(f"writing {args.records:,} records × {args.gaps} gaps to {run} ...", flush=True)
        print(f"  written in {write_run(run, args.records, args.gaps):.1f} s")
    size_mb = folder.records.stat().st_size / 1e6
    print(f"records.arrow: {size_mb:,.0f} MB")
    print(f"load average before timing: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    command = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "summarize",
        str(run),
        "--slo",
        "ttft_p95=500ms",
    ]
    timed_runs(command, args.repeat, "vprof summarize", 1.5)
    print("  (peak memory target < 600 MB; the ratio is against the reference workload)")
    summary = None
    for i in range(args.repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        loaded = load_run(run)
        read = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        summary = summarize(loaded.records, warmup_until=loaded.warmup_until, slo="ttft_p95=500ms")
        compute = time.perf_counter() - wall, time.process_time() - cpu
        wall, cpu = time.perf_counter(), time.process_time()
        summarize_run(run, slo="ttft_p95=500ms")
        total = time.perf_counter() - wall, time.process_time() - cpu
        print(
            f"run {i + 1}: summarize_run {total[0]:.2f} s wall / {total[1]:.2f} s CPU"
            f"  (read {read[0]:.2f} / {read[1]:.2f}, compute {compute[0]:.2f} / {compute[1]:.2f})"
        )
    if summary is None:
        return
    print(
        f"  {summary['requests']:,} requests after warm-up, {summary['completed']:,} completed, "
        f"p99 TTFT {summary['p99_ttft_ms']:.1f} ms, p99.9 ITL {summary['p99.9_itl_ms']:.2f} ms, "
        f"{summary['total_output_tokens']:,} output tokens"
    )


if __name__ == "__main__":
    main()
