"""What a report was given: run folders, bench folders (folders of runs) and sweep folders.

A sweep folder is a bench folder that also holds the ladder's manifest (where:
``vprof.records.rundir.sweep_manifest``; written by ``vprof.runs.sweep.write_sweep``)::

    {"kind": "batched-tokens" | "chunked" | "set" | "load", "profile": "baseline",
     "rows": [{"rung": "...", "run": "<run folder name>", "state": "...", ...}, ...],
     "recommendation": "Recommended: ..."}

with one row per rung as ``vprof.runs.sweep.rung_row`` makes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import ReportError
from vprof.records.rundir import expand_runs, read_json, sweep_manifest


@dataclass(frozen=True)
class Sweep:
    """A sweep folder's manifest, checked."""

    path: Path  # the sweep folder
    kind: str
    profile: str
    rows: tuple[dict[str, Any], ...]
    recommendation: str


@dataclass(frozen=True)
class Inputs:
    """The run folders to report on, in the order given, and the sweeps among them."""

    runs: tuple[Path, ...]
    sweeps: tuple[Sweep, ...]


def resolve_inputs(paths: Iterable[str | Path]) -> Inputs:
    """Run folders named by ``paths`` (each once, in order) and the sweep manifests found."""
    runs: list[Path] = []
    seen: set[Path] = set()
    sweeps: list[Sweep] = []
    given = list(paths)
    if not given:
        raise ReportError("no runs given", hint="name run, bench or sweep folders")
    for raw in given:
        path = Path(raw)
        if path.is_dir() and sweep_manifest(path).is_file():
            sweeps.append(read_sweep(path))
        for run in expand_runs([path]):
            key = run.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return Inputs(tuple(runs), tuple(sweeps))


def read_sweep(folder: Path) -> Sweep:
    """Read and check a sweep folder's manifest; raises :class:`ReportError` naming the key
    (or ``RunError`` for a file that is not JSON)."""
    path = sweep_manifest(folder)
    data = read_json(path)
    kind = data.get("kind")
    # Any ladder is shown; only "load" is read differently (its rungs are offered loads).
    if not isinstance(kind, str) or not kind:
        raise ReportError(
            "the sweep's kind is missing",
            path=str(path),
            key="kind",
            hint="batched-tokens, chunked, set or load",
        )
    profile = data.get("profile")
    if not isinstance(profile, str) or not profile:
        raise ReportError("the profile's name is missing", path=str(path), key="profile")
    rows = data.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ReportError(
            "rows must be a list of objects, one per rung", path=str(path), key="rows"
        )
    checked = []
    for i, row in enumerate(rows):
        run = row.get("run")
        if run is not None and (not isinstance(run, str) or Path(run).name != run or not run):
            raise ReportError(
                f"{run!r} is not a run folder's name",
                path=str(path),
                key=f"rows[{i}].run",
                hint="the name of a run folder inside the sweep folder",
            )
        checked.append({str(k): _plain(v) for k, v in row.items()})
    recommendation = data.get("recommendation", "")
    if not isinstance(recommendation, str):
        raise ReportError("the recommendation must be text", path=str(path), key="recommendation")
    return Sweep(folder, kind, profile, tuple(checked), recommendation)


def _plain(value: Any) -> Any:
    """A manifest cell as the report shows it: finite numbers stay numbers, others become text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    return json.dumps(value, sort_keys=True)
