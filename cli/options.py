"""Options shared by several commands, declared once (their parsing lives in the library)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

from vprof.common.errors import VprofError
from vprof.common.numbers import check_number, parse_number
from vprof.common.paths import check_writable_dir

F = TypeVar("F", bound=Callable[..., Any])


class FiniteFloat(click.ParamType):
    """A number option checked by the one rule for numbers (finite, within its range)."""

    name = "number"

    def __init__(
        self,
        minimum: float | None = None,
        maximum: float | None = None,
        *,
        above: float | None = None,
    ) -> None:
        self.limits = {"minimum": minimum, "maximum": maximum, "above": above}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(check_number(value, **self.limits))
            return float(parse_number(value, **self.limits))
        except VprofError as exc:
            self.fail(exc.message, param, ctx)


class OutDir(click.ParamType):
    """A folder vprof will write into: refused at once when it is a file or not writable."""

    name = "folder"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return check_writable_dir(Path(value))
        except VprofError as exc:
            self.fail(exc.message + (f" ({exc.hint})" if exc.hint else ""), param, ctx)


# ---------------------------------------------------------------------------- shell completion
# Each reads the preset folders when the shell asks (names only, no file is checked), honouring
# a folder option already typed on the line; a word that looks like a path completes as a file.


def _given(ctx: click.Context, name: str) -> tuple[str, ...]:
    """The values of option ``name`` typed so far, on this command or a group above it."""
    context: click.Context | None = ctx
    while context is not None:
        value = context.params.get(name)
        if value:
            return tuple(value)
        context = context.parent
    return ()


def _complete(
    names: Callable[[click.Context], list[str]], ctx: click.Context, incomplete: str
) -> list[CompletionItem]:

    if incomplete.startswith((".", "/", "~")) or "/" in incomplete:
        return [CompletionItem(incomplete, type="file")]
    try:
        found = [name for name in names(ctx) if name.startswith(incomplete)]
    except VprofError:  # a folder option that does not exist: nothing to offer from it
        found = []
    return [CompletionItem(name) for name in found] or [CompletionItem(incomplete, type="file")]


def complete_profile(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Profile names (``shell_complete=`` of an argument or option that takes one)."""
    from vprof.registry.loader import profile_names

    return _complete(
        lambda c: profile_names([Path(p) for p in _given(c, "profiles_dirs")]), ctx, incomplete
    )


def complete_workload(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Workload preset names."""
    from vprof.workloads.loading import workload_names

    return _complete(lambda c: workload_names(_given(c, "extra_dirs")), ctx, incomplete)


def complete_traffic(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Traffic shape preset names."""
    from vprof.traffic.load import shape_names

    return _complete(lambda c: shape_names(_given(c, "dirs")), ctx, incomplete)


processes_option = click.option(
    "--processes",
    type=click.IntRange(1, 512),
    default=1,
    show_default=True,
    help="Locust worker processes on this host (one per spare core).",
)

profiles_dir_option = click.option(
    "--profiles-dir",
    "profiles_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Extra folder (or file) of profiles, layered over the others; repeatable.",
)


def profile_override_options(func: F) -> F:
    """``--model``, ``--port`` and ``--set KEY=VALUE`` applied on top of a profile."""
    options = [
        click.option("--model", help="Serve this model instead of the profile's (kept as given)."),
        click.option("--port", type=click.IntRange(1, 65535), help="Listen on this port."),
        click.option(
            "--set",
            "set_args",
            multiple=True,
            metavar="KEY=VALUE",
            help="Set an engine argument (value read as YAML; empty or null removes it); "
            "repeatable.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func
