"""The ``vprof`` command group.

Subcommands live in their own modules and are imported only when invoked, so
``vprof --help`` and the registry commands start without pandas, locust or vllm.
"""

from __future__ import annotations

import importlib
import sys

import click

from vprof.common.errors import VprofError

# command name -> "module:attribute"; modules are imported on first use
COMMANDS: dict[str, tuple[str, str]] = {
    "profiles": ("vprof.cli.profiles:profiles", "List shipped and user profiles; `show` one."),
    "validate": ("vprof.cli.profiles:validate", "Check profile files without running anything."),
    "render": ("vprof.cli.profiles:render", "Render a profile as a command, argv, docker or k8s."),
    "diff": ("vprof.cli.profiles:diff", "Show what differs between two profiles."),
    "launch": ("vprof.cli.launch:launch", "Start a profile's vLLM server and wait until healthy."),
    "model": ("vprof.cli.launch:model", "Write or locate vprof's embedded tiny model."),
    "emulate": ("vprof.cli.emulate:emulate", "Run a fast streaming server that emulates vLLM."),
    "workloads": ("vprof.cli.workloads:workloads", "List workload presets; `show` one."),
    "traffic": ("vprof.cli.traffic:traffic", "List traffic shape presets; `show` one."),
    "bench": ("vprof.cli.bench:bench", "Run profiles × traffic shapes and summarise them."),
    "sweep": ("vprof.cli.bench:sweep", "The guide's ladders: batched tokens, chunked prefill."),
    "summarize": ("vprof.cli.report:summarize", "Percentile tables for one or more runs."),
    "compare": ("vprof.cli.report:compare", "Runs side by side with confidence intervals."),
    "plan": ("vprof.cli.report:plan", "Replicas needed to serve a request rate within an SLO."),
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
        module_name, attr = target[0].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a command still being built
            if exc.name != module_name:
                raise
            return None
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help comes from the table above, so --help imports no command module.
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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


def main() -> None:
    try:
        cli(standalone_mode=True)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
