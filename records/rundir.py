"""The run folder: its layout, the names of its files, and how they are read and written.

This module is the only place that spells a run folder's file names; writers (the bench
orchestrator, the Locust side, the metrics sampler) and readers (summaries, comparisons,
plans, reports) ask a :class:`RunDir` for a file instead::

    <run>/run.json       what was run: profile as rendered (name, identity, argv, env), workload,
                         traffic shape, seeds, url, vLLM version, hardware, client versions
    <run>/status.json    running | completed | failed | interrupted, and why it stopped
    <run>/records.arrow  per-request records (written by the Locust side as they arrive)
    <run>/locust.json    what the load generator saw: start/stop, warm-up end, workers
    <run>/loadgen.jsonl  the load generator's own health (CPU, event-loop lag)
    <run>/metrics.jsonl  server /metrics samples
    <run>/server.log     the server's log during this run
    <run>/locust.log     the load generator's log (locust.out: its stdout and stderr)
    <run>/summary.json   the summary (written last)
    <run>/timeline.csv   per-interval activity

A *bench* folder holds run folders (and each launched server's log); a sweep also writes
``sweep.json`` there. A run that was started again keeps its earlier, unfinished attempt
beside it as ``<run>.attempt-N``: nothing is deleted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from vprof.common.errors import RunError

RETIRED_MARK = ".attempt-"
SWEEP_FILE = "sweep.json"


class RunState(StrEnum):
    """Where a run stands, as ``status.json`` says."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


MISSING = "missing"  # no readable status.json: the run never started or its folder is damaged


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a reader never sees half a file (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path, *, strict: bool = True) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when the file is absent.

    A file that is not a JSON object raises :class:`RunError` naming it (``strict``), or
    reads as ``{}`` (not strict: used where a damaged file only means "not finished").
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        if strict:
            raise RunError(f"cannot read it: {exc}", path=str(path)) from None
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if strict:
            raise RunError(
                f"not valid JSON (line {exc.lineno}: {exc.msg})", path=str(path), line=exc.lineno
            ) from None
        return {}
    if not isinstance(data, dict):
        if strict:
            raise RunError(f"expected a JSON object, found {type(data).__name__}", path=str(path))
        return {}
    return data


def append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append one JSON object per line (a sampler's lines are complete when written)."""
    lines = "".join(json.dumps(row, default=str) + "\n" for row in rows)
    if lines:
        with path.open("a", encoding="utf-8") as out:
            out.write(lines)


def read_jsonl(path: Path) -> tuple[dict[str, Any], ...]:
    """Every JSON object line of ``path`` (``()`` when absent).

    A torn *last* line (a sampler killed mid-write) is dropped; a bad line anywhere else
    means the file is not what vprof wrote, and raises :class:`RunError` with its line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read it: {exc}", path=str(path)) from None
    lines = text.split("\n")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the last line, with no newline after it: torn
                continue
            raise RunError("not a JSON line", path=str(path), line=number) from None
        if not isinstance(row, dict):
            raise RunError("expected a JSON object per line", path=str(path), line=number)
        rows.append(row)
    return tuple(rows)


@dataclass(frozen=True)
class RunDir:
    """One run folder. Its files are attributes; nothing else spells their names."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    # -- the files ---------------------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def status_json(self) -> Path:
        return self.path / "status.json"

    @property
    def records(self) -> Path:
        return self.path / "records.arrow"

    @property
    def locust_json(self) -> Path:
        return self.path / "locust.json"

    @property
    def loadgen_jsonl(self) -> Path:
        return self.path / "loadgen.jsonl"

    @property
    def metrics_jsonl(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def server_log(self) -> Path:
        return self.path / "server.log"

    @property
    def locust_log(self) -> Path:
        return self.path / "locust.log"

    @property
    def locust_out(self) -> Path:
        return self.path / "locust.out"

    @property
    def summary_json(self) -> Path:
        return self.path / "summary.json"

    @property
    def timeline_csv(self) -> Path:
        return self.path / "timeline.csv"

    # -- what ran and how it ended -----------------------------------------------------------
    def create(self, meta: Mapping[str, Any]) -> None:
        """Make the folder and record what is about to run."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.run_json, dict(meta))
        self.set_status(RunState.RUNNING)

    def meta(self, *, strict: bool = False) -> dict[str, Any]:
        """``run.json`` (``{}`` when absent; damaged: ``{}``, or an error when ``strict``)."""
        return read_json(self.run_json, strict=strict)

    def status(self, *, strict: bool = False) -> dict[str, Any]:
        """``status.json`` (``{}`` when absent; damaged: ``{}``, or an error when ``strict``)."""
        return read_json(self.status_json, strict=strict)

    @property
    def state(self) -> str:
        """A :class:`RunState` value, or ``"missing"`` when there is no readable status."""
        return str(self.status().get("state", MISSING))

    def set_status(self, state: RunState | str, reason: str = "") -> None:
        state = RunState(state)
        previous = self.status()
        status: dict[str, Any] = {
            "state": state.value,
            "reason": reason,
            "started_at": previous.get("started_at", time.time()),
        }
        if state is not RunState.RUNNING:
            status["finished_at"] = time.time()
        write_json_atomic(self.status_json, status)

    def locust_info(self) -> dict[str, Any]:
        return read_json(self.locust_json)

    def write_locust_info(self, info: Mapping[str, Any]) -> None:
        write_json_atomic(self.locust_json, dict(info))

    def retire(self) -> Path:
        """Move an unfinished earlier attempt aside (nothing is deleted) and return its path."""
        n = 1
        while (target := self.path.with_name(f"{self.path.name}{RETIRED_MARK}{n}")).exists():
            n += 1
        self.path.rename(target)
        return target


def is_run_dir(path: Path) -> bool:
    """True when ``path`` looks like a run folder (it has run.json or records)."""
    run = RunDir(path)
    return run.run_json.is_file() or run.records.is_file()


def is_retired(path: Path) -> bool:
    """An earlier, unfinished attempt kept beside the run that replaced it."""
    return RETIRED_MARK in path.name


def _runs_inside(folder: Path) -> Iterator[Path]:
    for child in sorted(folder.iterdir()):
        if child.is_dir() and is_run_dir(child) and not is_retired(child):
            yield child


def expand_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Run folders named by ``paths``: a run folder itself, or the runs inside a bench folder
    (retired attempts left out)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise RunError("no such run folder", path=str(path), hint="give a run or bench folder")
        if is_run_dir(path):
            found.append(path)
            continue
        inner = list(_runs_inside(path)) if path.is_dir() else []
        if not inner:
            raise RunError(
                "not a run folder (no run.json or records.arrow) and holds no runs",
                path=str(path),
                hint="point at a folder written by `vprof bench`",
            )
        found.extend(inner)
    return found


def sweep_manifest(folder: Path) -> Path:
    """Where a sweep writes its ladder, its rows and its recommendation."""
    return Path(folder) / SWEEP_FILE
