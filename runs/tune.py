"""``vprof tune``: the best engine settings for a workload and an SLO, found on the real server.

:func:`prepare` checks every input — the SLO, the budget, ``--space``, the traffic shape, the
workload, the profile — before any server starts. :func:`run_tune` then runs the staged search
of ``vprof.runs.tunesearch`` with trials that are bench runs: each level of a trial is one run
folder in the tune folder, so re-running the same command skips every level that completed
and starts no server it does not need. The tune folder holds::

    <out>/<run folders>   one per level of every trial (bench's names and layout)
    <out>/*.server.log    each launched server's log
    <out>/tune.json       what was asked, the space, every trial with its evidence, the answer,
                          and the candidates whose server would not start (not retried)
    <out>/sweep.json      the trials as a ladder, for ``vprof report``
    <out>/<name>.yaml     the best settings: a profile that ``extends:`` the starting one
    <out>/report.html     the report of every run
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.analysis.keys import K
from vprof.common.errors import LaunchError, ProfileError, RunError, WorkloadError
from vprof.common.numbers import check_number, parse_number
from vprof.locustfiles.optiontable import CUT_IN_FLIGHT_S
from vprof.records.rundir import (
    TUNE_FIELDS,
    TUNE_FILE,
    read_json,
    tune_manifest,
    write_json_atomic,
)
from vprof.runs.tunesearch import (
    OBJECTIVES,
    Measurement,
    Objective,
    SearchSettings,
    TrialResult,
    Tuner,
    TuneResult,
    Verdict,
)
from vprof.runs.tunespace import Candidate, Space, build_space, parse_space, refusal, variant

if TYPE_CHECKING:
    from vprof.analysis.slo import Slo
    from vprof.registry import Profile
    from vprof.runs.bench import ServerSession
    from vprof.runs.spec import BenchSpec, RunOutcome
    from vprof.traffic import TrafficShape

Say = Callable[[str], None]
REPORT_FILE = "report.html"
DEFAULT_BUDGET_TRIALS = 12
# A level the load generator could not keep up with says nothing of the server (and a plan never
# counts it as met): it is measured again, at most this many times in all.
CLIENT_LIMITED_ATTEMPTS = 3
MAX_BUDGET_TRIALS = 1000
MAX_BUDGET_S = 30 * 86_400.0
_DURATION = re.compile(
    r"^(?:(?P<h>\d+(?:\.\d*)?)h)?(?:(?P<m>\d+(?:\.\d*)?)m(?:in)?)?(?:(?P<s>\d+(?:\.\d*)?)s)?$"
)
_DURATION_HINT = "e.g. 2h, 90m, 1h30m or 600s"


# --------------------------------------------------------------------------- what was asked


@dataclass(frozen=True)
class TuneRequest:
    """Everything ``vprof tune`` was asked, as the CLI parsed it (numbers are checked again in
    :func:`prepare`, so library callers meet the same rules)."""

    profile: str
    slo: str
    workload: str = "chat"
    objective: str = "max-rate"
    target_rps: float | None = None
    headroom: float = 0.2
    gpu_hour_price: float | None = None
    budget_trials: int | None = None
    budget_time_s: float | None = None
    space: tuple[str, ...] = ()
    traffic: str = "constant-rate"
    level_s: float = 30.0
    warmup_s: float = 5.0
    max_in_flight: int = 256
    start_rps: float = 1.0
    max_rps: float = 10_000.0
    resolution: float = 0.1
    repeat: int = 2
    out_dir: Path = Path("vprof-tune")
    name: str | None = None
    profiles_dirs: tuple[Path, ...] = ()
    model: str | None = None
    port: int | None = None
    set_args: tuple[str, ...] = ()
    seed: int = 0
    processes: int = 1
    tokenizer: str | None = None
    fetch_tokenizer: bool = False
    report: bool = True
    force: bool = False  # replace --out's files even when they are not this tune's


def parse_duration(text: str, key: str = "--budget-time") -> float:
    """``"2h"``, ``"90m"``, ``"1h30m"``, ``"600s"`` or ``"600"`` → seconds (positive, finite,
    at most 30 days)."""
    raw = str(text).strip().lower().replace(" ", "")
    match = _DURATION.match(raw)
    if raw and match and any(match.groupdict().values()):
        parts = {k: float(v) for k, v in match.groupdict().items() if v}
        seconds = parts.get("h", 0.0) * 3600 + parts.get("m", 0.0) * 60 + parts.get("s", 0.0)
    else:
        seconds = parse_number(raw, error=RunError, key=key, hint=_DURATION_HINT)
    return float(check_number(seconds, above=0, maximum=MAX_BUDGET_S, error=RunError, key=key,
                              hint=_DURATION_HINT))  # fmt: skip


def parse_budget_trials(text: str) -> int:
    """``--budget-trials N``: a whole number of candidates to measure, 1 to 1000."""
    return int(
        parse_number(
            text,
            minimum=1,
            maximum=MAX_BUDGET_TRIALS,
            integer=True,
            error=RunError,
            key="--budget-trials",
        )  # fmt: skip
    )


@dataclass(frozen=True)
class Prepared:
    """The checked inputs of a tune: nothing has started yet."""

    request: TuneRequest
    slo: Slo
    objective: Objective
    settings: SearchSettings
    base: Profile  # with the command line's overrides
    on_disk: Profile  # as its file has it (what the written profile extends)
    space: Space
    start: Candidate
    level_shape: TrafficShape
    spec: BenchSpec
    tuned_name: str
    workload_name: str


def prepare(request: TuneRequest, say: Say = lambda _: None) -> Prepared:
    """Check everything before any server starts; raise the error that names what is wrong."""
    from vprof.analysis.slo import SloError, parse_slo
    from vprof.registry import get_profile
    from vprof.runs.bench import resolve_profiles
    from vprof.runs.spec import BenchSpec
    from vprof.runs.tunespace import starting_candidate
    from vprof.server.host import detect_engine
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    slo = parse_slo(request.slo)
    if not any(t.percentile is not None for t in slo.targets):
        raise SloError(
            "tune needs percentile targets to judge each level by", key="--slo",
            hint="e.g. ttft_p95=500ms,tpot_p95=50ms",
        )  # fmt: skip
    objective = _objective(request)
    settings = _settings(request)
    given = parse_space(request.space)
    shape = get_shape(request.traffic)
    if not shape.open_loop or shape.process == "trace":
        kind = "a trace replay" if shape.open_loop else f"closed-loop ({shape.kind})"
        raise WorkloadError(
            f"{shape.name} is {kind}: tune climbs an open-loop request rate",
            key="--traffic",
            hint="use constant-rate or poisson (or an open-loop YAML shape)",
        )
    level_s = check_number(request.level_s, above=0, maximum=86_400, error=RunError,
                           key="--level-s")  # fmt: skip
    warmup_s = check_number(request.warmup_s, minimum=0, maximum=86_400, error=RunError,
                            key="--warmup-s")  # fmt: skip
    in_flight = check_number(request.max_in_flight, minimum=1, maximum=1_000_000, integer=True,
                             error=RunError, key="--max-in-flight")  # fmt: skip
    level_shape = replace(shape, duration_s=level_s, warmup_s=warmup_s, max_in_flight=in_flight)
    try:  # the highest rate's schedule must fit in one run
        rate_shape(level_shape, settings.max_rps)
    except WorkloadError as exc:
        raise RunError(exc.message, key="--max-rps", hint="lower it or --level-s") from None
    workload = get_workload(request.workload)
    (base,) = resolve_profiles(
        [request.profile], request.profiles_dirs, model=request.model, port=request.port,
        set_args=request.set_args,
    )  # fmt: skip
    on_disk = get_profile(request.profile, list(request.profiles_dirs))
    engine = detect_engine()
    if engine.distribution is None:
        raise LaunchError(
            "vLLM is not installed in this Python environment",
            hint="install vprof[cpu] on a machine without a GPU, vprof[gpu] with one",
        )
    space = build_space(base, workload, given, gpu=engine.gpu)
    _check_base(base, space)
    start = starting_candidate(space, base)
    tuned_name = request.name or f"{on_disk.name}-tuned"
    _check_name(tuned_name)
    spec = BenchSpec(
        traffic=(),
        workload=request.workload,
        out_dir=request.out_dir,
        model_overridden=request.model is not None,
        seed=request.seed,
        processes=request.processes,
        slo=str(slo),
        tokenizer=request.tokenizer,
        fetch_tokenizer=request.fetch_tokenizer,
        extra_meta={"tune": {"profile": base.name, "slo": str(slo)}},
        cut_in_flight_s=CUT_IN_FLIGHT_S,  # a level ends at its end (runs.measure)
    )
    prepared = Prepared(
        request,
        slo,
        objective,
        settings,
        base,
        on_disk,
        space,
        start,
        level_shape,
        spec,
        tuned_name,
        workload.name,
    )
    _claim_outputs(prepared)
    return prepared


def _objective(request: TuneRequest) -> Objective:
    if request.objective not in OBJECTIVES:
        from vprof.common.suggest import suggestion

        hint = suggestion(request.objective, OBJECTIVES, ", ".join(OBJECTIVES))
        raise RunError(f"unknown objective {request.objective!r}", key="--objective", hint=hint)
    target = request.target_rps
    if target is not None:
        target = float(check_number(target, above=0, maximum=1e9, error=RunError, key="--rps"))
    if request.objective == "min-latency" and target is None:
        raise RunError(
            "min-latency compares latency at one request rate", key="--rps",
            hint="give the rate each replica must serve, e.g. --rps 8",
        )  # fmt: skip
    headroom = check_number(request.headroom, minimum=0, maximum=10, error=RunError,
                            key="--headroom")  # fmt: skip
    price = request.gpu_hour_price
    if price is not None:
        price = float(check_number(price, above=0, maximum=1e6, error=RunError,
                                   key="--gpu-hour-price"))  # fmt: skip
    return Objective(request.objective, target, float(headroom), price)


def _settings(request: TuneRequest) -> SearchSettings:
    trials, time_s = request.budget_trials, request.budget_time_s
    if trials is not None:
        trials = int(check_number(trials, minimum=1, maximum=MAX_BUDGET_TRIALS, integer=True,
                                  error=RunError, key="--budget-trials"))  # fmt: skip
    if time_s is not None:
        time_s = float(check_number(time_s, above=0, maximum=MAX_BUDGET_S, error=RunError,
                                    key="--budget-time"))  # fmt: skip
    if trials is None and time_s is None:
        trials = DEFAULT_BUDGET_TRIALS
    start = float(check_number(request.start_rps, above=0, maximum=1e6, error=RunError,
                               key="--start-rps"))  # fmt: skip
    top = float(check_number(request.max_rps, above=0, maximum=1e6, error=RunError,
                             key="--max-rps"))  # fmt: skip
    if top < start:
        raise RunError(f"{top:g} is below --start-rps ({start:g})", key="--max-rps")
    resolution = float(check_number(request.resolution, minimum=0.01, maximum=1, error=RunError,
                                    key="--resolution", hint="0.1 = within 10 %"))  # fmt: skip
    repeat = int(check_number(request.repeat, minimum=1, maximum=100, integer=True,
                              error=RunError, key="--repeat"))  # fmt: skip
    return SearchSettings(
        start_rps=start, max_rps=top, min_rps=min(start, 0.05), resolution=resolution,
        repeat=repeat, budget_trials=trials, budget_time_s=time_s,
    )  # fmt: skip


def _check_base(base: Profile, space: Space) -> None:
    """The starting profile's own problems (file:line: key), except those of the keys the
    search sets itself (it may start from settings vLLM would refuse and move off them)."""
    from vprof.registry.validate import check

    searched = set(space.keys)
    errors, _ = check(base)
    for error in errors:
        if error.key not in searched:
            raise error


def rate_shape(shape: TrafficShape, rate_rps: float) -> TrafficShape:
    """A trial's level: ``shape`` at ``rate_rps``, named as a load ladder names its levels."""
    from vprof.runs.sweep import load_ladder

    (level,) = load_ladder(shape, [rate_rps])
    return level


