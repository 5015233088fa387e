"""``vprof bench`` and ``vprof sweep``: run profiles against traffic and say which is better."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from vprof.cli.options import FiniteFloat, OutDir, profile_override_options, profiles_dir_option
from vprof.cli.output import HUMAN, Part, emit_parts, format_option
from vprof.locustfiles.optiontable import BALANCE_CHOICES, DEFAULT_BALANCE, DEFAULT_WORKLOAD
from vprof.runs.order import ORDERS

_last_progress = [0.0]


def _say(message: str) -> None:
    """Progress to stderr: live on a terminal, one line every 10 s in a log file."""
    if not message.startswith("\r"):
        click.echo(message, err=True)
    elif sys.stderr.isatty():
        click.echo(message, nl=False, err=True)
    elif time.monotonic() - _last_progress[0] >= 10:
        _last_progress[0] = time.monotonic()
        click.echo(message[1:], err=True)


@contextmanager
def _interruptible(out_dir: Path) -> Iterator[None]:
    """Ctrl-C or SIGTERM: the runs stop cleanly (the library keeps what was measured); say
    where it is and exit 130."""

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except KeyboardInterrupt:
        click.echo(
            f"\nInterrupted: finished runs and the partial one are kept in {out_dir}; "
            "re-run the same command to resume.",
            err=True,
        )
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_options(func):
    """Options shared by ``bench`` and every ``sweep``: traffic, workload, where and how."""
    options = [
        click.option(
            "--traffic",
            "-t",
            "traffic",
            multiple=True,
            default=("steady",),
            show_default=True,
            help="Traffic shape preset or YAML file (repeatable).",
        ),
        click.option(
            "--workload",
            "-w",
            default=DEFAULT_WORKLOAD,
            show_default=True,
            help="Workload preset or YAML file.",
        ),
        click.option(
            "--out",
            "out_dir",
            type=OutDir(),
            default=Path("vprof-runs"),
            show_default=True,
            help="Folder for run folders; re-running resumes.",
        ),
        click.option(
            "--url",
            "urls",
            multiple=True,
            help="Measure a server already running here instead of launching profiles; "
            "repeat it for several replicas of one deployment (load is spread over them).",
        ),
        click.option(
            "--balance",
            type=click.Choice(BALANCE_CHOICES),
            default=None,
            help=f"With several --url: send each request to the replica with the fewest in "
            f"flight (least-outstanding) or to each in turn (round-robin). [default: "
            f"{DEFAULT_BALANCE}]",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed for the workload and arrivals.",
        ),
        click.option(
            "--reuse-prefix-cache",
            is_flag=True,
            help="Do not salt prompts per run (lets a warm prefix cache count).",
        ),
        click.option(
            "--on-failure",
            type=click.Choice(["continue", "stop"]),
            default="continue",
            show_default=True,
            help="After a failed run: go on with the rest, or stop.",
        ),
        click.option(
            "--processes",
            type=click.IntRange(1, 512),
            default=1,
            show_default=True,
            help="Locust worker processes (one per spare core).",
        ),
        click.option("--slo", default=None, help="Goodput SLO, e.g. ttft_p95=500ms,tpot_p95=50ms."),
        click.option(
            "--tokenizer",
            default=None,
            help="Tokenizer (model folder or tokenizer.json) for building prompts.",
        ),
        click.option(
            "--repeat",
            type=click.IntRange(min=1, max=100),
            default=1,
            show_default=True,
            help="Runs per profile × traffic shape: the evidence compare needs for a verdict.",
        ),
        click.option(
            "--order",
            type=click.Choice(ORDERS),
            default="interleaved",
            show_default=True,
            help="Order of repeats across profiles: A B A B (interleaved), A A B B (blocked), "
            "or shuffled with --seed.",
        ),
        click.option(
            "--fresh-server",
            is_flag=True,
            help="Restart the server between repeats (a fresh server is part of what varies).",
        ),
        click.option(
            "--metrics-interval",
            "metrics_interval_s",
            type=FiniteFloat(above=0, maximum=3600),
            default=None,
            help="Seconds between /metrics scrapes during a run (it backs off when a "
            "scrape is slow, so scraping stays under 2 % of the time).",
        ),
        click.option(
            "--no-metrics",
            is_flag=True,
            help="Do not scrape /metrics at all (no server-side numbers in the summary).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return profile_override_options(profiles_dir_option(func))


def _spec(opts: dict[str, Any], **extra: Any):
    from vprof.runs import BenchSpec

    if opts["balance"] and len(opts["urls"]) < 2:
        click.echo("note: --balance applies only with several --url; ignored", err=True)
    return BenchSpec(
        traffic=tuple(opts["traffic"]),
        workload=opts["workload"],
        out_dir=opts["out_dir"],
        urls=tuple(opts["urls"]),
        balance=opts["balance"] or DEFAULT_BALANCE,
        model_overridden=opts["model"] is not None,
        seed=opts["seed"],
        reuse_prefix_cache=opts["reuse_prefix_cache"],
        on_failure=opts["on_failure"],
        processes=opts["processes"],
        slo=opts["slo"],
        tokenizer=opts["tokenizer"],
        repeat=opts["repeat"],
        order=opts["order"],
        fresh_server=opts["fresh_server"],
        metrics=not opts["no_metrics"],
        **(
            {"metrics_interval_s": opts["metrics_interval_s"]} if opts["metrics_interval_s"] else {}
        ),
        **extra,
    )


def _profiles(names: tuple[str, ...], opts: dict[str, Any], url: str | None):
    from vprof.runs.bench import resolve_profiles

    return resolve_profiles(
        names, opts["profiles_dirs"], url=url, say=_say, model=opts["model"],
        port=opts["port"], set_args=opts["set_args"],
    )  # fmt: skip


def _report(outcomes, fmt: str, opts: dict[str, Any]) -> None:
    """Print what ran, the summaries and the comparison as one output, write the HTML report
    next to the runs; exit 1 if a run failed."""
    from vprof.cli.report import comparison_parts, summary_parts

    click.echo("", err=True)
    parts: list[Part] = [("runs", _outcome_rows(outcomes), None)]
    runs = [o.run.path for o in outcomes if o.finished]
    if runs:
        parts += summary_parts(runs, fmt=fmt, slo=opts["slo"])
    if len(runs) > 1:
        parts += comparison_parts(runs, fmt=fmt, only_if_several=True)
    emit_parts(parts, fmt)
    if runs:
        _html_report(runs, opts)
    if not all(o.finished for o in outcomes):
        raise SystemExit(1)


def _html_report(paths: list[Path], opts: dict[str, Any], **options: Any) -> None:
    """``<out>/report.html`` of what was just measured; a report that fails loses no run."""
    from vprof.common.errors import VprofError, os_reason
    from vprof.report import write_report

    target = opts["out_dir"] / "report.html"
    try:
        write_report(paths, target, slo=opts["slo"], **options)
    except VprofError as exc:
        click.echo(f"note: no report written: {exc}", err=True)
        return
    except OSError as exc:  # a full disk: the runs are kept, the report is not
        click.echo(f"note: no report written: {target}: {os_reason(exc)}", err=True)
        return
    click.echo(f"report: {target}", err=True)


def _outcome_rows(outcomes) -> list[dict[str, Any]]:
    return [
        {"profile": o.profile, "traffic": o.traffic, "repeat": o.repeat, "state": o.state,
         "run": str(o.run.path), "reason": o.reason.splitlines()[0] if o.reason else ""}
        for o in outcomes
    ]  # fmt: skip


@click.command(short_help="Run profiles × traffic shapes and summarise them.")
@click.argument("profile_names", metavar="PROFILE...", nargs=-1, required=True)
@run_options
@format_option
def bench(profile_names: tuple[str, ...], fmt: str, **opts: Any) -> None:
    """Run each PROFILE against each traffic shape and compare them.

    Launches each profile's vLLM server (on a machine without a GPU: the CPU build with
    vprof's tiny model), warms up, drives the workload with Locust, samples /metrics, and
    writes one run folder per profile × traffic. Re-running the same command skips runs that
    already completed. Ctrl-C stops cleanly and keeps what was measured.

    \b
    Example:
      vprof bench chunked-256 baseline --traffic steady
      vprof bench chunked-256 --traffic steady --traffic spike --workload rag-shared-prefix
      vprof bench my-deployment --url http://10.0.0.5:8000 --traffic poisson
      vprof bench my-deployment --url http://10.0.0.5:8000 --url http://10.0.0.6:8000
    """
    from vprof.runs import run_bench

    spec = _spec(opts)  # the run's own checks (--url, --slo, --tokenizer) come first
    profiles = _profiles(profile_names, opts, spec.url)
    with _interruptible(opts["out_dir"]):
        outcomes = run_bench(profiles, spec, _say)
    _report(outcomes, fmt, opts)


@click.group(short_help="The guide's ladders: batched tokens, chunked prefill, load.")
def sweep() -> None:
    """The guide's tuning procedures, each a ladder of runs ending in a recommendation.

    \b
    Example:
      vprof sweep batched-tokens baseline --traffic steady
      vprof sweep chunked baseline --sizes 128,256,512,1024
      vprof sweep load chunked-512 --traffic poisson --levels 2,4,8 --slo ttft_p95=500ms
    """


def _rows_part(rows: list[dict[str, Any]], fmt: str) -> Part:
    """A sweep's rows; terminal tables leave out the (long) run folder names."""
    columns = None
    if fmt in HUMAN:
        columns = [
            c for c in dict.fromkeys(k for row in rows for k in row) if c not in ("run", "runs")
        ]
    return ("rungs", rows, columns)


