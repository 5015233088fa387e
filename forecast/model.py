"""``model.json``: a fitted capacity model, one entry per server configuration (this module is
the file's one owner: its layout, its version, and the checks a read makes).

A file that is not JSON, is another program's (no ``kind: vprof-forecast-model``), has a
version this vprof does not read, or holds a value vprof never writes there is refused with the
file, line and key — never read as an empty or partial model.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vprof.analysis.keys import HEADLINE_KEYS
from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import ForecastError
from vprof.forecast.rules import ConfigKey, SchedulerRules
from vprof.forecast.stalls import STALL_FIELDS, StallProcess
from vprof.forecast.stepcost import COEFFICIENTS, StepCost

KIND = "vprof-forecast-model"
# 2: what a request's arrival costs the engine's step (``step_cost.arrival_ms``,
# ``arrival_ms_per_1k_prompt``); a version-1 file has neither, which is what they read as (0)
# 3: the front end's delay per request in flight (``step_cost.frontend_ms_per_in_flight``);
# older files have none (0)
# 4: the step's cost per prompt whose prefill ends in it (``step_cost.prefill_prompt_ms``);
# older files have none (0)
VERSION = 4
READS = (1, 2, 3, 4)
MAX_MODEL_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ConfigModel:
    """The model of one server configuration."""

    key: ConfigKey
    rules: SchedulerRules
    cost: StepCost
    engine_args: Mapping[str, Any] = field(default_factory=dict)
    chat_template_tokens: int = 0  # tokens a chat request has beyond its messages' content
    closed_loop_gap_ms: float = 1.0  # a closed-loop user's pause between answer and next send
    fitted_on: tuple[Mapping[str, Any], ...] = ()  # one row per run the fit used
    span: Mapping[str, Sequence[float]] = field(default_factory=dict)  # what those runs covered
    errors: Mapping[str, Any] = field(default_factory=dict)  # "fitted", "held_out": reports
    stalls: StallProcess | None = None  # the server's pauses (None: none seen, or not fitted)

    @property
    def label(self) -> str:
        return f"{self.key.profile} on {self.key.hardware}"

    def error_text(self) -> str:
        """The model's error as a person reads it: held-out when measured, else in-sample."""
        for which, words in (("held_out", "held-out"), ("fitted", "on its own runs")):
            report = self.errors.get(which)
            if report and report.get("median_abs_pct"):
                parts = [
                    f"{_metric_words(k)} {v:.0f} %"
                    for k, v in report["median_abs_pct"].items()
                    if v is not None and k in HEADLINE_KEYS
                ]
                runs = report.get("runs", 0)
                return f"median error {words} ({runs} runs): " + ", ".join(parts)
        return "error unknown (no run was checked)"

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.key.to_json(),
            "rules": self.rules.to_json(),
            "step_cost": self.cost.to_json(),
            "engine_args": dict(self.engine_args),
            "chat_template_tokens": self.chat_template_tokens,
            "closed_loop_gap_ms": self.closed_loop_gap_ms,
            "fitted_on": [dict(r) for r in self.fitted_on],
            "span": {k: list(v) for k, v in self.span.items()},
            "errors": dict(self.errors),
            **({"stalls": self.stalls.to_json()} if self.stalls is not None else {}),
        }


def _metric_words(key: str) -> str:
    return {
        K.REQUEST_THROUGHPUT: "throughput",
        K.SERVED_RATE: "served rate",
        K.MEDIAN_TTFT_MS: "p50 TTFT",
        K.P95_TTFT_MS: "p95 TTFT",
        K.MEDIAN_TPOT_MS: "p50 TPOT",
    }.get(key, key)


