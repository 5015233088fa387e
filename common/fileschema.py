"""Building blocks for the JSON Schemas of vprof's YAML files, for editors.

Each file kind's schema is built in its own package (``vprof.registry.fileschema``,
``vprof.workloads.fileschema``, ``vprof.traffic.fileschema``) from the tables its loader checks
against, so the schema cannot say something the loader does not. These helpers turn the
loaders' vocabulary (``check_number``'s limits, anchored regexes, keys as written) into JSON
Schema. Draft-07: the newest draft that every YAML editor plugin reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

DRAFT = "http://json-schema.org/draft-07/schema#"
# YAML scalars whose text a loader keeps as written (``name: 1.10`` is the name "1.10"):
# numbers and booleans are accepted where a string is expected.
_WRITTEN_AS_OTHER = {"type": ["number", "boolean"]}
# no command line or environment can hold a NUL (the regex escape, not the character itself)
NO_NUL = r"^[^\u0000]*$"


def document(title: str, description: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A whole schema: ``$schema``, ``title`` and ``description`` ahead of ``body``."""
    return {"$schema": DRAFT, "title": title, "description": description, **body}


def number(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    integer: bool = False,
    description: str | None = None,
) -> dict[str, Any]:
    """The schema of a number under ``check_number``'s limits (same keywords)."""
    out: dict[str, Any] = {"type": "integer" if integer else "number"}
    if description:
        out["description"] = description
    if above is not None:
        out["exclusiveMinimum"] = above
    if minimum is not None and (above is None or minimum > above):
        out["minimum"] = minimum
    if maximum is not None:
        out["maximum"] = maximum
    elif not integer:
        # JSON Schema cannot say "finite"; a bound keeps YAML's .inf out (.nan still passes)
        out["maximum"] = 1.7976931348623157e308
    if minimum is None and above is None and not integer:
        out["minimum"] = -1.7976931348623157e308
    return out


def pattern(regex: re.Pattern[str], *, or_empty: bool = False) -> str:
    """A Python regex anchored with ``\\A…\\Z`` as a JSON Schema pattern anchored the same way
    in both regex dialects (``$(?!\\n)``: Python's ``$`` also matches before a final newline,
    which ``\\Z`` refuses); ``or_empty`` also matches the empty string."""
    text = regex.pattern
    if not (text.startswith(r"\A") and text.endswith(r"\Z")):
        raise ValueError(f"{text!r} is not anchored with \\A…\\Z")
    inner = f"(?:{text[2:-2]})?" if or_empty else text[2:-2]
    return "^" + inner + r"$(?!\n)"


def text(description: str | None = None, **constraints: Any) -> dict[str, Any]:
    """A string that a loader keeps as written: also a YAML number or bool (kept as its text).
    Each of ``constraints`` applies to its own type, as in JSON Schema: ``pattern`` and
    ``minLength`` to a string, ``minimum`` to a number."""
    out: dict[str, Any] = {"description": description} if description else {}
    out.update(type=["string", "number", "boolean"], **constraints)
    return out


def choice(values: Iterable[str], description: str | None = None) -> dict[str, Any]:
    """One of ``values``."""
    out: dict[str, Any] = {"enum": list(values)}
    if description:
        out = {"description": description, **out}
    return out


def closed(
    properties: Mapping[str, Any],
    required: Iterable[str] = (),
    description: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """A mapping of exactly these keys (others are refused, as the loaders refuse them)."""
    out: dict[str, Any] = {}
    if description:
        out["description"] = description
    out.update(type="object", properties=dict(properties), additionalProperties=False)
    if required:
        out["required"] = list(required)
    out.update(more)
    return out


# keywords that apply to a value of any type: null would have to pass them too
_ANY_TYPE = frozenset({"enum", "const", "not", "anyOf", "allOf", "oneOf", "if", "$ref"})


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` or null (a key written with no value, which the loader treats as unset)."""
    out = dict(schema)
    keywords = set(out) - {"description", "default"}
    if "enum" in out and keywords == {"enum"}:
        out["enum"] = [*out["enum"], None]
    elif "anyOf" in out and keywords == {"anyOf"}:
        out["anyOf"] = [{"type": "null"}, *out["anyOf"]]
    elif "type" in out and not keywords & _ANY_TYPE:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
    else:
        described: dict[str, Any] = {k: out.pop(k) for k in ("description", "default") if k in out}
        out = {**described, "anyOf": [{"type": "null"}, out]}
    return out
