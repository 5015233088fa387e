"""``vprof calibrate``: a certificate of the client's own timing error on this host."""

from __future__ import annotations

from typing import Any

import click

from vprof.cli.options import FiniteFloat, processes_option
from vprof.cli.output import format_option


@click.command(short_help="Measure the client's own timing error on this host at a load.")
@click.option(
    "--users",
    type=click.IntRange(1, 100_000),
    default=64,
    show_default=True,
    help="Closed-loop users.",
)
@processes_option
@click.option(
    "--rate",
    "rate_rps",
    type=FiniteFloat(minimum=0, maximum=100_000),
    default=0.0,
    help="Open loop: requests per second instead of --users (Poisson arrivals).",
)
@click.option(
    "--duration",
    "duration_s",
    type=FiniteFloat(minimum=1, maximum=3600),
    default=20.0,
    show_default=True,
    help="Seconds measured (after 3 s of warm-up) per load.",
)
@click.option(
    "--search",
    is_flag=True,
    help="Also find the highest load whose error stays within ±1 ms (p50) and ±5 ms (p99): "
    "a measurement per load tried, doubling then bisecting.",
)
@click.option(
    "--emulator-workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes of the emulated server (its lateness never counts; more keep it on time).",
)
@format_option
def calibrate(
    users: int,
    processes: int,
    rate_rps: float,
    duration_s: float,
    search: bool,
    emulator_workers: int,
    fmt: str,
) -> None:
    """Certify how exactly vprof's client measures on this host at a given load.

    Runs vprof's emulated server here with exact timing (it logs when each chunk really
    left, so its own lateness does not count), drives it with vprof's own Locust client at
    the load given, and prints the client's error: TTFT error p50/p99, ITL error p50/p99, the
    chunk events per second it kept up with, and its event-loop verdict.

    \b
    Example:
      vprof calibrate --users 256
      vprof calibrate --users 512 --processes 2 --search
      vprof calibrate --rate 40 --format json
    """
    import vprof.runs.calibrate as cal

    spec = cal.CalibrateSpec(
        users=users,
        processes=processes,
        rate_rps=rate_rps,
        duration_s=duration_s,
        emulator_workers=emulator_workers,
    )
    cert = (cal.search if search else cal.calibrate)(spec, _say)
    if fmt == "json":
        import json

        click.echo(json.dumps(cert, indent=2))
        return
    from vprof.analysis.clienterror import certificate_line
    from vprof.cli.output import emit

    emit(_rows(cert), fmt)
    click.echo(f"client error {certificate_line(cert)}", err=True)


_SHOWN = (
    ("users", "users"),
    ("rate_rps", "open-loop rate (req/s)"),
    ("processes", "Locust processes"),
    ("requests", "requests measured"),
    ("events_per_s", "chunk events/s held"),
    ("ttft_error_p50_ms", "TTFT error p50 (ms)"),
    ("ttft_error_p99_ms", "TTFT error p99 (ms)"),
    ("itl_error_p50_ms", "ITL error p50 (ms)"),
    ("itl_error_p99_ms", "ITL error p99 (ms)"),
    ("within_bounds", "within ±1 / ±5 ms"),
    ("loop_lag_verdict", "event loop"),
    ("max_load_within_bounds", "highest load within bounds"),
)


def _rows(cert: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [{"metric": label, "value": cert[key]} for key, label in _SHOWN if key in cert]
    if "searched" not in cert:
        rows = [r for r in rows if r["metric"] != "highest load within bounds"]
    return rows


def _say(message: str) -> None:
    click.echo(message, err=True)
