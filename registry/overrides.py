"""Command-line overrides on top of a named profile: ``--model``, ``--port``, ``--set K=V``,
``--env NAME=VALUE``, read as a profile file would read them.

``--set KEY=VALUE`` values are YAML, as under ``engine_args:`` (``512`` an int, ``false`` a
bool, ``{a: 1}`` a mapping, empty or ``null`` drops the flag), with the same limits and the
same rule for strings: where vLLM expects a string the text arrives as typed
(``served-model-name=1.10`` stays ``1.10``). ``--env NAME=VALUE`` values are taken literally.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vprof.common.errors import ProfileError
from vprof.common.yamlfile import parse_yaml  # yaml: loaded with the loader anyway
from vprof.registry.checks import ENV_NAME_HINT, env_name_problem
from vprof.registry.loader import get_profile
from vprof.registry.profile import Profile, flag_key
from vprof.registry.vllm_args import flag_table

MAX_LIST_VALUES = 100  # a list of values to try: each can cost a server start


def parse_set_args(items: Sequence[str]) -> dict[str, Any]:
    """``["max-num-batched-tokens=512", "enable-chunked-prefill=false"]`` → typed values."""
    table = flag_table()
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise ProfileError(
                f"--set {item!r} is not KEY=VALUE", hint="e.g. --set max-num-batched-tokens=512"
            )
        where = f"--set {key}"
        if not text.strip():
            parsed[key] = None
            continue
        spec = table.lookup(flag_key(key))
        if spec is not None and spec.kind == "str":
            # a string flag takes what was typed: YAML only removes quotes around it, or makes
            # a list for a flag that takes several; anything else YAML sees (a number, a
            # mapping, a syntax error) is not what the user meant
            try:
                doc = parse_yaml(text, "", ProfileError, key=where)
            except ProfileError:
                parsed[key] = text
                continue
            if doc.data is None or isinstance(doc.data, str):  # null drops the flag
                parsed[key] = doc.data
            elif isinstance(doc.data, list) and spec.is_list:
                parsed[key] = [doc.as_written(i, value=v) for i, v in enumerate(doc.data)]
            else:
                parsed[key] = text
            continue
        doc = parse_yaml(text, "", ProfileError, key=where)
        value = doc.data
        try:
            if isinstance(value, list):
                value = [table.as_written(key, v, doc.text(i)) for i, v in enumerate(value)]
            else:
                value = table.as_written(key, value, doc.text())
        except ValueError as exc:
            raise ProfileError(str(exc), key=where) from None
        parsed[key] = value
    return parsed


def parse_ladder_values(text: str, key: str | None = None) -> list[Any]:
    """``"128,256,true"`` → ``[128, 256, True]``: each value read as ``--set KEY=VALUE`` reads
    it (YAML scalars; strings as typed where vLLM expects a string when ``key`` is given)."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise ProfileError("no values", key=key or "LADDER", hint="e.g. max-num-seqs=16,32,64")
    if len(parts) > MAX_LIST_VALUES:
        raise ProfileError(
            f"at most {MAX_LIST_VALUES} values, got {len(parts)}", key=key or "LADDER"
        )
    name = key or "value"
    values = []
    for part in parts:
        if not part:
            raise ProfileError(f"an empty value in {text!r}", key=key or "LADDER")
        values.append(parse_set_args([f"{name}={part}"])[name])
    return values


def parse_env_args(items: Sequence[str]) -> dict[str, str]:
    """``["NAME=value", …]`` → ``{"NAME": "value"}``; a name that is not a valid environment
    variable name is refused, naming ``--env``."""
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ProfileError(f"expected NAME=VALUE, got {item!r}", key="--env")
        problem = env_name_problem(name)
        if problem:
            raise ProfileError(problem, key="--env", hint=ENV_NAME_HINT)
        parsed[name] = value
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