def _ladder(
    kind: str, profile_name: str, rungs_of, opts: dict[str, Any], fmt: str, *, stop_early: bool,
    prefer: str,
) -> None:  # fmt: skip
    from vprof.runs.sweep import check_ladder, recommend, run_ladder, write_sweep

    spec = _spec(opts)
    check_ladder(spec)
    (profile,) = _profiles((profile_name,), opts, spec.url)
    rungs = rungs_of(profile)
    with _interruptible(opts["out_dir"]):
        rows = run_ladder(profile, rungs, spec, _say, stop_early=stop_early)
    recommendation = recommend(rows, prefer=prefer)
    written = write_sweep(opts["out_dir"], kind, profile.name, rows, recommendation)
    click.echo("", err=True)
    emit_parts([_rows_part(rows, fmt), ("recommendation", recommendation, None)], fmt)
    if written is not None:  # some rung ran
        _html_report([opts["out_dir"]], opts)


@sweep.command("batched-tokens")
@click.argument("profile_name", metavar="PROFILE")
@click.option(
    "--rungs",
    type=click.IntRange(1, 100),
    default=4,
    show_default=True,
    help="How many multiples of max-model-len to try at most.",
)
@run_options
@format_option
def batched_tokens(profile_name: str, rungs: int, fmt: str, **opts: Any) -> None:
    """Walk max-num-batched-tokens from max-model-len upward (×1, ×2, ×3, …).

    Stops at the first rung where the server fails to start, runs out of memory or reports
    preemptions, then recommends the rung with the best throughput and names its evidence.

    \b
    Example:
      vprof sweep batched-tokens baseline --traffic steady --rungs 4
    """
    from vprof.runs.sweep import batched_tokens_ladder

    _ladder(
        "batched-tokens",
        profile_name,
        lambda p: batched_tokens_ladder(p, rungs),
        opts,
        fmt,
        stop_early=True,
        prefer="throughput",
    )