def _check_name(name: str) -> None:
    from vprof.registry.loader import _NAME_RE  # the loader owns what a profile may be named

    if not _NAME_RE.match(name):
        raise ProfileError(
            f"profile name {name!r} must be letters, digits, '.', '_' or '-'", key="--name"
        )


def _request_of(prepared: Prepared) -> dict[str, Any]:
    """What makes two tunes one search, as ``tune.json`` holds it (read back through JSON): a
    ``tune.json`` holding other values is another request's."""
    import json

    request = prepared.request
    values = {
        "profile": prepared.base.name,
        "workload": prepared.workload_name,
        "slo": str(prepared.slo),
        "objective": prepared.objective.kind,
        "target_rps": prepared.objective.target_rps,
        "space": prepared.space.to_dict(),
        "traffic": request.traffic,
        "level_s": request.level_s,
        "warmup_s": request.warmup_s,
        "max_in_flight": request.max_in_flight,
    }
    return dict(json.loads(json.dumps(values, default=str)))


def _other_request(earlier: Mapping[str, Any], prepared: Prepared) -> list[str]:
    """How an earlier ``tune.json`` differs from this request (``[]``: the same search)."""
    now = _request_of(prepared)
    return [
        f"{key} {earlier[key]!r}, now {now[key]!r}" if key != "space" else "space"
        for key in now
        if key in earlier and earlier[key] != now[key]
    ]


