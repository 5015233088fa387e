"""The guide's procedures as ladders of profile variants, each rung one bench run.

- batched tokens: ``max-num-batched-tokens`` = max-model-len × 1, 2, 3, … until the server
  fails to start, runs out of memory, or reports preemptions;
- chunked prefill: 128, 256, 512, … batched tokens with chunked prefill on, against the
  non-chunked profile;
- any ``--set key=v1,v2,…`` ladder over another engine argument.

The ladder maths and the recommendation are pure; running the rungs reuses ``run_bench``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import ProfileError

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.runs.bench import BenchSpec, RunOutcome


@dataclass(frozen=True)
class Rung:
    label: str
    overrides: Mapping[str, Any]


def batched_tokens_ladder(profile: Profile, rungs: int) -> list[Rung]:
    """max-num-batched-tokens from max-model-len upward, ×1, ×2, ×3, … (the guide's ladder)."""
    max_model_len = profile.engine_args.get("max-model-len")
    if not isinstance(max_model_len, int):
        raise ProfileError(
            "the batched-tokens sweep starts at max-model-len, which this profile does not set",
            path=profile.source,
            key="max-model-len",
            hint="add it or pass --set max-model-len=N",
        )
    return [
        Rung(
            f"{profile.name}@mnbt={k * max_model_len}",
            {"max-num-batched-tokens": k * max_model_len},
        )
        for k in range(1, rungs + 1)
    ]


def chunked_ladder(profile: Profile, sizes: Sequence[int]) -> list[Rung]:
    """The non-chunked profile, then chunked prefill at each batched-token size."""
    max_model_len = profile.engine_args.get("max-model-len")
    baseline: dict[str, Any] = {"enable-chunked-prefill": False}
    if isinstance(max_model_len, int):
        current = profile.engine_args.get("max-num-batched-tokens", 0)
        baseline["max-num-batched-tokens"] = max(int(current or 0), max_model_len)
    rungs = [Rung(f"{profile.name}@no-chunked", baseline)]
    rungs += [
        Rung(
            f"{profile.name}@chunked-{n}",
            {"enable-chunked-prefill": True, "max-num-batched-tokens": n},
        )
        for n in sizes
    ]
    return rungs


def set_ladder(profile: Profile, key: str, values: Sequence[Any]) -> list[Rung]:
    return [Rung(f"{profile.name}@{key}={v}", {key: v}) for v in values]


def parse_ladder_values(text: str) -> list[Any]:
    """``"128,256,true"`` → ``[128, 256, True]`` (YAML scalars)."""
    import yaml

    return [yaml.safe_load(part.strip()) for part in text.split(",") if part.strip()]


def variant(profile: Profile, rung: Rung) -> Profile:
    return replace(profile.with_overrides(set_args=dict(rung.overrides)), name=rung.label)


def load_ladder(traffic: str, levels: Sequence[float], folder: Path) -> list[str]:
    """The traffic shape at each load level, written as YAML files the Locust side reads.

    Open-loop shapes climb ``rate_rps``; closed-loop shapes climb ``users``. The files sit in
    ``folder`` and are named ``<shape>@<field>=<level>.yaml``, so run folders say the level.
    """
    import yaml

    from vprof.traffic import get_shape

    shape = get_shape(traffic)
    field = "rate_rps" if shape.open_loop else "users"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for level in levels:
        value: float | int = float(level) if shape.open_loop else int(level)
        if value <= 0:
            raise ProfileError(f"load levels must be positive, got {level!r}", key="--levels")
        data = {k: v for k, v in shape.to_dict().items() if k not in ("name", "source")}
        data[field] = value
        data["description"] = f"{shape.description} (at {field}={value:g})"
        path = folder / f"{shape.name}@{field}={value:g}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths.append(str(path))
    return paths


# --- reading the evidence -------------------------------------------------------------------

_OOM = (
    "out of memory",
    "outofmemory",
    "cannot allocate memory",
    "no available memory for the cache",
)


def _server_log_oom(run_path) -> bool:
    try:
        text = (run_path / "server.log").read_text(errors="replace").lower()
    except OSError:
        return False
    return any(marker in text for marker in _OOM)


def rung_row(rung: Rung, outcome: RunOutcome | None) -> dict[str, Any]:
    """One table row for a rung: what happened and the numbers that decide between rungs."""
    row: dict[str, Any] = {"rung": rung.label, **{k: v for k, v in rung.overrides.items()}}
    if outcome is None:
        return {**row, "state": "not run"}
    row["state"] = outcome.state if outcome.state != "skipped" else "completed"
    summary = {}
    try:
        summary = json.loads((outcome.run.path / "summary.json").read_text())
    except (OSError, ValueError):
        pass
    for key in (
        "request_throughput",
        "output_throughput",
        "median_ttft_ms",
        "p95_ttft_ms",
        "p95_itl_ms",
        "p95_tpot_ms",
        "num_preemptions",
        "max_kv_cache_usage_perc",
        "failed",
    ):
        row[key] = summary.get(key)
    row["oom"] = (
        outcome.state == "not-started"
        and "memory" in outcome.reason.lower()
        or (outcome.run.path.exists() and _server_log_oom(outcome.run.path))
    )
    if outcome.state == "not-started":
        row["note"] = outcome.reason.splitlines()[0][:120] if outcome.reason else "did not start"
    return row


def should_stop(row: Mapping[str, Any]) -> str | None:
    """The guide's stopping rule: failure to start, out of memory, or preemptions."""
    if row.get("state") == "not-started":
        return "the server failed to start"
    if row.get("oom"):
        return "the server ran out of memory"
    if (row.get("num_preemptions") or 0) > 0:
        return f"the server reported {row['num_preemptions']:.0f} preemptions"
    if row.get("state") == "failed":
        return "the run failed"
    return None


def recommend(rows: Sequence[Mapping[str, Any]], *, prefer: str = "throughput") -> str:
    """Name the best healthy rung and the evidence for it.

    ``prefer="throughput"``: highest request throughput, ties (within 3 %) broken by lower
    p95 TTFT. ``prefer="itl"``: lowest p95 ITL among rungs within 10 % of the best throughput.
    """
    healthy = [
        r
        for r in rows
        if r.get("state") == "completed"
        and not r.get("oom")
        and not (r.get("num_preemptions") or 0)
        and isinstance(r.get("request_throughput"), (int, float))
        and r["request_throughput"] > 0
    ]
    if not healthy:
        return "No rung completed cleanly, so there is nothing to recommend; see the table."
    best_tp = max(r["request_throughput"] for r in healthy)

    def num(r: Mapping[str, Any], key: str) -> float:
        value = r.get(key)
        return (
            float(value) if isinstance(value, (int, float)) and not math.isnan(value) else math.inf
        )

    if prefer == "itl":
        pool = [r for r in healthy if r["request_throughput"] >= 0.9 * best_tp]
        choice = min(pool, key=lambda r: (num(r, "p95_itl_ms"), -r["request_throughput"]))
        why = "lowest p95 inter-token latency among rungs within 10 % of the best throughput"
    else:
        pool = [r for r in healthy if r["request_throughput"] >= 0.97 * best_tp]
        choice = min(pool, key=lambda r: (num(r, "p95_ttft_ms"), -r["request_throughput"]))
        why = "highest request throughput (ties within 3 % broken by lower p95 TTFT)"
    return (
        f"Recommended: {choice['rung']} — {why}: "
        f"{choice['request_throughput']:.2f} req/s, p95 TTFT {num(choice, 'p95_ttft_ms'):.0f} ms, "
        f"p95 ITL {num(choice, 'p95_itl_ms'):.1f} ms "
        f"(best throughput over {len(healthy)} healthy rung(s): {best_tp:.2f} req/s)."
    )


def run_ladder(
    base: Profile, rungs: Sequence[Rung], spec: BenchSpec, say, *, stop_early: bool
) -> list[dict[str, Any]]:
    """Run rung after rung; with ``stop_early`` stop at the first that breaks the guide's rule."""
    from vprof.runs.bench import run_bench

    rows: list[dict[str, Any]] = []
    for i, rung in enumerate(rungs):
        outcomes = run_bench([variant(base, rung)], spec, say)
        row = rung_row(rung, outcomes[0] if outcomes else None)
        rows.append(row)
        reason = should_stop(row)
        if stop_early and reason:
            say(f"stopping the ladder at {rung.label}: {reason}")
            rows += [{"rung": r.label, **r.overrides, "state": "not run"} for r in rungs[i + 1 :]]
            break
    return rows
