"""Summaries, comparisons and capacity plans from run folders.

Everything here is a pure function of its inputs except ``load_run`` (reads a folder) and
``write_summary`` (writes ``summary.json`` and ``timeline.csv``). pandas and numpy are
imported inside the functions, so importing this package is cheap.
"""

from vprof.analysis.compare import compare
from vprof.analysis.plan import Plan, ProfilePlan, plan
from vprof.analysis.run import Run, load_run, summarize_run, write_summary
from vprof.analysis.slo import Slo, SloError, SloTarget, parse_slo
from vprof.analysis.summary import summarize, timeline
from vprof.records.rundir import expand_runs

__all__ = [
    "Plan",
    "ProfilePlan",
    "Run",
    "Slo",
    "SloError",
    "SloTarget",
    "compare",
    "expand_runs",
    "load_run",
    "parse_slo",
    "plan",
    "summarize",
    "summarize_run",
    "timeline",
    "write_summary",
]