def _claim_outputs(prepared: Prepared) -> None:
    """Refuse before any server starts to write over what is not this tune's (``--force``
    replaces it): a file in --out of another kind, or a ``tune.json`` of another request."""
    from vprof.records.outputs import REPORT, SWEEP, TUNE, TUNED_PROFILE, claim_output
    from vprof.records.rundir import sweep_manifest

    request = prepared.request
    folder, force = request.out_dir, request.force
    earlier = read_json(tune_manifest(folder), fields=TUNE_FIELDS)  # damaged: its own error
    manifest = claim_output(tune_manifest(folder), TUNE, force=force)
    if earlier and not force:
        differs = _other_request(earlier, prepared)
        if differs:
            raise RunError(
                f"holds the tune of another request ({'; '.join(differs)}): resuming it would "
                "mix two searches",
                path=str(manifest),
                hint="give another --out, or --force to start this tune there (the earlier "
                "runs stay beside it)",
            )
    claim_output(folder / f"{prepared.tuned_name}.yaml", TUNED_PROFILE, force=force)
    claim_output(sweep_manifest(folder), SWEEP, force=force)
    if request.report:
        claim_output(folder / REPORT_FILE, REPORT, force=force)


# --------------------------------------------------------------------------- running trials


class BenchTrials:
    """Trials as bench runs in the tune folder: one server per candidate, one run per level.

    Candidates whose server would not start are remembered in ``tune.json`` and not started
    again when the tune is resumed.
    """

    def __init__(self, prepared: Prepared, say: Say, failures: dict[str, str]) -> None:
        self.prepared = prepared
        self.say = say
        self.failures = failures  # profile identity → why its server did not start
        self.on_failure: Callable[[], None] = lambda: None

    def profile_of(self, candidate: Candidate) -> Profile:
        p = self.prepared
        return variant(p.base, p.space, candidate)

    def shape(self, rate_rps: float) -> TrafficShape:
        return rate_shape(self.prepared.level_shape, rate_rps)

    def open(self, candidate: Candidate) -> _BenchTrial:
        return _BenchTrial(self, self.profile_of(candidate))

    def measurement(
        self, outcome: RunOutcome, rate_rps: float, wall_s: float, profile: Profile
    ) -> Measurement:
        from vprof.runs.spec import NOT_STARTED
        from vprof.runs.sweep import mentions_oom

        if outcome.state == NOT_STARTED:
            self.failures[profile.identity()] = outcome.reason
            self.on_failure()
            return Measurement(rate_rps, "not-started", reason=outcome.reason,
                               oom=mentions_oom(outcome.reason), wall_s=wall_s)  # fmt: skip
        summary = read_json(outcome.run.summary_json, strict=False)
        oom = mentions_oom(outcome.reason)
        if not oom and outcome.state == "failed":
            try:
                oom = mentions_oom(outcome.run.server_log.read_text(errors="replace"))
            except OSError:
                pass
        return Measurement(rate_rps, outcome.state, summary, str(outcome.run.path),
                           outcome.reason, outcome.repeat, oom, wall_s)  # fmt: skip

    def confirm(
        self, candidates: Sequence[Candidate], rate_rps: float, repeats: int
    ) -> dict[Candidate, list[Measurement]]:
        """Each candidate ``repeats`` times at ``rate_rps``, interleaved, as one bench."""
        from vprof.runs.bench import run_bench
        from vprof.runs.spec import NOT_STARTED, SKIPPED

        profiles = [self.profile_of(c) for c in candidates]
        spec = replace(self.prepared.spec, traffic=(self.shape(rate_rps),), repeat=repeats,
                       order="interleaved")  # fmt: skip
        started = time.monotonic()
        outcomes = run_bench(profiles, spec, self.say)
        wall = (time.monotonic() - started) / max(1, len(outcomes))
        by_name = {p.name: p for p in profiles}
        measured = []
        serving = None  # a bench keeps one server up across consecutive runs of a profile
        for o in outcomes:
            m = self.measurement(o, rate_rps, wall, by_name[o.profile])
            if o.state not in (SKIPPED, NOT_STARTED):
                m.started_server = o.profile != serving
                serving = o.profile
            measured.append((o.profile, m))
        return {
            c: [m for name, m in measured if name == p.name]
            for c, p in zip(candidates, profiles, strict=True)
        }

    def verdict(
        self, base: Sequence[Measurement], other: Sequence[Measurement], metric: str
    ) -> Verdict:
        """compare's verdict on ``metric`` between two groups of runs (paired over the
        interleaved repeats of the check), with its interval's half-width."""
        from vprof.analysis.compare import compare

        a = [m.run for m in base if m.run and m.summary]
        b = [m.run for m in other if m.run and m.summary]
        if not a or not b:
            return Verdict("not compared: a side has no completed run")
        frame = compare([a, b], metrics=[metric], slo=self.prepared.spec.slo, n_boot=200)
        if not len(frame):
            return Verdict("not compared")
        row = frame.iloc[0]
        low, diff, high = row["ci_low_pct"], row["diff_pct"], row["ci_high_pct"]
        half = (
            max(high - diff, diff - low) if math.isfinite(low) and math.isfinite(high) else math.inf
        )
        return Verdict(str(row["verdict"]), bool(row["significant"]), float(half))


