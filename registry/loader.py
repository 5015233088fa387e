"""Finding profile files, layering them, and resolving ``extends``.

Layers, lowest first (a later layer's profile replaces an earlier one of the same name):
the shipped ``vprof.profiles`` package data, ``./profiles/`` of the current directory,
each folder of ``$VPROF_PROFILES_DIR`` (``os.pathsep``-separated), then ``extra_dirs``
(``--profiles-dir``; a single file is accepted too). ``extends:`` may name a profile of any
layer; a profile that extends its own name extends the one it replaces in a lower layer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import ProfileError
from vprof.common.presets import (
    YAML_SUFFIXES,
    check_given,
    preset_locations,
    preset_names,
    yaml_files,
)
from vprof.common.suggest import closest, suggestion
from vprof.common.yamlfile import YamlDoc, read_yaml
from vprof.registry.checks import ENV_NAME_HINT, env_name_problem, text_problem
from vprof.registry.profile import Profile, flag_key

ENV_VAR = "VPROF_PROFILES_DIR"
TOP_LEVEL_KEYS = ("name", "description", "extends", "model", "entrypoint", "engine_args", "env")
_STRING_KEYS = ("name", "description", "extends", "model", "entrypoint")
# \A…\Z: "$" would also match before a trailing newline
_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# A profile's name names files (a tuned profile's YAML, a server's log, run folders); ASCII
# only, so characters are bytes, well under the 255 bytes of a file name.
MAX_NAME_CHARS = 128


def name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a profile's name (``None``: nothing)."""
    if len(name) > MAX_NAME_CHARS:
        return (
            f"profile name {name[:24]!r}… is {len(name):,} characters long, at most "
            f"{MAX_NAME_CHARS} (it names files)"
        )
    if not _NAME_RE.match(name):
        return f"profile name {name!r} must be letters, digits, '.', '_' or '-'"
    return None


@dataclass(frozen=True, eq=False)
class _Raw:
    """One profile file as written, before ``extends`` is applied."""

    name: str
    path: str
    layer: int
    doc: YamlDoc

    @property
    def data(self) -> dict[str, Any]:
        return self.doc.data

    def where(self, key: Any, *sub: Any) -> str:
        return f"{self.path}:{self.doc.line(key, *sub) or 1}"

    def error(self, message: str, key: str | None = None, hint: str | None = None) -> ProfileError:
        line = self.doc.line(key) if key else None
        return ProfileError(message, path=self.path, line=line or 1, key=key, hint=hint)


# ---------------------------------------------------------------------------- finding files


def shipped_dir() -> Path | None:
    """The folder of profiles shipped inside the package (the ``vprof.profiles`` package data)."""
    # Its __path__ rather than importlib.resources: that module alone costs ~25 ms at start-up,
    # and vprof is installed as plain files (wheel or editable), never zipped.
    import vprof.profiles

    for entry in vprof.profiles.__path__:
        if os.path.isdir(entry):
            return Path(entry).resolve()
    return None


def profile_files(location: Path, what: str = "profile path") -> list[Path]:
    """The profile files at ``location``: the file itself, or a folder's *.yaml / *.yml."""
    if not (location.is_file() or location.is_dir()):
        raise ProfileError(
            f"{what} {str(location)!r} does not exist", hint="create it or fix the path"
        )
    return yaml_files(location)


def profile_layers(extra_dirs: Sequence[Path] = ()) -> list[list[Path]]:
    """The profile files of each layer, lowest first."""
    shipped = shipped_dir()
    layers: list[list[Path]] = []
    locations = preset_locations(shipped, Path("profiles"), ENV_VAR, extra_dirs)
    check_given(locations, env_var=ENV_VAR, flag="--profiles-dir", error=ProfileError)
    for path, origin in locations:
        # Inside a vprof checkout ./profiles *is* the shipped folder; do not load it twice.
        if origin == "local" and (not path.is_dir() or path.resolve() == shipped):
            continue
        layers.append(yaml_files(path))
    return layers


# ---------------------------------------------------------------------------- reading files


def _read_raw(file: Path, layer: int) -> _Raw:
    path = str(file)
    doc = read_yaml(file, ProfileError, what="profile file")
    data = doc.data
    if data is None:
        raise ProfileError("empty profile file", path=path, line=1, hint="see profiles/base.yaml")
    if not isinstance(data, dict):
        raise ProfileError(
            "a profile file must be a mapping (description:, model:, engine_args:, …)",
            path=path,
            line=1,
        )
    doc = _env_names_as_written(doc)
    doc = YamlDoc(doc.path, _strings_as_written(doc), doc.lines, doc.texts, doc.key_texts)
    data = doc.data
    raw = _Raw(name=str(data.get("name") or file.stem), path=path, layer=layer, doc=doc)
    _check_shape(raw)
    _engine_args_as_written(raw)
    return raw


