"""Command-line overrides on top of a named profile: ``--model``, ``--port``, ``--set K=V``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vprof.common.errors import ProfileError
from vprof.registry.loader import get_profile
from vprof.registry.profile import Profile


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
    profile = get_profile(name, list(profiles_dirs))
    sets = parse_set_args(set_args)
    if model is not None or port is not None or sets or any(overrides.values()):
        profile = profile.with_overrides(model=model, port=port, set_args=sets or None, **overrides)
    return profile
