"""The JSON Schema of a profile file, built from the tables the loader and validator use.

The top-level keys and the name rule come from ``registry.loader``, the entrypoints and the
environment-name rule from ``registry.profile``, and every engine argument (its type, choices,
list form, aliases and help) from the flag table ``vprof validate`` checks against, so an
editor knows exactly the flags of the installed vLLM. What one value cannot show is left to
``vprof validate``: combinations (``max-num-batched-tokens`` below ``max-model-len`` with
chunked prefill off), flags set twice under two spellings, and the ranges of numbers written
as strings (``"4k"``).
"""

from __future__ import annotations

import re
from typing import Any

from vprof.common import fileschema as js
from vprof.registry.checks import ENV_NAME_RE
from vprof.registry.loader import _NAME_RE, TOP_LEVEL_KEYS
from vprof.registry.profile import ENTRYPOINTS
from vprof.registry.validate import _POSITIVE_INTS
from vprof.registry.vllm_args import FlagSpec, FlagTable, flag_table

# Integer flags with a range beyond "a positive integer" (validate.check_range).
_PORT = (1, 65535)
# ``_as_int``'s forms, for a string: a plain integer, then the human-readable ones
_INT_TEXT = r"-?\d+"
_POSITIVE_INT_TEXT = r"0*[1-9]\d*"
_HUMAN_TEXT = r"\d+(?:\.\d+)?[kmgt]|\d+[KMGT]"
_AUTO_TEXT = r"[Aa][Uu][Tt][Oo]|-1"

_KEY_HELP = {
    "name": "The profile's name (default: the file's name without .yaml).",
    "description": "One line saying what this profile is for.",
    "extends": "Another profile whose settings this one starts from.",
    "model": "The model to serve: a Hugging Face hub id or a local folder.",
    "entrypoint": "How vLLM is started: `vllm serve`, `python -m vllm.entrypoints.openai."
    "api_server` (openai-module) or the legacy api-server.",
    "engine_args": "vLLM engine arguments, spelled as its flags without dashes "
    "(max-model-len: 4096); null drops one inherited from extends.",
    "env": "Environment variables for the server process.",
}


def _int_value(spec: FlagSpec) -> dict[str, Any]:
    """An integer flag: a YAML integer in its range, or text vLLM reads as one (JSON Schema's
    number keywords apply to the integer, ``pattern`` to the text)."""
    name = spec.name
    value: dict[str, Any] = {"type": ["integer", "string"]}
    forms = [_INT_TEXT]
    if name in _POSITIVE_INTS:
        value["minimum"] = 1
        forms = [_POSITIVE_INT_TEXT]
    elif name == "port":
        value.update(minimum=_PORT[0], maximum=_PORT[1])
    elif name == "max-model-len":
        value["minimum"] = 1
    if spec.kind == "int_or_auto":
        forms.append(_AUTO_TEXT)
    if spec.human_readable:
        forms.append(_HUMAN_TEXT)
    value["pattern"] = r"^\s*(?:" + "|".join(forms) + r")\s*$"
    if name == "max-model-len":  # -1 (or "auto") leaves it to the model's config
        return {"anyOf": [value, {"const": -1}]}
    return value


def _choices(spec: FlagSpec) -> list[Any]:
    """The values a flag with choices takes: each choice, and the YAML number that stands for
    it where vLLM compares the text (``max-lora-rank: 8`` is the choice "8")."""
    import yaml

    assert spec.choices is not None
    out: list[Any] = list(spec.choices)
    for choice in spec.choices:
        value = yaml.safe_load(choice) if re.fullmatch(r"-?\d+(?:\.\d+)?", choice) else None
        if isinstance(value, (int, float)) and value not in out:
            out.append(value)
    return out


def _one_value(spec: FlagSpec) -> dict[str, Any]:
    """The schema of one value of ``spec`` (a list's item, for list flags)."""
    kind = spec.kind
    if spec.choices is not None:
        return {"enum": _choices(spec)}
    if kind in ("bool", "flag"):
        return {"type": "boolean"}
    if kind in ("int", "int_or_auto"):
        return _int_value(spec)
    if kind == "float":
        if spec.name == "gpu-memory-utilization":
            return js.number(above=0, maximum=1)
        return js.number()
    if kind == "json":
        return {"type": ["object", "array", "string"]}
    return js.text(pattern=js.NO_NUL)  # vLLM reads a str flag's text as written