class _BenchTrial:
    """One candidate's server: started by its first level that is not already completed."""

    def __init__(self, trials: BenchTrials, profile: Profile) -> None:
        self.trials = trials
        self.profile = profile
        self.session: ServerSession | None = None
        self.server_started = False

    def measure(self, rate_rps: float) -> Measurement:
        from vprof.runs.bench import ServerSession
        from vprof.runs.sweep import mentions_oom

        known = self.trials.failures.get(self.profile.identity())
        if known is not None and self.session is None:
            self.trials.say(f"{self.profile.name}: its server did not start before; not retried")
            return Measurement(rate_rps, "not-started", reason=known, oom=mentions_oom(known))
        if self.session is None:
            self.session = ServerSession(self.profile, self.trials.prepared.spec, self.trials.say)
        started, starts = time.monotonic(), self.session.starts
        for attempt in range(1, CLIENT_LIMITED_ATTEMPTS + 1):
            outcome = self.session.run(self.trials.shape(rate_rps), repeat=attempt)
            measured = self.trials.measurement(outcome, rate_rps, time.monotonic() - started,
                                               self.profile)  # fmt: skip
            if not (measured.summary or {}).get(K.CLIENT_LIMITED):
                break
            if attempt < CLIENT_LIMITED_ATTEMPTS:
                self.trials.say(f"{self.profile.name} at {rate_rps:g} req/s: the load generator "
                                "could not keep up; measured again")  # fmt: skip
        self.server_started = self.session.starts > 0
        measured.started_server = self.session.starts > starts
        return measured

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


