"""A whole tune on a trial runner: the search, its ``evaluate`` door, then the final check.

The runner is where servers are: ``vprof.runs.tune`` gives real ones
(``vprof.runs.tunebench``), the replay benchmark a recording, the tests a model. Everything
here is pure over it: :func:`tune_on` makes the one door the search measures through
(``evaluate``: a trial's rate search on a server the runner opens), runs the search (staged,
or guided by a capacity model), then checks the best against its near ties.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from vprof.analysis.slo import Slo
from vprof.runs.tunecheck import Checker, check_best
from vprof.runs.tuneevidence import Evidence, Objective, TuneResult
from vprof.runs.tunesearch import Ledger, Say, SearchResult, SearchSettings, staged_search
from vprof.runs.tunespace import Candidate, Space
from vprof.runs.tunetrial import Trial, run_trial

if TYPE_CHECKING:
    from vprof.runs.tuneguide import Guide


class TrialRunner(Checker, Protocol):
    """Servers for trials (one per candidate) and for the final check."""

    def open(self, candidate: Candidate) -> Trial: ...


def tune_on(
    space: Space,
    start: Candidate,
    runner: TrialRunner,
    *,
    slo: Slo,
    objective: Objective,
    settings: SearchSettings,
    refuse: Callable[[Candidate], str | None] = lambda c: None,
    gpus: Callable[[Candidate], int] = lambda c: 1,
    label: Callable[[Candidate], str] = lambda c: c.label("candidate"),
    say: Say = lambda _: None,
    clock: Callable[[], float] = time.monotonic,
    guide: Guide | None = None,
) -> TuneResult:
    """Search ``space`` from ``start`` on ``runner``'s servers, then check the best (see
    ``tunesearch``, ``tuneguide`` and ``tunecheck``)."""

    def evaluate(candidate: Candidate, race_rps: float | None) -> Evidence:
        return run_trial(
            runner.open(candidate),
            label(candidate),
            race_rps=race_rps,
            limits=settings,
            slo=slo,
            objective=objective,
            clock=clock,
        )

    ledger = Ledger(
        space,
        evaluate,
        objective=objective,
        settings=settings,
        refuse=refuse,
        gpus=gpus,
        label=label,
        say=say,
        clock=clock,
    )
    found: SearchResult
    if guide is None:
        found = staged_search(space, start, ledger)
    else:
        from vprof.runs.tuneguide import guided_search

        found = guided_search(space, start, ledger, guide)
    best, confirmation = found.best, {}
    if not found.environment:  # a check would meet the same machine
        best, confirmation = check_best(
            found, runner, slo=slo, objective=objective, settings=settings, clock=clock, say=say
        )
    servers = sum(t.server_started for t in found.trials) + confirmation.get("servers", 0)
    return TuneResult(
        trials=found.trials,
        best=best,
        start=start,
        stopped_by=found.stopped_by,
        servers_started=servers,
        wall_s=clock() - found.started_at,
        confirmation=confirmation,
        environment=found.environment,
    )
