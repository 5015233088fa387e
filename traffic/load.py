"""Reading traffic shapes from YAML: shipped presets, ``./traffic/``, ``$VPROF_TRAFFIC_DIR``.

Errors name the file, the line and the key (``WorkloadError``), so a typo in a shape file
reads like a compiler message.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.presets import (
    YAML_SUFFIXES,
    check_given,
    preset_files,
    preset_locations,
    preset_names,
)
from vprof.common.suggest import suggestion
from vprof.common.yamlfile import KeyPath, read_yaml
from vprof.traffic.shape import (
    KINDS,
    LIMITS,
    PROCESSES,
    TRACE_TAIL_S,
    TrafficShape,
    check_field,
    trace_schedule,
)

PRESETS_DIR = Path(__file__).parent / "presets"
ENV_DIRS = "VPROF_TRAFFIC_DIR"
_FIELDS = {f.name: f for f in fields(TrafficShape)}
_SETTABLE = set(_FIELDS) - {"name", "source"}
# The settings that are text, and what each must be.
_TEXT_FIELDS = {
    "name": "a non-empty string",
    "kind": "a string",
    "process": "a string",
    "description": "a string",
    "trace": "a string (a workload name or YAML path)",
}


def shape_from_dict(
    data: Mapping[str, Any],
    *,
    name: str,
    source: str = "<dict>",
    lines: Mapping[KeyPath, int] | None = None,
) -> TrafficShape:
    """Validate a mapping and build a :class:`TrafficShape`; errors carry ``source``:line: key.

    ``name`` is the shape's name unless the mapping gives one. ``lines`` maps ``(key,)`` to the
    line it was written on (``()``: the mapping itself).
    """

    def fail(key: str | None, message: str, hint: str | None = None) -> WorkloadError:
        line = (lines or {}).get((key,) if key else ())
        return WorkloadError(message, path=source, line=line, key=key, hint=hint)

    if not isinstance(data, Mapping):
        raise fail(None, "a traffic shape must be a mapping of settings")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _TEXT_FIELDS:  # as written: YAML's numbers and dates are already text here
            if not isinstance(value, str) or (key == "name" and not value.strip()):
                got = "nothing" if value is None else f"{type(value).__name__} {value!r}"
                raise fail(key, f"must be {_TEXT_FIELDS[key]}, got {got}"[:200])
            if key == "name":
                name = value
                continue
        elif key not in _SETTABLE:
            hint = suggestion(key, sorted(_SETTABLE), f"known: {', '.join(sorted(_SETTABLE))}")
            raise fail(str(key), "unknown setting", hint)
        if key in _TEXT_FIELDS:
            values[key] = value
            continue
        line = (lines or {}).get((key,))
        value = check_field(key, value, path=source, line=line)
        values[key] = value if LIMITS[key][2] else float(value)
    kind = values.get("kind")
    if kind is None:
        raise fail(None, "missing 'kind'", f"one of {', '.join(KINDS)}")
    if kind not in KINDS:
        raise fail(
            "kind", f"unknown kind {kind!r}", suggestion(kind, KINDS, f"one of {', '.join(KINDS)}")
        )
    if values.get("process") == "trace" or values.get("trace"):
        values.update(_trace_settings(values, fail, source))
    if "duration_s" not in values or values["duration_s"] <= 0:
        raise fail(
            "duration_s" if "duration_s" in values else None,
            "duration_s must be given and positive",
        )
    process = values.get("process", "poisson")
    if process not in PROCESSES:
        raise fail(
            "process",
            f"unknown arrival process {process!r}",
            suggestion(process, PROCESSES, f"one of {', '.join(PROCESSES)}"),
        )
    if values.get("burstiness", 1.0) <= 0:  # whatever the kind: no value out of range
        raise fail("burstiness", "must be positive (1 = Poisson, <1 burstier)")
    if kind == "open-loop":
        if process != "trace" and values.get("rate_rps", 0) <= 0:
            raise fail(
                "rate_rps" if "rate_rps" in values else None,
                "an open-loop shape needs rate_rps > 0",
            )
        if values.get("max_in_flight", 32) < 1:
            raise fail("max_in_flight", "must be at least 1")
    elif values.get("users", 1) < 1 and kind != "spike":
        raise fail("users", "must be at least 1")
    if kind == "step" and values.get("step_s", 10.0) <= 0:
        raise fail("step_s", "must be positive")
    try:
        shape = TrafficShape(name=name, source=source, **values)
    except WorkloadError as exc:  # a combination of fields, e.g. too many scheduled requests
        raise fail(exc.key, exc.message, exc.hint) from None
    if shape.kind == "spike" and shape.users < 1:
        spike_runs = shape.spike_s > 0 and shape.spike_at_s < shape.duration_s
        if shape.spike_users < 1 or not spike_runs:
            why = (
                "spike_users is 0 too"
                if shape.spike_users < 1
                else "the spike (spike_at_s, spike_s) never falls within duration_s"
            )
            raise fail(
                "users" if "users" in values else None,
                f"users is 0 and {why}: no request would ever be sent",
                "give spike_users (and a spike_s within duration_s) or users at least 1",
            )
    return shape


def _trace_settings(
    values: Mapping[str, Any], fail: Callable[..., WorkloadError], source: str
) -> dict[str, Any]:
    """``trace`` resolved, the mean ``rate_rps`` and, unless given, ``duration_s`` (the last
    arrival plus a short tail) of a ``process: trace`` shape, from its trace workload."""
    if values.get("process") != "trace":
        raise fail("trace", "only a shape with process: trace replays a trace")
    if values["kind"] != "open-loop":
        raise fail("process", "process: trace needs kind: open-loop")
    ref = str(values.get("trace", ""))
    if not ref:
        raise fail(
            "trace" if "trace" in values else "process",
            "a trace shape needs trace: the trace workload whose times it replays",
            "a workload name or YAML path, e.g. trace: sample-trace",
        )
    if ref.endswith(YAML_SUFFIXES) or "/" in ref or os.sep in ref:
        path = Path(os.path.expanduser(ref))
        if not path.is_absolute() and Path(source).is_file():
            path = Path(source).parent / path
        ref = str(path.resolve())
    try:
        # The workload's file from here on, so no process looks its name up again.
        ref, offsets = trace_schedule(ref)
    except WorkloadError as exc:
        if exc.path:  # the trace workload's own file and line, or the trace file's
            raise
        raise fail("trace", exc.message, exc.hint) from None
    last_s = offsets[-1]
    rate_rps = (len(offsets) - 1) / last_s if last_s > 0 else 0.0
    # A shape written back out (shape_to_json) carries the rate it was given: that is fine.
    if "rate_rps" in values and not math.isclose(values["rate_rps"], rate_rps, rel_tol=1e-9):
        raise fail(
            "rate_rps",
            f"a trace shape replays the trace's own times (a mean {rate_rps:.4g} req/s)",
            "drop rate_rps; the trace workload's time_scale speeds the trace up",
        )
    out: dict[str, Any] = {"trace": ref, "rate_rps": rate_rps}
    if "duration_s" not in values:
        out["duration_s"] = last_s + TRACE_TAIL_S
    return out


def _load_file(path: Path) -> TrafficShape:
    doc = read_yaml(path, WorkloadError, what="the traffic shape file", invalid="not valid YAML")
    data = doc.strings_as_written(_TEXT_FIELDS)
    return shape_from_dict(data or {}, name=path.stem, source=str(path), lines=doc.lines)


def _files(extra_dirs: Iterable[str | Path]) -> list[Path]:
    locations = preset_locations(PRESETS_DIR, Path.cwd() / "traffic", ENV_DIRS, extra_dirs)
    return preset_files(locations)


def shape_names(extra_dirs: Iterable[str | Path] = ()) -> list[str]:
    """The names of every shape, without loading them (for shell completion)."""
    return preset_names(_files(extra_dirs))


def load_shapes(extra_dirs: Iterable[str | Path] = ()) -> dict[str, TrafficShape]:
    """Every shape by name: shipped presets, then ``./traffic/``, ``$VPROF_TRAFFIC_DIR``, extras.

    A later folder overrides an earlier one with the same name.
    """
    shapes: dict[str, TrafficShape] = {}
    locations = preset_locations(PRESETS_DIR, Path.cwd() / "traffic", ENV_DIRS, extra_dirs)
    check_given(locations, env_var=ENV_DIRS, flag="--dir", error=WorkloadError)
    for path in preset_files(locations):
        shape = _load_file(path)
        shapes[shape.name] = shape
    return shapes


def shape_to_json(shape: TrafficShape) -> str:
    """A shape as one JSON object that :func:`get_shape` reads back exactly (how the bench
    hands a resolved shape to the load generator: nothing is looked up twice)."""
    data = {k: v for k, v in shape.to_dict().items() if k != "source"}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _shape_from_json(text: str) -> TrafficShape:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"not a JSON object: {exc.msg}", key="traffic") from None
    if not isinstance(data, dict):
        raise WorkloadError("a traffic shape in JSON must be an object", key="traffic")
    return shape_from_dict(data, name="inline", source="--traffic")


def get_shape(name_or_path: str | Path, extra_dirs: Iterable[str | Path] = ()) -> TrafficShape:
    """One shape by preset name, YAML path or JSON object (as :func:`shape_to_json` writes);
    an unknown name suggests the closest one."""
    text = str(name_or_path)
    if text.lstrip().startswith("{"):
        return _shape_from_json(text)
    path = Path(text)
    if text.endswith(YAML_SUFFIXES) or (path.suffix and path.exists()):
        if not path.is_file():
            raise WorkloadError("no such traffic shape file", path=text)
        return _load_file(path)
    shapes = load_shapes(extra_dirs)
    if text in shapes:
        return shapes[text]
    hint = suggestion(text, shapes, f"known: {', '.join(sorted(shapes))}")
    raise WorkloadError(f"no traffic shape named {text!r}", key="traffic", hint=hint)
