"""The installed vLLM's server flags, read from ``vllm_args.json`` (never from vLLM itself).

``scripts/gen_vllm_args.py`` writes that file by introspecting vLLM's own argument parser.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FlagSpec:
    """What vLLM's parser says about one flag."""

    name: str
    kind: str  # bool | flag | int | int_or_auto | float | str | json
    is_list: bool
    append: bool
    nullable: bool
    negatable: bool
    human_readable: bool
    choices: tuple[str, ...] | None
    default: Any
    help: str


@dataclass(frozen=True)
class FlagTable:
    """All flags of one vLLM version, with aliases (``tp`` → ``tensor-parallel-size``)."""

    vllm_version: str
    flags: dict[str, FlagSpec]
    aliases: dict[str, str]

    def lookup(self, name: str) -> FlagSpec | None:
        """The spec for a flag name or alias, or None if vLLM has no such flag."""
        return self.flags.get(self.aliases.get(name, name))

    def suggest(self, name: str) -> str | None:
        """The closest known flag name, for a did-you-mean."""
        from vprof.common.suggest import closest

        near = closest(name, [*self.flags, *self.aliases])
        return None if near is None else self.aliases.get(near, near)


@cache
def flag_table() -> FlagTable:
    """Load the committed flag table (cached; about 100 KB of JSON)."""
    path = Path(__file__).with_name("vllm_args.json")
    try:
        text = path.read_text("utf-8")
    except OSError:
        from vprof.common.errors import ProfileError

        raise ProfileError(
            f"vLLM's flag table {path} is missing, so profiles cannot be checked",
            hint="reinstall vprof, or run scripts/gen_vllm_args.py in a checkout",
        ) from None
    data = json.loads(text)
    flags: dict[str, FlagSpec] = {}
    aliases: dict[str, str] = {}
    for name, entry in data["args"].items():
        choices = entry.get("choices")
        flags[name] = FlagSpec(
            name=name,
            kind=entry["kind"],
            is_list=entry["list"],
            append=entry["append"],
            nullable=entry["nullable"],
            negatable=entry["negatable"],
            human_readable=entry.get("human_readable", False),
            choices=tuple(choices) if choices is not None else None,
            default=entry["default"],
            help=entry["help"],
        )
        for alias in entry["aliases"]:
            aliases[alias] = name
    return FlagTable(vllm_version=data["vllm_version"], flags=flags, aliases=aliases)
