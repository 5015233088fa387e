"""``vprof trace stats``: what a request trace holds, before replaying it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from vprof.cli.options import FiniteFloat, complete_workload
from vprof.cli.output import HUMAN, Part, emit_parts, format_option
from vprof.common.errors import WorkloadError
from vprof.traffic.replay import TRACE_FLAGS

_BAR_WIDTH = 30


@click.group()
def trace() -> None:
    """Look at a request trace before replaying it: rate, lengths, prefix sharing.

    \b
    Example:
      vprof trace stats sample-trace
    """


@trace.command()
@click.argument("source", shell_complete=complete_workload)
@click.option(
    "--trace-format",
    type=click.Choice(["auto", "mooncake", "azure", "vprof"]),
    default=None,
    help="The file's schema [default: detected from its fields].",
)
@click.option("--block-size", type=int, default=None, help="Tokens per hash id [default: 512].")
@click.option(
    "--time-scale",
    type=FiniteFloat(),
    default=None,
    help="Replay speed, 2 = twice as fast [default: 1].",
)
@click.option(
    "--start", "start_s", type=FiniteFloat(), default=None, help="Skip the first S trace seconds."
)
@click.option(
    "--duration", "duration_s", type=FiniteFloat(), default=None, help="Keep S trace seconds."
)
@click.option("--max-requests", type=int, default=None, help="Keep at most N requests.")
@click.option("--max-model-len", type=int, default=None, help="Fail on a request longer than this.")
@click.option(
    "--bucket-s",
    type=FiniteFloat(above=0, maximum=1e9),
    default=None,
    help="Rate interval in replayed seconds [default: auto].",
)
@format_option
def stats(source: str, bucket_s: float | None, fmt: str, **flags: Any) -> None:
    """Rate over time, length percentiles and prefix sharing of a trace.

    SOURCE is a trace file, or a workload of kind trace (name or YAML), whose settings the
    flags then override. The implied prefix-cache hit rate assumes an unlimited cache and
    requests in arrival order: set it beside the server's measured hit rate after a replay.

    \b
    Example:
      vprof trace stats sample-trace
      vprof trace stats mooncake_trace.jsonl --start 600 --duration 300 --time-scale 2
      vprof trace stats AzureLLMInferenceTrace_conv.csv --max-requests 5000 --format json
    """
    from vprof.workloads.trace import TraceSpec, load_trace
    from vprof.workloads.tracestats import trace_stats

    given = {key: value for key, value in flags.items() if value is not None}
    if "trace_format" in given:
        given["format"] = given.pop("trace_format")
    settings = _settings_of(source)
    settings.update(given)
    try:
        spec = TraceSpec(**settings)
    except WorkloadError as exc:
        raise WorkloadError(
            exc.message, key=TRACE_FLAGS.get(exc.key or "", exc.key), hint=exc.hint
        ) from None
    result = trace_stats(load_trace(spec), bucket_s)
    if fmt not in HUMAN:
        from vprof.analysis.run import json_safe  # light: no pandas or numpy

        result = json_safe(result)  # strict JSON: nan (no block ids) -> null
    summary = result["summary"]
    rate = result["rate"]
    if fmt in HUMAN or fmt == "csv":
        summary_rows = [{"metric": key, "value": value} for key, value in summary.items()]
    else:
        summary_rows = [summary]
    if fmt == "table" and rate:
        peak = max(row["requests"] for row in rate) or 1
        rate = [{**row, "": "#" * round(_BAR_WIDTH * row["requests"] / peak)} for row in rate]
    parts: list[Part] = [
        ("summary", summary_rows, None),
        ("lengths", result["lengths"], None),
        ("rate", rate, None),
    ]
    emit_parts(parts, fmt)


def _settings_of(source: str) -> dict[str, Any]:
    """The trace settings of SOURCE: a trace file's path, or those of a trace workload."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix not in (".yaml", ".yml"):
        return {"file": str(path)}
    from vprof.workloads.loading import get_workload

    try:
        workload = get_workload(source)
    except WorkloadError as exc:
        if exc.path:  # the workload file itself is broken: say where
            raise
        raise WorkloadError(
            f"no trace file or trace workload named {source!r}",
            hint="give a trace file (JSONL or CSV) or a workload of kind: trace",
        ) from None
    if workload.trace is None:
        raise WorkloadError(
            f"workload {workload.name!r} is {workload.kind}, not a trace",
            hint="give a trace file, or a workload of kind: trace",
        )
    return dataclasses.asdict(workload.trace)