# --------------------------------------------------------------------------- the whole tune


@dataclass
class TuneOutcome:
    """What a tune leaves: the search's result, its table, and the files it wrote."""

    result: TuneResult
    rows: list[dict[str, Any]]
    answer: str
    folder: Path
    profile_path: Path | None = None
    report_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def run_tune(request: TuneRequest, say: Say = print) -> TuneOutcome:
    """Prepare (checking everything), search, and write the profile, tables and report."""
    return run_prepared(prepare(request, say), say)


def run_prepared(prepared: Prepared, say: Say = print) -> TuneOutcome:
    """Search with checked inputs (``prepare``'s) and write what a tune leaves."""
    p = prepared
    request = p.request
    folder = request.out_dir
    folder.mkdir(parents=True, exist_ok=True)
    # vprof writes tune.json atomically: a damaged one is foreign, and resuming from it would
    # forget which candidates failed to start
    earlier = read_json(tune_manifest(folder), fields=TUNE_FIELDS)
    if _other_request(earlier, prepared):  # only with --force: prepare refused it otherwise
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
    tuner = Tuner(
        p.space, p.start, slo=p.slo, objective=p.objective, runner=runner, settings=p.settings,
        refuse=lambda c: refusal(p.base, p.space, c), gpus=lambda c: _gpus(runner.profile_of(c)),
        label=lambda c: c.label(p.base.name), say=say,
    )  # fmt: skip

    def save_progress() -> None:
        _write_state(folder, prepared, tuner, failures, None, [])

    runner.on_failure = save_progress
    result = tuner.run()
    rows = trial_rows(result, tuner)
    answer = answer_text(result, tuner, prepared)
    outcome = TuneOutcome(result, rows, answer, folder)
    if result.best is not None:
        outcome.profile_path = write_tuned_profile(prepared, result, runner.profile_of(
            result.best.candidate), folder / f"{p.tuned_name}.yaml")  # fmt: skip
    outcome.notes = _notes(result, tuner)
    _write_state(folder, prepared, tuner, failures, outcome, rows)
    write_sweep_manifest(folder, p.base.name, rows, answer)
    if request.report:
        outcome.report_path = _report(folder, prepared, say)
    return outcome