@sweep.command("chunked")
@click.argument("profile_name", metavar="PROFILE")
@click.option(
    "--sizes",
    default="128,256,512,1024,2048",
    show_default=True,
    help="Batched-token sizes with chunked prefill on.",
)
@run_options
@format_option
def chunked(profile_name: str, sizes: str, fmt: str, **opts: Any) -> None:
    """The chunked-prefill ladder (128, 256, 512, …) against the non-chunked profile.

    \b
    Example:
      vprof sweep chunked baseline --sizes 128,256,512,1024 --traffic steady
    """
    from vprof.runs.sweep import chunked_ladder, parse_sizes

    values = parse_sizes(sizes)
    _ladder(
        "chunked",
        profile_name,
        lambda p: chunked_ladder(p, values),
        opts,
        fmt,
        stop_early=False,
        prefer="itl",
    )


@sweep.command("set")
@click.argument("profile_name", metavar="PROFILE")
@click.argument("ladder", metavar="KEY=V1,V2,...")
@run_options
@format_option
def set_(profile_name: str, ladder: str, fmt: str, **opts: Any) -> None:
    """Sweep any engine argument over a list of values.

    \b
    Example:
      vprof sweep set chunked-512 max-num-seqs=16,32,64,128 --traffic steady
    """
    from vprof.runs.sweep import parse_ladder_values, set_ladder

    key, sep, values = ladder.partition("=")
    if not sep or not values:
        raise click.BadParameter("expected KEY=V1,V2,...", param_hint="LADDER")
    parsed = parse_ladder_values(values, key.strip().lstrip("-"))
    _ladder(
        "set",
        profile_name,
        lambda p: set_ladder(p, key.strip().lstrip("-"), parsed),
        opts,
        fmt,
        stop_early=False,
        prefer="throughput",
    )


