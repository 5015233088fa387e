"""``vprof tune``: the best engine settings for a workload and an SLO, found on the real server.

A request goes down once and comes back: :func:`~vprof.runs.tunerequest.prepare` checks
every input before any server starts; :func:`run_prepared` hands the search
(:func:`vprof.runs.tuner.tune_on`, pure) its one door to servers — trials that are bench runs
(:class:`~vprof.runs.tunebench.BenchTrials`) — and writes what comes back
(:mod:`vprof.runs.tuneoutput`). Each level of a trial is one run folder in the tune folder, so
re-running the same command skips every level that completed and starts no server it does not
need. The tune folder holds::

    <out>/<run folders>   one per level of every trial (bench's names and layout)
    <out>/*.server.log    each launched server's log
    <out>/tune.json       what was asked, the space, every trial with its evidence, the answer,
                          and the candidates whose server would not start (not retried)
    <out>/sweep.json      the trials as a ladder, for ``vprof report``
    <out>/<name>.yaml     the best settings: a profile that ``extends:`` the starting one
    <out>/report.html     the report of every run
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vprof.common.errors import RunError
from vprof.records.rundir import REPORT_FILE, TUNE_FIELDS, read_json, tune_manifest
from vprof.runs.spec import Progress
from vprof.runs.tunebench import BenchTrials
from vprof.runs.tuneguide import ModelGuide
from vprof.runs.tuneoutput import (
    TuneOutcome,
    answer_text,
    trial_rows,
    tune_notes,
    write_state,
    write_sweep_manifest,
    write_tuned_profile,
)
from vprof.runs.tuner import tune_on
from vprof.runs.tunerequest import Prepared, TuneRequest, other_request, prepare
from vprof.runs.tunespace import Candidate, refusal

if TYPE_CHECKING:
    from vprof.forecast.rules import SchedulerRules


def run_tune(request: TuneRequest, say: Progress = print) -> TuneOutcome:
    """Prepare (checking everything), search, and write the profile, tables and report."""
    return run_prepared(prepare(request, say), say)


def run_prepared(prepared: Prepared, say: Progress = print) -> TuneOutcome:
    """Search with checked inputs (``prepare``'s) and write what a tune leaves."""
    p = prepared
    folder = p.request.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    # vprof writes tune.json atomically: a damaged one is foreign, and resuming from it would
    # forget which candidates failed to start
    earlier = read_json(tune_manifest(folder), fields=TUNE_FIELDS)
    if other_request(earlier, prepared):  # only with --force: prepare refused it otherwise
        say(f"note: replacing {tune_manifest(folder)}, another request's (--force)")
        earlier = {}
    failures: dict[str, str] = dict(earlier.get("start_failures") or {})
    for note in p.space.notes:
        say(f"note: {note}")
    searched = ", ".join(f"{d.key} ({len(d.values)})" for d in p.space.dims) or "nothing"
    say(
        f"tuning {p.base.name} for {p.workload_name} within {p.slo} ({p.objective.kind}): "
        f"{searched}; a grid would hold {p.space.grid_size()} candidates"
    )
    runner = BenchTrials(prepared, say, failures)
    runner.on_failure = lambda: write_state(folder, prepared, runner.opened, failures, None, [])

    def gpus(candidate: Candidate) -> int:
        return runner.profile_of(candidate).gpus_per_server()[0]

    guide = _guide(prepared, runner, say) if p.request.guided else None
    result = tune_on(
        p.space,
        p.start,
        runner,
        slo=p.slo,
        objective=p.objective,
        settings=p.settings,
        refuse=lambda c: refusal(p.base, p.space, c),
        gpus=gpus,
        label=lambda c: c.label(p.base.name),
        say=say,
        guide=guide,
    )
    rows = trial_rows(result, p.objective)
    answer = answer_text(result, prepared)
    outcome = TuneOutcome(result, rows, answer, folder)
    if result.best is not None and not result.environment:  # a search cut short: no answer
        tuned = runner.profile_of(result.best.candidate)
        path = folder / f"{p.tuned_name}.yaml"
        outcome.profile_path = write_tuned_profile(prepared, result, tuned, path)
    outcome.notes = tune_notes(result, p.settings.repeat)
    write_state(folder, prepared, len(result.trials), failures, outcome, rows)
    write_sweep_manifest(folder, p.base.name, rows, answer)
    if p.request.report:
        outcome.report_path = _report(folder, prepared, say)
    return outcome


def _guide(prepared: Prepared, runner: BenchTrials, say: Progress) -> ModelGuide:
    """The capacity model behind --guided: the tune's workload at its levels' rates, on this
    host, with each candidate's scheduler rules and the KV cache its server reported (before
    any did: the least any reported, else a cache that holds every request)."""
    from vprof.forecast.levelfit import AMPLE_KV_TOKENS, LevelModel
    from vprof.forecast.rules import rules_from_run
    from vprof.forecast.scenario import Scenario
    from vprof.runs.environment import hardware
    from vprof.workloads import get_workload

    request = prepared.request
    scenario = Scenario(get_workload(request.workload), prepared.level_shape, request.seed)
    host = hardware()

    def rules_of(candidate: Candidate) -> SchedulerRules:
        profile = runner.profile_of(candidate)
        known = runner.kv_cache_tokens
        kv = known.get(profile.identity()) or min(known.values(), default=AMPLE_KV_TOKENS)
        meta = {
            "profile": {"engine_args": dict(profile.engine_args)},
            "hardware": host,
            "server": {"kv_cache_tokens": kv},
        }
        rules, _ = rules_from_run(meta)
        assert rules is not None  # the KV cache is given
        return rules

    model = LevelModel(scenario, prepared.slo)
    return ModelGuide(model, rules_of, start_rps=prepared.settings.start_rps, say=say)


def _report(folder: Path, prepared: Prepared, say: Progress) -> Path | None:
    from vprof.report import write_report

    objective = prepared.objective
    try:
        return write_report(
            [folder],
            folder / REPORT_FILE,
            slo=str(prepared.slo),
            target_rps=objective.target_rps,
            headroom=objective.headroom,
            gpu_hour_price=objective.gpu_hour_price,
            title=f"vprof tune: {prepared.base.name} for {prepared.workload_name}",
            force=prepared.request.force,
        )
    except RunError as exc:  # a damaged run folder must not lose the tune's answer
        say(f"could not write the report: {exc}")
        return None