def _env_names_as_written(doc: YamlDoc) -> YamlDoc:
    """Environment names as written (``ON:`` is the name "ON", not YAML's ``True``), with the
    lines and texts of their entries moved to the written names."""
    env = doc.data.get("env")
    if not isinstance(env, dict) or not any(("env", str(k)) in doc.key_texts for k in env):
        return doc
    lines, texts = dict(doc.lines), dict(doc.texts)
    renamed: dict[Any, Any] = {}
    for key, value in env.items():
        name = doc.key_as_written("env", key)
        for table in (lines, texts):
            if ("env", str(key)) in table:
                table[("env", str(name))] = table.pop(("env", str(key)))
        renamed[name] = value
    return YamlDoc(doc.path, {**doc.data, "env": renamed}, lines, texts, doc.key_texts)


def _strings_as_written(doc: YamlDoc) -> dict[str, Any]:
    """A copy of the profile's data where the keys that hold strings (name, description, …,
    env values) keep the text YAML read as a number, bool or date (``VER: 1.10`` → "1.10")."""
    data = dict(doc.data)
    for key in _STRING_KEYS:
        if key in data:
            data[key] = doc.as_written(key, value=data[key])
    env = data.get("env")
    if isinstance(env, dict):
        data["env"] = {name: doc.as_written("env", name, value=v) for name, v in env.items()}
    return data


def _engine_args_as_written(raw: _Raw) -> None:
    """Engine arguments vLLM reads as strings keep their text (``served-model-name: 1.10``);
    integers YAML reads differently from vLLM (``010``) are refused."""
    from vprof.registry.vllm_args import flag_table

    args = raw.data.get("engine_args")
    if not args:
        return
    table = flag_table()
    doc = raw.doc
    kept: dict[Any, Any] = {}
    for written, value in args.items():
        key = flag_key(written)
        try:
            if isinstance(value, list):
                value = [
                    table.as_written(key, item, doc.text("engine_args", written, i))
                    for i, item in enumerate(value)
                ]
            else:
                value = table.as_written(key, value, doc.text("engine_args", written))
        except ValueError as exc:
            raise ProfileError(
                str(exc),
                path=raw.path,
                line=doc.line("engine_args", written) or 1,
                key=str(written),
            ) from None
        kept[written] = value
    raw.data["engine_args"] = kept


