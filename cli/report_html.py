"""``vprof report``: one self-contained HTML file of runs, benches and sweeps."""

from __future__ import annotations

from pathlib import Path

import click

from vprof.cli.output import echo_note
from vprof.records.rundir import REPORT_FILE


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path(REPORT_FILE),
    show_default=True,
    help="The HTML file to write (an earlier vprof report there is replaced, any other file "
    "only with --force).",
)
@click.option(
    "--slo", default=None, help="Objectives, e.g. ttft_p95=500ms,tpot_p95=50ms,errors=1%."
)
@click.option(
    "--rps",
    "target_rps",
    type=float,
    default=None,
    help="Request rate to plan replicas for (needs --slo).",
)
@click.option(
    "--headroom",
    default=0.2,
    show_default=True,
    help="Spare capacity (0.2 = 20 %), as `vprof plan`.",
)
@click.option(
    "--gpu-hour-price", type=float, default=None, help="Price of one GPU-hour, for costs."
)
@click.option(
    "--baseline",
    default=None,
    help="Run or profile each comparison is against (default: the first).",
)
@click.option(
    "--n-boot",
    default=None,
    type=int,
    help="Bootstrap resamples for comparisons (default: as many as a ±0.2 percentage-point "
    "precision needs).",
)
@click.option(
    "--seed", default=0, show_default=True, help="Seed for the bootstrap and curve sampling."
)
@click.option("--title", default=None, help="The report's title.")
@click.option(
    "--force", is_flag=True, help="Replace --out even when it is not a report vprof wrote."
)
@click.option(
    "--model",
    default=None,
    type=click.Path(),
    help="A capacity model (vprof forecast fit): its predicted curves beside the runs.",
)
def report(
    runs: tuple[str, ...],
    out: Path,
    slo: str | None,
    target_rps: float | None,
    headroom: float,
    gpu_hour_price: float | None,
    baseline: str | None,
    n_boot: int,
    seed: int,
    title: str | None,
    force: bool,
    model: str | None,
) -> None:
    """An HTML report of runs, benches or sweeps.

    One self-contained file of RUNs (run, bench or sweep folders) that opens offline and
    prints: capacity curves with the SLO line and the plan, costs, latency distributions, timelines,
    sweep ladders, comparisons with their intervals, and each run's provenance. Its numbers
    are those of `vprof summarize`, `vprof plan` and `vprof compare`.

    \b
    Example:
      vprof report vprof-runs/ -o report.html
      vprof report sweep-out/ --slo ttft_p95=500ms --rps 40 --gpu-hour-price 2.5
      vprof report sweep-out/ --slo ttft_p95=500ms --model model.json   # predicted curves too
    """
    from vprof.report import write_report

    path = write_report(
        runs,
        out,
        slo=slo,
        target_rps=target_rps,
        headroom=headroom,
        gpu_hour_price=gpu_hour_price,
        baseline=baseline,
        n_boot=n_boot,
        seed=seed,
        title=title,
        progress=lambda message: click.echo(message, err=True),
        force=force,
        warn=lambda line: echo_note(f"warning: {line}"),
        model=model,
    )
    size_mb = path.stat().st_size / 1e6
    click.echo(f"wrote {path} ({size_mb:.1f} MB)")
