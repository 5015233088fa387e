"""The ``vprof`` command group.

Subcommands live in their own modules, imported when they run or when help lists them; those
modules import heavy libraries inside their functions, so ``vprof --help`` and the registry
commands start without pandas, locust or vllm.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from vprof.common.errors import VprofError

# command name -> "module:attribute"; a module is imported when its command runs or help lists it
COMMANDS: dict[str, str] = {
    "profiles": "vprof.cli.profiles:profiles",
    "validate": "vprof.cli.profiles:validate",
    "render": "vprof.cli.profiles:render",
    "diff": "vprof.cli.profiles:diff",
    "schema": "vprof.cli.schema:schema",
    "launch": "vprof.cli.launch:launch",
    "model": "vprof.cli.launch:model",
    "emulate": "vprof.cli.emulate:emulate",
    "worker": "vprof.cli.worker:worker",
    "calibrate": "vprof.cli.calibrate:calibrate",
    "workloads": "vprof.cli.workloads:workloads",
    "traffic": "vprof.cli.traffic:traffic",
    "trace": "vprof.cli.trace:trace",
    "bench": "vprof.cli.bench:bench",
    "sweep": "vprof.cli.bench:sweep",
    "tune": "vprof.cli.tune:tune",
    "summarize": "vprof.cli.report:summarize",
    "compare": "vprof.cli.report:compare",
    "plan": "vprof.cli.report:plan",
    "report": "vprof.cli.report_html:report",
    "forecast": "vprof.cli.forecast:forecast",
}


class UserError(click.ClickException):
    """A VprofError shown as one line, exit code 2, no traceback."""

    exit_code = 2


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        # Command modules import only click and light helpers at module level, so listing
        # every command's help (its docstring, the one place help is written) stays fast.
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except VprofError as exc:
            raise UserError(exc.format()) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vprof")
def cli() -> None:
    """vprof: which vLLM server settings serve my traffic best, and how much hardware it needs.

    \b
    Examples:
      vprof profiles                       # the named server profiles
      vprof render chunked-256             # its launch command
      vprof launch chunked-256             # start it (CPU build + tiny model here)
      vprof bench chunked-256 baseline --traffic steady
    """


# Commands that only read runs and write what was asked: once one has succeeded, the
# interpreter's teardown would only free memory the OS takes back anyway (after a report of
# ten 100k-request runs, 40-60 ms of freeing every object and module), so the process ends
# at once. Not for commands whose atexit handlers matter (bench stops spare load generators).
EXIT_AT_ONCE = frozenset({"report"})


def main() -> None:
    # A shell without job control starts background commands with SIGINT ignored, and Python
    # keeps it so: `vprof bench … &` then could not be stopped with Ctrl-C's signal, and its
    # runs, servers and Locust children would not wind down as an interrupt promises.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cli(standalone_mode=True)
    except SystemExit as exc:
        if not exc.code and sys.argv[1:2] and sys.argv[1] in EXIT_AT_ONCE:
            _exit_at_once()
        raise
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)


def _exit_at_once() -> None:
    """End the process now, with exit status 0, once what it printed is out (not under a
    profiler or coverage, which write their results at the usual exit)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        return  # a closed pipe: the usual exit says so
    os._exit(0)


if __name__ == "__main__":
    main()
