"""Run a matrix of server profiles × traffic shapes, one real server per profile.

Before any server starts, every profile, the workload and the traffic shapes are checked and
each profile is planned for this host (``vprof.server.plan_server``). Then for each profile:
start its server (or use ``url`` for one already running), warm it up, and for each traffic
shape run Locust headless from the shipped locustfile while sampling ``/metrics``; stop the
server. Runs already completed are skipped, so re-running the same command resumes. A dead
server fails that run with its records kept; Ctrl-C stops cleanly, keeps what was measured and
leaves no process behind.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import LaunchError, ProfileError
from vprof.locustfiles.optiontable import DEFAULT_WORKLOAD
from vprof.records.rundir import RunDir, RunState
from vprof.runs.clientwatch import ClientWatch
from vprof.runs.environment import client_versions, hardware, vllm_version
from vprof.runs.loadgen import LoadProcess, LoadSpec
from vprof.runs.order import block_order
from vprof.runs.sampler import MetricsSampler

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.server import ServerPlan, StartedServer
    from vprof.traffic import TrafficShape
    from vprof.workloads import Workload

Progress = Callable[[str], None]

# Outcomes of a bench cell beyond a run's own states: completed earlier, or never started.
SKIPPED = "skipped"
NOT_STARTED = "not-started"
FINISHED = (RunState.COMPLETED.value, SKIPPED)  # cells whose run folder holds a good run


@dataclass(frozen=True)
class BenchSpec:
    """What to run; the CLI builds one from its options.

    ``traffic`` holds shape preset names, YAML paths, or :class:`TrafficShape` objects (a
    sweep's load levels).
    """

    traffic: tuple[str | TrafficShape, ...]
    workload: str = DEFAULT_WORKLOAD
    out_dir: Path = Path("vprof-runs")
    url: str | None = None  # measure a server that is already running
    model_overridden: bool = False
    seed: int = 0
    reuse_prefix_cache: bool = False  # False: a fresh salt per run keeps warm caches out
    on_failure: str = "continue"  # "continue" | "stop"
    processes: int = 1
    health_timeout_s: float = 900.0
    metrics_interval_s: float = 2.0
    tokenizer: str | None = None
    slo: str | None = None
    repeat: int = 1  # runs per profile × shape
    order: str = "interleaved"  # of the (profile, repeat) blocks: see runs.order
    fresh_server: bool = False  # restart the server between repeats of one profile
    extra_meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOutcome:
    run: RunDir
    profile: str
    traffic: str
    state: str  # a RunState value, or skipped | not-started
    reason: str = ""
    repeat: int = 1

    @property
    def finished(self) -> bool:
        """True when the cell's run folder holds a completed run (now or from before)."""
        return self.state in FINISHED


@dataclass(frozen=True)
class _Resolved:
    """The bench's inputs, looked up once: the workload, the shapes and each profile's plan."""

    workload: Workload
    shapes: tuple[TrafficShape, ...]
    plans: Mapping[str, ServerPlan]  # by profile name; empty with --url


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def url_profile(name: str, url: str) -> Profile:
    """A profile that only labels a deployment vprof did not launch (``--url``)."""
    from vprof.registry import Profile

    return Profile(name=name, description=f"the server at {url}", model="")


def resolve_profiles(
    names: Sequence[str],
    profiles_dirs: Sequence[Path] = (),
    *,
    url: str | None = None,
    say: Progress = print,
    **overrides: Any,
) -> list[Profile]:
    """The named profiles with the command line's overrides; with ``url`` a name that is not
    a profile labels the deployment there."""
    from vprof.registry import resolve_profile

    profiles = []
    for name in names:
        try:
            profiles.append(resolve_profile(name, profiles_dirs, **overrides))
        except ProfileError:
            if not url:
                raise
            say(f"note: {name!r} is not a known profile; it labels {url}")
            profiles.append(url_profile(name, url))
    return profiles


def workload_digest(workload: Workload) -> str:
    """A hash of what the workload asks for, including a prompt dataset's contents: editing
    the workload file makes a new run instead of resuming an old one."""
    digest = hashlib.sha256(json.dumps(workload.to_dict(), sort_keys=True).encode())
    if workload.dataset is not None:
        digest.update("\0".join(workload.dataset.prompts).encode())
        digest.update(repr(workload.dataset.output_tokens).encode())
    return digest.hexdigest()[:16]


def run_key(
    profile: Profile, spec: BenchSpec, workload: Workload, shape: TrafficShape, repeat: int = 1
) -> str:
    """Folder name of a run: readable parts plus a hash of everything that defines it, and
    ``--rN`` for its N-th repeat (the first repeat is the plain run, so ``--repeat 3`` after a
    single run adds two)."""
    from vprof.traffic import shape_to_json

    identity = json.dumps(
        {
            "profile": profile.identity(),
            "workload": workload_digest(workload),
            "traffic": shape_to_json(shape),
            "seed": spec.seed,
            "url": spec.url,
            "processes": spec.processes,
            "tokenizer": spec.tokenizer,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    parts = (profile.name, Path(spec.workload).stem, shape.name, digest)
    return "--".join(_slug(part) for part in parts) + (f"--r{repeat}" if repeat > 1 else "")


def _health_ok(url: str) -> bool:
    import requests

    try:
        return requests.get(url.rstrip("/") + "/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


class _Server:
    """The server a profile's runs go to: started from its plan, or already running at ``url``."""

    def __init__(
        self, profile: Profile, plan: ServerPlan | None, spec: BenchSpec, log_path: Path
    ) -> None:
        self.profile = plan.profile if plan else profile
        self.plan = plan
        self.spec = spec
        self.log_path = log_path
        self.started: StartedServer | None = None
        self.settings: dict[str, Any] = {}
        self.url = spec.url or ""

    @property
    def argv(self) -> list[str]:
        return list(self.plan.argv) if self.plan else []

    @property
    def changes(self) -> list[str]:
        return list(self.plan.changes) if self.plan else []

    def start(self, say: Progress) -> None:
        from vprof.runs.warmup import warm_up

        if self.plan is None:
            if not _health_ok(self.url):
                raise LaunchError(f"no healthy server at {self.url}/health")
        else:
            from vprof.server import start_server

            for line in self.plan.report():
                say(f"  {line}")
            self.started = start_server(
                self.plan,
                log_path=self.log_path,
                timeout_s=self.spec.health_timeout_s,
                say=lambda line: say(f"  {line}"),
            )
            self.url = self.started.url
            self.settings = self.started.record()
            say(f"  healthy after {self.started.healthy_after_s:.1f} s")
        self.settings["warmup_s"] = round(warm_up(self.url), 3)
        say(f"  warmed up in {self.settings['warmup_s']:.1f} s")

    def alive(self) -> bool:
        return self.started.process.alive() if self.started else _health_ok(self.url)

    def death_note(self) -> str:
        if self.started is None:
            return f"the server at {self.url} stopped answering"
        return self.started.process.death_report("during the run")

    def log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def stop(self) -> None:
        if self.started is not None:
            from vprof.server import stop_quietly

            stop_quietly(self.started.process)


def _copy_log_segment(src: Path, start: int, dest: Path) -> None:
    try:
        with src.open("rb") as f:
            f.seek(start)
            dest.write_bytes(f.read())
    except OSError:
        pass


def _run_meta(
    server: _Server,
    spec: BenchSpec,
    workload: Workload,
    shape: TrafficShape,
    salt: str,
    repeat: int,
) -> dict[str, Any]:
    profile = server.profile
    return {
        "profile": {
            "name": profile.name,
            "identity": profile.identity(),
            "description": profile.description,
            "argv": server.argv,
            "env": dict(profile.env),
            "engine_args": dict(profile.engine_args),
            "host_changes": server.changes,
        },
        "server": server.settings,
        "url": server.url,
        "workload": _asdict(workload),
        "traffic": _asdict(shape),
        "seed": spec.seed,
        "salt": salt,
        "repeat": repeat,
        "repeats": spec.repeat,
        "order": spec.order,
        "open_loop": shape.open_loop,
        "vllm_version": vllm_version() if not spec.url else None,
        "hardware": hardware(),
        "client": client_versions(),
        "created_at": time.time(),
        "command": sys.argv,
        **spec.extra_meta,
    }


def _asdict(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _asdict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _asdict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_asdict(v) for v in obj]
    return obj


def _workload_file(spec: BenchSpec, workload: Workload) -> str:
    """The workload as the load generator should load it: its file, so no name is looked up
    again on the other side."""
    source = Path(workload.source) if workload.source else None
    return str(source.resolve()) if source is not None and source.is_file() else spec.workload


def _run_one(
    server: _Server,
    spec: BenchSpec,
    workload: Workload,
    shape: TrafficShape,
    run: RunDir,
    say: Progress,
    repeat: int = 1,
) -> RunOutcome:
    from vprof.traffic import shape_to_json

    salt = spec.extra_meta.get("salt") or ("" if spec.reuse_prefix_cache else secrets.token_hex(4))
    run.create(_run_meta(server, spec, workload, shape, salt, repeat))
    log_start = server.log_offset()
    sampler = MetricsSampler(server.url, run.metrics_jsonl, spec.metrics_interval_s)
    sampler.start()
    load = LoadProcess(
        LoadSpec(
            url=server.url,
            run_dir=run,
            workload=_workload_file(spec, workload),
            traffic=shape_to_json(shape),
            seed=spec.seed,
            salt=salt,
            model=server.profile.engine_args.get("served-model-name"),
            tokenizer=spec.tokenizer or _tokenizer_for(server.profile),
            processes=spec.processes,
        )
    )
    watch = ClientWatch(run)
    total_s = shape.total_s
    started = time.monotonic()
    done_before: float | None = None  # the server's finished-request count when the run began
    state, reason = RunState.COMPLETED, ""
    try:
        while load.running():
            time.sleep(1.0)
            if not server.alive() or (spec.url and sampler.consecutive_failures >= 5):
                state, reason = RunState.FAILED, server.death_note()
                say(f"  ! {reason.splitlines()[0]}; stopping the load generator")
                break
            if warning := watch.check():
                say(f"\n  ! {warning}")
            values = sampler.last_values
            finished = values.get("vllm:request_success_total", 0.0)
            if done_before is None and values:
                done_before = finished
            elapsed = time.monotonic() - started
            of = f"/{total_s:.0f}" if total_s else ""
            say(
                f"\r  {run.name[:48]:48} {elapsed:5.0f}{of} s  "
                f"running {values.get('vllm:num_requests_running', 0):3.0f}  "
                f"waiting {values.get('vllm:num_requests_waiting', 0):3.0f}  "
                f"done {finished - (done_before or 0.0):6.0f}"
            )
    except KeyboardInterrupt:
        state, reason = RunState.INTERRUPTED, "interrupted by the user (Ctrl-C)"
        raise
    finally:
        rc = load.stop()
        sampler.stop(final_sample=state is not RunState.FAILED)
        _copy_log_segment(server.log_path, log_start, run.server_log)
        if state is RunState.COMPLETED and rc not in (0, None):
            state = RunState.FAILED
            reason = f"the load generator exited with code {rc} (see locust.log)"
        if state is RunState.COMPLETED and not run.records.exists():
            state, reason = RunState.FAILED, "the load generator wrote no records (see locust.log)"
        _summarize(run, spec, say)
        run.set_status(state, reason)
        say(f"\n  {state}: {run.path}" + (f" — {reason.splitlines()[0]}" if reason else ""))
    return RunOutcome(run, server.profile.name, shape.name, state.value, reason, repeat)


def _tokenizer_for(profile: Profile) -> str | None:
    model = Path(str(profile.model))
    return str(model) if (model / "tokenizer.json").exists() else None


def _summarize(run: RunDir, spec: BenchSpec, say: Progress) -> None:
    if not run.records.exists():
        return
    try:
        from vprof.analysis import write_summary

        write_summary(run.path, slo=spec.slo)
    except Exception as exc:  # a summary failure must not lose the run
        say(f"\n  (could not summarise {run.name}: {exc})")


def _shape(traffic: str | TrafficShape) -> TrafficShape:
    from vprof.traffic import get_shape

    return traffic if not isinstance(traffic, str) else get_shape(traffic)


def check_before_running(profiles: Sequence[Profile], spec: BenchSpec, say: Progress) -> _Resolved:
    """Resolve the workload and shapes and plan every profile's server before any starts: a bad
    profile, workload or traffic name fails now. Warns when a profile's max-model-len would
    reject part of the workload."""
    from vprof.server import plan_server
    from vprof.workloads import get_workload

    workload = get_workload(spec.workload)
    shapes = tuple(_shape(t) for t in spec.traffic)
    longest = workload.max_request_tokens()
    plans: dict[str, ServerPlan] = {}
    for profile in profiles:
        if spec.url:
            continue
        plans[profile.name] = plan_server(profile, model_overridden=spec.model_overridden)
        limit = plans[profile.name].profile.engine_args.get("max-model-len")
        if isinstance(limit, int) and longest > limit:
            say(
                f"warning: {profile.name} has max-model-len {limit}, but workload "
                f"{workload.name} can ask for {longest} tokens (prompt + output); the server "
                "will reject those requests"
            )
    return _Resolved(workload, shapes, plans)


class _Bench:
    """Runs the (profile, repeat) blocks in order, keeping one server up between blocks of
    the same profile (unless ``fresh_server``), and collects one outcome per cell."""

    def __init__(self, profiles: Sequence[Profile], spec: BenchSpec, say: Progress) -> None:
        self.profiles = profiles
        self.spec = spec
        self.say = say
        self.resolved = check_before_running(profiles, spec, say)
        self.outcomes: list[RunOutcome] = []
        self.stopped = ""  # why the bench stopped early (--on-failure stop)
        self.broken: dict[int, str] = {}  # profiles whose server would not start, and why
        self.server: _Server | None = None
        self.serving = -1  # the profile index whose server is up
        self.starts = 0  # servers this bench tried to start

    def run(self) -> list[RunOutcome]:
        self.spec.out_dir.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        try:
            for index, repeat in block_order(
                len(self.profiles), spec.repeat, spec.order, spec.seed
            ):
                self._block(index, repeat)
        finally:
            self._stop_server()
        return self.outcomes

    def _cells(self, profile: Profile, repeat: int) -> list[tuple[TrafficShape, RunDir]]:
        workload = self.resolved.workload
        return [
            (
                shape,
                RunDir(self.spec.out_dir / run_key(profile, self.spec, workload, shape, repeat)),
            )
            for shape in self.resolved.shapes
        ]

    def _not_started(self, profile: Profile, repeat: int, cells: Sequence, reason: str) -> None:
        self.outcomes += [
            RunOutcome(run, profile.name, shape.name, NOT_STARTED, reason, repeat)
            for shape, run in cells
        ]

    def _block(self, index: int, repeat: int) -> None:
        profile, spec, say = self.profiles[index], self.spec, self.say
        cells = self._cells(profile, repeat)
        if self.stopped or index in self.broken:
            self._not_started(profile, repeat, cells, self.stopped or self.broken[index])
            return
        pending = [(shape, run) for shape, run in cells if run.state != RunState.COMPLETED]
        for shape, run in cells:
            if (shape, run) not in pending:
                where = f"{profile.name} × {shape.name}{_of(repeat, spec)}"
                say(f"{where}: already completed ({run.path})")
                self.outcomes.append(RunOutcome(run, profile.name, shape.name, SKIPPED, "", repeat))
        if not pending:
            return
        server = self._server_for(index)
        if server is None:
            self._not_started(profile, repeat, pending, self.broken[index])
            return
        for i, (shape, run) in enumerate(pending):
            if run.path.exists():
                run.retire()
            say(f"{profile.name} × {shape.name}{_of(repeat, spec)}: running")
            outcome = _run_one(server, spec, self.resolved.workload, shape, run, say, repeat)
            self.outcomes.append(outcome)
            if outcome.state != RunState.FAILED:
                continue
            if spec.on_failure == "stop":
                self.stopped = f"the bench stopped after {outcome.run.name} failed"
            elif server.alive():
                continue
            # Stopped, or the server died: this block's other shapes are lost (a later block
            # of the profile starts a fresh server).
            reason = self.stopped or f"the server of {profile.name} died"
            self._not_started(profile, repeat, pending[i + 1 :], reason)
            return

    def _server_for(self, index: int) -> _Server | None:
        """The running server of profile ``index``, started if needed; None if it failed."""
        server, spec = self.server, self.spec
        if server is not None and (
            self.serving != index or spec.fresh_server or not server.alive()
        ):
            self._stop_server()
        if self.server is not None:
            return self.server
        profile = self.profiles[index]
        self.say(
            f"{profile.name}: " + ("starting its server" if not spec.url else f"using {spec.url}")
        )
        log_path = spec.out_dir / f"{_slug(profile.name)}.server.log"
        server = _Server(profile, self.resolved.plans.get(profile.name), spec, log_path)
        self.starts += 1
        try:
            server.start(self.say)
        except LaunchError as exc:
            server.stop()
            self.say(f"{profile.name}: the server did not start: {exc}")
            self.broken[index] = str(exc)
            if spec.on_failure == "stop":
                self.stopped = f"the bench stopped after {profile.name} failed (--on-failure stop)"
            return None
        self.server, self.serving = server, index
        return server

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server, self.serving = None, -1


def run_bench(
    profiles: Sequence[Profile], spec: BenchSpec, say: Progress = print
) -> list[RunOutcome]:
    """Run every profile × traffic shape × repeat; return one outcome per cell, in the order
    the blocks ran (see :func:`block_order`)."""
    return _Bench(profiles, spec, say).run()


class ServerSession:
    """One profile's server kept up while the caller picks its runs one at a time (``vprof
    tune``'s rate search): runs completed before are skipped as in a bench, and the server
    starts with the first run that is not, so a resumed search starts none it does not need.
    Use it as a context manager; the server stops on exit."""

    def __init__(self, profile: Profile, spec: BenchSpec, say: Progress = print) -> None:
        from dataclasses import replace

        spec.out_dir.mkdir(parents=True, exist_ok=True)
        self._bench = _Bench([profile], replace(spec, traffic=()), say)

    @property
    def starts(self) -> int:
        """How many times a server was started (0 while every run was already completed)."""
        return self._bench.starts

    def run(self, shape: TrafficShape, repeat: int = 1) -> RunOutcome:
        """Run ``shape`` on the profile's server (or skip it when completed before)."""
        from dataclasses import replace

        bench = self._bench
        bench.resolved = replace(bench.resolved, shapes=(shape,))
        done = len(bench.outcomes)
        bench._block(0, repeat)
        return bench.outcomes[done]

    def close(self) -> None:
        self._bench._stop_server()

    def __enter__(self) -> ServerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _of(repeat: int, spec: BenchSpec) -> str:
    return f" (repeat {repeat} of {spec.repeat})" if spec.repeat > 1 else ""
