"""Options shared by several commands, declared once (their parsing lives in the library)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

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
