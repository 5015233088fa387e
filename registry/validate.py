"""Checking a profile before anything runs: flags vLLM knows, types, ranges and combinations.

The rules follow vLLM's own config checks (its ``SchedulerConfig`` validation, mirrored case by
case in ``tests/test_registry_validate.py``) so a profile vLLM would
refuse fails here, in milliseconds, with the file, line and key — not after a 40 s start-up.
"""

from __future__ import annotations

import math
import re
from typing import Any

from vprof.common.errors import ProfileError
from vprof.registry.checks import text_problem
from vprof.registry.profile import ENTRYPOINTS, Profile
from vprof.registry.vllm_args import FlagSpec, FlagTable, flag_table

_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")  # used with fullmatch
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# flags that count things: vLLM's pydantic configs require them to be at least 1
_POSITIVE_INTS = (
    "max-num-seqs",
    "max-num-batched-tokens",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "data-parallel-size",
    "max-num-active-seqs",
    "block-size",
)


def _finite_throughout(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (a mapping's values, a list's items)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_throughout(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_throughout(v) for v in value)
    return True


def _origin(profile: Profile, key: str) -> tuple[str | None, int | None]:
    # a key the profile never set (e.g. a missing model) is located at the profile itself
    where = profile.origins.get(key) or profile.origins.get("name") or profile.source or None
    if where and ":" in where:
        path, _, line = where.rpartition(":")
        if line.isdigit():
            return path, int(line)
    return where, None


def _as_int(value: Any, spec: FlagSpec) -> int | None:
    """The integer vLLM would parse from ``value``, or None if it would not parse one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if spec.kind == "int_or_auto" and text.lower() in ("auto", "-1"):
            return -1
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        match = _HUMAN_INT.fullmatch(text)
        if match and spec.human_readable:
            number, suffix = match.groups()
            if suffix in _DECIMAL:
                return int(float(number) * _DECIMAL[suffix])
            if "." not in number:
                return int(number) * _BINARY[suffix]
    return None


class _Checker:
    def __init__(self, profile: Profile, table: FlagTable) -> None:
        self.profile = profile
        self.table = table
        self.errors: list[ProfileError] = []
        self.notes: list[str] = []
        self.ints: dict[str, int] = {}  # canonical flag -> parsed integer value
        self.bools: dict[str, bool] = {}

    def error(self, key: str, message: str, hint: str | None = None) -> None:
        path, line = _origin(self.profile, key)
        self.errors.append(ProfileError(message, path=path, line=line, key=key, hint=hint))

    def note(self, key: str, message: str) -> None:
        path, line = _origin(self.profile, key)
        where = f"{path}:{line}" if line else (path or self.profile.name)
        self.notes.append(f"{where}: {key}: {message}")

    # ------------------------------------------------------------------ one flag at a time

    def check_flag(self, key: str, value: Any) -> None:
        if key == "model":
            self.error(key, "the model is not an engine argument", hint="set top-level 'model:'")
            return
        spec = self.table.lookup(key)
        if spec is None:
            near = self.table.suggest(key)
            hint = f"did you mean '{near}'?" if near else "see `vllm serve --help=all`"
            self.error(key, f"unknown vLLM engine argument (vLLM {self.table.vllm_version})", hint)
            return
        values = value if isinstance(value, list) and spec.is_list else [value]
        if isinstance(value, list) and not spec.is_list and spec.kind != "json":
            self.error(key, "takes one value, not a list")
            return
        for item in values:
            if not self.check_value(key, spec, item):
                return
        self.check_range(spec, value)

    def check_value(self, key: str, spec: FlagSpec, value: Any) -> bool:
        kind = spec.kind
        expected = None
        if kind in ("bool", "flag"):  # a False store_true flag is simply left out
            if not isinstance(value, bool):
                expected = "true or false"
        elif kind in ("int", "int_or_auto"):
            number = _as_int(value, spec)
            if number is None:
                expected = "an integer" + (" or 'auto'" if kind == "int_or_auto" else "")
                if spec.human_readable:
                    expected += " (4096, '4k' or '4K')"
            elif not spec.is_list:
                self.ints[spec.name] = number
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                expected = "a number"
            elif not math.isfinite(value):
                expected = "a finite number"
        elif kind == "json":
            if not isinstance(value, (dict, list, str)):
                expected = "a mapping or a JSON string"
            elif not _finite_throughout(value):
                expected = "JSON, whose numbers are finite (NaN and infinity are not JSON)"
        else:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                expected = "a string"
        if expected:
            self.error(key, f"expected {expected}, got {value!r}")
            return False
        problem = _text_problem_in(value)
        if problem:
            self.error(key, f"the value {problem}")
            return False
        if spec.choices is not None and str(value) not in spec.choices:
            near = [c for c in spec.choices if c.lower() == str(value).lower()]
            shown = ", ".join(spec.choices[:12]) + (", …" if len(spec.choices) > 12 else "")
            hint = f"did you mean '{near[0]}'?" if near else f"choose one of: {shown}"
            self.error(key, f"{value!r} is not a valid choice", hint)
            return False
        if kind == "bool":
            self.bools[spec.name] = value
        return True

    def check_range(self, spec: FlagSpec, value: Any) -> None:
        name = spec.name
        key = self._written(name)
        if name == "gpu-memory-utilization" and not 0 < float(value) <= 1:
            self.error(key, f"must be in (0, 1], got {value}", hint="0.9 means 90% of the GPU")
        elif name in _POSITIVE_INTS and name in self.ints and self.ints[name] < 1:
            self.error(key, f"must be a positive integer, got {value}")
        elif name == "max-model-len" and name in self.ints:
            if self.ints[name] < 1 and self.ints[name] != -1:
                self.error(key, f"must be positive (or -1/'auto'), got {value}")
        elif name == "port" and name in self.ints and not 0 < self.ints[name] < 65536:
            self.error(key, f"must be a TCP port 1–65535, got {value}")

    def _written(self, canonical: str) -> str:
        """The key as the profile spells it (it may use an alias)."""
        for key in self.profile.engine_args:
            if key == canonical or self.table.aliases.get(key) == canonical:
                return key
        return canonical

    # ------------------------------------------------------------------ combinations

    def check_combinations(self) -> None:
        ints, bools = self.ints, self.bools
        tokens = ints.get("max-num-batched-tokens")
        model_len = ints.get("max-model-len")
        seqs = ints.get("max-num-seqs")
        chunked = bools.get("enable-chunked-prefill")
        tokens_key = self._written("max-num-batched-tokens")
        if model_len == -1:
            model_len = None
        if chunked is False and tokens is not None and model_len is not None:
            if tokens < model_len:
                self.error(
                    tokens_key,
                    f"{tokens} is below max-model-len ({model_len}) with chunked prefill off; "
                    "vLLM refuses to start",
                    hint=f"raise it to at least {model_len}, lower max-model-len, "
                    "or enable chunked prefill",
                )
        elif chunked is False and tokens is not None:
            self.note(
                tokens_key,
                "with chunked prefill off vLLM needs this to be at least max-model-len, which "
                "this profile leaves to the model's config; set max-model-len to check it here",
            )
        if tokens is not None and seqs is not None and tokens < seqs:
            self.error(
                tokens_key,
                f"{tokens} is below max-num-seqs ({seqs}); vLLM refuses to start",
                hint="raise max-num-batched-tokens or lower max-num-seqs",
            )
        if tokens and seqs and model_len and tokens > seqs * model_len:
            self.note(
                tokens_key, "exceeds max-num-seqs × max-model-len; vLLM warns this may misbehave"
            )
        active = ints.get("max-num-active-seqs")
        if active is not None and seqs is not None and active > seqs:
            self.error(
                self._written("max-num-active-seqs"),
                f"{active} exceeds max-num-seqs ({seqs}); vLLM refuses to start",
            )
        threshold = ints.get("long-prefill-token-threshold")
        if threshold and model_len and threshold > model_len:
            self.error(
                self._written("long-prefill-token-threshold"),
                f"{threshold} exceeds max-model-len ({model_len})",
            )

    # ------------------------------------------------------------------ where the guide is old

    def add_guide_notes(self) -> None:
        version = self.table.vllm_version
        chunked = self.bools.get("enable-chunked-prefill")
        prefix = self.bools.get("enable-prefix-caching")
        if chunked and prefix:
            self.note(
                self._written("enable-prefix-caching"),
                "the guide says prefix caching does not combine with chunked prefill; that was "
                f"vLLM V0 (≤ 0.5). In vLLM {version} (V1) they combine and both are on by default",
            )
        elif prefix:
            self.note(
                self._written("enable-prefix-caching"),
                f"prefix caching is on by default in vLLM {version} (V1); this flag matters for "
                "older releases and makes the profile explicit",
            )
        elif chunked:
            self.note(
                self._written("enable-chunked-prefill"),
                f"chunked prefill is on by default in vLLM {version} (V1); the batched-tokens "
                "budget is the knob that changes behaviour",
            )
        if chunked is False:
            self.note(
                self._written("enable-chunked-prefill"),
                f"vLLM {version} chunks prefills by default; turning it off makes vLLM warn the "
                "model does not officially support it, and needs batched tokens ≥ max-model-len",
            )

    def check_profile(self) -> None:
        profile = self.profile
        if self.table.note:
            self.notes.append(self.table.note)
        if not profile.model:
            self.error("model", "no model set", hint="add 'model: <hub id or path>'")
        elif text_problem(profile.model):
            self.error("model", f"the model name {text_problem(profile.model)}")
        elif profile.model.startswith("-"):
            self.error(
                "model",
                f"the model {profile.model!r} starts with '-', so vLLM would read it as an option",
                hint=f"for a local folder write ./{profile.model}",
            )
        if profile.entrypoint not in ENTRYPOINTS:
            self.error(
                "entrypoint",
                f"unknown entrypoint {profile.entrypoint!r}",
                hint="choose one of: " + ", ".join(ENTRYPOINTS),
            )
        elif profile.entrypoint == "api-server":
            self.note(
                "entrypoint",
                "vllm.entrypoints.api_server (the guide's /generate server) is not shipped with "
                f"vLLM {self.table.vllm_version}; this renders for older releases — use "
                "'openai-module' or 'serve' with current vLLM",
            )
        if not profile.description:
            self.note("name", "no description; add a one-line 'description:'")
        for key, value in profile.engine_args.items():
            self.check_flag(key, value)
        self.check_combinations()
        self.add_guide_notes()


def _text_problem_in(value: Any) -> str | None:
    """Why a string somewhere in ``value`` cannot reach a command line, or None."""
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return None
    return next((p for item in items if (p := _text_problem_in(item))), None)


def check(profile: Profile) -> tuple[list[ProfileError], list[str]]:
    """All problems and notes for ``profile``, without raising."""
    checker = _Checker(profile, flag_table())
    checker.check_profile()
    return checker.errors, checker.notes


def validate(profile: Profile) -> list[str]:
    """Check ``profile`` against the installed vLLM's flags and rules; return notes.

    Raises the first ``ProfileError`` (with file, line and key); its ``problems`` attribute
    lists every problem found.
    """
    errors, notes = check(profile)
    if errors:
        first = errors[0]
        first.problems = errors  # type: ignore[attr-defined]
        raise first
    return notes
