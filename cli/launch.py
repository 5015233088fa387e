"""`vprof launch`: start a profile's vLLM server, keep it in the foreground; `vprof model`."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import click

from vprof.cli.options import (
    FiniteFloat,
    complete_profile,
    profile_override_options,
    profiles_dir_option,
)
from vprof.common.errors import LaunchError
from vprof.common.paths import cache_dir


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM/SIGHUP so cleanup runs as it does for Ctrl-C."""


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _default_log_path(name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return cache_dir() / "logs" / f"{name}-{stamp}.log"


@click.command(short_help="Start a profile's vLLM server and wait until healthy.")
@click.argument("name", shell_complete=complete_profile)
@profile_override_options
@profiles_dir_option
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloat(minimum=1, maximum=7 * 86_400),
    default=600.0,
    show_default=True,
    help="Seconds to wait for /health.",
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Server log file (default: a new file under vprof's cache, logs/).",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Return once healthy and leave the server running (stop it with the printed kill).",
)
def launch(
    name: str,
    model: str | None,
    port: int | None,
    set_args: tuple[str, ...],
    profiles_dirs: tuple[Path, ...],
    timeout_s: float,
    log_path: Path | None,
    detach: bool,
) -> None:
    """Start profile NAME's vLLM server, wait until healthy, and serve until Ctrl-C.

    On a machine without a GPU the CPU build of vLLM runs the profile's engine settings on
    vprof's tiny model; each change is printed in one line (--model keeps your model).

    \b
    Example:
      vprof launch chunked-256 --port 8001
      vprof launch baseline --model /models/llama-3-8b --set max-model-len=8192
    """
    from vprof.registry import resolve_profile
    from vprof.server import plan_server, start_server, stop_quietly

    profile = resolve_profile(name, profiles_dirs, model=model, port=port, set_args=set_args)
    plan = plan_server(profile, model_overridden=model is not None)
    for line in plan.report():
        click.echo(line, err=line.startswith("note:"))
    log_path = log_path or _default_log_path(plan.profile.name)
    click.echo(f"command: {plan.command_line()}")
    click.echo(f"log: {log_path}")

    with _stop_on_signals():
        try:
            server = start_server(plan, log_path=log_path, timeout_s=timeout_s, say=click.echo)
        except (KeyboardInterrupt, _Stop):
            click.echo("interrupted before the server was healthy; stopped it", err=True)
            sys.exit(130)
        detached = False
        try:
            _print_ready(server)
            if detach:
                detached = True
                click.echo(f"detached: stop it with  kill -TERM -{server.process.pid}")
                return
            click.echo("Ctrl-C stops the server.")
            try:
                _serve_until_stopped(server.process)
            except (KeyboardInterrupt, _Stop) as why:
                reason = "Ctrl-C" if isinstance(why, KeyboardInterrupt) else str(why)
                click.echo(f"{reason}: stopping the server ...")
                stop_quietly(server.process)
                click.echo("stopped; no server process is left")
        finally:
            if not detached:
                stop_quietly(server.process)


def _print_ready(server: Any) -> None:
    profile = server.plan.profile
    served = profile.engine_args.get("served-model-name") or profile.model
    if isinstance(served, list | tuple):
        served = served[0]
    click.echo(
        f"ready after {server.healthy_after_s:.1f} s: {server.url}  "
        f"(model name in requests: {served})"
    )
    for line in server.settings.lines():
        click.echo(f"  {line}")
    example = {"model": served, "prompt": "Hello", "max_tokens": 16, "stream": True}
    click.echo(
        "try: curl -N "
        + shlex.join(
            [
                f"{server.url}/v1/completions",
                "-H",
                "Content-Type: application/json",
                "-d",
                _json(example),
            ]
        )
    )


def _json(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data, separators=(",", ":"))


def _serve_until_stopped(server: Any) -> None:
    """Block until the server dies (an error) or a signal interrupts us (the normal end)."""
    while server.wait(1.0) is None:
        pass  # still serving; wait() returns at once if the server dies
    from vprof.server import stop_quietly

    report = server.death_report("while serving")
    stop_quietly(server)  # the engine core may outlive the API server
    raise LaunchError(report)


@click.command(short_help="Write or locate vprof's embedded tiny model.")
def model() -> None:
    """Print the folder of vprof's embedded tiny model, writing it first if needed.

    \b
    Example:
      vprof model
      python -m vllm.entrypoints.openai.api_server --model "$(vprof model)" --load-format dummy
    """
    from vprof.tinymodel.build import ensure_tiny_model

    click.echo(str(ensure_tiny_model()))
