"""``vprof tune``: search engine settings for a workload and an SLO on the real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from vprof.cli.bench import _interruptible, _say
from vprof.cli.options import (
    FiniteFloat,
    OutDir,
    complete_profile,
    complete_traffic,
    complete_workload,
    processes_option,
    profile_override_options,
    profiles_dir_option,
)
from vprof.cli.output import HUMAN, Part, emit_parts, format_option
from vprof.records.rundir import tune_manifest

# What the terminal table shows of each trial (JSON has every field).
_COLUMNS = (
    "trial",
    "stage",
    "changes",
    "state",
    "levels",
    "sustainable_rps",
    "binding",
    "vs_best_pct",
    "server",
    "wall_s",
    "note",
)


@click.command(short_help="Find the engine settings that serve a workload best within an SLO.")
@click.argument("profile_name", metavar="PROFILE", shell_complete=complete_profile)
@click.option(
    "--workload",
    "-w",
    default="chat",
    show_default=True,
    shell_complete=complete_workload,
    help="Workload preset or YAML file.",
)
@click.option(
    "--slo",
    required=True,
    help="The objective each level must meet, e.g. ttft_p95=500ms,tpot_p95=50ms.",
)
@click.option(
    "--objective",
    default="max-rate",
    show_default=True,
    help="max-rate (most req/s per replica), min-cost (most req/s per GPU; with --rps: "
    "replicas and GPUs) or min-latency (lowest SLO latency at --rps).",
)
@click.option(
    "--rps",
    "target_rps",
    type=FiniteFloat(above=0, maximum=1e9),
    default=None,
    help="Request rate per replica for min-latency; the target for min-cost.",
)
@click.option(
    "--headroom",
    type=FiniteFloat(minimum=0, maximum=10),
    default=0.2,
    show_default=True,
    help="Spare capacity when planning replicas (0.2 = 20 %).",
)
@click.option(
    "--gpu-hour-price",
    type=FiniteFloat(above=0, maximum=1e6),
    default=None,
    help="Price of one GPU-hour, for min-cost's answer and the report.",
)
@click.option(
    "--budget-trials",
    default=None,
    metavar="N",
    help="Measure at most N candidates (each one server start; default 12).",
)
@click.option(
    "--budget-time",
    default=None,
    metavar="DURATION",
    help="Stop starting trials when this would be exceeded, e.g. 2h or 90m.",
)
@click.option(
    "--space",
    "space",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Values to search for an engine argument (repeatable); narrows or widens "
    "the default ladders. A key given with --set is pinned instead.",
)
@click.option(
    "--guided",
    is_flag=True,
    help="Let a capacity model fitted on the trials so far choose the next candidate to measure "
    "(its prediction for every candidate); every answer still rests on measured runs.",
)
@click.option(
    "--traffic",
    "-t",
    default="constant-rate",
    shell_complete=complete_traffic,
    show_default=True,
    help="Open-loop shape whose arrival process each level uses.",
)
@click.option(
    "--level-s",
    type=FiniteFloat(above=0, maximum=86_400),
    default=30.0,
    show_default=True,
    help="Measured seconds per level.",
)
@click.option(
    "--warmup-s",
    type=FiniteFloat(minimum=0, maximum=86_400),
    default=5.0,
    show_default=True,
    help="Warm-up seconds before each level.",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(1, 1_000_000),
    default=256,
    show_default=True,
    help="Requests in flight at most, per level.",
)
@click.option(
    "--start-rps",
    type=FiniteFloat(above=0, maximum=1e6),
    default=1.0,
    show_default=True,
    help="The first trial's first rate; it climbs ×2 from there.",
)
@click.option(
    "--max-rps",
    type=FiniteFloat(above=0, maximum=1e6),
    default=10_000.0,
    show_default=True,
    help="Never offer more than this.",
)
@click.option(
    "--resolution",
    type=FiniteFloat(minimum=0.01, maximum=1),
    default=0.1,
    show_default=True,
    help="A rate search ends when met and missed are this close.",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 100),
    default=2,
    show_default=True,
    help="Runs of the best and its near ties at the best's rate (1: no check).",
)
@click.option(
    "--out",
    "out_dir",
    type=OutDir(),
    default=Path("vprof-tune"),
    show_default=True,
    help="Folder for the trials' runs and the results; re-running resumes.",
)
@click.option("--name", default=None, help="Name of the written profile (default PROFILE-tuned).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the workload.")
@processes_option
@click.option(
    "--tokenizer",
    default=None,
    help="Tokenizer for building prompts [default: the model's, from its folder or the local "
    "Hugging Face cache].",
)
@click.option(
    "--fetch-tokenizer",
    is_flag=True,
    help="Download the model's tokenizer from the Hugging Face hub when no local copy has it.",
)
@click.option("--no-report", is_flag=True, help="Do not write report.html.")
@click.option(
    "--force",
    is_flag=True,
    help="Write into --out even over files vprof did not write there, or another request's "
    "tune.json (its runs stay beside).",
)
@profile_override_options
@profiles_dir_option
@format_option
def tune(profile_name: str, fmt: str, **opts: Any) -> None:
    """Search PROFILE's engine settings for the one that serves --workload best within --slo.

    Searches max-num-batched-tokens, enable-chunked-prefill, max-num-seqs,
    enable-prefix-caching, gpu-memory-utilization, enforce-eager and max-model-len (from the
    workload's longest request), in the guide's order. Each candidate's capacity is an
    open-loop rate search on its own server that climbs ×2 and bisects, and stops early
    once the candidate is clearly worse than the best; candidates the validator refuses
    never start. Writes the best as a profile (extends PROFILE), a table of every trial, its
    trials and evidence as JSON and a report into --out; re-running the same command resumes.

    \b
    Example:
      vprof tune chunked-512 --workload chat --slo ttft_p95=500ms,tpot_p95=50ms
      vprof tune baseline --slo ttft_p95=1s --space max-num-seqs=16,64,256 --budget-time 2h
      vprof tune chunked-512 --slo ttft_p95=300ms --objective min-latency --rps 8
      vprof tune chunked-512 --slo ttft_p95=500ms --guided --budget-trials 6
    """
    from vprof.runs.tune import run_tune
    from vprof.runs.tunerequest import TuneRequest, parse_budget_trials, parse_duration

    request = TuneRequest(
        profile=profile_name,
        slo=opts["slo"],
        workload=opts["workload"],
        objective=opts["objective"],
        target_rps=opts["target_rps"],
        headroom=opts["headroom"],
        gpu_hour_price=opts["gpu_hour_price"],
        budget_trials=(
            parse_budget_trials(opts["budget_trials"])
            if opts["budget_trials"] is not None
            else None
        ),
        budget_time_s=(
            parse_duration(opts["budget_time"]) if opts["budget_time"] is not None else None
        ),
        space=tuple(opts["space"]),
        traffic=opts["traffic"],
        level_s=opts["level_s"],
        warmup_s=opts["warmup_s"],
        max_in_flight=opts["max_in_flight"],
        start_rps=opts["start_rps"],
        max_rps=opts["max_rps"],
        resolution=opts["resolution"],
        repeat=opts["repeat"],
        out_dir=opts["out_dir"],
        name=opts["name"],
        profiles_dirs=tuple(opts["profiles_dirs"]),
        model=opts["model"],
        port=opts["port"],
        set_args=tuple(opts["set_args"]),
        seed=opts["seed"],
        processes=opts["processes"],
        tokenizer=opts["tokenizer"],
        fetch_tokenizer=opts["fetch_tokenizer"],
        report=not opts["no_report"],
        force=opts["force"],
        guided=opts["guided"],
    )
    with _interruptible(opts["out_dir"]):
        outcome = run_tune(request, _say)
    click.echo("", err=True)
    parts: list[Part] = [("trials", outcome.rows, list(_COLUMNS) if fmt in HUMAN else None)]
    parts.append(("answer", outcome.answer, None))
    if fmt in HUMAN:
        files = [f"Trials, evidence and the answer: {tune_manifest(outcome.folder)}"]
        if outcome.profile_path is not None:
            files.append(
                f"The best as a profile: {outcome.profile_path} — start it with "
                f"`vprof launch {outcome.profile_path}`"
            )
        if outcome.report_path is not None:
            files.append(f"Report: {outcome.report_path}")
        parts.append(("files", "\n".join([*(f"note: {n}" for n in outcome.notes), *files]), None))
    else:
        parts.append(
            (
                "files",
                [
                    {
                        "tune": str(tune_manifest(outcome.folder)),
                        "profile": str(outcome.profile_path or ""),
                        "report": str(outcome.report_path or ""),
                        "notes": outcome.notes,
                    }
                ],
                None,
            )
        )
    emit_parts(parts, fmt)
    if outcome.result.best is None or outcome.result.environment:
        raise SystemExit(1)  # nothing measured, or stopped by the machine: not an answer
