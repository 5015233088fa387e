"""What a tune leaves: its table of trials, its answer, and its files.

``tune.json`` (what was asked, the space, every trial with its evidence, the answer, and the
candidates whose server would not start), ``sweep.json`` (the trials as a ladder, for
``vprof report``) and the best as a profile that ``extends:`` the starting one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.records.rundir import TUNE_FILE, tune_manifest, write_json_atomic
from vprof.runs.tuneevidence import Objective, TrialResult, TuneResult
from vprof.runs.tunerequest import Prepared, request_of

if TYPE_CHECKING:
    from vprof.registry import Profile


@dataclass
class TuneOutcome:
    """What a tune leaves: the search's result, its table, and the files it wrote."""

    result: TuneResult
    rows: list[dict[str, Any]]
    answer: str
    folder: Path
    profile_path: Path | None = None
    report_path: Path | None = None
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- words and tables


def trial_rows(result: TuneResult, objective: Objective) -> list[dict[str, Any]]:
    """One row per candidate the search considered (refused ones too), with its evidence."""
    best_score = objective.score(result.best)
    start = result.start.as_dict()
    rows = []
    for t in result.trials:
        score = objective.score(t)
        changes = {
            k: v
            for k, v in t.candidate.settings
            if start.get(k) != v or type(start.get(k)) is not type(v)
        }
        row: dict[str, Any] = {
            "trial": t.number,
            "stage": t.stage,
            "candidate": t.label,
            "changes": ", ".join(f"{k}={_text(v)}" for k, v in changes.items()) or "(start)",
            "state": t.state,
            "levels": t.levels_text(),
            "sustainable_rps": t.sustainable_rps,
            "binding": t.binding,
        }
        if objective.kind == "min-latency":
            row["latency_ms"] = t.latency_ms
        row["vs_best_pct"] = (
            (score / best_score - 1) * 100
            if score is not None and best_score not in (None, 0)
            else None
        )
        if objective.kind == "min-latency" and row["vs_best_pct"] is not None:
            row["vs_best_pct"] = -row["vs_best_pct"]  # scores are negated latencies
        row.update(
            best=t is result.best,
            preempted=t.preempted,
            server=t.server_started,
            wall_s=round(t.wall_s, 1),
            confirmed=t.confirmed,
            note=t.note,
            settings=t.candidate.as_dict(),
            evidence=_evidence_run(t),
            runs=[m.run for m in t.measurements if m.run],
        )
        rows.append(row)
    return rows


def _evidence_run(trial: TrialResult) -> str:
    """The run its answer rests on: its highest level that met the SLO, else its first."""
    met = [m for m in trial.measurements if m.met and m.run]
    if met:
        return max(met, key=lambda m: m.rate_rps).run
    return next((m.run for m in trial.measurements if m.run), "")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def answer_text(result: TuneResult, prepared: Prepared) -> str:
    """The answer in one paragraph: the best, what it sustains, and what it rests on."""
    best, objective = result.best, prepared.objective
    measured = len(result.measured)
    if result.environment:
        return (
            f"Stopped: {result.environment}. Every candidate would fail the same way, so none "
            f"more was tried ({measured} measured before). Fix it and run the same command "
            "again: what completed is kept."
        )
    if result.tried and not measured:
        return (
            f"Nothing was measured: the server of none of the {len(result.tried)} candidates "
            "tried started (see each row's note); fix what the notes say, or widen --space."
        )
    if best is None:
        return (
            f"No candidate met {prepared.slo} ({measured} measured, {result.stopped_by}); "
            "see the table: try a lower --start-rps, a looser SLO or a wider --space."
        )
    if objective.kind == "min-latency":
        what = (
            f"lowest {prepared.slo.targets[0].key} {best.latency_ms:.1f} ms at "
            f"{objective.target_rps:g} req/s"
        )
    else:
        what = f"{best.sustainable_rps:.2f} req/s per replica ({best.binding or 'nothing'} binds)"
        if objective.kind == "min-cost":
            what += f", {best.gpus} GPU{'s' if best.gpus != 1 else ''} each"
            if objective.target_rps:
                replicas = math.ceil(
                    objective.target_rps
                    / (best.sustainable_rps or math.inf)
                    * (1 + objective.headroom)
                    - 1e-9
                )
                plural = "s" if replicas != 1 else ""
                what += (
                    f"; {objective.target_rps:g} req/s needs {replicas} replica{plural} "
                    f"= {replicas * best.gpus} GPUs"
                )
                if objective.gpu_hour_price:
                    what += f" = {replicas * best.gpus * objective.gpu_hour_price:,.2f}/hour"
    start = next((t for t in result.trials if t.candidate == result.start), None)
    versus = ""
    if start is not None and start is not best and objective.score(start) is not None:
        if objective.kind == "min-latency":
            versus = f"; the starting settings: {start.latency_ms:.1f} ms"
        else:
            versus = f"; the starting settings: {start.sustainable_rps:.2f} req/s"
    elif start is best:
        versus = "; the starting settings were already the best found"
    confirmed = f" {best.confirmed}." if best.confirmed else ""
    return (
        f"Best: {best.label} — {what}{versus}. {measured} of {prepared.space.grid_size()} "
        f"candidates measured, {result.servers_started} server start"
        f"{'s' if result.servers_started != 1 else ''}, {result.wall_s / 60:.1f} min; "
        f"stopped: {result.stopped_by}.{confirmed}"
    )


