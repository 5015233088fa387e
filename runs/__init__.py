"""Runs and benches: one run = one profile × one workload × one traffic shape.

A bench is a matrix of runs; a sweep is a ladder of profile variants. Each run lives in a
self-describing, append-only folder, whose layout ``vprof.records.rundir`` owns.
"""

from vprof.runs.bench import BenchSpec, RunOutcome, resolve_profiles, run_bench

__all__ = ["BenchSpec", "RunOutcome", "resolve_profiles", "run_bench"]
