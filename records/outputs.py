"""The files vprof writes for people: whether one may be written, and writing it.

Every command that writes a file (``report -o``, bench's and sweeps' ``report.html``, a sweep's
or a tune's manifest, a tune's profile, ``schema -o``) asks :func:`claim_output` first, before
any work: a file that exists and is not that kind of output (a text file, a profile, a run's own
``records.arrow``) is refused unless ``force``, a file inside a run folder being read is
refused always (a run folder holds what its run wrote), and a place that cannot be written is
one line. :func:`write_output` then writes the text atomically, with the same one-line error
when the disk says no.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import OutputError, VprofError
from vprof.common.paths import check_writable_dir
from vprof.records.rundir import expand_runs, is_run_dir, sweep_manifest, tune_manifest

_HEAD_BYTES = 4096
_JSON_LIMIT_BYTES = 64 * 1024 * 1024  # a manifest vprof wrote is far smaller


@dataclass(frozen=True)
class OutputKind:
    """One kind of file vprof writes: what to call it, and how to recognise one on disk."""

    what: str
    recognise: Callable[[Path], bool]


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(_HEAD_BYTES)
    except OSError:
        return b""


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or {} when it holds none (or too much to be vprof's)."""
    try:
        if path.stat().st_size > _JSON_LIMIT_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _json_with(*keys: str) -> Callable[[Path], bool]:
    def recognise(path: Path) -> bool:
        data = _json_object(path)
        return bool(data) and all(key in data for key in keys)

    return recognise


def _is_report(path: Path) -> bool:
    head = _head(path).lower()
    return head.startswith(b"<!doctype html") and b'<meta name="generator" content="vprof' in head


TUNED_PROFILE_HEADER = "# Written by `vprof tune`"

REPORT = OutputKind("a vprof report", _is_report)
SWEEP = OutputKind("a sweep's manifest", _json_with("kind", "profile", "rows"))
TUNE = OutputKind("a tune's manifest", _json_with("profile", "space", "start_failures"))
TUNED_PROFILE = OutputKind(
    "a profile written by vprof tune",
    lambda path: _head(path).startswith(TUNED_PROFILE_HEADER.encode()),
)
# `vprof schema -o`: its title names vprof (another schema is left alone)
SCHEMA = OutputKind(
    "a JSON Schema written by vprof schema",
    lambda path: str(_json_object(path).get("title", "")).startswith("vprof "),
)


def protected_inputs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """What a command reading ``paths`` (run, bench, sweep or tune folders) must never write
    over: the run folders in them, and the folders' own manifests."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and not is_run_dir(path):
            out += [sweep_manifest(path), tune_manifest(path)]
    try:
        out += expand_runs(paths)
    except VprofError:  # a missing input is the reader's error to give, not this one's
        pass
    return out


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def claim_output(
    path: str | os.PathLike[str],
    kind: OutputKind,
    *,
    force: bool = False,
    protected: Iterable[Path] = (),
    key: str | None = None,
) -> Path:
    """``path`` if vprof may write ``kind`` there; raises :class:`OutputError` (exit 2) first.

    Refused: a folder; anything inside ``protected`` (the inputs' run folders and manifests,
    whatever ``force`` says); an existing file that is not ``kind`` (unless ``force``); a
    place that cannot be written (a missing parent under a file, no permission, ``/proc``).
    """

    target = Path(path)
    where = {"path": str(target), "key": key}
    if target.is_dir():
        raise OutputError("is a folder", hint=f"give a file name for {kind.what}", **where)
    for item in protected:
        if target.resolve() == item.resolve() or (item.is_dir() and _inside(target, item)):
            what = "a run folder" if item.is_dir() else "a manifest"
            raise OutputError(
                f"is inside {what} being read ({item}): vprof never writes over its inputs",
                hint="give an output path outside the runs",
                **where,
            )
    if (target.exists() or target.is_symlink()) and not force:
        if not target.is_file() or not kind.recognise(target):
            raise OutputError(
                f"exists and is not {kind.what}; it was left as it was",
                hint="give another path, or --force to replace it",
                **where,
            )
    try:
        check_writable_dir(target.parent)
    except VprofError as exc:
        raise OutputError(f"cannot be written: {exc.message}", **where) from None
    return target


def write_output(path: str | os.PathLike[str], text: str, *, key: str | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (a unique temporary file beside it, then a
    rename); a disk that refuses is :class:`OutputError`, one line, not a traceback."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("x", encoding="utf-8") as out:  # "x": never an existing file
            out.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise OutputError(
            f"cannot be written: {exc.strerror or exc}", path=str(target), key=key
        ) from None
    return target


__all__ = [
    "REPORT",
    "SCHEMA",
    "SWEEP",
    "TUNE",
    "TUNED_PROFILE",
    "TUNED_PROFILE_HEADER",
    "OutputKind",
    "claim_output",
    "protected_inputs",
    "write_output",
]
