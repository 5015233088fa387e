"""Runs and benches: one run = one profile × one workload × one traffic shape.

A bench is a matrix of runs (``bench``: what to run and in which order; ``measure``: one run);
a sweep is a ladder of profile variants. Each run lives in a self-describing, append-only
folder, whose layout ``vprof.records.rundir`` owns. The names below load on first use, so a
command module can import ``vprof.runs.order`` for its option choices without loading the
orchestrator.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "BenchSpec": "spec",
    "RunOutcome": "spec",
    "Tick": "spec",
    "resolve_profiles": "bench",
    "run_bench": "bench",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"vprof.runs.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vprof.runs' has no attribute {name!r}")
