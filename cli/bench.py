"""``vprof bench`` and ``vprof sweep``: run profiles against traffic and say which is better."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

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
from vprof.cli.progress import ProgressView
from vprof.common.errors import VprofError, os_reason
from vprof.common.interrupt import raise_interrupted, signal_of
from vprof.locustfiles.optiontable import (
    BALANCE_CHOICES,
    DEFAULT_BALANCE,
    DEFAULT_ON_WORKER_LOSS,
    DEFAULT_SLICE_S,
    DEFAULT_WORKLOAD,
    WORKER_LOSS_CHOICES,
)
from vprof.runs.order import ORDERS

if TYPE_CHECKING:
    from vprof.runs.spec import Tick

_view: list[ProgressView] = []  # the command's, until it ends


def _say(message: str | Tick) -> None:
    """Progress to stderr: a live display on a terminal, plain lines in a log file."""
    if not _view:
        _view.append(ProgressView())
    _view[0].say(message)


def _end_progress() -> None:
    if _view:
        _view.pop().close()


@contextmanager
def _interruptible(out_dir: Path) -> Iterator[None]:
    """Take ``out_dir``'s lock, held until the command ends (its report too): a second command
    writing the folder is refused, exit 2. Ctrl-C or SIGTERM: the runs stop cleanly (the
    library keeps what was measured); say which signal, where the runs are, and exit
    128 + the signal (130, 143)."""
    from vprof.records.folderlock import lock_folder

    release = lock_folder(out_dir, _say)
    command = click.get_current_context(silent=True)
    if command is not None:
        command.call_on_close(release)
    previous = {
        sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    except KeyboardInterrupt as exc:
        _end_progress()
        signum = signal_of(exc)
        click.echo(
            f"\nInterrupted by {signal.Signals(signum).name}: finished runs and the partial one "
            f"are kept in {out_dir}; re-run the same command to resume.",
            err=True,
        )
        raise SystemExit(128 + signum) from None
    finally:
        _end_progress()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if command is None:
            release()


def run_options(func):
    """Options shared by ``bench`` and every ``sweep``: traffic, workload, where and how."""
    options = [
        click.option(
            "--traffic",
            "-t",
            "traffic",
            multiple=True,
            default=("steady",),
            shell_complete=complete_traffic,
            show_default=True,
            help="Traffic shape preset or YAML file (repeatable).",
        ),
        click.option(
            "--workload",
            "-w",
            default=DEFAULT_WORKLOAD,
            show_default=True,
            shell_complete=complete_workload,
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
        processes_option,
        click.option(
            "--workers-expected",
            type=click.IntRange(1, 10_000),
            default=None,
            help="Load from other hosts: the Locust master waits for this many workers "
            "(`vprof worker --master HOST:PORT` on each load host) before each run, and sends "
            "them the workload, traffic and seeds. Needs --master-bind.",
        ),
        click.option(
            "--master-bind",
            default=None,
            metavar="HOST:PORT",
            help="With --workers-expected: the address the Locust master listens on for its "
            "workers (0.0.0.0:5557: every interface).",
        ),
        click.option(
            "--calibrate",
            is_flag=True,
            help="First certify the client on this host at each traffic shape's planned load "
            "(vprof calibrate, 20 s each): the summary and report show its error beside the "
            "latencies.",
        ),
        click.option(
            "--on-worker-loss",
            type=click.Choice(WORKER_LOSS_CHOICES),
            default=DEFAULT_ON_WORKER_LOSS,
            show_default=True,
            help="When a Locust worker is lost mid-run: stop the run, or continue with the "
            "workers left. Either way the run is marked degraded and says so.",
        ),
        click.option("--slo", default=None, help="Goodput SLO, e.g. ttft_p95=500ms,tpot_p95=50ms."),
        click.option(
            "--tokenizer",
            default=None,
            help="Tokenizer (model folder or tokenizer.json) for building prompts [default: "
            "the served model's, from its folder or the local Hugging Face cache].",
        ),
        click.option(
            "--fetch-tokenizer",
            is_flag=True,
            help="Download the served model's tokenizer from the Hugging Face hub when no "
            "local copy has it (otherwise vprof's tiny model's stands in, and says so).",
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
        click.option(
            "--force",
            is_flag=True,
            help="Replace report.html (and a sweep's manifest) in --out even when vprof did "
            "not write it.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return profile_override_options(profiles_dir_option(func))


def _claim_outputs(opts: dict[str, Any], *, sweep: bool = False) -> None:
    """Refuse, before anything runs, to write over a file in --out that vprof did not write."""
    from vprof.records.outputs import REPORT, SWEEP, claim_output
    from vprof.records.rundir import REPORT_FILE, sweep_manifest

    claim_output(opts["out_dir"] / REPORT_FILE, REPORT, force=opts["force"])
    if sweep:
        claim_output(sweep_manifest(opts["out_dir"]), SWEEP, force=opts["force"])


def trace_options(func):
    """``--trace FILE`` and the settings ``vprof trace stats`` has: a replay in one flag."""
    options = [
        click.option(
            "--trace",
            "trace_file",
            default=None,
            metavar="FILE",
            help="Replay a request trace (Mooncake or vprof JSONL, Azure or vprof CSV): each "
            "request at its own time, its own lengths; instead of --workload and --traffic.",
        ),
        click.option(
            "--trace-format",
            type=click.Choice(["auto", "mooncake", "azure", "vprof"]),
            default=None,
            help="With --trace: the file's schema [default: detected from its fields].",
        ),
        click.option(
            "--time-scale",
            type=FiniteFloat(),
            default=None,
            help="With --trace: replay speed, 2 = twice as fast [default: 1].",
        ),
        click.option(
            "--start",
            "start_s",
            type=FiniteFloat(),
            default=None,
            help="With --trace: skip the first S trace seconds.",
        ),
        click.option(
            "--duration",
            "duration_s",
            type=FiniteFloat(),
            default=None,
            help="With --trace: keep S trace seconds.",
        ),
        click.option(
            "--max-requests",
            type=int,
            default=None,
            help="With --trace: keep at most N requests.",
        ),
        click.option(
            "--block-size",
            type=int,
            default=None,
            help="With --trace: tokens per hash id [default: 512].",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_TRACE_SETTINGS = {
    "trace_format": "format",
    "time_scale": "time_scale",
    "start_s": "start_s",
    "duration_s": "duration_s",
    "max_requests": "max_requests",
    "block_size": "block_size",
}


def _trace_replay(opts: dict[str, Any]) -> None:
    """``--trace FILE``: write the replay's workload and traffic shape and run those (the
    trace settings without ``--trace``, or beside ``--workload``/``--traffic``, are refused)."""
    ctx = click.get_current_context()
    settings = {_TRACE_SETTINGS[k]: opts.pop(k) for k in _TRACE_SETTINGS}
    file = opts.pop("trace_file")
    if file is None:
        from vprof.traffic.replay import TRACE_FLAGS

        given = [TRACE_FLAGS[k] for k, v in settings.items() if v is not None]
        if given:
            raise click.UsageError(f"{given[0]} applies only with --trace FILE")
        return
    for name in ("traffic", "workload"):
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(
                f"--trace replays the trace's own requests at their own times; leave out "
                f"--{name} (or give the replay's YAML as --workload and --traffic instead)"
            )
    from vprof.traffic.replay import write_trace_replay

    replay = write_trace_replay(file, **settings)
    _say(replay.note())
    opts["workload"], opts["traffic"] = str(replay.workload), (str(replay.traffic),)


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
        on_worker_loss=opts["on_worker_loss"],
        workers_expected=opts["workers_expected"] or 0,
        master_bind=opts["master_bind"] or "",
        calibrate=opts["calibrate"],
        slo=opts["slo"],
        tokenizer=opts["tokenizer"],
        fetch_tokenizer=opts["fetch_tokenizer"],
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
        names,
        opts["profiles_dirs"],
        url=url,
        say=_say,
        model=opts["model"],
        port=opts["port"],
        set_args=opts["set_args"],
    )


def _report(outcomes, fmt: str, opts: dict[str, Any], *, alternating: bool = False) -> None:
    """Print what ran, the summaries and the comparison as one output, write the HTML report
    next to the runs; exit 1 if a run failed. An alternating run compares its own sides."""
    from vprof.cli.report import comparison_parts, summary_parts

    click.echo("", err=True)
    parts: list[Part] = [("runs", _outcome_rows(outcomes), None)]
    runs = [o.run.path for o in outcomes if o.measured]
    if runs:
        parts += summary_parts(runs, fmt=fmt, slo=opts["slo"])
    if len(runs) > 1 or (alternating and runs):
        parts += comparison_parts(runs, fmt=fmt, only_if_several=not alternating)
    emit_parts(parts, fmt)
    if runs:  # of every run in --out, earlier commands' too
        _html_report(_measured_runs_in(opts["out_dir"]), opts)
    if not all(o.finished for o in outcomes):
        raise SystemExit(1)


def _measured_runs_in(folder: Path) -> list[Path]:
    """The runs in a bench folder worth a report, whichever command measured them."""
    from vprof.records.rundir import RunDir, expand_runs
    from vprof.runs.spec import MEASURED

    return [path for path in expand_runs([folder]) if RunDir(path).state in MEASURED]


def _html_report(paths: list[Path], opts: dict[str, Any], **options: Any) -> None:
    """``<out>/report.html`` of what was just measured; a report that fails loses no run."""
    from vprof.records.rundir import REPORT_FILE
    from vprof.report import write_report

    target = opts["out_dir"] / REPORT_FILE
    try:
        write_report(paths, target, slo=opts["slo"], force=opts["force"], **options)
    except VprofError as exc:
        click.echo(f"note: no report written: {exc}", err=True)
        return
    except OSError as exc:  # a full disk: the runs are kept, the report is not
        click.echo(f"note: no report written: {target}: {os_reason(exc)}", err=True)
        return
    click.echo(f"report: {target}", err=True)


def _outcome_rows(outcomes) -> list[dict[str, Any]]:
    return [
        {
            "profile": o.profile,
            "traffic": o.traffic,
            "repeat": o.repeat,
            "state": o.state,
            "run": str(o.run.path),
            "reason": o.reason.splitlines()[0] if o.reason else "",
        }
        for o in outcomes
    ]


def alternate_options(func):
    """``bench``'s options for servers side by side with the load alternating."""
    options = [
        click.option(
            "--alternate",
            is_flag=True,
            help="Start every profile's server at once and switch the load between them in "
            "short slices (ABBA), comparing paired slices: finds small differences fast.",
        ),
        click.option(
            "--slice",
            "slice_text",
            default=None,
            metavar="DURATION",
            help=f"With --alternate: how long each side gets the load. [default: "
            f"{DEFAULT_SLICE_S:g}s, shortened by up to a fifth when one more block then "
            "fills --time-budget]",
        ),
        click.option(
            "--slice-warmup",
            "slice_warmup_text",
            default=None,
            metavar="DURATION",
            help="With --alternate: the first part of each slice that is not measured "
            "(default: a quarter of the slice, at most 5 s).",
        ),
        click.option(
            "--precision",
            "precision_text",
            default=None,
            metavar="PCT%",
            help="Measure until every headline metric's 95 % interval is within ±PCT "
            "(alternating slices, or repeats without --alternate), within --time-budget.",
        ),
        click.option(
            "--time-budget",
            "time_budget_text",
            default=None,
            metavar="DURATION",
            help="With --precision (or --alternate): at most this long (e.g. 10m). "
            "[default with --precision: 10m]",
        ),
        click.option(
            "--swap/--no-swap",
            default=None,
            help="With --alternate: restart the servers halfway with the profiles exchanged, "
            "so an offset of one server instance is not taken for a profile's. "
            "[default: --swap for servers vprof launches; --url servers cannot swap]",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command(short_help="Run profiles × traffic shapes and summarise them.")
@click.argument("profile_names", metavar="PROFILE...", nargs=-1, shell_complete=complete_profile)
@run_options
@alternate_options
@trace_options
@format_option
def bench(profile_names: tuple[str, ...], fmt: str, **opts: Any) -> None:
    """Run each PROFILE against each traffic shape and compare them.

    Launches each profile's vLLM server (on a machine without a GPU: the CPU build with
    vprof's tiny model), warms up, drives the workload with Locust, samples /metrics, and
    writes one run folder per profile × traffic. Re-running the same command skips runs that
    already completed. Ctrl-C stops cleanly and keeps what was measured.

    With --alternate every profile's server runs at once and the load switches between them
    in short slices inside one Locust run; the comparison is over paired slices, so drift
    cancels and a 10 % difference is found in minutes (--precision 5% stops when precise).

    \b
    Example:
      vprof bench chunked-256 baseline --traffic steady
      vprof bench chunked-256 --traffic steady --traffic spike --workload rag-shared-prefix
      vprof bench my-deployment --url http://10.0.0.5:8000 --traffic poisson
      vprof bench my-deployment --url http://10.0.0.5:8000 --url http://10.0.0.6:8000
      vprof bench chunked-256 chunked-512 --alternate --precision 5% --time-budget 10m
      vprof bench --alternate --url a=http://10.0.0.5:8000 --url b=http://10.0.0.6:8000
      vprof bench chunked-256 --trace mooncake_trace.jsonl --start 600 --duration 300
      vprof bench prod --url http://10.0.0.5:8000 --workers-expected 4 --master-bind 0.0.0.0:5557
    """
    _trace_replay(opts)
    if opts["alternate"]:
        _alternate(profile_names, fmt, opts)
        return
    if any(opts[k] is not None for k in ("slice_text", "slice_warmup_text", "swap")):
        raise click.UsageError("--slice, --slice-warmup and --swap need --alternate")
    if not profile_names:
        raise click.UsageError("give at least one PROFILE")
    if opts["precision_text"] or opts["time_budget_text"]:
        _until_precise(profile_names, fmt, opts)
        return
    from vprof.runs import run_bench

    spec = _spec(opts)  # the run's own checks (--url, --slo, --tokenizer) come first
    _claim_outputs(opts)
    profiles = _profiles(profile_names, opts, spec.url)
    with _interruptible(opts["out_dir"]):
        outcomes = run_bench(profiles, spec, _say)
    _report(outcomes, fmt, opts)


def _named_urls(urls: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """``--url NAME=URL`` (repeatable; several URLs of one name are its replicas)."""
    named: dict[str, list[str]] = {}
    for text in urls:
        name, sep, url = text.partition("=")
        if not sep or not name.strip() or "://" in name:
            raise click.UsageError(
                f"--url {text!r}: with --alternate name each server's side: --url NAME=URL"
            )
        named.setdefault(name.strip(), []).append(url.strip())
    return [(name, tuple(u)) for name, u in named.items()]


def _alternate(profile_names: tuple[str, ...], fmt: str, opts: dict[str, Any]) -> None:
    from vprof.analysis.designs import parse_shift
    from vprof.runs.alternate import AlternateSpec, run_alternating
    from vprof.runs.tunerequest import parse_duration
    from vprof.traffic.slices import default_warmup_s

    if opts["repeat"] != 1 or opts["fresh_server"]:
        raise click.UsageError(
            "--alternate measures many slices in one run: --repeat and --fresh-server do not apply"
        )
    if opts["workers_expected"]:
        raise click.UsageError(
            "--alternate runs with this host's Locust processes; --workers-expected is for "
            "plain runs and sweeps"
        )
    url_sides = _named_urls(opts["urls"]) if opts["urls"] else []
    if url_sides and profile_names:
        raise click.UsageError("with --url NAME=URL the sides are the named servers: no PROFILE")
    slice_s = parse_duration(opts["slice_text"], "--slice") if opts["slice_text"] else None
    slice_s = slice_s or DEFAULT_SLICE_S
    warmup_s = (
        parse_duration(opts["slice_warmup_text"], "--slice-warmup")
        if opts["slice_warmup_text"]
        else default_warmup_s(slice_s)
    )
    alt = AlternateSpec(
        slice_s=slice_s,
        warmup_s=warmup_s,
        precision_pct=parse_shift(opts["precision_text"], "--precision")
        if opts["precision_text"]
        else None,
        time_budget_s=parse_duration(opts["time_budget_text"], "--time-budget")
        if opts["time_budget_text"]
        else None,
        swap=not url_sides if opts["swap"] is None else opts["swap"],
        fit_slice=not opts["slice_text"],
        url_sides=tuple(url_sides),
    )
    spec = _spec({**opts, "urls": ()})
    _claim_outputs(opts)
    profiles = _profiles(profile_names, opts, None) if profile_names else []
    with _interruptible(opts["out_dir"]):
        outcomes = run_alternating(profiles, spec, alt, _say)
    _report(outcomes, fmt, opts, alternating=True)


def _until_precise(profile_names: tuple[str, ...], fmt: str, opts: dict[str, Any]) -> None:
    """Without --alternate, --precision adds repeats (A B A B …) until precise or out of time."""
    from vprof.analysis.designs import parse_shift
    from vprof.runs.precise import repeat_until_precise
    from vprof.runs.tunerequest import parse_duration

    precision = (
        parse_shift(opts["precision_text"], "--precision") if opts["precision_text"] else None
    )
    budget = (
        parse_duration(opts["time_budget_text"], "--time-budget")
        if opts["time_budget_text"]
        else None
    )
    spec = _spec(opts)
    _claim_outputs(opts)
    profiles = _profiles(profile_names, opts, spec.url)
    with _interruptible(opts["out_dir"]):
        outcomes = repeat_until_precise(
            profiles, spec, _say, precision_pct=precision, budget_s=budget
        )
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
    """A sweep's rows; terminal tables leave out the (long) run folder names and why a
    client-limited rung was (the recommendation says it)."""
    columns = None
    if fmt in HUMAN:
        hidden = ("run", "runs", "client_limit")
        columns = [c for c in dict.fromkeys(k for row in rows for k in row) if c not in hidden]
    return ("rungs", rows, columns)


def _ladder(
    kind: str,
    profile_name: str,
    rungs_of,
    opts: dict[str, Any],
    fmt: str,
    *,
    stop_early: bool,
    prefer: str,
) -> None:
    from vprof.runs.sweep import check_ladder, recommend, run_ladder, write_sweep

    spec = _spec(opts)
    check_ladder(spec)
    _claim_outputs(opts, sweep=True)
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
    _exit_if_unmeasured(rows)


def _exit_if_unmeasured(rows: list[dict[str, Any]]) -> None:
    """A ladder none of whose rungs measured anything is no answer: say why, exit 1."""
    from vprof.runs.sweep import unmeasured

    reason = unmeasured(rows)
    if reason:
        click.echo(f"Error: {reason}", err=True)
        raise SystemExit(1)


@sweep.command("batched-tokens")
@click.argument("profile_name", metavar="PROFILE", shell_complete=complete_profile)
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
@click.argument("profile_name", metavar="PROFILE", shell_complete=complete_profile)
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
@click.argument("profile_name", metavar="PROFILE", shell_complete=complete_profile)
@click.argument("ladder", metavar="KEY=V1,V2,...")
@run_options
@format_option
def set_(profile_name: str, ladder: str, fmt: str, **opts: Any) -> None:
    """Sweep any engine argument over a list of values.

    \b
    Example:
      vprof sweep set chunked-512 max-num-seqs=16,32,64,128 --traffic steady
    """
    from vprof.registry.overrides import parse_ladder_values
    from vprof.runs.sweep import set_ladder

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
@click.argument("profile_name", metavar="PROFILE", shell_complete=complete_profile)
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
    _claim_outputs(opts, sweep=True)
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
    _exit_if_unmeasured(rows)
