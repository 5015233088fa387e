"""The JSON Schema of a workload file, built from the tables the loader checks against.

Keys come from ``workloads.loading``, kinds, parameters and their limits from
``workloads.spec`` (distributions, think times, prefixes, sessions) and the trace settings
from ``workloads.trace``. What one value cannot show is left to the loader: ``min`` above
``max``, whether a file exists or is a list of prompts, and a trace's contents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vprof.common import fileschema as js
from vprof.common.numbers import MAX_TOKENS
from vprof.workloads.loading import (
    _AGENT_KEYS,
    _CONVERSATION_KEYS,
    _PREFIX_KEYS,
    _TOP_KEYS,
    _TRACE_KEYS,
    _TRACE_TOP_KEYS,
    KINDS,
)
from vprof.workloads.spec import (
    _ALLOWED,
    _REQUIRED,
    _THINK_ALLOWED,
    _THINK_REQUIRED,
    CONTEXT_LIMITS,
    DISTRIBUTION_KINDS,
    ENDPOINTS,
    MAX_FAN_OUT,
    MAX_THINK_S,
    POPULARITIES,
    PREFIX_LIMITS,
    THINK_KINDS,
    distribution_limits,
    think_limits,
)
from vprof.workloads.trace import _SETTINGS, FORMATS

# file suffixes the loader reads as prompts rather than lengths (``_distribution_or_dataset``)
_PROMPTS_FILE = r"\.jsonl?$"

_HELP = {
    "name": "The workload's name (default: the file's name without .yaml).",
    "description": "One line saying what traffic this is.",
    "kind": "synthetic (lengths drawn from distributions, the default) or trace (a replay).",
    "endpoint": "completions (/v1/completions) or chat (/v1/chat/completions).",
    "seed": "Seed of every draw: the same seed plans the same requests.",
    "prompt_tokens": "Prompt length in tokens: a number, a distribution, or prompts from a "
    "file ({kind: empirical, file: prompts.jsonl}).",
    "output_tokens": "Tokens to ask the server for: a number or a distribution.",
    "fixed_output": "Ask for exactly the drawn output length (ignore_eos); default true.",
    "prefix": "Shared prefixes (system prompts, documents) a prefix cache can reuse.",
    "conversation": "Multi-turn chat: each turn resends the history (endpoint: chat).",
    "agent": "Agent sessions: chains of calls sharing a growing context (endpoint: chat).",
    "file": "The trace file: Mooncake JSONL, Azure CSV, or vprof JSONL/CSV.",
    "format": "The trace's format (auto: detected from the file).",
    "block_size": "Tokens per prefix block id (Mooncake: 512).",
    "time_scale": "Speed-up of the trace's time (2 = twice as fast).",
    "start_s": "Start of the replayed window, seconds from the trace's first request.",
    "duration_s": "Length of the replayed window in trace seconds.",
    "max_requests": "Replay at most this many requests of the window.",
    "max_model_len": "A request longer than this (prompt + output) is an error.",
    "groups": "How many distinct shared prefixes.",
    "length_tokens": "Tokens in each shared prefix.",
    "popularity": "How a request picks its prefix: uniform or zipf.",
    "zipf_s": "Zipf exponent: group k is drawn with weight 1 / (k + 1) ** zipf_s.",
    "share": "Fraction of requests that use a shared prefix (0 to 1).",
    "turns": "Turns per conversation: a number or a distribution.",
    "user_tokens": "Tokens of each new user message (default: prompt_tokens).",
    "max_context_tokens": "End a session before a request would exceed this many tokens.",
    "think_time_s": "Seconds between an answer and the next request: a number or "
    "{kind: exponential, mean: 3}.",
    "steps": "Calls an agent session chains.",
    "tool_tokens": "Tokens of each synthetic tool result.",
    "fan_out": "Calls each step makes at once (default 1).",
}


def _by_kind(
    kinds: tuple[str, ...],
    allowed: dict[str, frozenset[str]],
    required: dict[str, tuple[tuple[str, ...], ...]],
    limits: Callable[[str, str], dict[str, Any]],
    extra: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One ``if kind is k then …`` per kind: its parameters, their limits, what it needs."""
    rules = []
    for kind in kinds:
        names = sorted(allowed[kind])
        properties: dict[str, Any] = {"kind": {"const": kind}}
        properties.update({key: js.number(**limits(kind, key)) for key in names})
        properties.update((extra or {}).get(kind, {}))
        then = js.closed(properties)
        alternatives = [list(alt) for alt in required[kind] if alt]
        if len(alternatives) == 1:
            then["required"] = alternatives[0]
        elif alternatives:
            then["anyOf"] = [{"required": alt} for alt in alternatives]
        if {"mean", "median"} <= set(names):
            then["not"] = {"required": ["mean", "median"]}  # give mean or median, not both
        rules.append({"if": _is_kind(kind), "then": then})
    return rules


