"""Old and new numbers side by side: recorded runs, synthetic runs, and their golden outputs.

``tests/data/recorded/`` holds small run folders recorded by the e2e tests against real vLLM
(the CPU build); :func:`synthetic_run` writes larger seeded runs with every kind of record
(open and closed loop, failures, timeouts, cancelled and never-sent requests, sessions, two
replicas, empty and zero gaps, batches of uneven size). ``tests/data/golden.json`` holds the
summaries, timelines, comparisons and report data that the code computed from them before
the summary and the bootstrap were made fast; ``tests/test_golden.py`` checks that today's
code computes the same. Regenerate (only when a number is meant to change) with

    .venv/bin/python tests/golden.py --write
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RECORDED = HERE / "data" / "recorded"
GOLDEN = HERE / "data" / "golden.json"
SLO = "ttft_p95=500ms,itl_p99=100ms,tpot_p90=80ms"
T0 = 1_800_000_000.0
N_BOOT = 1000
# (name, seed, open loop, requests, TTFT scale ms)
SYNTHETIC = (
    ("synthetic-open-a", 1, True, 4_000, 120.0),
    ("synthetic-open-b", 2, True, 3_000, 100.0),
    ("synthetic-closed", 3, False, 2_500, 90.0),
)
# pairs compared with n_boot=N_BOOT, seed 0 (baseline first)
PAIRS = (
    ("mnbt4096-smoke", "mnbt2048-smoke"),
    ("rate2-open", "rate2-open-seqs16"),
    ("synthetic-open-a", "synthetic-open-b"),
    ("synthetic-closed", "url-smoke"),
)


def synthetic_run(path: Path, seed: int, open_loop: bool, n: int, ttft_ms: float) -> Path:
    """Write a seeded run folder of ``n`` records of every kind; returns its path."""
    import numpy as np

    from vprof.records import RecordWriter, RunDir, RunState
    from vprof.records.rundir import append_jsonl

    run = RunDir(path)
    traffic = (
        {"name": "poisson", "kind": "open-loop", "rate_rps": 50.0, "max_in_flight": 64}
        if open_loop
        else {"name": "steady", "kind": "steady", "users": 16}
    )
    run.create(
        {
            "name": path.name,
            "profile": {"name": path.name.rsplit("-", 1)[0], "engine_args": {}},
            "workload": {"name": "chat"},
            "traffic": traffic,
            "open_loop": open_loop,
            "created_at": T0,
        }
    )
    rng = np.random.default_rng(seed)
    statuses = rng.choice(
        ["ok", "error", "timeout", "cancelled"], size=n, p=[0.95, 0.03, 0.01, 0.01]
    )
    scheduled = T0 + np.cumsum(rng.exponential(0.02, n))
    with RecordWriter(run.records, batch_size=97) as writer:
        for i in range(n):
            status = str(statuses[i])
            sent = scheduled[i] + (rng.exponential(0.004) if open_loop else 0.0)
            never_sent = status == "cancelled" and i % 3 == 0
            row: dict[str, Any] = {
                "request_id": f"r{i}",
                "user_class": "ChatUser",
                "endpoint": "chat",
                "worker": f"w{i % 2}",
                "replica": "http://a" if i % 5 else "http://b",
                "open_loop": open_loop,
                "prefix_group": int(i % 4),
                "scheduled_at": float(scheduled[i]),
                "expected_prompt_tokens": 300,
                "expected_output_tokens": 24,
                "status": status,
            }
            if i % 7 == 0:  # a session of up to three turns
                row.update(
                    conversation_id=i // 21, turn=(i // 7) % 3, session_last=(i // 7) % 3 == 2
                )
                if not open_loop:
                    row.update(think_ms=float(rng.uniform(0, 50)))
            if not open_loop and i >= 16:
                row["idle_before_ms"] = float(rng.exponential(2.0))
            if never_sent:
                writer.add(row)
                continue
            row["sent_at"] = float(sent)
            row["schedule_lag_ms"] = float((sent - scheduled[i]) * 1000.0)
            k = int(rng.integers(0, 40)) if status == "ok" else int(rng.integers(0, 3))
            gaps = rng.lognormal(np.log(20.0), 0.6, k)
            gaps[rng.random(k) < 0.05] = 0.0  # two chunks read at once
            ttft = float(rng.lognormal(np.log(ttft_ms), 0.7))
            first = sent + ttft / 1000.0
            last = first + float(gaps.sum()) / 1000.0
            if status == "ok":
                e2e = ttft + float(gaps.sum())
                row.update(
                    http_status=200,
                    first_token_at=float(first),
                    last_token_at=float(last),
                    finished_at=float(last + 0.0005),
                    ttft_ms=ttft,
                    e2e_ms=e2e,
                    tpot_ms=float(gaps.sum()) / k if k else math.nan,
                    itl_ms=[float(g) for g in gaps],
                    prompt_tokens=300 + (i % 3),
                    completion_tokens=k + 1,
                    cached_tokens=(i % 4) * 64 if i % 11 else -1,
                )
            elif status == "error":
                row.update(
                    http_status=503 if i % 2 else 0,
                    finished_at=float(sent + 0.01),
                    error="Service Unavailable" if i % 2 else "ConnectionError: reset",
                    itl_ms=[float(g) for g in gaps[:1]],
                )
            elif status == "timeout":
                row.update(
                    first_token_at=float(first),
                    finished_at=float(sent + 30.0),
                    error="timeout after 30 s",
                )
            else:
                row.update(first_token_at=float(first), finished_at=float(first + 0.05))
            writer.add(row)
    t_end = float(scheduled[-1]) + 2.0
    ticks = np.arange(T0, t_end, 2.0)
    append_jsonl(
        run.metrics_jsonl,
        (
            {
                "t": float(t),
                "values": {
                    "vllm:num_requests_running": float(rng.integers(0, 16)),
                    "vllm:num_requests_waiting": float(rng.integers(0, 4)),
                    "vllm:kv_cache_usage_perc": float(rng.random()),
                    "vllm:generation_tokens_total": 100.0 * j,
                    "vllm:prefix_cache_hits_total": 10.0 * j,
                    "vllm:prefix_cache_queries_total": 40.0 * j,
                },
            }
            for j, t in enumerate(ticks)
        ),
    )
    append_jsonl(
        run.loadgen_jsonl,
        (
            {"t": float(t), "worker": f"w{j % 2}", "cpu_percent": float(rng.uniform(10, 60))}
            for j, t in enumerate(ticks)
        ),
    )
    run.write_locust_info({"warmup_until": T0 + 5.0, "open_loop": open_loop, "records": n})
    run.set_status(RunState.COMPLETED)
    return path


def run_folders(root: Path) -> dict[str, Path]:
    """Every golden run by name: the recorded ones, and the synthetic ones written to ``root``."""
    runs = {p.name: p for p in sorted(RECORDED.iterdir()) if p.is_dir()}
    for name, seed, open_loop, n, ttft_ms in SYNTHETIC:
        folder = root / name
        if not (folder / "status.json").exists():
            synthetic_run(folder, seed, open_loop, n, ttft_ms)
        runs[name] = folder
    return runs


def _clean(value: Any, root: str) -> Any:
    """JSON-safe, with the run folders' location (which differs per machine) left out."""
    from vprof.analysis.run import json_safe

    value = json_safe(value)
    if isinstance(value, dict):
        return {k: _clean(v, root) for k, v in value.items() if k not in ("path",)}
    if isinstance(value, list):
        return [_clean(v, root) for v in value]
    if isinstance(value, str) and root in value:
        return value.replace(root, "<root>")
    return value


