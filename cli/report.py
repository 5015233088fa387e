"""``vprof summarize``, ``vprof compare`` and ``vprof plan``: read run folders, print tables."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from vprof.cli.options import FiniteFloat, complete_traffic, complete_workload
from vprof.cli.output import (
    HUMAN,
    Part,
    echo_note,
    emit_parts,
    format_option,
    lift_long_cells,
    table_width,
    wrap,
)


def warn(lines: Sequence[str]) -> None:
    """What a reader must know before trusting the numbers, on stderr (JSON carries it too)."""
    for line in lines:
        echo_note(f"warning: {line}")


slo_option = click.option(
    "--slo", default=None, help="Objectives, e.g. ttft_p95=500ms,tpot_p95=50ms,errors=1%."
)


def summary_parts(
    runs: Sequence[str | Path],
    *,
    fmt: str = "table",
    slo: str | None = None,
    save: bool = False,
    force: bool = False,
    timeline_interval_s: float | None = None,
) -> list[Part]:
    """The summaries of ``runs`` (run or bench folders) as output parts; also used by bench.

    Tables put runs side by side (one column per run); JSON has every key. With
    ``timeline_interval_s`` the per-interval rows follow. A run whose client was the
    bottleneck is named on stderr first.
    """
    from vprof.analysis.keys import SummaryKey as K
    from vprof.analysis.run import (
        damage,
        display_names,
        json_safe,
        load_run,
        replica_rows,
        summaries_of,
        write_summary,
    )
    from vprof.analysis.slo import parse_slo
    from vprof.analysis.summary import timeline
    from vprof.records import expand_runs
    from vprof.records.rundir import RunState

    parsed = parse_slo(slo) if slo else None  # a bad --slo fails before anything is read
    paths = expand_runs(runs)
    interval_s = timeline_interval_s or 5.0
    summaries: list[dict[str, Any]] = []
    for path in paths:
        if save:
            written = write_summary(path, slo=parsed, interval_s=interval_s, force=force)
            summaries += written.get(K.SIDES) or [written]  # an alternating run: its sides
        else:
            summaries += summaries_of(path, slo=parsed)
    names = display_names(summaries)
    warn(damage(summaries, names))
    for name, summary in zip(names, summaries, strict=True):
        if summary.get(K.STATE) in (RunState.DEGRADED, RunState.ABANDONED):
            echo_note(f"warning: {name}: {summary[K.STATE]}: {summary.get(K.REASON)}")
        if summary.get(K.CLIENT_LIMITED):
            why = "; ".join(summary.get(K.CLIENT_LIMITED_BY) or [])
            echo_note(f"warning: {name}: the load generator set the pace ({why})")
        if summary.get(K.METRICS_WARNING):
            echo_note(f"warning: {name}: {summary[K.METRICS_WARNING]}")
        if summary.get(K.PROMPT_TOKEN_WARNING):
            echo_note(f"warning: {name}: {summary[K.PROMPT_TOKEN_WARNING]}")
    rows, notes = summary_rows(names, summaries, fmt), ""
    if fmt == "table" and rows:  # sentences (a verdict, a warning) below the table, by run
        rows, notes = lift_long_cells(
            rows, list(rows[0]), lambda row, run: f"{run}, {row['metric']}", table_width()
        )
    parts: list[Part] = [("summaries", rows, None)]
    if notes:
        parts.append(("summary_notes", notes, None))
    if fmt in HUMAN and (by_replica := replica_rows(names, summaries)):
        parts.append((K.PER_REPLICA, by_replica, None))  # JSON has it in each summary
    if timeline_interval_s:
        frames = []
        for path in paths:
            run = load_run(path)
            frame = timeline(run.records, interval_s)
            frame.insert(0, "run", run.name)
            frames += json_safe(frame.to_dict("records"))
        parts.append(("timeline", frames, None))
    return parts


def summary_rows(
    names: Sequence[str], summaries: Sequence[dict[str, Any]], fmt: str
) -> list[dict[str, Any]]:
    """Summaries side by side for people (a row per metric, a column per run), or each one
    whole for JSON."""
    from vprof.analysis.keys import SHOWN_WHEN_NONZERO, SUMMARY_TABLE_KEYS
    from vprof.analysis.run import json_safe

    if fmt in HUMAN or fmt == "csv":
        return [
            {"metric": key, **{name: s.get(key) for name, s in zip(names, summaries, strict=True)}}
            for key in SUMMARY_TABLE_KEYS
            if any(s.get(key) is not None for s in summaries)
            and (key not in SHOWN_WHEN_NONZERO or any(s.get(key) for s in summaries))
        ]
    return [json_safe(s) for s in summaries]


def comparison_parts(
    runs: Sequence[str | Path],
    *,
    fmt: str = "table",
    metrics: Sequence[str] = (),
    n_boot: int | None = None,
    seed: int = 0,
    only_if_several: bool = False,
    detect: float | None = None,
) -> list[Part]:
    """The comparison of ``runs`` against the first group as output parts; also used by bench
    (``only_if_several``: nothing when the runs are all one configuration's repeats).

    A literal ``vs`` among ``runs`` separates explicit groups; otherwise repeats of one
    configuration are grouped. Notes for the reader go to stderr.
    """
    from vprof.analysis.compare import DEFAULT_METRICS, cell_key
    from vprof.analysis.compare import TABLE_COLUMNS as COMPARE_TABLE_COLUMNS
    from vprof.analysis.compare import compare as compare_runs
    from vprof.analysis.run import json_safe
    from vprof.records import expand_runs

    sides = _split_on_vs([str(r) for r in runs])
    groups: Any = [expand_runs(side) for side in sides] if len(sides) > 1 else expand_runs(runs)
    if only_if_several and len(sides) == 1 and len({cell_key(p) for p in groups}) < 2:
        return []
    frame = compare_runs(
        groups,
        metrics=metrics or DEFAULT_METRICS,
        n_boot=n_boot,
        seed=seed,
        detect=detect,
    )
    rows = json_safe(frame.to_dict("records"))
    warn(frame.attrs.get("warnings", []))
    for note in frame.attrs.get("notes", []):
        echo_note(f"note: {note}")
    if fmt not in HUMAN or not rows:
        return [("comparison", rows, None)]
    how = "95 % intervals by " + ", ".join(dict.fromkeys(r["method"] for r in rows))
    columns = list(COMPARE_TABLE_COLUMNS)
    if detect is not None:
        columns.insert(columns.index("detectable_pct") + 1, "power_pct")
    columns.remove("ci_high_pct")  # in one cell with ci_low_pct
    if all(row.get("detectable_pct") is None for row in rows):  # one run a side: no design
        columns.remove("detectable_pct")
    if fmt == "markdown":
        columns.append("verdict")
    return [
        ("comparison_method", f"Against {rows[0]['baseline']} (the first), {how}:", None),
        (
            "comparison",
            [_compare_cells(row) for row in rows],
            [_HEADINGS.get(c, c) for c in columns],
        ),
        *(
            [("verdicts", verdicts, None)]
            if fmt == "table" and (verdicts := _verdicts(rows))
            else []
        ),
    ]


# A comparison table's headings for people (JSON and CSV keep the keys).
_HEADINGS = {
    "baseline_value": "baseline",
    "diff_pct": "diff %",
    "ci_low_pct": "95 % interval",
    "detectable_pct": "detectable ±%",
    "power_pct": "power %",
}


def _compare_cells(row: dict[str, Any]) -> dict[str, Any]:
    """A comparison row for a table: headings for people, the interval in one cell."""
    low, high = row.get("ci_low_pct"), row.get("ci_high_pct")
    cells = {_HEADINGS.get(key, key): value for key, value in row.items()}
    cells[_HEADINGS["ci_low_pct"]] = (
        f"[{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else ""
    )
    from vprof.analysis.compare import DETECTABLE_CAP_PCT

    detectable = row.get("detectable_pct")
    if detectable is not None and detectable >= DETECTABLE_CAP_PCT:
        cells[_HEADINGS["detectable_pct"]] = f">{DETECTABLE_CAP_PCT:g}"
    return cells


# Outcomes the table says in full (the note on stderr says what request noise means).
_SAID_IN_THE_TABLE = ("identical", "request noise")


def _verdicts(rows: Sequence[dict[str, Any]]) -> str:
    """The verdict sentences the table's outcome column cannot hold, grouped by run."""
    width = table_width()
    lines: list[str] = []
    for run in dict.fromkeys(row["run"] for row in rows):
        said = [
            wrap(f"  {row['verdict']}", width, indent="    ")
            for row in rows
            if row["run"] == run and row["outcome"] not in _SAID_IN_THE_TABLE
        ]
        if said:
            lines += [f"{run} against {rows[0]['baseline']}:", *said]
    return "\n".join(lines)


def _split_on_vs(args: Sequence[str]) -> list[list[str]]:
    sides: list[list[str]] = [[]]
    for arg in args:
        if arg == "vs":
            sides.append([])
        else:
            sides[-1].append(arg)
    if len(sides) > 1 and any(not side for side in sides):
        raise click.UsageError("`vs` needs runs on both sides: RUN... vs RUN...")
    return sides


@click.command(short_help="Percentile tables for one or more runs.")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@format_option
@slo_option
@click.option("--timeline", "show_timeline", is_flag=True, help="Also print per-interval rows.")
@click.option(
    "--interval",
    "interval_s",
    type=FiniteFloat(above=0, maximum=1e9),
    default=5.0,
    show_default=True,
    help="Timeline bin, s.",
)
@click.option("--save", is_flag=True, help="Write summary.json and timeline.csv into each run.")
@click.option(
    "--force",
    is_flag=True,
    help="With --save: replace a summary even when it counted more requests than this read.",
)
def summarize(
    runs: tuple[str, ...],
    fmt: str,
    slo: str | None,
    show_timeline: bool,
    interval_s: float,
    save: bool,
    force: bool,
) -> None:
    """Percentile tables for one or more runs (a RUN may be a bench folder of runs).

    \b
    Example:
      vprof summarize runs/bench-1/chunked-256-steady --slo ttft_p95=500ms
      vprof summarize runs/bench-1 --format markdown --timeline
    """
    timeline_s = interval_s if show_timeline else None
    parts = summary_parts(
        runs, fmt=fmt, slo=slo, save=save, force=force, timeline_interval_s=timeline_s
    )
    emit_parts(parts, fmt)


@click.command(short_help="Runs side by side with confidence intervals.")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@format_option
@click.option("--metric", "metrics", multiple=True, help="Summary key to compare (repeatable).")
@click.option(
    "--n-boot",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Bootstrap resamples for one-run-a-side intervals (default: as many as a ±0.2 "
    "percentage-point precision needs).",
)
@click.option("--seed", default=0, show_default=True, help="Bootstrap seed.")
@click.option(
    "--detect",
    "detect",
    default=None,
    metavar="SHIFT%",
    help="Also print each comparison's power to find a change of this size (e.g. 10%).",
)
def compare(
    runs: tuple[str, ...],
    fmt: str,
    metrics: tuple[str, ...],
    n_boot: int | None,
    seed: int,
    detect: str | None,
) -> None:
    """Runs side by side; the first configuration is the baseline.

    Repeats of one configuration (`vprof bench --repeat N`) are grouped; with two or more runs
    on each side the 95 % intervals include run-to-run variation and a difference whose
    interval excludes zero is called significant: repeats made in A B A B order are paired
    (the interval is over the within-pair differences, so slow drift cancels), others are
    compared with Welch's t. The metrics of a comparison are judged as one family (their
    p-values adjusted together, Benjamini–Hochberg), so an A/A calls any of them different at
    most 5 % of the time; fewer --metric see smaller changes. Every row says the smallest change
    its design would have found with 80 % power (detectable_pct). With one run a side the
    interval covers request noise only and nothing is called significant. Give explicit groups
    with `vs` between them.

    \b
    Example:
      vprof compare runs/bench-1 --metric p95_itl_ms --metric p99_ttft_ms
      vprof compare runs/bench-1/baseline--chat--steady--* runs/bench-1/chunked-256--chat--*
      vprof compare out/a--chat--steady--1a2b3c4d out/a--chat--steady--1a2b3c4d--r2 \\
          vs out/a--chat--steady--1a2b3c4d--r3 out/a--chat--steady--1a2b3c4d--r4
    """
    from vprof.analysis.designs import parse_shift

    shift = parse_shift(detect) if detect is not None else None
    parts = comparison_parts(runs, fmt=fmt, metrics=metrics, n_boot=n_boot, seed=seed, detect=shift)
    emit_parts(parts, fmt)


def plan_parts(
    runs: Sequence[str | Path],
    *,
    target_rps: float,
    slo: str,
    headroom: float = 0.2,
    evidence: bool = False,
    fmt: str = "table",
    predicted: Sequence[dict[str, Any]] = (),
) -> list[Part]:
    """The replicas each profile needs, as output parts; also used by ``vprof sweep load``.
    ``predicted`` summaries (``vprof forecast``) are planned beside the measured runs."""
    from vprof.analysis.plan import plan as make_plan
    from vprof.analysis.run import json_safe
    from vprof.analysis.slo import parse_slo
    from vprof.records import expand_runs

    parsed = parse_slo(slo)
    levels: list[Any] = [*(expand_runs(runs) if runs else []), *predicted]
    result = make_plan(levels, target_rps=target_rps, slo=parsed, headroom=headroom)
    rows = json_safe(result.rows())
    warn(result.warnings)
    # In a table the sentence is printed below each row's numbers rather than as a column, and
    # the warnings went to stderr.
    columns = [c for c in rows[0] if c not in ("plan", "warnings")] if fmt in HUMAN else None
    parts: list[Part] = [("plan", rows, columns)]
    if evidence:
        parts.append(("evidence", json_safe(result.evidence_rows()), None))
    if fmt in HUMAN:
        lines = []
        for profile in result.profiles:
            lines.append(profile.message)
            lines += [f"  note: {note}" for note in profile.notes]
        parts.append(("plan_sentences", "\n".join(lines), None))
    return parts


@click.command(short_help="Replicas needed to serve a request rate within an SLO.")
@click.argument("runs", nargs=-1, type=click.Path())
@click.option(
    "--rps",
    "target_rps",
    type=FiniteFloat(above=0, maximum=1e9),
    required=True,
    help="Request rate to serve.",
)
@click.option("--slo", required=True, help="Objectives, e.g. ttft_p95=500ms,tpot_p95=50ms.")
@click.option(
    "--headroom",
    type=FiniteFloat(minimum=0, maximum=100),
    default=0.2,
    show_default=True,
    help="Spare capacity (0.2 = 20 %).",
)
@click.option("--evidence", is_flag=True, help="Also list every measured level and its checks.")
@click.option(
    "--model",
    default=None,
    type=click.Path(),
    help="Also plan from this capacity model (vprof forecast fit) for --workload.",
)
@click.option(
    "-w",
    "--workload",
    default=None,
    shell_complete=complete_workload,
    help="With --model: the workload to predict.",
)
@click.option(
    "-t",
    "--traffic",
    default="poisson",
    show_default=True,
    shell_complete=complete_traffic,
    help="With --model: its arrivals.",
)
@click.option("--profile", "config", default=None, help="With --model: its configuration.")
@format_option
def plan(
    runs: tuple[str, ...],
    target_rps: float,
    slo: str,
    headroom: float,
    evidence: bool,
    model: str | None,
    workload: str | None,
    traffic: str,
    config: str | None,
    fmt: str,
) -> None:
    """Replicas of each profile needed to serve --rps within --slo, from measured runs — or,
    with --model, from a capacity model's predictions for a workload never measured.

    Give several load levels per profile (runs at rising rates) for an interpolated answer. A
    predicted plan is a row of its own, with the model's error beside its answer.

    \b
    Example:
      vprof plan runs/bench-1 --rps 40 --slo ttft_p95=500ms,tpot_p95=50ms
      vprof plan --model model.json -w rag-shared-prefix --rps 40 --slo ttft_p95=500ms
    """
    if not runs and not model:
        raise click.UsageError("give run folders, or --model with --workload")
    predicted: list[dict[str, Any]] = []
    if model:
        if not workload:
            raise click.UsageError("--model needs --workload: the traffic to predict")
        from vprof.analysis.slo import parse_slo
        from vprof.forecast.capacity import sustainable
        from vprof.forecast.model import read_model
        from vprof.forecast.scenario import scenario

        parsed = parse_slo(slo)  # a bad --slo fails before anything is predicted
        fitted = read_model(model)
        chosen = fitted.pick(config)
        _, predicted = sustainable(
            chosen, scenario(workload, traffic), parsed, model_path=str(model), pace=True
        )
    parts = plan_parts(
        runs,
        target_rps=target_rps,
        slo=slo,
        headroom=headroom,
        evidence=evidence,
        fmt=fmt,
        predicted=predicted,
    )
    emit_parts(parts, fmt)