@dataclass(frozen=True)
class ForecastModel:
    """A model file: its configurations, and where it was read from."""

    configs: tuple[ConfigModel, ...]
    created_at: float = field(default_factory=time.time)
    path: str = ""

    def find(self, key: ConfigKey) -> ConfigModel | None:
        """The configuration fitted for ``key`` (same profile identity and hardware)."""
        for config in self.configs:
            if config.key.identity == key.identity and config.key.hardware_id == key.hardware_id:
                return config
        return None

    def pick(self, profile: str | None = None) -> ConfigModel:
        """The configuration to predict with: the only one, or the one named ``profile``."""
        if profile is None:
            if len(self.configs) == 1:
                return self.configs[0]
            names = ", ".join(c.key.profile for c in self.configs)
            raise ForecastError(
                f"the model holds {len(self.configs)} configurations ({names})",
                path=self.path or None,
                key="--profile",
                hint="name the one to predict with --profile",
            )
        found = [c for c in self.configs if profile in (c.key.profile, c.key.identity)]
        if not found:
            names = ", ".join(c.key.profile for c in self.configs)
            raise ForecastError(
                f"no configuration {profile!r} in the model (it holds {names})",
                path=self.path or None,
                key="--profile",
            )
        return found[0]

    def to_json(self) -> dict[str, Any]:
        from importlib import metadata

        try:
            version = metadata.version("vprof")
        except metadata.PackageNotFoundError:
            version = None
        return {
            "kind": KIND,
            "version": VERSION,
            "vprof_version": version,
            "created_at": self.created_at,
            "configs": [c.to_json() for c in self.configs],
        }


def write_model(model: ForecastModel, path: str | Path) -> None:
    """Write ``model`` as JSON (atomically: a reader never sees half a file)."""
    from vprof.analysis.run import json_safe
    from vprof.records.rundir import write_json_atomic

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(target, json_safe(model.to_json()))


# -- reading, with every value checked ---------------------------------------------------------

Check = Callable[[Any, str], None]


class _Bad(Exception):
    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.message, self.key = message, key


