"""What a report was given: run folders, bench folders (folders of runs) and sweep folders.

A sweep folder is a bench folder that also holds ``sweep.json``, the ladder's manifest::

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

SWEEP_MANIFEST = "sweep.json"
SWEEP_KINDS = ("batched-tokens", "chunked", "set", "load")


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
    from vprof.analysis import expand_runs

    runs: list[Path] = []
    seen: set[Path] = set()
    sweeps: list[Sweep] = []
    given = list(paths)
    if not given:
        raise ReportError("no runs given", hint="name run, bench or sweep folders")
    for raw in given:
        path = Path(raw)
        if path.is_dir() and (path / SWEEP_MANIFEST).is_file():
            sweeps.append(read_sweep(path))
        for run in expand_runs([path]):
            key = run.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return Inputs(tuple(runs), tuple(sweeps))


def read_sweep(folder: Path) -> Sweep:
    """Read and check ``folder/sweep.json``; raises :class:`ReportError` naming the key."""
    path = folder / SWEEP_MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read the sweep manifest: {exc}", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"not valid JSON: {exc.msg}", path=str(path), line=exc.lineno) from None
    if not isinstance(data, dict):
        raise ReportError("a sweep manifest is a JSON object", path=str(path))
    kind = data.get("kind")
    if kind not in SWEEP_KINDS:
        raise ReportError(
            f"unknown sweep kind {kind!r}",
            path=str(path),
            key="kind",
            hint=f"one of {', '.join(SWEEP_KINDS)}",
        )
    profile = data.get("profile")
    if not isinstance(profile, str) or not profile:
        raise ReportError("the profile's name is missing", path=str(path), key="profile")
    rows = data.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ReportError("rows must be a list of objects, one per rung", path=str(path),
                          key="rows")  # fmt: skip
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
        raise ReportError("the recommendation must be text", path=str(path),
                          key="recommendation")  # fmt: skip
    return Sweep(folder, kind, profile, tuple(checked), recommendation)


def _plain(value: Any) -> Any:
    """A manifest cell as the report shows it: finite numbers stay numbers, others become text."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    return json.dumps(value, sort_keys=True)