def tune_notes(result: TuneResult, repeat: int) -> list[str]:
    notes = []
    confirmation = result.confirmation
    if confirmation.get("skipped"):
        notes.append(str(confirmation["skipped"]))
    for verdict in confirmation.get("verdicts", []):
        notes.append(f"near tie with {verdict['vs']}: {verdict['verdict']}")
    best = result.best
    if best is not None and best.binding == "client limit":
        notes.append(
            "the load generator was the bottleneck above the best's rate: its capacity may be "
            "higher (re-run with --processes N)"
        )
    if best is not None and best.preempted:
        notes.append(f"{best.label} reported preemptions: the KV cache was short")
    if repeat < 2:
        notes.append("--repeat 1: near ties were not measured again; the answer rests on one run")
    return notes


# --------------------------------------------------------------------------- files


def write_tuned_profile(prepared: Prepared, result: TuneResult, tuned: Profile, path: Path) -> Path:
    """The best candidate as a profile YAML that ``extends:`` the starting profile, holding the
    engine arguments that differ from it; checked by the validator once written."""
    import yaml

    from vprof.records.outputs import TUNED_PROFILE_HEADER, write_output
    from vprof.registry import get_profile, validate

    best = result.best
    assert best is not None
    on_disk = prepared.on_disk
    args: dict[str, Any] = {}
    for key, value in tuned.engine_args.items():
        if key in ("port", "host"):
            continue  # where a server listens is not a tuning result
        old = on_disk.engine_args.get(key)
        if old is None or old != value or type(old) is not type(value):
            args[key] = value
    for key in on_disk.engine_args:
        if key not in tuned.engine_args and key not in ("port", "host"):
            args[key] = None  # dropped with --set KEY=
    data: dict[str, Any] = {"description": _description(prepared, result), "extends": on_disk.name}
    if tuned.model != on_disk.model and prepared.request.model is not None:
        data["model"] = tuned.model
    data["engine_args"] = args
    header = [
        f"{TUNED_PROFILE_HEADER.removeprefix('# ')} on {time.strftime('%Y-%m-%d %H:%M')}: "
        f"the best of {len(result.measured)} measured candidates.",
        f"Evidence: {TUNE_FILE} and the run folders beside this file; "
        f"{best.confirmed or 'one rate search'}.",
        f"Launch: vprof launch {path}" + _dirs_hint(prepared),
    ]
    text = "".join(f"# {line}\n" for line in header)
    # one line per value: the description stays whole however long it is
    text += yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
    write_output(path, text)
    profile = get_profile(str(path), list(prepared.request.profiles_dirs))
    validate(profile)  # a profile vprof writes must pass its own validator
    return path


def _dirs_hint(prepared: Prepared) -> str:
    return "".join(f" --profiles-dir {d}" for d in prepared.request.profiles_dirs)


def _description(prepared: Prepared, result: TuneResult) -> str:
    best = result.best
    assert best is not None
    if prepared.objective.kind == "min-latency":
        measured = (
            f"{best.latency_ms:.1f} ms ({prepared.slo.targets[0].key}) at "
            f"{prepared.objective.target_rps:g} req/s"
        )
    else:
        measured = f"{best.sustainable_rps:.2f} req/s per replica measured"
    return (
        f"Tuned by vprof tune for workload {prepared.workload_name} within {prepared.slo}: "
        f"{measured} ({prepared.objective.kind}, best of {len(result.measured)} candidates)"
    )


def write_state(
    folder: Path,
    prepared: Prepared,
    trials_so_far: int,
    failures: Mapping[str, str],
    outcome: TuneOutcome | None,
    rows: list[dict[str, Any]],
) -> None:
    import sys

    request = prepared.request
    data: dict[str, Any] = {
        **request_of(prepared),
        "start": prepared.start.as_dict(),
        "repeat": request.repeat,
        "guided": request.guided,
        "command": sys.argv,
        "start_failures": dict(failures),
        "updated_at": time.time(),
    }
    if outcome is not None:
        result = outcome.result
        data.update(
            trials=rows,
            best=result.best.label if result.best else None,
            best_settings=result.best.candidate.as_dict() if result.best else None,
            sustainable_rps=result.best.sustainable_rps if result.best else None,
            answer=outcome.answer,
            notes=outcome.notes,
            stopped_by=result.stopped_by,
            confirmation=result.confirmation,
            servers_started=result.servers_started,
            candidates_measured=len(result.measured),
            candidates_tried=len(result.tried),
            environment=result.environment or None,
            grid_size=prepared.space.grid_size(),
            wall_s=result.wall_s,
            profile_path=str(outcome.profile_path) if outcome.profile_path else None,
        )
    else:
        data["trials_so_far"] = trials_so_far
    write_json_atomic(tune_manifest(folder), data)


def write_sweep_manifest(
    folder: Path, profile: str, rows: Sequence[Mapping[str, Any]], answer: str
) -> Path:
    """The trials as a ladder for ``vprof report``: one rung per candidate, naming the run of
    its highest level that met the SLO (else its first level)."""
    from vprof.runs.sweep import write_sweep

    rungs = []
    for row in rows:
        skip = ("runs", "settings", "candidate", "evidence")
        rung = {"rung": row["candidate"], **{k: v for k, v in row.items() if k not in skip}}
        if row.get("evidence"):
            rung["run"] = Path(row["evidence"]).name
        rungs.append(rung)
    return write_sweep(folder, "tune", profile, rungs, answer)
