"""Options and argument parsing shared by several commands, written once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from vprof.common.errors import ProfileError

if TYPE_CHECKING:
    from vprof.registry import Profile

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


def parse_set_args(items: Sequence[str]) -> dict[str, Any]:
    """``["max-num-batched-tokens=512", "enable-chunked-prefill=false"]`` → typed values.

    Values are read as YAML scalars, as in a profile file: ``512`` is an int, ``false`` a bool;
    an empty value (``key=``) drops the flag.
    """
    import yaml

    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ProfileError(
                f"--set {item!r} is not KEY=VALUE", hint="e.g. --set max-num-batched-tokens=512"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        parsed[key] = value
    return parsed


def resolve_profile(
    name: str,
    profiles_dirs: Sequence[Path] = (),
    *,
    model: str | None = None,
    port: int | None = None,
    set_args: Sequence[str] = (),
    **overrides: Any,
) -> Profile:
    """Look a profile up by name and apply the command line's overrides to it."""
    from vprof.registry import get_profile

    profile = get_profile(name, list(profiles_dirs))
    sets = parse_set_args(set_args)
    if model is not None or port is not None or sets or any(overrides.values()):
        profile = profile.with_overrides(model=model, port=port, set_args=sets or None, **overrides)
    return profile