def _number(low: float = -math.inf, high: float = math.inf, *, integer: bool = False) -> Check:
    def check(value: Any, key: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad(f"expected a number, found {_kind(value)}", key)
        if not math.isfinite(value):
            raise _Bad("expected a finite number", key)
        if integer and not float(value).is_integer():
            raise _Bad(f"expected a whole number, found {value!r}", key)
        if not low <= value <= high:
            raise _Bad(f"{value!r} is out of range [{low:g}, {high:g}]", key)

    return check


def _text(value: Any, key: str) -> None:
    if not isinstance(value, str):
        raise _Bad(f"expected text, found {_kind(value)}", key)


def _flag(value: Any, key: str) -> None:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, found {_kind(value)}", key)


def _kind(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "text"}
    return kinds.get(type(value), repr(value))


def _obj(fields: Mapping[str, Check], required: Sequence[str] = ()) -> Check:
    def check(value: Any, key: str) -> None:
        if not isinstance(value, dict):
            raise _Bad(f"expected an object, found {_kind(value)}", key)
        for name in required:
            if name not in value:
                raise _Bad(f"missing {name!r}", f"{key}.{name}" if key else name)
        for name, sub in fields.items():
            if name in value:
                sub(value[name], f"{key}.{name}" if key else name)

    return check


def _items(check: Check, limit: int = 100_000) -> Check:
    def check_list(value: Any, key: str) -> None:
        if not isinstance(value, list):
            raise _Bad(f"expected a list, found {_kind(value)}", key)
        if len(value) > limit:
            raise _Bad(f"a list of {len(value):,} items (at most {limit:,})", key)
        for i, item in enumerate(value):
            check(item, f"{key}[{i}]")

    return check_list


def _any_obj(value: Any, key: str) -> None:
    if not isinstance(value, dict):
        raise _Bad(f"expected an object, found {_kind(value)}", key)


TOKENS = _number(1, 1e7, integer=True)
_RULES = _obj(
    {
        "max_num_batched_tokens": TOKENS,
        "max_num_seqs": _number(1, 1e7, integer=True),
        "chunked_prefill": _flag,
        "prefix_caching": _flag,
        "kv_cache_tokens": _number(1, 1e12, integer=True),
        "block_size": _number(1, 1e5, integer=True),
        "max_model_len": TOKENS,
        "long_prefill_token_threshold": _number(0, 1e7, integer=True),
        "sources": _any_obj,
    },
    required=(
        "max_num_batched_tokens",
        "max_num_seqs",
        "chunked_prefill",
        "prefix_caching",
        "kv_cache_tokens",
        "block_size",
        "max_model_len",
    ),
)
_COST = _obj(
    {
        **{name: _number(0, 1e7) for name in COEFFICIENTS},
        "jitter": _number(0, 10),
        "decode_exponent": _number(0.1, 1),
        "arrival_ms": _number(0, 1e4),
        "arrival_ms_per_1k_prompt": _number(0, 1e4),
        "frontend_ms_per_in_flight": _number(0, 1e4),
        "prefill_prompt_ms": _number(0, 1e4),
    },
    # a model written before the cost per prefill chunk (or the decode exponent, or the cost
    # of an arrival) was fitted has none
    required=tuple(c for c in COEFFICIENTS if c != "prefill_chunk_ms"),
)
_STALLS = _obj(
    {
        "rate_per_s": _number(0, 1e3),
        "continue_prob": _number(0, 0.99),
        "min_ms": _number(0, 6e4),
        "mean_excess_ms": _number(0, 6e4),
    },
    required=STALL_FIELDS,
)
_KEY = _obj(
    {name: _text for name in ("profile", "identity", "hardware", "hardware_id", "vllm_version")},
    required=("profile", "identity", "hardware", "hardware_id"),
)
_REPORT = _obj(
    {"runs": _number(0, 1e7, integer=True), "median_abs_pct": _any_obj, "rows": _items(_any_obj)}
)
_CONFIG = _obj(
    {
        "config": _KEY,
        "rules": _RULES,
        "step_cost": _COST,
        "engine_args": _any_obj,
        "chat_template_tokens": _number(0, 1e6, integer=True),
        "closed_loop_gap_ms": _number(0, 1e7),
        "fitted_on": _items(_any_obj),
        "span": _any_obj,
        "errors": _obj({"fitted": _REPORT, "held_out": _REPORT}),
        "stalls": _STALLS,
    },
    required=("config", "rules", "step_cost"),
)
_FILE = _obj(
    {
        "kind": _text,
        "version": _number(1, 1e6, integer=True),
        "created_at": _number(0, 1e11),
        "configs": _items(_CONFIG, limit=10_000),
    },
    required=("kind", "version", "configs"),
)


def read_model(path: str | Path) -> ForecastModel:
    """Read and check a model file; :class:`ForecastError` names the file, line and key of
    whatever is wrong with it."""
    where = str(path)
    file = Path(path)
    try:
        if file.stat().st_size > MAX_MODEL_BYTES:
            raise ForecastError(
                f"{file.stat().st_size:,} bytes: larger than any model vprof writes", path=where
            )
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ForecastError(
            "no such model file", path=where, hint="write one with `vprof forecast fit`"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ForecastError(f"cannot read it: {exc}", path=where) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ForecastError(f"not valid JSON ({exc.msg})", path=where, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise ForecastError(f"expected a JSON object, found {_kind(data)}", path=where)
    if data.get("kind") != KIND:
        found = data.get("kind")
        raise ForecastError(
            f"not a vprof forecast model (kind is {json.dumps(found)}, not {KIND!r})",
            path=where,
            line=_line_of(text, "kind") if "kind" in data else None,
            key="kind",
            hint="give a model.json written by `vprof forecast fit`",
        )
    version = data.get("version")
    if isinstance(version, bool) or version not in READS:
        readable = ", ".join(str(v) for v in READS[:-1]) + f" and {READS[-1]}"
        raise ForecastError(
            f"model version {json.dumps(version)}; this vprof reads versions {readable}",
            path=where,
            line=_line_of(text, "version"),
            key="version",
            hint="fit the model again with this vprof",
        )
    try:
        _FILE(data, "")
    except _Bad as bad:
        raise ForecastError(
            bad.message, path=where, line=_line_of(text, bad.key), key=bad.key
        ) from None
    if not data["configs"]:
        raise ForecastError("the model holds no configuration", path=where, key="configs")
    return ForecastModel(
        configs=tuple(_config(c) for c in data["configs"]),
        created_at=float(data.get("created_at") or 0.0),
        path=where,
    )


def _config(data: Mapping[str, Any]) -> ConfigModel:
    rules = dict(data["rules"])
    sources = rules.pop("sources", {}) or {}
    cost = data["step_cost"]
    return ConfigModel(
        key=ConfigKey(
            **{k: str(v) for k, v in data["config"].items() if k in ConfigKey.__dataclass_fields__}
        ),
        rules=SchedulerRules(**rules, sources=sources),
        cost=StepCost(
            **{k: float(v) for k, v in cost.items() if k in StepCost.__dataclass_fields__}
        ),
        engine_args=dict(data.get("engine_args") or {}),
        chat_template_tokens=int(data.get("chat_template_tokens") or 0),
        closed_loop_gap_ms=float(data.get("closed_loop_gap_ms", 1.0)),
        fitted_on=tuple(data.get("fitted_on") or ()),
        span={k: tuple(v) for k, v in (data.get("span") or {}).items() if isinstance(v, list)},
        errors=dict(data.get("errors") or {}),
        stalls=(
            StallProcess(**{k: float(data["stalls"][k]) for k in STALL_FIELDS})
            if "stalls" in data
            else None
        ),
    )


def _line_of(text: str, dotted: str) -> int | None:
    """The line where ``dotted`` (``configs[0].rules.block_size``) is written, else the line of
    the nearest enclosing key that is."""
    lines = _key_lines(text)
    while dotted:
        if dotted in lines:
            return lines[dotted]
        cut = max(dotted.rfind("."), dotted.rfind("["))
        dotted = dotted[:cut] if cut > 0 else ""
    return None


def _key_lines(text: str) -> dict[str, int]:
    """Every key and list item of a JSON text by dotted path, with the line it starts on."""
    out: dict[str, int] = {}
    stack: list[list[Any]] = []  # [path, kind, next index or pending key]
    i, n, line = 0, len(text), 1
    path = ""
    expect_key = False
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            word = text[i + 1 : j]
            line += text.count("\n", i, j)
            if stack and stack[-1][1] == "{" and expect_key:
                try:
                    name = json.loads('"' + word + '"')
                except json.JSONDecodeError:
                    name = word
                path = f"{stack[-1][0]}.{name}" if stack[-1][0] else str(name)
                out.setdefault(path, line)
                stack[-1][2] = path
                expect_key = False
            elif stack and stack[-1][1] == "[":
                out.setdefault(f"{stack[-1][0]}[{stack[-1][2]}]", line)
                stack[-1][2] += 1
            i = j
        elif c in "{[":
            if stack and stack[-1][1] == "[":
                item = f"{stack[-1][0]}[{stack[-1][2]}]"
                out.setdefault(item, line)
                stack[-1][2] += 1
                base = item
            elif stack:
                base = stack[-1][2]
            else:
                base = ""
            stack.append([base, c, 0 if c == "[" else ""])
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
        elif c == ",":
            expect_key = bool(stack) and stack[-1][1] == "{"
        elif stack and stack[-1][1] == "[" and not c.isspace() and c not in ":,":
            # a scalar list item
            item = f"{stack[-1][0]}[{stack[-1][2]}]"
            out.setdefault(item, line)
            stack[-1][2] += 1
            while i + 1 < n and text[i + 1] not in ",]":
                i += 1
        i += 1
    return out
