"""``vprof forecast fit|predict|check``: a capacity model fitted on measured runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from vprof.cli.options import OutDir, complete_traffic, complete_workload
from vprof.cli.output import HUMAN, Part, echo_note, emit_parts, format_option
from vprof.common.errors import ForecastError
from vprof.common.numbers import parse_number


def _rates(values: Sequence[str]) -> list[float]:
    """``--rate 2 --rate 4,8`` → [2, 4, 8], each a finite positive number."""

    rates: list[float] = []
    for value in values:
        for part in str(value).split(","):
            if part.strip():
                rates.append(
                    float(
                        parse_number(
                            part.strip(), above=0, maximum=1e6, error=ForecastError, key="--rate"
                        )
                    )
                )
    return rates


@click.group(short_help="Capacity models fitted on your runs: fit, predict, check.")
def forecast() -> None:
    """Capacity models fitted on your own runs: predict what was not measured, then check.

    A model is fitted per server configuration (profile × hardware) from run folders: the
    time of a scheduler step from what it holds, the KV cache the server had, and the
    scheduler rules of the profile, replayed step by step as vLLM schedules.

    \b
    Example:
      vprof forecast fit vprof-runs/chat-sweep -o model.json --holdout vprof-runs/other
      vprof forecast predict model.json --workload rag-shared-prefix --traffic poisson --rate 4,8
      vprof forecast check model.json vprof-runs/new-runs
    """


@forecast.command(short_help="Fit a model on run folders.")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="The model file to write (model.json).",
)
@click.option(
    "--holdout",
    multiple=True,
    type=click.Path(),
    help="Runs to predict, not fit on; their error is kept with the model (repeatable).",
)
def fit(runs: tuple[str, ...], out: Path, holdout: tuple[str, ...]) -> None:
    """Fit one model per server configuration the RUNS (run or bench folders) measured.

    \b
    Example:
      vprof forecast fit vprof-runs/sweep-chat -o model.json --holdout vprof-runs/sweep-rag
    """
    from vprof.forecast.fit import fit_model
    from vprof.forecast.model import write_model

    model = fit_model(runs, holdout=holdout, say=lambda line: click.echo(line, err=True))
    write_model(model, out)
    for config in model.configs:
        click.echo(f"{config.label}: {config.error_text()}")
    click.echo(f"wrote {out}")


@forecast.command(short_help="Predict summaries for a workload and traffic.")
@click.argument("model", type=click.Path())
@click.option(
    "-w",
    "--workload",
    required=True,
    shell_complete=complete_workload,
    help="Workload preset or YAML file.",
)
@click.option(
    "-t",
    "--traffic",
    default="poisson",
    shell_complete=complete_traffic,
    show_default=True,
    help="Traffic shape preset or YAML file.",
)
@click.option(
    "--rate",
    "rates",
    multiple=True,
    help="Open-loop rates to predict, e.g. --rate 2,4,8 (default: the shape's).",
)
@click.option("--profile", default=None, help="The model's configuration, when it holds several.")
@click.option("--slo", default=None, help="Objectives, e.g. ttft_p95=500ms,tpot_p95=50ms.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for lengths, arrivals.")
@click.option(
    "-o",
    "--out",
    "out",
    type=OutDir(),
    default=None,
    help="Also write each prediction as a run folder here (for compare, plan, report).",
)
@format_option
def predict(
    model: str,
    workload: str,
    traffic: str,
    rates: tuple[str, ...],
    profile: str | None,
    slo: str | None,
    seed: int,
    out: Path | None,
    fmt: str,
) -> None:
    """Summaries predicted by MODEL, with the keys `vprof summarize` gives a measured run.

    Each is also replayed with every server step 5 % faster and slower: the notes give the
    range, and a level that range moves by more than 20 % is named near the knee (measure it).

    \b
    Example:
      vprof forecast predict model.json -w fixed-800-64 -t poisson --rate 4,8,16
      vprof forecast predict model.json -w chat -t poisson --rate 12 -o predicted/
    """
    from vprof.analysis.keys import SummaryKey as K
    from vprof.analysis.run import display_names
    from vprof.analysis.slo import parse_slo
    from vprof.cli.report import summary_rows
    from vprof.forecast.model import read_model
    from vprof.forecast.predict import predict_rates, write_prediction
    from vprof.forecast.scenario import scenario

    parsed = parse_slo(slo) if slo else None
    wanted = _rates(rates)
    fitted = read_model(model)
    config = fitted.pick(profile)
    s = scenario(workload, traffic, seed=seed)
    predictions = predict_rates(
        config, s, wanted, slo=parsed, model_path=str(model), spread=True, pace=True
    )
    summaries = [p.summary for p in predictions]
    click.echo(f"predicted by {model} ({config.label}); {config.error_text()}", err=True)
    for p in predictions:
        for note in p.summary.get(K.FORECAST, {}).get("notes") or []:
            echo_note(f"warning: {p.summary[K.RUN]}: {note}")
        for line in _range_lines(p.summary):
            echo_note(f"note: {_short(p.summary)}: {line}")
    if out is not None:
        for p in predictions:
            click.echo(f"wrote {write_prediction(p, out)}", err=True)
    names = [_short(s) for s in summaries] if fmt in HUMAN else display_names(summaries)
    emit_parts([("summaries", summary_rows(names, summaries, fmt), None)], fmt)


def _range_lines(summary: dict) -> list[str]:
    """How far the server's stalls alone move the prediction's tail and pace, when the model
    replays them (each a random draw; a measured run is one such draw), and how far steps a
    little faster or slower move its latencies."""
    from vprof.analysis.keys import SummaryKey as K

    forecast = summary.get(K.FORECAST) or {}
    pace = forecast.get("pace") or {}
    median_ttft = (K.MEDIAN_TTFT_MS, "median TTFT")
    p95_ttft = (K.P95_TTFT_MS, "p95 TTFT")
    median_tpot = (K.MEDIAN_TPOT_MS, "median TPOT")
    lines = []
    for ranges, keys, heading in (
        (forecast.get("spread") or {}, (p95_ttft, median_tpot), "across the stalls' draws"),
        (
            pace.get("range") or {},
            (median_ttft, p95_ttft, median_tpot),
            f"with steps {pace.get('step_time_pct', 0):g} % faster to slower",
        ),
    ):
        parts = [
            f"{words} {ranges[key][0]:.3g}–{ranges[key][1]:.3g} ms"
            for key, words in keys
            if key in ranges
        ]
        if parts:
            lines.append(f"{heading} " + ", ".join(parts))
    return lines


def _short(summary: dict) -> str:
    from vprof.analysis.keys import SummaryKey as K

    load = summary.get(K.OFFERED_LOAD)
    unit = summary.get(K.OFFERED_LOAD_UNIT) or ""
    return f"{load:g} {unit} (predicted)" if isinstance(load, (int, float)) else str(summary[K.RUN])


@forecast.command(short_help="Predicted against measured, per run and metric.")
@click.argument("model", type=click.Path())
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@format_option
def check(model: str, runs: tuple[str, ...], fmt: str) -> None:
    """Each of RUNS predicted by MODEL from its own workload, traffic and seed, beside what it
    measured, and the median absolute error per metric; each also replayed as it ran, its
    arrivals and the stalls it measured where they happened (``own_stalls``: a miss that stays
    with them is the model's, one that goes was the stalls' chance); per run, the model's
    step costs on the run's own steps over their measured time (near 1: a miss lies in the
    queue, not the step).

    \b
    Example:
      vprof forecast check model.json vprof-runs/sweep-rag
    """
    from vprof.analysis.run import json_safe
    from vprof.forecast.check import check_runs
    from vprof.forecast.model import read_model

    fitted = read_model(model)
    rows, report = check_runs(fitted, runs)
    within = report.get("within_draws") or {}
    within_pace = report.get("within_pace") or {}
    own = report.get("median_abs_pct_own_stalls") or {}
    medians = [
        {
            "metric": k,
            "median_abs_error_pct": v,
            "runs": report["runs"],
            **({"within_draws_share": within[k]} if k in within else {}),
            **({"within_pace_share": within_pace[k]} if k in within_pace else {}),
            **({"own_stalls_median_abs_error_pct": own[k]} if k in own else {}),
        }
        for k, v in report["median_abs_pct"].items()
    ]
    steps = [
        {"run": run, **{f"step_time_{k}": v for k, v in ratio.items()}}
        for run, ratio in (report.get("step_time") or {}).items()
    ]
    parts: list[Part] = [("checks", json_safe(rows), None), ("errors", json_safe(medians), None)]
    if steps:
        # model / measured time of the steps each run showed: near 1 the step costs hold there
        parts.append(("steps", json_safe(steps), None))
    emit_parts(parts, fmt)
