"""Layered preset folders: what ships with vprof, then the user's own, later ones overriding.

Profiles, workloads and traffic shapes are all found the same way, lowest layer first: the
shipped folder, ``./<local>/`` of the current directory, each entry of ``$<ENV_VAR>``
(``os.pathsep``-separated), then the extra folders given on the command line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from vprof.common.errors import VprofError

YAML_SUFFIXES = (".yaml", ".yml")


class Location(NamedTuple):
    """One layer's folder (or file) and where it came from."""

    path: Path
    origin: str  # "shipped", "local", "env" or "extra"


def preset_locations(
    shipped: Path | None,
    local: Path,
    env_var: str,
    extra: Iterable[str | os.PathLike[str]] = (),
) -> list[Location]:
    """Every layer's location, lowest first; none is checked for existence."""
    found = [Location(shipped, "shipped")] if shipped is not None else []
    found.append(Location(local, "local"))
    found += [Location(Path(p), "env") for p in os.environ.get(env_var, "").split(os.pathsep) if p]
    found += [Location(Path(p), "extra") for p in extra]
    return found


def check_given(
    locations: Iterable[Location], *, env_var: str, flag: str, error: type[VprofError]
) -> None:
    """Refuse a location the user named (an ``$env_var`` entry, a ``flag``) that does not
    exist: a typo must not fall back to the shipped presets without a word."""
    for path, origin in locations:
        if origin in ("env", "extra") and not (path.is_file() or path.is_dir()):
            named = f"${env_var} entry" if origin == "env" else flag
            raise error(f"{named} {str(path)!r} does not exist", hint="create it or fix the path")


def yaml_files(location: Path) -> list[Path]:
    """The file itself, or a folder's ``*.yaml`` / ``*.yml`` files by name; [] if neither."""
    if location.is_file():
        return [location]
    if not location.is_dir():
        return []
    return sorted(p for p in location.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())


def preset_files(locations: Iterable[Location]) -> list[Path]:
    """The YAML files of each existing folder, lowest layer first, a folder only once."""
    files: list[Path] = []
    seen: set[Path] = set()
    for location in locations:
        try:
            resolved = location.path.resolve()
        except OSError:
            continue
        if resolved in seen or not location.path.is_dir():
            continue
        seen.add(resolved)
        files += yaml_files(location.path)
    return files


def preset_names(files: Iterable[Path]) -> list[str]:
    """The names ``files`` define (each one's ``name:``, else its file name without the
    suffix), sorted, read without checking them: quick enough for shell completion, and a
    broken file still lists under its file name."""
    from vprof.common.yamlfile import read_yaml

    names: set[str] = set()
    for path in files:
        try:
            data = read_yaml(path).data
        except VprofError:
            data = None
        name = data.get("name") if isinstance(data, dict) else None
        names.add(str(name) if name not in (None, "") else path.stem)
    return sorted(names)
