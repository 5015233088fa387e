"""The guide's procedures as ladders of profile variants, each rung one bench run.

- batched tokens: ``max-num-batched-tokens`` = max-model-len × 1, 2, 3, … until the server
  fails to start, runs out of memory, or reports preemptions;
- chunked prefill: 128, 256, 512, … batched tokens with chunked prefill on, against the
  non-chunked profile;
- any ``--set key=v1,v2,…`` ladder over another engine argument.

- a load ladder: one profile's offered load (rate or users) climbed on one server, for plans.

The ladder maths and the recommendation are pure; running the rungs reuses ``run_bench``, and
each sweep writes its rows and recommendation to the bench folder's ``sweep.json``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.analysis.keys import BOTTLENECK, CLIENT_FIX, SummaryKey, client_limit
from vprof.common.errors import ProfileError, RunError, WorkloadError
from vprof.common.numbers import MAX_TOKENS, check_number, parse_number_list
from vprof.records.rundir import RunState, read_json, sweep_manifest, write_json_atomic
from vprof.runs.spec import MEASURED, NOT_STARTED, SKIPPED, level_cut_s, nested
from vprof.server.logparse import mentions_oom
from vprof.traffic.shape import level_name

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.runs.spec import BenchSpec, RunOutcome
    from vprof.traffic import TrafficShape

Progress = Callable[[str], None]
NOT_RUN = "not run"  # a rung after the ladder stopped


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


MAX_RUNGS = 100  # each rung is a server start and a run of minutes


def parse_sizes(text: str) -> list[int]:
    """``--sizes 128,256,512`` → batched-token sizes: whole numbers from 1 to MAX_TOKENS."""

    return parse_number_list(
        text,
        minimum=1,
        maximum=MAX_TOKENS,
        integer=True,
        max_items=MAX_RUNGS,
        error=ProfileError,
        key="--sizes",
    )


def parse_levels(text: str) -> list[float]:
    """``--levels 2,4,8`` → load levels: positive, finite (rates or user counts)."""

    return parse_number_list(
        text,
        above=0,
        maximum=1_000_000,
        max_items=MAX_RUNGS,
        error=ProfileError,
        key="--levels",
    )


def variant(profile: Profile, rung: Rung) -> Profile:
    return replace(profile.with_overrides(set_args=dict(rung.overrides)), name=rung.label)


def load_ladder(traffic: str | TrafficShape, levels: Sequence[float]) -> list[TrafficShape]:
    """The traffic shape at each load level: open-loop shapes climb ``rate_rps``, closed-loop
    shapes climb ``users``. Each is named ``<shape>@<field>=<level>``, so run folders say it."""
    from vprof.traffic import get_shape

    shape = get_shape(traffic) if isinstance(traffic, str) else traffic
    field = "rate_rps" if shape.open_loop else "users"
    shapes = []
    for level in levels:
        value: float | int = check_number(
            level,
            above=0,
            integer=not shape.open_loop,
            error=WorkloadError,
            key="--levels",
            hint=None if shape.open_loop else f"{shape.name} is closed-loop: levels are users",
        )
        try:  # the shape's own checks, as for a file (e.g. how many requests a rate schedules)
            shapes.append(
                replace(
                    shape,
                    name=level_name(shape.name, field, value),
                    description=f"{shape.description} (at {field}={value:g})",
                    **{field: value},
                )
            )
        except WorkloadError as exc:
            raise WorkloadError(exc.message, key="--levels", hint=exc.hint) from None
    return shapes


# --- reading the evidence -------------------------------------------------------------------


def _server_log_oom(outcome: RunOutcome) -> bool:
    try:
        text = outcome.run.server_log.read_text(errors="replace")
    except OSError:
        return False
    return mentions_oom(text)


# The summary numbers a rung's row shows: what decides between rungs.
ROW_KEYS = (
    SummaryKey.REQUEST_THROUGHPUT,
    SummaryKey.OUTPUT_THROUGHPUT,
    SummaryKey.MEDIAN_TTFT_MS,
    SummaryKey.P95_TTFT_MS,
    SummaryKey.P95_TTFT_FROM_SCHEDULE_MS,
    SummaryKey.P95_ITL_MS,
    SummaryKey.P95_TPOT_MS,
    SummaryKey.NUM_PREEMPTIONS,
    SummaryKey.MAX_KV_CACHE_USAGE_PERC,
    SummaryKey.FAILED,
    SummaryKey.CLIENT_LIMITED,
)


def rung_row(rung: Rung, outcomes: RunOutcome | Sequence[RunOutcome] | None) -> dict[str, Any]:
    """One table row for a rung: what happened and the numbers that decide between rungs.

    With repeats (several outcomes) the numbers are the mean over the repeats that measured
    them, ``repeats`` says how many there were, and the state is the worst of them.
    """
    if outcomes is None or isinstance(outcomes, Sequence):
        runs = list(outcomes or [])
        if len(runs) != 1:
            return _mean_row(rung, [_one_row(rung, o) for o in runs])
        outcomes = runs[0]
    return _one_row(rung, outcomes)


def _mean_row(rung: Rung, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"rung": rung.label, **rung.overrides, "state": NOT_RUN}
    worst = next((r for r in rows if r["state"] != RunState.COMPLETED), rows[0])
    # "run" names the first repeat's folder (as a single run's row does); "runs" lists them all
    runs = [r["run"] for r in rows if r.get("run")]
    out: dict[str, Any] = {
        **worst,
        "repeats": len(rows),
        "run": runs[0] if runs else None,
        "runs": runs,
    }
    for key in ROW_KEYS:
        if key == SummaryKey.CLIENT_LIMITED:
            out[key] = any(r.get(key) for r in rows)
            out["client_limit"] = next((r["client_limit"] for r in rows if r.get(key)), None)
            continue
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        values = [v for v in values if not math.isnan(v)]
        out[key] = sum(values) / len(values) if values else None
    out["oom"] = any(r.get("oom") for r in rows)
    return out


def _one_row(rung: Rung, outcome: RunOutcome | None) -> dict[str, Any]:
    row: dict[str, Any] = {"rung": rung.label, **{k: v for k, v in rung.overrides.items()}}
    if outcome is None:
        return {**row, "state": NOT_RUN}
    row["state"] = outcome.state if outcome.state != SKIPPED else RunState.COMPLETED.value
    row["run"] = outcome.run.name
    summary = read_json(outcome.run.summary_json, strict=False)
    for key in ROW_KEYS:
        row[key] = summary.get(key)
    if summary.get(SummaryKey.CLIENT_LIMITED):
        row["client_limit"] = list(client_limit(summary))  # why, and what to do
    row["oom"] = (
        outcome.state == NOT_STARTED
        and "memory" in outcome.reason.lower()
        or (outcome.run.path.exists() and _server_log_oom(outcome))
    )
    if outcome.state == NOT_STARTED:
        row["note"] = outcome.reason.splitlines()[0][:120] if outcome.reason else "did not start"
    elif outcome.state not in MEASURED and outcome.reason:
        row["note"] = outcome.reason.splitlines()[0][:120]
    return row


def unmeasured(rows: Sequence[Mapping[str, Any]]) -> str:
    """Why a ladder is no answer: no rung measured anything (``""`` when one did). Names the
    first rung that was tried and what became of it; the command exits 1 with it."""
    if any(row.get("state") in MEASURED for row in rows):
        return ""
    tried = [row for row in rows if row.get("state") != NOT_RUN]
    if not tried:
        return "no rung was measured (none ran)"
    first = tried[0]
    what = "did not start" if first.get("state") == NOT_STARTED else str(first.get("state"))
    note = first.get("note")
    if note and note != "did not start":
        what = f"{what}: {note}"
    return f"no rung was measured ({first['rung']} {what})"


def should_stop(row: Mapping[str, Any]) -> str | None:
    """The guide's stopping rule: failure to start, out of memory, or preemptions."""
    if row.get("state") == NOT_STARTED:
        return "the server failed to start"
    if row.get("oom"):
        return "the server ran out of memory"
    if (row.get(SummaryKey.NUM_PREEMPTIONS) or 0) > 0:
        return f"the server reported {row[SummaryKey.NUM_PREEMPTIONS]:.0f} preemptions"
    if row.get("state") == RunState.FAILED:
        return "the run failed"
    return None


