"""The JSON Schema of a traffic shape file, built from the tables the loader checks against.

The keys and their defaults are ``TrafficShape``'s fields, the number ranges ``LIMITS``, the
kinds and arrival processes ``KINDS`` and ``PROCESSES``; the rules between settings (an
open-loop shape needs a rate, a trace replay needs ``trace``) follow ``shape_from_dict``.
What one file cannot show is left to the loader: whether the trace workload exists, a
schedule of more than ``MAX_SCHEDULED_REQUESTS`` requests, and a spike outside the duration.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from vprof.common import fileschema as js
from vprof.traffic.load import _SETTABLE
from vprof.traffic.shape import KINDS, LIMITS, PROCESSES, TrafficShape

_HELP = {
    "name": "The shape's name (default: the file's name without .yaml).",
    "kind": "steady, ramp, step or spike (closed loop: users), or open-loop (a request rate).",
    "duration_s": "Measured seconds, after the warm-up.",
    "warmup_s": "Seconds of load before measuring, at the starting level.",
    "description": "One line saying what this shape is for.",
    "users": "Closed-loop users (ramp, step: the level reached; spike: the base).",
    "spawn_rate": "Users started per second; 0 = all at once.",
    "start_users": "ramp and step: users at the start.",
    "ramp_s": "ramp: seconds to reach users (default: the whole duration).",
    "step_users": "step: users added at each step.",
    "step_s": "step: seconds between steps.",
    "spike_users": "spike: users during the spike.",
    "spike_at_s": "spike: when the spike starts, seconds after the warm-up.",
    "spike_s": "spike: how long the spike lasts.",
    "rate_rps": "open-loop: requests per second.",
    "process": "open-loop arrivals: constant, poisson, gamma (with burstiness) or trace.",
    "burstiness": "gamma arrivals: 1 = Poisson, below 1 burstier, above 1 more regular.",
    "max_in_flight": "open-loop: at most this many requests at once.",
    "trace": "process trace: the trace workload (name or YAML path) whose times to replay.",
}
# settings that must be above zero (LIMITS allows 0 for fields other kinds leave at 0)
_POSITIVE = ("duration_s", "burstiness")


def _setting(field_name: str, default: Any) -> dict[str, Any]:
    if field_name in ("kind", "process"):
        values = KINDS if field_name == "kind" else PROCESSES
        schema = js.choice(values, _HELP[field_name])
    elif field_name in LIMITS:
        low, high, whole = LIMITS[field_name]
        above = low if field_name in _POSITIVE else None
        schema = js.number(minimum=low, maximum=high, above=above, integer=whole)
        schema = {"description": _HELP[field_name], **schema}
    else:  # description, trace: text kept as written
        schema = js.text(_HELP[field_name])
    if default is not MISSING and default != "":
        schema["default"] = default
    return schema


def _rules() -> list[dict[str, Any]]:
    """``shape_from_dict``'s rules between settings."""

    def when(condition: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
        return {"if": {"properties": condition, "required": list(condition)}, "then": then}

    def need(**settings: dict[str, Any]) -> dict[str, Any]:
        return {"properties": settings, "required": list(settings)}

    positive = {"exclusiveMinimum": 0}
    at_least_one = {"minimum": 1}
    open_loop = {"kind": {"const": "open-loop"}}
    closed_loop = [kind for kind in KINDS if kind not in ("open-loop", "spike")]
    trace = {"process": {"const": "trace"}}
    return [
        # duration_s must be given, unless a trace replay takes it from the trace
        {"if": need(**trace), "else": {"required": ["duration_s"]}},
        when(trace, need(kind={"const": "open-loop"}, trace={"minLength": 1})),
        when({"trace": {"not": {"enum": ["", None]}}}, need(**trace)),
        {
            "if": need(**open_loop),
            "then": {
                "properties": {"max_in_flight": at_least_one},
                "if": need(**trace),
                "else": need(rate_rps=positive),
            },
        },
        # closed loop needs a user, except a spike, whose base may be 0 (next rule)
        when({"kind": {"enum": closed_loop}}, {"properties": {"users": at_least_one}}),
        when({"kind": {"const": "step"}}, {"properties": {"step_s": positive}}),
        # a spike with no base users must have a spike
        when(
            {"kind": {"const": "spike"}, "users": {"const": 0}},
            need(spike_users=at_least_one, spike_s=positive),
        ),
    ]


def traffic_schema() -> dict[str, Any]:
    """The JSON Schema of a traffic shape file."""
    defaults = {f.name: f.default for f in fields(TrafficShape)}
    keys = [f.name for f in fields(TrafficShape) if f.name in _SETTABLE]
    properties = {"name": js.text(_HELP["name"])}
    properties.update({key: _setting(key, defaults[key]) for key in keys})
    body = js.closed(properties, ["kind"], allOf=_rules())
    return js.document(
        "vprof traffic shape",
        "A vprof traffic shape: closed-loop users over time, or open-loop arrivals.",
        body,
    )