@sweep.command("load")
@click.argument("profile_name", metavar="PROFILE")
@click.option(
    "--levels",
    required=True,
    metavar="L1,L2,...",
    help="Request rates (open-loop shape) or user counts (closed-loop shape).",
)
@click.option(
    "--rps",
    "target_rps",
    type=FiniteFloat(above=0, maximum=1e9),
    default=None,
    help="With --slo: also plan replicas for this request rate.",
)
@run_options
@format_option
def load(profile_name: str, levels: str, target_rps: float | None, fmt: str, **opts: Any) -> None:
    """Climb one profile's load (rate or users) on one server, for capacity planning.

    Each level is one run of the --traffic shape (the first one given) at that load. With
    --slo the table says which levels met it and, with --rps, how many replicas are needed.

    \b
    Example:
      vprof sweep load chunked-512 --traffic poisson --levels 2,4,8,12 --slo ttft_p95=500ms
      vprof sweep load baseline --traffic steady --levels 1,4,16 --slo tpot_p95=50ms --rps 40
    """
    from vprof.runs.sweep import parse_levels, run_load_ladder, write_sweep

    values = parse_levels(levels)
    spec = _spec(opts)
    (profile,) = _profiles((profile_name,), opts, spec.url)
    with _interruptible(opts["out_dir"]):
        rows, outcomes = run_load_ladder(profile, opts["traffic"][0], values, spec, _say)
    write_sweep(opts["out_dir"], "load", profile.name, rows, "")
    click.echo("", err=True)
    parts = [_rows_part(rows, fmt)]
    done = [o.run.path for o in outcomes if o.finished]
    if opts["slo"] and done:
        from vprof.cli.report import plan_parts

        target = target_rps or max(values)
        parts += plan_parts(done, target_rps=target, slo=opts["slo"], fmt=fmt)
    emit_parts(parts, fmt)
    if done:
        plan_for = {"target_rps": target_rps or max(values)} if opts["slo"] else {}
        _html_report([opts["out_dir"]], opts, **plan_for)
