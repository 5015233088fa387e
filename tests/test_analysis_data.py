"""Synthetic but realistic run folders for the analysis tests (no tests here).

Records are built with the real ``RequestRecord.finalize`` and written with the real
``RecordWriter``, so the tests exercise the same files a run produces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vprof.records import RecordWriter, RequestRecord

T0 = 1_800_000_000.0  # a fixed wall-clock epoch for reproducible files


def synth_records(
    n: int,
    *,
    seed: int = 0,
    rate_rps: float = 4.0,
    ttft_ms: float = 80.0,
    itl_ms: float = 20.0,
    tokens: tuple[int, int] = (1, 40),
    fail_every: int = 0,
    cancel_every: int = 0,
    open_loop: bool = False,
    lag_ms: float = 0.0,
    start: float = T0,
) -> list[RequestRecord]:
    """``n`` finalised records: lognormal TTFT and gaps, Poisson-ish sends, some failures."""
    rng = np.random.default_rng(seed)
    records = []
    sent = start
    for i in range(n):
        scheduled = start + i / rate_rps
        sent = scheduled + (rng.exponential(lag_ms) if lag_ms else 0.0) / 1000.0
        rec = RequestRecord(
            request_id=f"r{i}",
            user_class="ChatUser",
            endpoint="completions",
            worker=f"w{i % 2}",
            open_loop=open_loop,
            prefix_group=i % 3,
            scheduled_at=scheduled if open_loop else float("nan"),
            sent_at=sent,
            expected_prompt_tokens=100,
            expected_output_tokens=tokens[1],
        )
        if fail_every and i % fail_every == fail_every - 1:
            rec.status, rec.http_status, rec.error = "error", 500, "Internal Server Error"
            rec.finished_at = sent + 0.05
        elif cancel_every and i % cancel_every == cancel_every - 1:
            rec.status, rec.error = "cancelled", "test stopped"
            rec.finished_at = sent + 0.01
        else:
            out = int(rng.integers(tokens[0], tokens[1] + 1))
            gaps = rng.lognormal(np.log(itl_ms), 0.4, size=max(out - 1, 0))
            rec.first_token_at = sent + rng.lognormal(np.log(ttft_ms), 0.5) / 1000.0
            rec.itl_ms = [float(g) for g in gaps]
            rec.last_token_at = rec.first_token_at + float(gaps.sum()) / 1000.0
            rec.finished_at = rec.last_token_at + 0.002
            rec.prompt_tokens = int(rng.integers(90, 110))
            rec.completion_tokens = out
            rec.cached_tokens = 32 if i % 3 == 0 else 0
            rec.http_status = 200
        records.append(rec.finalize())
    return records


def write_run(
    path: Path,
    records: list[RequestRecord],
    *,
    name: str | None = None,
    profile: str = "baseline",
    warmup_until: float | None = None,
    state: str = "completed",
    open_loop: bool = False,
    metrics: list[dict[str, Any]] | None = None,
    loadgen: list[dict[str, Any]] | None = None,
    meta: dict[str, Any] | None = None,
    locust: dict[str, Any] | None = None,
) -> Path:
    """A run folder as the bench orchestrator and the Locust side write it (``meta``: more
    keys of run.json)."""
    path.mkdir(parents=True, exist_ok=True)
    with RecordWriter(path / "records.arrow", batch_size=64) as writer:
        writer.extend(records)
    run = {
        "name": name or path.name,
        "profile": {"name": profile, "identity": f"{profile}-abc123", "argv": [], "env": {}},
        "workload": {"name": "chat"},
        "traffic": {"name": "steady"},
        "seed": 0,
        "open_loop": open_loop,
        "vllm_version": "0.32.0",
        **(meta or {}),
    }
    (path / "run.json").write_text(json.dumps(run))
    info = {
        "started_at": T0,
        "warmup_until": warmup_until,
        "open_loop": open_loop,
        **(locust or {}),
    }
    (path / "locust.json").write_text(json.dumps(info))
    (path / "status.json").write_text(json.dumps({"state": state, "reason": ""}))
    for file, rows in (("metrics.jsonl", metrics), ("loadgen.jsonl", loadgen)):
        if rows is not None:
            (path / file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def synth_alternating(
    path: Path,
    *,
    blocks: int,
    shift: float = 1.0,
    drift_per_slice: float = 0.0,
    slice_noise: float = 0.05,
    slice_s: float = 20.0,
    warmup_s: float = 5.0,
    rate_rps: float = 8.0,
    seed: int = 0,
    names: tuple[str, str] = ("a", "b"),
    stop_early_s: float = 0.0,
    late_s: Mapping[int, float] | None = None,
) -> Path:
    """An alternating run of two sides (as ``bench --alternate`` writes one): ABBA slices,
    every latency of a slice scaled by a shared drift (``drift_per_slice`` per slice, so the
    host slows steadily), a per-slice factor (``slice_noise``) and, on side b, ``shift``.
    ``late_s`` {k: s}: slice k's last answer ends s after the next slice starts."""
    from vprof.traffic.slices import SliceSchedule

    rng = np.random.default_rng(seed)
    schedule = SliceSchedule(epoch=T0, slice_s=slice_s, warmup_s=warmup_s, sides=2)
    urls = ("http://127.0.0.1:1", "http://127.0.0.1:2")
    records: list[RequestRecord] = []
    slices = blocks * 2
    for k in range(slices):
        side = schedule.side_of(k)
        factor = (1 + drift_per_slice) ** k * float(rng.lognormal(0, slice_noise))
        factor *= shift if side == 1 else 1.0
        batch = synth_records(
            int(rate_rps * slice_s),
            seed=seed * 1000 + k,
            rate_rps=rate_rps,
            ttft_ms=80.0 * factor,
            itl_ms=20.0 * factor,
            start=schedule.start(k),
        )
        for i, rec in enumerate(batch):
            rec.request_id, rec.slice, rec.replica = f"{k * 1_000_000 + i}", k, urls[side]
        if late_s and k in late_s:
            batch[-1].last_token_at = batch[-1].finished_at = schedule.start(k + 1) + late_s[k]
        records += batch
    sides = [
        {"name": name, "urls": [url], "profile": {"name": name, "identity": f"{name}-x"}}
        for name, url in zip(names, urls, strict=True)
    ]
    return write_run(
        path,
        records,
        meta={"alternate": {"sides": sides, "phase": 1, "swapped": False}},
        locust={"slices": schedule.to_dict(), "stopped_at": T0 + slices * slice_s - stop_early_s},
    )