def _gpus(profile: Profile) -> int:
    from vprof.report.capacity import gpus_per_replica

    return gpus_per_replica({"profile": {"engine_args": dict(profile.engine_args)}},
                            profile.name)[0]  # fmt: skip


def _report(folder: Path, prepared: Prepared, say: Say) -> Path | None:
    from vprof.report import write_report

    objective = prepared.objective
    try:
        return write_report(
            [folder], folder / REPORT_FILE, slo=str(prepared.slo), target_rps=objective.target_rps,
            headroom=objective.headroom, gpu_hour_price=objective.gpu_hour_price,
            title=f"vprof tune: {prepared.base.name} for {prepared.workload_name}",
            force=prepared.request.force,
        )  # fmt: skip
    except RunError as exc:  # a damaged run folder must not lose the tune's answer
        say(f"could not write the report: {exc}")
        return None


# --------------------------------------------------------------------------- words and tables


def trial_rows(result: TuneResult, tuner: Tuner) -> list[dict[str, Any]]:
    """One row per candidate the search considered (refused ones too), with its evidence."""
    best_score = tuner.score(result.best)
    start = result.start.as_dict()
    rows = []
    for t in result.trials:
        score = tuner.score(t)
        changes = {k: v for k, v in t.candidate.settings if start.get(k) != v or
                   type(start.get(k)) is not type(v)}  # fmt: skip
        row: dict[str, Any] = {
            "trial": t.number,
            "stage": t.stage,
            "candidate": t.label,
            "changes": ", ".join(f"{k}={_text(v)}" for k, v in changes.items()) or "(start)",
            "state": t.state,
            "levels": t.levels_text(),
            "sustainable_rps": t.sustainable_rps,
            "binding": t.binding,
        }
        if tuner.objective.kind == "min-latency":
            row["latency_ms"] = t.latency_ms
        row["vs_best_pct"] = (
            (score / best_score - 1) * 100
            if score is not None and best_score not in (None, 0)
            else None
        )
        if tuner.objective.kind == "min-latency" and row["vs_best_pct"] is not None:
            row["vs_best_pct"] = -row["vs_best_pct"]  # scores are negated latencies
        row.update(
            best=t is result.best,
            preempted=t.preempted,
            server=t.server_started,
            wall_s=round(t.wall_s, 1),
            confirmed=t.confirmed,
            note=t.note,
            settings=t.candidate.as_dict(),
            evidence=_evidence_run(t),
            runs=[m.run for m in t.measurements if m.run],
        )
        rows.append(row)
    return rows


