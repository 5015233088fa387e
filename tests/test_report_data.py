"""Synthetic benches and sweeps for the report tests (no tests here).

Runs are written with the real records writer (``test_analysis_data.write_run``) and given a
``run.json`` as ``vprof bench`` writes it: the profile as rendered with its engine arguments,
an open-loop traffic shape at a rate, hardware, the command, dates; plus ``/metrics`` and
load-generator samples. A sweep folder gets its manifest from the sweeps' own writer
(``vprof.runs.sweep.write_sweep``) with rows written by hand in ``rung_row``'s form.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_analysis_data import T0, synth_records, write_run

from vprof.runs.sweep import write_sweep as write_manifest

RATES = (2.0, 4.0, 8.0)
PROFILES = {"baseline": 60.0, "chunked-256": 45.0}  # TTFT at the lowest rate, ms


def metrics_samples(start: float, seconds: float, rate_rps: float) -> list[dict[str, Any]]:
    """``/metrics`` samples every 2 s: queue gauges, KV-cache use (a fraction), token counter."""
    samples = []
    for k in range(int(seconds // 2) + 2):
        samples.append(
            {
                "t": start + 2.0 * k,
                "values": {
                    "vllm:num_requests_running": float(min(k, 6)),
                    "vllm:num_requests_waiting": float(k % 3),
                    "vllm:kv_cache_usage_perc": min(0.05 * k, 0.9),
                    "vllm:generation_tokens_total": 40.0 * rate_rps * k,
                    "vllm:num_preemptions_total": 0.0,
                },
            }
        )
    return samples


def loadgen_samples(start: float, seconds: float) -> list[dict[str, Any]]:
    return [
        {"t": start + 2.0 * k, "worker": worker, "cpu_percent": 20.0 + 5.0 * (k % 4)}
        for k in range(int(seconds // 2) + 1)
        for worker in ("vm:1:local",)
    ]


def run_meta(profile: str, rate_rps: float, *, engine_args: dict[str, Any] | None = None) -> dict:
    """What ``vprof bench`` writes to run.json, abridged to the keys the report reads."""
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "tiny"]
    return {
        "profile": {
            "name": profile,
            "identity": f"{profile}-0123abcd",
            "description": f"{profile} for the report tests",
            "argv": argv + ["--max-num-batched-tokens", "256"],
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "engine_args": engine_args or {"max-num-batched-tokens": 256},
            "host_changes": [],
        },
        "server": {"warmup_s": 0.4},
        "url": "http://127.0.0.1:18000",
        "workload": {"name": "chat", "endpoint": "chat"},
        "traffic": {
            "name": f"poisson@rate_rps={rate_rps:g}",
            "kind": "open-loop",
            "rate_rps": rate_rps,
            "duration_s": 60.0,
        },
        "seed": 7,
        "salt": "b24e43b8",
        "open_loop": True,
        "vllm_version": "0.32.0 (vllm-cpu)",
        "hardware": {"machine": "x86_64", "cpu_count": 2, "memory_gib": 23.5, "gpus": []},
        "client": {"vprof": "0.1.0", "locust": "2.47.0"},
        "created_at": T0 - 30.0,
        "command": ["vprof", "bench", profile, "--traffic", "poisson"],
    }


def write_level(
    path: Path,
    profile: str,
    rate_rps: float,
    *,
    n: int = 120,
    ttft_ms: float = 60.0,
    seed: int = 0,
    engine_args: dict[str, Any] | None = None,
) -> Path:
    """One open-loop run of ``profile`` at ``rate_rps`` with server and load-generator samples."""
    records = synth_records(
        n,
        seed=seed,
        rate_rps=rate_rps,
        ttft_ms=ttft_ms,
        open_loop=True,
        lag_ms=2.0,
        fail_every=40,
    )
    seconds = n / rate_rps + 5.0
    write_run(
        path,
        records,
        name=path.name,
        profile=profile,
        open_loop=True,
        warmup_until=T0 + 2.0,
        metrics=metrics_samples(T0 - 1.0, seconds, rate_rps),
        loadgen=loadgen_samples(T0, seconds),
    )
    (path / "run.json").write_text(
        json.dumps({"name": path.name, **run_meta(profile, rate_rps, engine_args=engine_args)})
    )
    locust = json.loads((path / "locust.json").read_text())
    locust |= {"stopped_at": T0 + seconds, "locust_version": "2.47.0", "workers": 1}
    (path / "locust.json").write_text(json.dumps(locust))
    status = {
        "state": "completed",
        "reason": "",
        "started_at": T0 - 30.0,
        "finished_at": T0 + seconds,
    }
    (path / "status.json").write_text(json.dumps(status))
    return path


def write_bench(root: Path, *, rates: tuple[float, ...] = RATES, n: int = 120) -> Path:
    """Two profiles × open-loop rates; latency rises with the rate, chunked-256 is faster."""
    for p, (profile, ttft_ms) in enumerate(PROFILES.items()):
        for r, rate in enumerate(rates):
            write_level(
                root / f"{profile}--chat--poisson_rate_rps={rate:g}",
                profile,
                rate,
                n=n,
                ttft_ms=ttft_ms * (1 + r * r),
                seed=10 * p + r,
                engine_args={"tensor-parallel-size": 2, "max-num-batched-tokens": 256},
            )
    return root


def write_sweep(root: Path, n: int = 80) -> Path:
    """A batched-tokens sweep folder: three rungs, the third not run, and its manifest."""
    rows = []
    for k, ttft in ((1, 50.0), (2, 70.0)):
        label = f"baseline@mnbt={2048 * k}"
        run = root / f"{label}--chat--steady--{k:08d}"
        write_level(run, label, 4.0, n=n, ttft_ms=ttft, seed=k)
        rows.append(
            {
                "rung": label,
                "max-num-batched-tokens": 2048 * k,
                "state": "completed",
                "request_throughput": 3.9 + 0.05 * k,
                "p95_ttft_ms": ttft * 2,
                "p95_itl_ms": 30.0,
                "num_preemptions": 0,
                "oom": False,
                "run": run.name,
            }
        )
    rows.append({"rung": "baseline@mnbt=6144", "max-num-batched-tokens": 6144, "state": "not run"})
    recommendation = (
        "Recommended: baseline@mnbt=4096 — highest request throughput (ties within 3 % broken "
        "by lower p95 TTFT): 4.00 req/s, p95 TTFT 140 ms, p95 ITL 30.0 ms (best throughput over "
        "2 healthy rung(s): 4.00 req/s)."
    )
    write_manifest(root, "batched-tokens", "baseline", rows, recommendation)
    return root


def test_a_capacity_level_holds_the_metrics_percentiles_and_no_lookalike():
    from vprof.report.capacity import _level

    summary = {
        "p95_e2el_ms": 900.0,
        "median_e2el_ms": 400.0,
        "p99.9_e2el_ms": 1500.0,
        "p95_session_e2el_ms": 9000.0,
        "mean_e2el_ms": 450.0,
    }
    level = _level("r1", summary, ["e2el"])
    assert {k for k in level if k.endswith("e2el_ms")} == {
        "p95_e2el_ms",
        "median_e2el_ms",
        "p99.9_e2el_ms",
    }