def _is_kind(kind: str) -> dict[str, Any]:
    return {"type": "object", "required": ["kind"], "properties": {"kind": {"const": kind}}}


def _with_kind(
    description: str,
    number: dict[str, Any],
    kinds: tuple[str, ...],
    rules: list[dict[str, Any]],
) -> dict[str, Any]:
    """A plain number (JSON Schema's number keywords) or a mapping with one of ``kinds``."""
    return {
        "description": description,
        **number,
        "type": ["number", "object"],
        "properties": {"kind": js.choice(kinds)},
        "allOf": rules,
    }


def _distribution(description: str, maximum: int = MAX_TOKENS) -> dict[str, Any]:
    """A token count (up to ``maximum``), a mapping with a ``kind``, or
    ``{empirical: {file: …}}``."""
    values = {
        "description": "Token counts to draw from.",
        "type": "array",
        "minItems": 1,
        "items": js.number(minimum=1, maximum=MAX_TOKENS, integer=True),
    }
    file = js.text(
        "A file of token counts, one a line (for prompt_tokens also a JSONL of prompts).",
        minLength=1,
    )
    one_source = {"oneOf": [{"required": ["file"]}, {"required": ["values"]}]}
    bounds = {key: js.number(**distribution_limits(key)) for key in ("min", "max")}
    shorthand = js.closed(
        {"empirical": js.closed({"file": file, "values": values, **bounds}, **one_source)},
        required=["empirical"],
    )
    rules = _by_kind(
        DISTRIBUTION_KINDS,
        _ALLOWED,
        _REQUIRED,
        lambda kind, key: distribution_limits(key),
        extra={"empirical": {"file": file, "values": values}},
    )
    rules.append({"if": _is_kind("empirical"), "then": one_source})
    rules.append({"if": {"type": "object", "not": {"required": ["kind"]}}, "then": shorthand})
    count = js.number(minimum=1, maximum=maximum)
    return _with_kind(description, count, DISTRIBUTION_KINDS, rules)


def _think_time() -> dict[str, Any]:
    """Seconds, or a mapping with a think-time ``kind``."""
    rules = _by_kind(THINK_KINDS, _THINK_ALLOWED, _THINK_REQUIRED, think_limits)
    rules.append({"if": {"type": "object"}, "then": {"required": ["kind"]}})
    seconds = js.number(minimum=0, maximum=MAX_THINK_S)
    return js.nullable(_with_kind(_HELP["think_time_s"], seconds, THINK_KINDS, rules))