def outputs(runs: dict[str, Path]) -> dict[str, Any]:
    """What the golden file holds, computed by today's code."""
    from vprof.analysis import compare, load_run, summarize_run, timeline
    from vprof.analysis.run import summarize_loaded
    from vprof.report.runs import columns, distributions, timelines

    out: dict[str, Any] = {"summaries": {}, "timelines": {}, "comparisons": {}, "report": {}}
    for name, path in runs.items():
        root = str(path.parent)
        out["summaries"][name] = _clean(summarize_run(path, slo=SLO), root)
        run = load_run(path)
        out["timelines"][name] = _clean(timeline(run.records, 5.0).to_dict("records"), root)
        summary = summarize_loaded(run)
        cols = columns(run)
        out["report"][name] = _clean(
            {
                "distributions": distributions(run, summary, cols),
                "timeline": timelines(run, summary, cols),
            },
            root,
        )
    for base, other in PAIRS:
        frame = compare([runs[base], runs[other]], n_boot=N_BOOT, seed=0)
        root = str(runs[base].parent)
        rows = _clean(frame.to_dict("records"), root)
        out["comparisons"][f"{base} vs {other}"] = rows
    return out


def fingerprint(runs: dict[str, Path]) -> dict[str, Any]:
    """Counts and sums of each run's records: a synthetic run that came out differently (another
    numpy, say) is told apart from a summary that changed."""
    import numpy as np

    from vprof.records.store import read_table

    prints = {}
    for name, path in runs.items():
        table = read_table(path / "records.arrow")
        gaps = table.column("itl_ms").combine_chunks().flatten().to_numpy()
        sent = table.column("sent_at").to_numpy()
        prints[name] = {
            "rows": table.num_rows,
            "gaps": int(gaps.size),
            "gap_sum": float(np.sum(gaps)),
            "sent_sum": float(np.nansum(sent - T0)),
        }
    return prints


def main() -> None:
    import tempfile

    if "--write" not in sys.argv:
        print(__doc__)
        return
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_folders(Path(tmp))
        data = {"fingerprint": fingerprint(runs), **outputs(runs)}
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