def recommend(rows: Sequence[Mapping[str, Any]], *, prefer: str = "throughput") -> str:
    """Name the best healthy rung and the evidence for it.

    ``prefer="throughput"``: highest request throughput, ties (within 3 %) broken by lower
    p95 TTFT. ``prefer="itl"``: lowest p95 ITL among rungs within 10 % of the best throughput.
    """
    tp, ttft, itl = SummaryKey.REQUEST_THROUGHPUT, SummaryKey.P95_TTFT_MS, SummaryKey.P95_ITL_MS
    healthy = [
        r
        for r in rows
        if r.get("state") == RunState.COMPLETED
        and not r.get("oom")
        and not (r.get(SummaryKey.NUM_PREEMPTIONS) or 0)
        and not r.get(SummaryKey.CLIENT_LIMITED)
        and not (r.get(SummaryKey.FAILED) or 0)
        and isinstance(r.get(tp), (int, float))
        and r[tp] > 0
    ]
    # a rung whose requests failed is left out for that (its users backed off after failures);
    # the others client-limited, by why (a row without it: the generic advice)
    suspect: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.get(SummaryKey.CLIENT_LIMITED) and not (r.get(SummaryKey.FAILED) or 0):
            what, fix = r.get("client_limit") or (BOTTLENECK, CLIENT_FIX)
            suspect.setdefault((str(what), str(fix)), []).append(str(r["rung"]))
    caveat = "".join(
        f" Left out because {what}: {', '.join(rungs)} "
        + (f"(re-run them: {fix})." if what == BOTTLENECK else f"({fix}).")
        for (what, fix), rungs in suspect.items()
    )
    failing = [
        f"{r['rung']} ({r[SummaryKey.FAILED]:.0f})"
        for r in rows
        if r.get("state") == RunState.COMPLETED and (r.get(SummaryKey.FAILED) or 0)
    ]
    if failing:
        caveat += f" Left out because requests failed: {', '.join(failing)}."
    if not healthy:
        return (
            "No rung completed cleanly, so there is nothing to recommend; see the table." + caveat
        )
    best_tp = max(r[tp] for r in healthy)
    if all(r.get(SummaryKey.P95_TTFT_FROM_SCHEDULE_MS) is not None for r in healthy):
        ttft = SummaryKey.P95_TTFT_FROM_SCHEDULE_MS  # open loop: from the intended send time

    def num(r: Mapping[str, Any], key: str) -> float:
        value = r.get(key)
        return (
            float(value) if isinstance(value, (int, float)) and not math.isnan(value) else math.inf
        )

    if prefer == "itl":
        pool = [r for r in healthy if r[tp] >= 0.9 * best_tp]
        choice = min(pool, key=lambda r: (num(r, itl), -r[tp]))
        why = "lowest p95 inter-token latency among rungs within 10 % of the best throughput"
    else:
        pool = [r for r in healthy if r[tp] >= 0.97 * best_tp]
        choice = min(pool, key=lambda r: (num(r, ttft), -r[tp]))
        why = "highest request throughput (ties within 3 % broken by lower p95 TTFT)"
    return (
        f"Recommended: {choice['rung']} — {why}: "
        f"{choice[tp]:.2f} req/s, p95 TTFT {num(choice, ttft):.0f} ms, "
        f"p95 ITL {num(choice, itl):.1f} ms "
        f"(best throughput over {len(healthy)} healthy rung(s): {best_tp:.2f} req/s)."
    ) + caveat