def flag_value(spec: FlagSpec) -> dict[str, Any]:
    """The schema of an engine argument's value, with vLLM's help as its description."""
    one = _one_value(spec)
    value = one
    if spec.is_list and "type" in one and "enum" not in one:
        types = one["type"] if isinstance(one["type"], list) else [one["type"]]
        value = {**one, "type": [*types, "array"], "items": one}
    elif spec.is_list:
        value = {"anyOf": [one, {"type": "array", "items": one}]}
    described: dict[str, Any] = {"description": " ".join(spec.help.split()), **value}
    # vLLM's default, where it is a value one could write (not a config object's repr)
    if spec.kind != "json" and isinstance(spec.default, (bool, int, float, str)):
        described["default"] = spec.default
    return js.nullable(described)


def _spellings(name: str) -> str:
    """Every way the loader reads ``name`` (``flag_key``: leading dashes, ``_`` for ``-``)."""
    return "^-*" + "[-_]".join(re.escape(part) for part in name.split("-")) + r"$(?!\n)"


def _flag_names(table: FlagTable) -> list[str]:
    return sorted(n for n in table.flags if n != "model")  # the model is a top-level key


def _engine_args(table: FlagTable) -> dict[str, Any]:
    names = _flag_names(table)
    aliases = sorted(a for a, n in table.aliases.items() if n in names)
    properties: dict[str, Any] = {n: {"$ref": f"#/definitions/{n}"} for n in names}
    properties.update({a: {"$ref": f"#/definitions/{table.aliases[a]}"} for a in aliases})
    spelled = {_spellings(n): properties[n] for n in [*names, *aliases]}
    return js.nullable(
        {
            "description": _KEY_HELP["engine_args"],
            "type": "object",
            "properties": properties,
            "patternProperties": spelled,
            "additionalProperties": False,
        }
    )


def profile_schema(table: FlagTable | None = None) -> dict[str, Any]:
    """The JSON Schema of a profile file, for the flags of ``table`` (default: the installed
    vLLM's, as ``vprof validate`` uses)."""
    table = table or flag_table()
    env_value = js.text(pattern=js.NO_NUL)
    keys: dict[str, Any] = {
        # an empty name falls back to the file's, as no name does
        "name": js.nullable(
            js.text(_KEY_HELP["name"], pattern=js.pattern(_NAME_RE, or_empty=True), minimum=0)
        ),
        "description": js.nullable(js.text(_KEY_HELP["description"])),
        "extends": js.nullable(js.text(_KEY_HELP["extends"])),
        "model": js.nullable(
            # minimum: a number is the text it was written as, which must not start with "-"
            js.text(_KEY_HELP["model"], minLength=1, pattern=r"^(?!-)[^\u0000]*$", minimum=0)
        ),
        "entrypoint": js.nullable(js.choice(ENTRYPOINTS, _KEY_HELP["entrypoint"])),
        "engine_args": _engine_args(table),
        "env": js.nullable(
            {
                "description": _KEY_HELP["env"],
                "type": "object",
                "propertyNames": {"pattern": js.pattern(ENV_NAME_RE)},
                "additionalProperties": env_value,
            }
        ),
    }
    assert tuple(keys) == TOP_LEVEL_KEYS, "a top-level key without a schema"
    unset = {"enum": [None, ""]}
    body = js.closed(
        keys,
        # without extends a profile names its own model
        **{
            "if": {"required": ["extends"], "properties": {"extends": {"not": unset}}},
            "else": {"required": ["model"], "properties": {"model": {"not": unset}}},
            "definitions": {n: flag_value(table.flags[n]) for n in _flag_names(table)},
        },
    )
    return js.document(
        "vprof profile",
        f"A vprof server profile; engine arguments of vLLM {table.vllm_version}. "
        "Combinations of flags are checked by `vprof validate`.",
        body,
    )
