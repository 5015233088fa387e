"""How long does `vprof report` take for a bench of 10 runs × 100k requests, and how big is
the HTML? (targets: under 2 s, under 5 MB)

Writes (once) a bench folder through ``RecordWriter``: two profiles × five open-loop rates
(20 … 100 req/s), 100,000 records per run with 32 inter-token gaps each (3.2 M gaps per run),
TTFT rising with the rate, 0.5 % failures, ``/metrics`` samples every 2 s and load-generator
CPU samples, as ``vprof bench`` leaves them. Then runs ``vprof report`` on it as a user would
(a fresh interpreter, with ``--slo``, ``--rps`` and ``--gpu-hour-price``: wall time with
start-up, the child's peak memory, and the ratio to a reference workload measured beside it,
see ``measure.reference_s``), and times the parts in-process: summaries, the plan, the
pictures (curves, timelines), the comparisons and the HTML.

    .venv/bin/python benchmarks/report_10x100k.py
    .venv/bin/python benchmarks/report_10x100k.py --n-boot 200 --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from measure import timed_runs

T0 = 1_800_000_000.0
PROFILES = {"baseline": 100.0, "chunked-256": 80.0}  # TTFT at the lowest rate, ms
RATES = (20.0, 40.0, 60.0, 80.0, 100.0)
SLO = "ttft_p95=500ms"


def write_run(
    path: Path, profile: str, rate_rps: float, ttft_ms: float, n: int, gaps: int, seed: int
) -> None:
    """One open-loop run folder with ``n`` records, server samples and client CPU samples."""
    import numpy as np

    from vprof.records import RecordWriter, RunDir, RunState
    from vprof.records.rundir import append_jsonl

    run = RunDir(path)
    meta = {
        "name": path.name,
        "profile": {
            "name": profile,
            "identity": f"{profile}-synthetic",
            "argv": ["vllm", "serve"],
            "engine_args": {"tensor-parallel-size": 1},
            "gpus_per_server": 1,  # as `vprof bench` records a launched server's
            "parallelism": "tensor-parallel-size 1",
        },
        "workload": {"name": "chat"},
        "traffic": {
            "name": f"poisson@rate_rps={rate_rps:g}",
            "kind": "open-loop",
            "rate_rps": rate_rps,
        },
        "open_loop": True,
        "seed": seed,
        "hardware": {"gpus": ["synthetic"]},
        "created_at": T0,
    }
    run.create(meta)
    rng = np.random.default_rng(seed)
    batch = 1000
    with RecordWriter(run.records, batch_size=batch) as writer:
        for start in range(0, n, batch):
            k = min(batch, n - start)
            scheduled = T0 + (start + np.arange(k)) / rate_rps
            sent = scheduled + rng.exponential(2.0, k) / 1000.0
            ttft = rng.lognormal(np.log(ttft_ms), 0.5, k)
            itl = rng.lognormal(np.log(20.0 + rate_rps / 10.0), 0.35, (k, gaps))
            first = sent + ttft / 1000.0
            last = first + itl.sum(axis=1) / 1000.0
            failed = rng.random(k) < 0.005
            for i in range(k):
                row = {
                    "request_id": f"r{start + i}",
                    "user_class": "ChatUser",
                    "endpoint": "chat",
                    "worker": "local",
                    "open_loop": True,
                    "scheduled_at": float(scheduled[i]),
                    "sent_at": float(sent[i]),
                    "schedule_lag_ms": float((sent[i] - scheduled[i]) * 1000.0),
                    "expected_prompt_tokens": 500,
                    "expected_output_tokens": gaps + 1,
                }
                if failed[i]:
                    row |= {
                        "status": "error",
                        "http_status": 503,
                        "error": "Service Unavailable",
                        "finished_at": float(sent[i] + 0.02),
                        "itl_ms": [],
                    }
                else:
                    e2e = (last[i] - sent[i]) * 1000.0
                    row |= {
                        "status": "ok",
                        "http_status": 200,
                        "first_token_at": float(first[i]),
                        "last_token_at": float(last[i]),
                        "finished_at": float(last[i] + 0.001),
                        "ttft_ms": float(ttft[i]),
                        "e2e_ms": float(e2e),
                        "tpot_ms": float((e2e - ttft[i]) / gaps),
                        "itl_ms": itl[i],
                        "prompt_tokens": 500,
                        "completion_tokens": gaps + 1,
                        "cached_tokens": 0,
                    }
                writer.add(row)
    samples = range(int(n / rate_rps // 2) + 1)
    append_jsonl(
        run.metrics_jsonl,
        (
            {
                "t": T0 + 2.0 * j,
                "values": {
                    "vllm:num_requests_running": float(rng.integers(0, 64)),
                    "vllm:num_requests_waiting": float(rng.integers(0, 8)),
                    "vllm:kv_cache_usage_perc": float(rng.random()),
                    "vllm:generation_tokens_total": 2.0 * j * rate_rps * (gaps + 1),
                },
            }
            for j in samples
        ),
    )
    append_jsonl(
        run.loadgen_jsonl,
        (
            {"t": T0 + 2.0 * j, "worker": "local", "cpu_percent": float(rng.uniform(20, 60))}
            for j in samples
        ),
    )
    run.write_locust_info({"warmup_until": T0 + 10.0, "open_loop": True})
    run.set_status(RunState.COMPLETED)


def write_bench(root: Path, n: int, gaps: int) -> None:
    for p, (profile, ttft_ms) in enumerate(PROFILES.items()):
        for r, rate in enumerate(RATES):
            run = root / f"{profile}--chat--poisson_rate_rps={rate:g}"
            write_run(run, profile, rate, ttft_ms * (1 + 0.5 * r * r), n, gaps, seed=10 * p + r)
            print(f"  wrote {run.name}", flush=True)


def phases(bench: Path, n_boot: int | None) -> dict[str, float]:
    """Seconds per part of a report, in-process (numpy, pandas, pyarrow already imported)."""
    from vprof.analysis import compare, expand_runs, load_run, plan
    from vprof.analysis.run import display_names, summarize_loaded
    from vprof.report import build_data
    from vprof.report.build import comparison_groups
    from vprof.report.html import render

    out: dict[str, float] = {}
    started = time.perf_counter()
    runs = [load_run(p) for p in expand_runs([bench])]
    out["read"] = time.perf_counter() - started
    started = time.perf_counter()
    summaries = [summarize_loaded(r, slo=SLO) for r in runs]
    out["summaries"] = time.perf_counter() - started
    started = time.perf_counter()
    plan(summaries, target_rps=200, slo=SLO)
    out["plan"] = time.perf_counter() - started
    started = time.perf_counter()
    for group in comparison_groups(summaries, display_names(summaries), None):
        # the summaries made above, as the report passes them (not made again per comparison)
        known = {runs[i].path: summaries[i] for i in group}
        compare([runs[i] for i in group], n_boot=n_boot, summaries=known)
    out["comparisons"] = time.perf_counter() - started
    started = time.perf_counter()
    data = build_data([bench], slo=SLO, target_rps=200, gpu_hour_price=2.0, n_boot=n_boot)
    out["build_data (all of the above, and the pictures)"] = time.perf_counter() - started
    started = time.perf_counter()
    render(data)
    out["render HTML"] = time.perf_counter() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="per run")
    parser.add_argument("--gaps", type=int, default=32, help="inter-token gaps per request")
    parser.add_argument(
        "--n-boot", type=int, default=None, help="as `vprof report` (default: sized by precision)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "vprof-report")
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()

    bench = args.dir / f"10x{args.records}x{args.gaps}"
    if args.rewrite or not (bench / "chunked-256--chat--poisson_rate_rps=100").is_dir():
        print(f"writing 10 runs × {args.records:,} records × {args.gaps} gaps to {bench} ...")
        started = time.perf_counter()
        write_bench(bench, args.records, args.gaps)
        print(f"  written in {time.perf_counter() - started:.0f} s")
    out = args.dir / "report.html"
    import os

    print(f"load average before timing: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    command = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "report",
        str(bench),
        "-o",
        str(out),
        "--slo",
        SLO,
        "--rps",
        "200",
        "--gpu-hour-price",
        "2",
        "--n-boot",
        str(args.n_boot),
    ]
    if args.n_boot is None:
        command = command[:-2]  # as a user runs it: resamples sized by precision
    timed_runs(command, args.repeat, "vprof report", 2.0)
    size_mb = out.stat().st_size / 1e6
    print(f"  HTML {size_mb:.2f} MB (target < 5 MB), --n-boot {args.n_boot or 'sized'}")
    import pandas  # noqa: F401  (every path imports it; left out of the parts below)

    for name, seconds in phases(bench, args.n_boot).items():
        print(f"  {name:48} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