def write_sweep(
    folder: Path, kind: str, profile: str, rows: Sequence[Mapping[str, Any]], recommendation: str
) -> Path | None:
    """Record a sweep's ladder, its rows (each naming its run folder) and its recommendation in
    the bench folder, for reports. A ladder none of whose rungs ran writes nothing (and leaves
    an earlier sweep's manifest as it was): ``None``."""
    if not any(row.get("state") not in (NOT_STARTED, NOT_RUN) for row in rows):
        return None
    path = sweep_manifest(folder)
    write_json_atomic(
        path,
        {"kind": kind, "profile": profile, "rows": list(rows), "recommendation": recommendation},
    )
    return path


def check_ladder(spec: BenchSpec) -> None:
    """Refuse a settings ladder against ``--url``: each rung needs its own server settings,
    and vprof cannot restart a server it did not start (every rung would measure the same)."""
    if spec.url:
        raise RunError(
            f"a sweep of server settings restarts the server for each rung, but vprof did not "
            f"start the server at {spec.url} and cannot change its settings: every rung would "
            "measure the same unchanged server",
            key="--url",
            hint="leave out --url to let vprof launch each rung; `vprof sweep load` works "
            "with --url (its rungs change the load, not the server)",
        )


def run_ladder(
    base: Profile, rungs: Sequence[Rung], spec: BenchSpec, say: Progress, *, stop_early: bool
) -> list[dict[str, Any]]:
    """Run rung after rung; with ``stop_early`` stop at the first that breaks the guide's rule."""
    from vprof.runs.bench import run_bench

    check_ladder(spec)
    if not stop_early:  # one bench: repeats interleave across the rungs
        outcomes = run_bench([variant(base, rung) for rung in rungs], spec, say)
        return [rung_row(rung, [o for o in outcomes if o.profile == rung.label]) for rung in rungs]
    rows: list[dict[str, Any]] = []
    for i, rung in enumerate(rungs):
        row = rung_row(rung, run_bench([variant(base, rung)], spec, nested(say, i, len(rungs))))
        rows.append(row)
        reason = should_stop(row)
        if reason:
            say(f"stopping the ladder at {rung.label}: {reason}")
            rows += [{"rung": r.label, **r.overrides, "state": NOT_RUN} for r in rungs[i + 1 :]]
            break
    return rows


def run_load_ladder(
    profile: Profile,
    traffic: str | TrafficShape,
    levels: Sequence[float],
    spec: BenchSpec,
    say: Progress,
) -> tuple[list[dict[str, Any]], list[RunOutcome]]:
    """Climb ``traffic``'s load through ``levels`` on one server of ``profile``: one run per
    level. Returns a row per level and the outcomes (for a capacity plan)."""
    from vprof.runs.bench import run_bench

    shapes = load_ladder(traffic, levels)
    ladder = replace(spec, traffic=tuple(shapes), cut_in_flight_s=level_cut_s(spec.slo))
    outcomes = run_bench([profile], ladder, say)
    rows = [
        rung_row(Rung(shape.name, {}), [o for o in outcomes if o.traffic == shape.name])
        for shape in shapes
    ]
    return rows, outcomes