def _check_shape(raw: _Raw) -> None:
    """Structural checks: known top-level keys and the right kind of value for each."""
    data = raw.data
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            near = suggestion(key, TOP_LEVEL_KEYS)
            if _looks_like_flag(str(key)):
                hint = "engine arguments go under 'engine_args:'"
            elif near:
                hint = near
            else:
                hint = "allowed: " + ", ".join(TOP_LEVEL_KEYS)
            raise raw.error("unknown profile key", key=str(key), hint=hint)
    for key in ("name", "description", "extends", "model", "entrypoint"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise raw.error(f"must be a string, not {_type_name(value)}", key=key)
    problem = name_problem(raw.name)
    if problem:
        raise raw.error(problem, key="name")
    for key in ("engine_args", "env"):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise raw.error(f"must be a mapping, not {_type_name(value)}", key=key)
    env = data.get("env") or {}
    for name, value in env.items():
        where = {"path": raw.path, "line": raw.doc.line("env", name), "key": f"env.{name!r}"}
        if env_name_problem(name):
            raise ProfileError("not a valid environment variable name", hint=ENV_NAME_HINT, **where)
        where["key"] = f"env.{name}"
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ProfileError(
                f"environment values must be strings, not {_type_name(value)}",
                hint='quote it, e.g. "1"',
                **where,
            )
        problem = text_problem(str(value))
        if problem:
            raise ProfileError(f"the value {problem}", **where)


def _looks_like_flag(key: str) -> bool:
    from vprof.registry.vllm_args import flag_table

    return flag_table().lookup(flag_key(key)) is not None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# ---------------------------------------------------------------------------- extends


class _Resolver:
    """Applies ``extends`` with memoisation and cycle detection."""

    def __init__(self, raws: list[_Raw]) -> None:
        self.by_name: dict[str, list[_Raw]] = {}
        for raw in sorted(raws, key=lambda r: r.layer):
            self.by_name.setdefault(raw.name, []).append(raw)
        self.done: dict[int, Profile] = {}

    def parent_of(self, raw: _Raw) -> _Raw:
        target = raw.data["extends"]
        candidates = self.by_name.get(target, [])
        if target == raw.name:
            # extending your own name means "the one I replace", from a lower layer
            candidates = [c for c in candidates if c.layer < raw.layer]
            if not candidates:
                raise raw.error(
                    f"profile {raw.name!r} extends itself and no lower layer defines it",
                    key="extends",
                )
        if not candidates:
            hint = suggestion(target, self.by_name, "run `vprof profiles` to list them")
            raise raw.error(f"extends unknown profile {target!r}", key="extends", hint=hint)
        return candidates[-1]

    def resolve(self, raw: _Raw, stack: tuple[_Raw, ...] = ()) -> Profile:
        if id(raw) in self.done:
            return self.done[id(raw)]
        if any(r is raw for r in stack):
            start = next(i for i, r in enumerate(stack) if r is raw)
            chain = " → ".join(r.name for r in stack[start:] + (raw,))
            raise raw.error(f"extends cycle: {chain}", key="extends")
        data = raw.data
        base: dict[str, Any] = {"description": "", "model": "", "entrypoint": "serve"}
        engine_args: dict[str, Any] = {}
        env: dict[str, str] = {}
        origins: dict[str, str] = {}
        if data.get("extends"):
            parent = self.resolve(self.parent_of(raw), stack + (raw,))
            base = {
                "description": parent.description,
                "model": parent.model,
                "entrypoint": parent.entrypoint,
            }
            engine_args = dict(parent.engine_args)
            env = dict(parent.env)
            origins = dict(parent.origins)
            origins.pop("extends", None)
            origins.pop("name", None)
        for key in ("description", "model", "entrypoint", "extends"):
            if data.get(key) is not None:
                base[key] = data[key]
                origins[key] = raw.where(key)
        args = data.get("engine_args") or {}
        seen: dict[str, Any] = {}
        for written, value in args.items():
            key = flag_key(written)
            if key in seen:
                raise raw.error(f"set twice (as {seen[key]!r} and {written!r})", key=str(written))
            seen[key] = written
            if value is None:  # `key: null` drops an inherited flag: vLLM's default applies
                engine_args.pop(key, None)
                origins.pop(key, None)
                continue
            engine_args[key] = value
            origins[key] = raw.where("engine_args", written)
        for name, value in (data.get("env") or {}).items():
            env[name] = str(value)
            origins[f"env.{name}"] = raw.where("env", name)
        origins["name"] = raw.where("name")
        profile = Profile(
            name=raw.name,
            description=" ".join(base["description"].split()),
            model=base["model"],
            engine_args=engine_args,
            env=env,
            entrypoint=base["entrypoint"],
            source=raw.path,
            origins=origins,
            extends=data.get("extends"),
        )
        self.done[id(raw)] = profile
        return profile


# ---------------------------------------------------------------------------- public


def _natural(name: str) -> list[Any]:
    """Sort key putting chunked-128 before chunked-1024."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)
    ]


def collect_profiles(
    extra_dirs: Sequence[Path] = (),
) -> tuple[dict[str, Profile], list[ProfileError]]:
    """Load every layer, keeping going past broken files: (profiles by name, problems)."""
    problems: list[ProfileError] = []
    raws: list[_Raw] = []
    for layer, files in enumerate(profile_layers(extra_dirs)):
        seen: dict[str, _Raw] = {}
        for file in files:
            try:
                raw = _read_raw(file, layer)
            except ProfileError as exc:
                problems.append(exc)
                continue
            if raw.name in seen:
                problems.append(
                    raw.error(
                        f"profile {raw.name!r} is also defined in {seen[raw.name].path}",
                        key="name" if "name" in raw.data else None,
                    )
                )
                continue
            seen[raw.name] = raw
            raws.append(raw)
    resolver = _Resolver(raws)
    profiles: dict[str, Profile] = {}
    for name in sorted(resolver.by_name, key=_natural):
        try:
            profiles[name] = resolver.resolve(resolver.by_name[name][-1])
        except ProfileError as exc:
            if not any(exc.format() == p.format() for p in problems):
                problems.append(exc)
    return profiles, problems


def profile_names(extra_dirs: Sequence[Path] = ()) -> list[str]:
    """The names of every layer's profiles, without loading them (for shell completion)."""
    return preset_names(file for files in profile_layers(extra_dirs) for file in files)


def load_profiles(extra_dirs: Sequence[Path] = ()) -> dict[str, Profile]:
    """All profiles by name, resolved; raises ``ProfileError`` on the first problem."""
    profiles, problems = collect_profiles(extra_dirs)
    if problems:
        raise problems[0]
    return profiles


def get_profile(name: str, extra_dirs: Sequence[Path] = ()) -> Profile:
    """One profile by name (or a path to a profile file); suggests a near name on a miss."""
    if name.endswith(YAML_SUFFIXES) and Path(name).is_file():
        path = Path(name)
        profiles = load_profiles([*extra_dirs, path])
        return profiles[_read_raw(path, 0).name]
    profiles = load_profiles(extra_dirs)
    if name in profiles:
        return profiles[name]
    near = closest(name, profiles)
    if near:
        raise ProfileError(f"no profile '{name}' — did you mean '{near}'?")
    raise ProfileError(f"no profile '{name}'", hint="run `vprof profiles` to list them")