def _evidence_run(trial: TrialResult) -> str:
    """The run its answer rests on: its highest level that met the SLO, else its first."""
    met = [m for m in trial.measurements if m.met and m.run]
    if met:
        return max(met, key=lambda m: m.rate_rps).run
    return next((m.run for m in trial.measurements if m.run), "")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def answer_text(result: TuneResult, tuner: Tuner, prepared: Prepared) -> str:
    """The answer in one paragraph: the best, what it sustains, and what it rests on."""
    best, objective = result.best, prepared.objective
    measured = len(result.measured)
    if best is None:
        return (
            f"No candidate met {prepared.slo} ({measured} measured, {result.stopped_by}); "
            "see the table: try a lower --start-rps, a looser SLO or a wider --space."
        )
    if objective.kind == "min-latency":
        what = (f"lowest {tuner.slo.targets[0].key} {best.latency_ms:.1f} ms at "
                f"{objective.target_rps:g} req/s")  # fmt: skip
    else:
        what = f"{best.sustainable_rps:.2f} req/s per replica ({best.binding or 'nothing'} binds)"
        if objective.kind == "min-cost":
            what += f", {best.gpus} GPU{'s' if best.gpus != 1 else ''} each"
            if objective.target_rps:
                replicas = math.ceil(
                    objective.target_rps / (best.sustainable_rps or math.inf)
                    * (1 + objective.headroom) - 1e-9
                )  # fmt: skip
                plural = "s" if replicas != 1 else ""
                what += (f"; {objective.target_rps:g} req/s needs {replicas} replica{plural} "
                         f"= {replicas * best.gpus} GPUs")  # fmt: skip
                if objective.gpu_hour_price:
                    what += f" = {replicas * best.gpus * objective.gpu_hour_price:,.2f}/hour"
    start = tuner.results.get(result.start)
    versus = ""
    if start is not None and start is not best and tuner.score(start) is not None:
        if objective.kind == "min-latency":
            versus = f"; the starting settings: {start.latency_ms:.1f} ms"
        else:
            versus = f"; the starting settings: {start.sustainable_rps:.2f} req/s"
    elif start is best:
        versus = "; the starting settings were already the best found"
    confirmed = f" {best.confirmed}." if best.confirmed else ""
    return (
        f"Best: {best.label} — {what}{versus}. {measured} of {prepared.space.grid_size()} "
        f"candidates measured, {result.servers_started} server start"
        f"{'s' if result.servers_started != 1 else ''}, {result.wall_s / 60:.1f} min; "
        f"stopped: {result.stopped_by}.{confirmed}"
    )


def _notes(result: TuneResult, tuner: Tuner) -> list[str]:
    notes = []
    confirmation = result.confirmation
    if confirmation.get("skipped"):
        notes.append(str(confirmation["skipped"]))
    for verdict in confirmation.get("verdicts", []):
        notes.append(f"near tie with {verdict['vs']}: {verdict['verdict']}")
    best = result.best
    if best is not None and best.binding == "client limit":
        notes.append(
            "the load generator was the bottleneck above the best's rate: its capacity may be "
            "higher (re-run with --processes N)"
        )
    if best is not None and best.preempted:
        notes.append(f"{best.label} reported preemptions: the KV cache was short")
    if tuner.settings.repeat < 2:
        notes.append("--repeat 1: near ties were not measured again; the answer rests on one run")
    return notes


# --------------------------------------------------------------------------- files


