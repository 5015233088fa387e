"""Runs and benches: one run = one profile × one workload × one traffic shape.

A bench is a matrix of runs; a sweep is a ladder of profile variants. Each run lives in a
self-describing, append-only folder (see ``vprof.runs.rundir``).
"""

from vprof.runs.bench import BenchSpec, RunOutcome, run_bench
from vprof.runs.rundir import RunDir

__all__ = ["BenchSpec", "RunDir", "RunOutcome", "run_bench"]
