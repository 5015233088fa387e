"""What ``vprof tune`` was asked, checked before any server starts.

:func:`prepare` checks every input — the SLO, the budget, ``--space``, the traffic shape, the
workload, the profile — and claims the files the tune will write in ``--out`` (refusing to
write over what is not a tune's), so a mistake costs no server start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import LaunchError, ProfileError, RunError, WorkloadError
from vprof.common.numbers import check_number, parse_number
from vprof.common.suggest import suggestion
from vprof.records.rundir import REPORT_FILE, TUNE_FIELDS, read_json, tune_manifest
from vprof.runs.spec import Progress
from vprof.runs.tuneevidence import OBJECTIVES, Objective
from vprof.runs.tunesearch import SearchSettings
from vprof.runs.tunespace import Candidate, Space, build_space, parse_space

if TYPE_CHECKING:
    from vprof.analysis.slo import Slo
    from vprof.registry import Profile
    from vprof.runs.spec import BenchSpec
    from vprof.traffic import TrafficShape
    from vprof.workloads import Workload

DEFAULT_BUDGET_TRIALS = 12
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
    guided: bool = False  # a capacity model fitted on the trials chooses what to measure next


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
    return float(
        check_number(
            seconds, above=0, maximum=MAX_BUDGET_S, error=RunError, key=key, hint=_DURATION_HINT
        )
    )


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
        )
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


def prepare(request: TuneRequest, say: Progress = lambda _: None) -> Prepared:
    """Check everything before any server starts; raise the error that names what is wrong."""
    from vprof.analysis.slo import SloError, parse_slo
    from vprof.registry import get_profile
    from vprof.runs.bench import resolve_profiles
    from vprof.runs.spec import BenchSpec, level_cut_s
    from vprof.runs.tunespace import starting_candidate
    from vprof.server.host import detect_engine
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    slo = parse_slo(request.slo)
    if not any(t.percentile is not None for t in slo.targets):
        raise SloError(
            "tune needs percentile targets to judge each level by",
            key="--slo",
            hint="e.g. ttft_p95=500ms,tpot_p95=50ms",
        )
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
    level_s = check_number(
        request.level_s, above=0, maximum=86_400, error=RunError, key="--level-s"
    )
    warmup_s = check_number(
        request.warmup_s, minimum=0, maximum=86_400, error=RunError, key="--warmup-s"
    )
    in_flight = check_number(
        request.max_in_flight,
        minimum=1,
        maximum=1_000_000,
        integer=True,
        error=RunError,
        key="--max-in-flight",
    )
    level_shape = replace(shape, duration_s=level_s, warmup_s=warmup_s, max_in_flight=in_flight)
    try:  # the highest rate's schedule must fit in one run
        rate_shape(level_shape, settings.max_rps)
    except WorkloadError as exc:
        raise RunError(exc.message, key="--max-rps", hint="lower it or --level-s") from None
    workload = get_workload(request.workload)
    if request.guided:
        _check_guided(objective, workload)
    (base,) = resolve_profiles(
        [request.profile],
        request.profiles_dirs,
        model=request.model,
        port=request.port,
        set_args=request.set_args,
    )
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
        cut_in_flight_s=level_cut_s(str(slo)),  # a level ends at its end (runs.measure)
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
        hint = suggestion(request.objective, OBJECTIVES, ", ".join(OBJECTIVES))
        raise RunError(f"unknown objective {request.objective!r}", key="--objective", hint=hint)
    target = request.target_rps
    if target is not None:
        target = float(check_number(target, above=0, maximum=1e9, error=RunError, key="--rps"))
    if request.objective == "min-latency" and target is None:
        raise RunError(
            "min-latency compares latency at one request rate",
            key="--rps",
            hint="give the rate each replica must serve, e.g. --rps 8",
        )
    headroom = check_number(
        request.headroom, minimum=0, maximum=10, error=RunError, key="--headroom"
    )
    price = request.gpu_hour_price
    if price is not None:
        price = float(
            check_number(price, above=0, maximum=1e6, error=RunError, key="--gpu-hour-price")
        )
    return Objective(request.objective, target, float(headroom), price)


def _check_guided(objective: Objective, workload: Workload) -> None:
    """What the capacity model behind --guided cannot predict is refused before anything runs."""
    if objective.kind == "min-latency":
        raise RunError(
            "--guided ranks candidates by their predicted capacity, and min-latency measures "
            "each candidate at one rate",
            key="--guided",
            hint="leave out --guided, or use --objective max-rate or min-cost",
        )
    if workload.sessions:
        raise RunError(
            f"workload {workload.name} sends sessions (conversations or agent chains), whose "
            "later requests wait on earlier answers; the model behind --guided replays single "
            "requests",
            key="--guided",
            hint="leave out --guided for this workload",
        )


def _settings(request: TuneRequest) -> SearchSettings:
    trials, time_s = request.budget_trials, request.budget_time_s
    if trials is not None:
        trials = int(
            check_number(
                trials,
                minimum=1,
                maximum=MAX_BUDGET_TRIALS,
                integer=True,
                error=RunError,
                key="--budget-trials",
            )
        )
    if time_s is not None:
        time_s = float(
            check_number(time_s, above=0, maximum=MAX_BUDGET_S, error=RunError, key="--budget-time")
        )
    if trials is None and time_s is None:
        trials = DEFAULT_BUDGET_TRIALS
    start = float(
        check_number(request.start_rps, above=0, maximum=1e6, error=RunError, key="--start-rps")
    )
    top = float(
        check_number(request.max_rps, above=0, maximum=1e6, error=RunError, key="--max-rps")
    )
    if top < start:
        raise RunError(f"{top:g} is below --start-rps ({start:g})", key="--max-rps")
    resolution = float(
        check_number(
            request.resolution,
            minimum=0.01,
            maximum=1,
            error=RunError,
            key="--resolution",
            hint="0.1 = within 10 %",
        )
    )
    repeat = int(
        check_number(
            request.repeat, minimum=1, maximum=100, integer=True, error=RunError, key="--repeat"
        )
    )
    return SearchSettings(
        start_rps=start,
        max_rps=top,
        min_rps=min(start, 0.05),
        resolution=resolution,
        repeat=repeat,
        budget_trials=trials,
        budget_time_s=time_s,
    )


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
    from vprof.registry.loader import name_problem  # the loader owns what a profile may be named

    problem = name_problem(name)
    if problem:
        raise ProfileError(problem, key="--name")


def request_of(prepared: Prepared) -> dict[str, Any]:
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


def other_request(earlier: Mapping[str, Any], prepared: Prepared) -> list[str]:
    """How an earlier ``tune.json`` differs from this request (``[]``: the same search)."""
    now = request_of(prepared)
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
        differs = other_request(earlier, prepared)
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