def _described(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": _HELP[key], **schema}


def _prefix() -> dict[str, Any]:
    properties = {
        "groups": js.number(**PREFIX_LIMITS["groups"]),
        "length_tokens": js.number(**PREFIX_LIMITS["length_tokens"]),
        "popularity": js.choice(POPULARITIES),
        "zipf_s": js.number(**PREFIX_LIMITS["zipf_s"]),
        "share": js.number(**PREFIX_LIMITS["share"]),
    }
    return _closed_section("prefix", _PREFIX_KEYS, properties, ["groups", "length_tokens"])


def _conversation() -> dict[str, Any]:
    properties = {
        "turns": _distribution(_HELP["turns"]),
        "user_tokens": js.nullable(_distribution(_HELP["user_tokens"])),
        "max_context_tokens": js.nullable(js.number(**CONTEXT_LIMITS)),
        "think_time_s": _think_time(),
    }
    return _closed_section("conversation", _CONVERSATION_KEYS, properties, ["turns"])


def _agent() -> dict[str, Any]:
    properties = {
        "steps": _distribution(_HELP["steps"]),
        "tool_tokens": _distribution(_HELP["tool_tokens"]),
        "fan_out": js.nullable(_distribution(_HELP["fan_out"], MAX_FAN_OUT)),
        "think_time_s": _think_time(),
        "max_context_tokens": js.nullable(js.number(**CONTEXT_LIMITS)),
    }
    return _closed_section("agent", _AGENT_KEYS, properties, ["steps", "tool_tokens"])


def _closed_section(
    name: str, keys: tuple[str, ...], properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    """A section of exactly ``keys`` (checked: every key the loader knows has a schema)."""
    assert tuple(properties) == keys, f"a key of {name} without a schema"
    described = {k: v if "description" in v else _described(k, v) for k, v in properties.items()}
    return js.nullable(js.closed(described, required, _HELP[name]))


def _common() -> dict[str, Any]:
    """The keys both kinds of workload take."""
    return {
        "name": js.text(_HELP["name"], minLength=1),
        "description": js.text(_HELP["description"]),
        "kind": js.choice(KINDS, _HELP["kind"]),
        "endpoint": js.choice(ENDPOINTS, _HELP["endpoint"]),
        "seed": _described("seed", {"type": "integer"}),
        "fixed_output": _described("fixed_output", {"type": "boolean"}),
    }


def _trace_settings() -> dict[str, Any]:
    settings: dict[str, Any] = {
        "file": js.text(_HELP["file"], minLength=1),
        "format": js.nullable(js.choice(FORMATS, _HELP["format"])),
    }
    for key, limits, _hint in _SETTINGS:
        settings[key] = js.nullable(_described(key, js.number(**limits)))
    assert tuple(settings) == _TRACE_KEYS, "a trace setting without a schema"
    return settings


def _ordered(keys: tuple[str, ...], properties: dict[str, Any]) -> dict[str, Any]:
    assert set(properties) == set(keys), f"keys {keys} and schemas {list(properties)} differ"
    return {key: properties[key] for key in keys}


def workload_schema() -> dict[str, Any]:
    """The JSON Schema of a workload file (``kind: synthetic`` or ``kind: trace``)."""
    common = _common()
    synthetic = _ordered(
        _TOP_KEYS,
        {
            **common,
            "prompt_tokens": _distribution(_HELP["prompt_tokens"]),
            "output_tokens": _distribution(_HELP["output_tokens"]),
            "prefix": _prefix(),
            "conversation": _conversation(),
            "agent": _agent(),
        },
    )
    trace = _ordered(_TRACE_TOP_KEYS, {**common, **_trace_settings()})
    prompts_file = {
        "type": "object",
        "properties": {"file": {"type": "string", "pattern": _PROMPTS_FILE}},
        "required": ["file"],
    }
    # output lengths may come from the prompts file; elsewhere they must be given
    lengths_given = {
        "if": {
            "properties": {
                "prompt_tokens": {
                    "anyOf": [
                        {"required": ["kind"], **prompts_file},
                        {
                            "type": "object",
                            "properties": {"empirical": prompts_file},
                            "required": ["empirical"],
                        },
                    ]
                }
            },
            "required": ["prompt_tokens"],
        },
        "else": {"required": ["output_tokens"]},
    }
    sessions = [
        {
            "if": {"properties": {key: {"type": "object"}}, "required": [key]},
            "then": {"properties": {"endpoint": {"const": "chat"}}, "required": ["endpoint"]},
        }
        for key in ("conversation", "agent")
    ]
    either = {
        "not": {
            "properties": {"conversation": {"type": "object"}, "agent": {"type": "object"}},
            "required": ["conversation", "agent"],
        }
    }
    body = {
        "type": "object",
        "properties": {"kind": js.choice(KINDS, _HELP["kind"])},
        "if": {"properties": {"kind": {"const": "trace"}}, "required": ["kind"]},
        "then": js.closed(trace, ["file"]),
        "else": js.closed(synthetic, ["prompt_tokens"], allOf=[lengths_given, *sessions, either]),
    }
    return js.document(
        "vprof workload",
        "A vprof workload: the requests to send (lengths, shared prefixes, sessions) or a "
        "trace to replay.",
        body,
    )
