"""Workloads from YAML: shipped presets, ./workloads/, $VPROF_WORKLOADS_DIR and extra folders.

Every error names the file, the line and the key, e.g.
``chat.yaml:7: prefix.share: must be between 0 and 1, got 1.5``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.numbers import MAX_TOKENS, check_number, number_hint, parse_number
from vprof.common.presets import (
    YAML_SUFFIXES,
    Location,
    check_given,
    preset_files,
    preset_locations,
    preset_names,
)
from vprof.common.suggest import did_you_mean
from vprof.workloads.spec import (
    AgentSpec,
    ConversationSpec,
    Distribution,
    PrefixSpec,
    PromptDataset,
    ThinkTime,
    Workload,
    think_time,
)
from vprof.workloads.trace import TraceSpec, load_trace

PRESETS_DIR = Path(__file__).parent / "presets"
ENV_DIRS = "VPROF_WORKLOADS_DIR"

_TOP_KEYS = (
    "name",
    "description",
    "kind",
    "endpoint",
    "seed",
    "prompt_tokens",
    "output_tokens",
    "fixed_output",
    "prefix",
    "conversation",
    "agent",
)
KINDS = ("synthetic", "trace")
# kind: trace takes the trace's settings instead of lengths, prefixes and conversations.
_TRACE_KEYS = (
    "file",
    "format",
    "block_size",
    "time_scale",
    "start_s",
    "duration_s",
    "max_requests",
    "max_model_len",
)
_TRACE_TOP_KEYS = ("name", "description", "kind", "endpoint", "seed", "fixed_output", *_TRACE_KEYS)
_PREFIX_KEYS = ("groups", "length_tokens", "popularity", "zipf_s", "share")
_CONVERSATION_KEYS = ("turns", "user_tokens", "max_context_tokens", "think_time_s")
_AGENT_KEYS = ("steps", "tool_tokens", "fan_out", "think_time_s", "max_context_tokens")
# keys whose values are strings wherever they appear: YAML's 1.10 arrives as "1.10"
_STRING_KEYS = frozenset({"name", "description", "endpoint", "kind", "popularity", "file"})
# a file of lengths or prompts is data, not config, but is read whole: a bound keeps a wrong
# path (a disk image, a log) from filling memory
MAX_DATA_BYTES = 2**30

Lines = dict[tuple[str, ...], int]


class _Located:
    """Where the data came from, so errors can point at file, line and key."""

    def __init__(self, source: str, lines: Lines, base_dir: Path | None) -> None:
        self.source = source
        self.lines = lines
        self.base_dir = base_dir

    def line(self, keys: tuple[str, ...]) -> int | None:
        # The key itself, else its nearest parent that has a line.
        for n in range(len(keys), -1, -1):
            if keys[:n] in self.lines:
                return self.lines[keys[:n]]
        return None

    def error(self, keys: tuple[str, ...], message: str, hint: str | None = None) -> WorkloadError:
        return WorkloadError(
            message,
            path=self.source,
            line=self.line(keys),
            key=".".join(keys) or None,
            hint=hint,
        )


def workload_from_dict(
    data: Mapping[str, Any],
    *,
    source: str = "<dict>",
    lines: Lines | None = None,
    base_dir: Path | None = None,
    default_name: str | None = None,
) -> Workload:
    """Build and validate a Workload from YAML-shaped data.

    ``source``/``lines`` locate errors; ``base_dir`` resolves relative ``file:`` paths.
    """
    loc = _Located(source, lines or {}, base_dir)
    if not isinstance(data, Mapping):
        raise loc.error((), f"a workload must be a mapping of keys, got {type(data).__name__}")
    kind = data.get("kind", "synthetic")
    if kind not in KINDS:
        raise loc.error(
            ("kind",),
            f"unknown workload kind {kind!r}{did_you_mean(str(kind), KINDS)}",
            hint="synthetic (the default) or trace",
        )
    allowed = _TRACE_TOP_KEYS if kind == "trace" else _TOP_KEYS
    for key in data:
        if key not in allowed:
            if key in _TRACE_KEYS:
                hint = "trace settings need kind: trace"
            elif kind == "trace":
                hint = f"a trace brings its own lengths; its keys are {', '.join(allowed)}"
            else:
                hint = f"workload keys are {', '.join(allowed)}"
            raise loc.error((str(key),), f"unknown key{did_you_mean(key, allowed)}", hint=hint)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise loc.error(("name",), "a workload needs a name (a non-empty string)")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise loc.error(("description",), "must be a string")
    if kind == "trace":
        return _trace_workload(data, loc, name, description)
    if "prompt_tokens" not in data:
        raise loc.error(
            ("prompt_tokens",),
            "missing: how long prompts are (e.g. 300 or {kind: lognormal, mean: 300, sigma: 0.5})",
        )
    prompt, dataset = _distribution_or_dataset(data["prompt_tokens"], ("prompt_tokens",), loc)
    if "output_tokens" in data:
        output = _distribution(data["output_tokens"], ("output_tokens",), loc)
    elif dataset is not None and all(n > 0 for n in dataset.output_tokens):
        output = Distribution("empirical", {}, values=dataset.output_tokens)
    else:
        raise loc.error(("output_tokens",), "missing: how many tokens to ask the server for")
    prefix = _prefix(data["prefix"], loc) if data.get("prefix") is not None else None
    conversation = (
        _conversation(data["conversation"], loc) if data.get("conversation") is not None else None
    )
    agent = _agent(data["agent"], loc) if data.get("agent") is not None else None
    fixed_output = _fixed_output(data, loc)
    try:
        return Workload(
            name=name,
            description=description.strip(),
            endpoint=data.get("endpoint", "completions"),
            prompt_tokens=prompt,
            output_tokens=output,
            prefix=prefix,
            conversation=conversation,
            fixed_output=fixed_output,
            seed=data.get("seed", 0),
            dataset=dataset,
            source=source,
            agent=agent,
        )
    except WorkloadError as exc:
        raise loc.error((exc.key or "",), exc.message) from None


def _fixed_output(data: Mapping[str, Any], loc: _Located) -> bool:
    """``fixed_output`` (default true): ask the server for exactly the drawn output length."""
    fixed_output = data.get("fixed_output", True)
    if not isinstance(fixed_output, bool):
        raise loc.error(("fixed_output",), f"must be true or false, got {fixed_output!r}")
    return fixed_output


def _trace_workload(
    data: Mapping[str, Any], loc: _Located, name: str, description: str
) -> Workload:
    """A ``kind: trace`` workload; reads the trace now, so a bad file fails before any run."""
    if data.get("file") is None:
        raise loc.error(
            ("file",), "missing: the trace file (Mooncake JSONL, Azure CSV or vprof JSONL/CSV)"
        )
    path = _resolve(data["file"], ("file",), loc)
    settings = {k: data[k] for k in _TRACE_KEYS[1:] if data.get(k) is not None}
    try:
        spec = TraceSpec(file=str(path.resolve()), **settings)
    except WorkloadError as exc:
        raise loc.error((exc.key or "",), exc.message) from None
    trace = load_trace(spec)  # its errors name the trace file and line
    fixed_output = _fixed_output(data, loc)
    try:
        return Workload(
            name=name,
            description=description.strip(),
            endpoint=data.get("endpoint", "completions"),
            prompt_tokens=Distribution(
                "empirical", {}, values=tuple(r.prompt_tokens for r in trace.requests)
            ),
            output_tokens=Distribution(
                "empirical", {}, values=tuple(r.output_tokens for r in trace.requests)
            ),
            fixed_output=fixed_output,
            seed=data.get("seed", 0),
            source=loc.source,
            trace=spec,
        )
    except WorkloadError as exc:
        raise loc.error((exc.key or "",), exc.message) from None


def _distribution(value: Any, keys: tuple[str, ...], loc: _Located) -> Distribution:
    dist, dataset = _distribution_or_dataset(value, keys, loc)
    if dataset is not None:
        raise loc.error(keys + ("file",), "a JSONL of prompts is only allowed for prompt_tokens")
    return dist


def _distribution_or_dataset(
    value: Any, keys: tuple[str, ...], loc: _Located
) -> tuple[Distribution, PromptDataset | None]:
    if isinstance(value, bool):
        raise loc.error(keys, f"must be a token count or a distribution, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            check_number(value, minimum=1, maximum=MAX_TOKENS, error=WorkloadError)
        except WorkloadError as exc:
            raise loc.error(keys, f"a token count {exc.message}") from None
        return Distribution("fixed", {"value": value}), None
    if isinstance(value, str) and number_hint(value):
        raise loc.error(keys, f"must be a token count, got {value!r}", number_hint(value))
    if not isinstance(value, Mapping):
        raise loc.error(
            keys, f"must be a token count or a mapping with a kind, got {type(value).__name__}"
        )
    spec = dict(value)
    # `empirical: {file: lengths.txt}` is shorthand for `{kind: empirical, file: lengths.txt}`.
    if "kind" not in spec and set(spec) == {"empirical"} and isinstance(spec["empirical"], dict):
        keys = keys + ("empirical",)
        spec = {"kind": "empirical", **spec["empirical"]}
    kind = spec.pop("kind", None)
    if kind is None:
        raise loc.error(
            keys, "a distribution needs a kind (fixed, uniform, normal, lognormal or empirical)"
        )
    values: tuple[int, ...] = ()
    dataset = None
    if kind == "empirical":
        file = spec.pop("file", None)
        inline = spec.pop("values", None)
        if (file is None) == (inline is None):
            raise loc.error(keys, "an empirical distribution needs either file: or values:")
        if inline is not None:
            if not isinstance(inline, list) or not inline:
                raise loc.error(keys + ("values",), "must be a non-empty list of token counts")
            values = tuple(inline)
        else:
            path = _resolve(file, keys + ("file",), loc)
            if path.suffix in (".jsonl", ".json"):
                dataset = _read_prompts(path)
                # Whitespace words stand in for token counts until a tokenizer measures them.
                values = tuple(max(1, len(p.split())) for p in dataset.prompts)
            else:
                values = _read_lengths(path)
    params: dict[str, float] = {}
    for key, raw in spec.items():
        try:
            check_number(raw, error=WorkloadError)  # ranges: Distribution, before float()
        except WorkloadError as exc:
            raise loc.error(keys + (str(key),), exc.message, exc.hint) from None
        params[str(key)] = raw
    try:
        return Distribution(str(kind), params, values=values), dataset
    except WorkloadError as exc:
        sub = keys if exc.key in (None, kind) else keys + (str(exc.key),)
        raise loc.error(sub, exc.message) from None


def _resolve(file: Any, keys: tuple[str, ...], loc: _Located) -> Path:
    if not isinstance(file, str) or not file:
        raise loc.error(keys, "must be a file path")
    path = Path(os.path.expanduser(file))
    if not path.is_absolute() and loc.base_dir is not None:
        path = loc.base_dir / path
    if path.is_dir():
        raise loc.error(keys, f"is a folder, not a file: {path}", hint="name a file in it")
    if not path.is_file():
        raise loc.error(keys, f"no such file: {path}")
    return path


def _read_text(path: Path) -> str:
    """A data file's text: UTF-8, at most ``MAX_DATA_BYTES``; errors name the file and line."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_DATA_BYTES + 1)
    except OSError as exc:
        raise WorkloadError(f"cannot read it: {exc.strerror or exc}", path=str(path)) from None
    if len(raw) > MAX_DATA_BYTES:
        raise WorkloadError(
            f"larger than {MAX_DATA_BYTES // 2**30} GiB; take a sample of it", path=str(path)
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(
            f"byte 0x{raw[exc.start]:02x} is not UTF-8",
            path=str(path),
            line=raw.count(b"\n", 0, exc.start) + 1,
            hint="save it as UTF-8",
        ) from None


def _read_lengths(path: Path) -> tuple[int, ...]:
    out = []
    for number, raw in enumerate(_read_text(path).splitlines(), start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if not text.lstrip("+-").isdigit():
            raise WorkloadError(
                f"expected one integer token count per line, got {text[:40]!r}",
                path=str(path),
                line=number,
            )
        n = parse_number(
            text,
            minimum=1,
            maximum=MAX_TOKENS,
            integer=True,
            error=WorkloadError,
            path=str(path),
            line=number,
        )
        out.append(n)
    if not out:
        raise WorkloadError("no token counts in the file", path=str(path))
    return tuple(out)


def _read_prompts(path: Path) -> PromptDataset:
    prompts: list[str] = []
    outputs: list[int] = []
    for number, raw in enumerate(_read_text(path).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise WorkloadError(f"not JSON: {why}", path=str(path), line=number) from None
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            raise WorkloadError(f"not usable JSON: {exc}", path=str(path), line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise WorkloadError(
                'each line needs a "prompt" string', path=str(path), line=number, key="prompt"
            )
        if not row["prompt"].strip():
            raise WorkloadError(
                "is empty: a request needs text to send",
                path=str(path),
                line=number,
                key="prompt",
                hint="drop the line, or give it its prompt",
            )
        try:
            row["prompt"].encode("utf-8")
        except UnicodeEncodeError:
            raise WorkloadError(
                "the prompt holds a lone surrogate (\\ud800-\\udfff), which cannot be sent",
                path=str(path),
                line=number,
                key="prompt",
            ) from None
        n = row.get("output_tokens", -1)
        if not isinstance(n, int) or isinstance(n, bool) or (n < 1 and n != -1) or n > MAX_TOKENS:
            raise WorkloadError(
                f"must be a positive integer up to {MAX_TOKENS:,}, got {n!r}",
                path=str(path),
                line=number,
                key="output_tokens",
            )
        prompts.append(row["prompt"])
        outputs.append(n)
    if not prompts:
        raise WorkloadError("no prompts in the file", path=str(path))
    return PromptDataset(str(path), tuple(prompts), tuple(outputs))


def _known_keys(
    value: Mapping, keys: tuple[str, ...], allowed: Sequence[str], loc: _Located
) -> None:
    """Refuse a key of section ``keys`` that is not one of ``allowed``, naming the closest."""
    for key in value:
        if key not in allowed:
            raise loc.error(
                keys + (str(key),),
                f"unknown key{did_you_mean(key, allowed)}",
                hint=f"{keys[0]} keys are {', '.join(allowed)}",
            )


def _prefix(value: Any, loc: _Located) -> PrefixSpec:
    keys = ("prefix",)
    if not isinstance(value, Mapping):
        raise loc.error(keys, "must be a mapping (groups, length_tokens, popularity, share)")
    _known_keys(value, keys, _PREFIX_KEYS, loc)
    for key in ("groups", "length_tokens"):
        if key not in value:
            raise loc.error(keys + (key,), "missing")
    try:
        return PrefixSpec(
            groups=value["groups"],
            length_tokens=value["length_tokens"],
            popularity=value.get("popularity", "uniform"),
            zipf_s=value.get("zipf_s", 1.0),
            share=value.get("share", 1.0),
        )
    except WorkloadError as exc:
        raise loc.error(keys + (exc.key or "",), exc.message) from None


def _conversation(value: Any, loc: _Located) -> ConversationSpec:
    keys = ("conversation",)
    if not isinstance(value, Mapping):
        raise loc.error(keys, "must be a mapping (turns, user_tokens, max_context_tokens)")
    _known_keys(value, keys, _CONVERSATION_KEYS, loc)
    if "turns" not in value:
        raise loc.error(keys + ("turns",), "missing: how many turns a conversation has")
    turns = _distribution(value["turns"], keys + ("turns",), loc)
    user = (
        _distribution(value["user_tokens"], keys + ("user_tokens",), loc)
        if value.get("user_tokens") is not None
        else None
    )
    think = _think_time(value.get("think_time_s"), keys + ("think_time_s",), loc)
    try:
        return ConversationSpec(turns, user, value.get("max_context_tokens"), think)
    except WorkloadError as exc:
        raise loc.error(keys + (exc.key or "",), exc.message) from None


def _think_time(value: Any, keys: tuple[str, ...], loc: _Located) -> ThinkTime | None:
    if value is None:
        return None
    if isinstance(value, str) and number_hint(value):
        raise loc.error(keys, f"must be a number of seconds, got {value!r}", number_hint(value))
    if not isinstance(value, (int, float, Mapping)) or isinstance(value, bool):
        raise loc.error(
            keys,
            f"must be seconds or a distribution (e.g. {{kind: exponential, mean: 2}}), "
            f"got {value!r}",
        )
    try:
        return think_time(value)
    except WorkloadError as exc:
        sub = keys + (str(exc.key),) if exc.key and isinstance(value, Mapping) else keys
        raise loc.error(sub, exc.message) from None


def _agent(value: Any, loc: _Located) -> AgentSpec:
    keys = ("agent",)
    if not isinstance(value, Mapping):
        raise loc.error(keys, f"must be a mapping ({', '.join(_AGENT_KEYS)})")
    _known_keys(value, keys, _AGENT_KEYS, loc)
    for key, what in (
        ("steps", "how many calls a session chains"),
        ("tool_tokens", "how long each synthetic tool result is"),
    ):
        if key not in value:
            raise loc.error(keys + (key,), f"missing: {what}")
    steps = _distribution(value["steps"], keys + ("steps",), loc)
    tool = _distribution(value["tool_tokens"], keys + ("tool_tokens",), loc)
    fan = (
        _distribution(value["fan_out"], keys + ("fan_out",), loc)
        if value.get("fan_out") is not None
        else None
    )
    think = _think_time(value.get("think_time_s"), keys + ("think_time_s",), loc)
    try:
        return AgentSpec(steps, tool, fan, think, value.get("max_context_tokens"))
    except WorkloadError as exc:
        raise loc.error(keys + (exc.key or "",), exc.message) from None


# --- files and folders -----------------------------------------------------------------------


def load_workload_file(path: str | os.PathLike[str]) -> Workload:
    """Read one workload YAML file; its name defaults to the file's stem."""
    from vprof.common.yamlfile import read_yaml  # imports yaml, only needed here

    p = Path(path)
    doc = read_yaml(p, WorkloadError, what="the workload file", invalid="not valid YAML")
    return workload_from_dict(
        doc.strings_as_written(_STRING_KEYS) if doc.data is not None else {},
        source=str(p),
        lines={**doc.lines, (): 1},
        base_dir=p.parent,
        default_name=p.stem,
    )


def _locations(extra_dirs: Iterable[str | os.PathLike[str]]) -> list[Location]:
    return preset_locations(PRESETS_DIR, Path.cwd() / "workloads", ENV_DIRS, extra_dirs)


def search_dirs(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """Folders searched for workloads, later ones overriding earlier ones by name."""
    return [location.path for location in _locations(extra_dirs)]


def workload_names(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """The names of every workload, without loading them (for shell completion)."""
    return preset_names(preset_files(_locations(extra_dirs)))


def load_workloads(extra_dirs: Iterable[str | os.PathLike[str]] = ()) -> dict[str, Workload]:
    """All workloads by name: shipped presets, then ./workloads/, $VPROF_WORKLOADS_DIR and
    ``extra_dirs`` (a later folder's workload replaces an earlier one of the same name)."""
    found: dict[str, Workload] = {}
    locations = _locations(extra_dirs)
    check_given(locations, env_var=ENV_DIRS, flag="--dir", error=WorkloadError)
    for file in preset_files(locations):
        workload = load_workload_file(file)
        found[workload.name] = workload
    return found


def get_workload(
    name_or_path: str | os.PathLike[str], extra_dirs: Iterable[str | os.PathLike[str]] = ()
) -> Workload:
    """A workload by name, or from a YAML file when given a path."""
    text = os.fspath(name_or_path)
    if text.endswith(YAML_SUFFIXES) or os.sep in text:
        return load_workload_file(text)
    workloads = load_workloads(extra_dirs)
    if text in workloads:
        return workloads[text]
    raise WorkloadError(
        f"no workload named {text!r}{did_you_mean(text, workloads)}",
        hint="`vprof workloads` lists them; a path to a YAML file works too",
    )