def write_tuned_profile(prepared: Prepared, result: TuneResult, tuned: Profile, path: Path) -> Path:
    """The best candidate as a profile YAML that ``extends:`` the starting profile, holding the
    engine arguments that differ from it; checked by the validator once written."""
    import yaml

    from vprof.records.outputs import TUNED_PROFILE_HEADER, write_output
    from vprof.registry import get_profile, validate

    best = result.best
    assert best is not None
    on_disk = prepared.on_disk
    args: dict[str, Any] = {}
    for key, value in tuned.engine_args.items():
        if key in ("port", "host"):
            continue  # where a server listens is not a tuning result
        old = on_disk.engine_args.get(key)
        if old is None or old != value or type(old) is not type(value):
            args[key] = value
    for key in on_disk.engine_args:
        if key not in tuned.engine_args and key not in ("port", "host"):
            args[key] = None  # dropped with --set KEY=
    data: dict[str, Any] = {"description": _description(prepared, result), "extends": on_disk.name}
    if tuned.model != on_disk.model and prepared.request.model is not None:
        data["model"] = tuned.model
    data["engine_args"] = args
    header = [
        f"{TUNED_PROFILE_HEADER.removeprefix('# ')} on {time.strftime('%Y-%m-%d %H:%M')}: "
        f"the best of {len(result.measured)} measured candidates.",
        f"Evidence: {TUNE_FILE} and the run folders beside this file; "
        f"{best.confirmed or 'one rate search'}.",
        f"Launch: vprof launch {path}" + _dirs_hint(prepared),
    ]
    text = "".join(f"# {line}\n" for line in header)
    # one line per value: the description stays whole however long it is
    text += yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
    write_output(path, text)
    profile = get_profile(str(path), list(prepared.request.profiles_dirs))
    validate(profile)  # a profile vprof writes must pass its own validator
    return path


def _dirs_hint(prepared: Prepared) -> str:
    return "".join(f" --profiles-dir {d}" for d in prepared.request.profiles_dirs)


def _description(prepared: Prepared, result: TuneResult) -> str:
    best = result.best
    assert best is not None
    if prepared.objective.kind == "min-latency":
        measured = (f"{best.latency_ms:.1f} ms ({prepared.slo.targets[0].key}) at "
                    f"{prepared.objective.target_rps:g} req/s")  # fmt: skip
    else:
        measured = f"{best.sustainable_rps:.2f} req/s per replica measured"
    return (
        f"Tuned by vprof tune for workload {prepared.workload_name} within {prepared.slo}: "
        f"{measured} ({prepared.objective.kind}, best of {len(result.measured)} candidates)"
    )


def _write_state(
    folder: Path,
    prepared: Prepared,
    tuner: Tuner,
    failures: Mapping[str, str],
    outcome: TuneOutcome | None,
    rows: list[dict[str, Any]],
) -> None:
    import sys

    request = prepared.request
    data: dict[str, Any] = {
        **_request_of(prepared),
        "start": prepared.start.as_dict(),
        "repeat": request.repeat,
        "command": sys.argv,
        "start_failures": dict(failures),
        "updated_at": time.time(),
    }
    if outcome is not None:
        result = outcome.result
        data.update(
            trials=rows,
            best=result.best.label if result.best else None,
            best_settings=result.best.candidate.as_dict() if result.best else None,
            sustainable_rps=result.best.sustainable_rps if result.best else None,
            answer=outcome.answer,
            notes=outcome.notes,
            stopped_by=result.stopped_by,
            confirmation=result.confirmation,
            servers_started=result.servers_started,
            candidates_measured=len(result.measured),
            grid_size=prepared.space.grid_size(),
            wall_s=result.wall_s,
            profile_path=str(outcome.profile_path) if outcome.profile_path else None,
        )
    else:
        data["trials_so_far"] = len(tuner.order)
    write_json_atomic(tune_manifest(folder), data)


def write_sweep_manifest(folder: Path, profile: str, rows: Sequence[Mapping[str, Any]],
                         answer: str) -> Path:  # fmt: skip
    """The trials as a ladder for ``vprof report``: one rung per candidate, naming the run of
    its highest level that met the SLO (else its first level)."""
    from vprof.runs.sweep import write_sweep

    rungs = []
    for row in rows:
        skip = ("runs", "settings", "candidate", "evidence")
        rung = {"rung": row["candidate"], **{k: v for k, v in row.items() if k not in skip}}
        if row.get("evidence"):
            rung["run"] = Path(row["evidence"]).name
        rungs.append(rung)
    return write_sweep(folder, "tune", profile, rungs, answer)


__all__ = [
    "BenchTrials",
    "Prepared",
    "TuneOutcome",
    "TuneRequest",
    "parse_budget_trials",
    "parse_duration",
    "prepare",
    "run_prepared",
    "run_tune",
]
