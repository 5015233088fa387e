"""Runs and benches: one run = one profile × one workload × one traffic shape.

A bench is a matrix of runs; a sweep is a ladder of profile variants. Each run lives in a
self-describing, append-only folder, whose layout ``vprof.records.rundir`` owns. The names
below load on first use, so a command module can import ``vprof.runs.order`` for its option
choices without loading the orchestrator.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BenchSpec", "RunOutcome", "resolve_profiles", "run_bench"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vprof.runs import bench

        return getattr(bench, name)
    raise AttributeError(f"module 'vprof.runs' has no attribute {name!r}")
