"""Run a matrix of server profiles × traffic shapes × repeats, one real server at a time.

Before any server starts, every profile, the workload and the traffic shapes are checked and
each profile is planned for this host (``vprof.server.plan_server``). Then, block by block in
the order ``vprof.runs.order`` gives: start the profile's server (or use ``url`` for one already
running), warm it up, and measure each traffic shape (``vprof.runs.measure``). Runs already
completed are skipped, so re-running the same command resumes. A dead server fails that run
with its records kept; Ctrl-C stops cleanly, keeps what was measured and leaves no process
behind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import LaunchError, ProfileError, RunError, VprofError, WorkloadError
from vprof.records.rundir import RunDir, RunState, name_of
from vprof.runs.measure import Server, check_fits, run_one
from vprof.runs.order import block_order
from vprof.runs.spec import NOT_STARTED, SKIPPED, BenchSpec, Progress, RunOutcome, placing

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.server import ServerPlan
    from vprof.traffic import TrafficShape
    from vprof.workloads import Workload
    from vprof.workloads.modeltokenizer import TokenizerChoice


@dataclass(frozen=True)
class _Resolved:
    """The bench's inputs, looked up once: the workload, the shapes and each profile's plan."""

    workload: Workload
    shapes: tuple[TrafficShape, ...]
    plans: Mapping[str, ServerPlan]  # by profile name; empty with --url
    # the tokenizer each profile's prompts are built with (by name; absent: decided once its
    # server answers, see _Bench._tokenizer_after_start)
    tokenizers: Mapping[str, TokenizerChoice]


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
    a profile labels the deployment there, and overrides are refused: vprof cannot apply
    them to a server it did not start (and must not record them as if it had)."""
    from vprof.registry import resolve_profile

    if url is not None:
        given = [f"--{k.replace('_args', '')}" for k, v in overrides.items() if v not in (None, ())]
        if given:
            also = f" (and so does {', '.join(given[1:])})" if len(given) > 1 else ""
            raise RunError(
                f"changes the server's settings{also}, but with --url the server at {url} is "
                "already running with its own",
                key=given[0],
                hint="start that server with the setting, or leave out --url and let vprof "
                "launch the profile with it",
            )
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


def _content(value: Any) -> Any:
    """Plain data for hashing: every field of a (frozen) dataclass that takes part in equality,
    so a lengths file's values or a dataset's prompts count, not just how many there are."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _content(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare
        }
    if isinstance(value, Mapping):
        return {str(k): _content(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_content(v) for v in value]
    return value


def workload_digest(workload: Workload) -> str:
    """A hash of everything the workload holds (its lengths files' values, its prompt dataset
    and, through ``to_dict``, a trace file's bytes): editing the workload or a file it reads
    makes a new run instead of resuming an old one."""
    text = json.dumps([workload.to_dict(), _content(workload)], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_digest(tokenizer: str | None) -> str | None:
    """A hash of the tokenizer files prompts are built with (``tokenizer.json`` and, for chat
    templates, ``tokenizer_config.json``); ``None`` when there is no local file."""
    if not tokenizer:
        return None
    path = Path(tokenizer).expanduser()
    folder = path if path.is_dir() else path.parent
    files = [path / "tokenizer.json" if path.is_dir() else path, folder / "tokenizer_config.json"]
    digest = hashlib.sha256()
    found = False
    for file in files:
        try:
            digest.update(file.read_bytes())
            found = True
        except OSError:
            digest.update(b"\0")
    return digest.hexdigest()[:16] if found else None


def run_key(
    profile: Profile,
    spec: BenchSpec,
    workload: Workload,
    shape: TrafficShape,
    repeat: int = 1,
    *,
    tokenizer: str | None = None,
) -> str:
    """Folder name of a run: readable parts plus a hash of everything that defines it (the
    files of ``tokenizer``, the one prompts are built with, among them), and ``--rN`` for its
    N-th repeat (the first repeat is the plain run, so ``--repeat 3`` after a single run adds
    two)."""
    from vprof.traffic import shape_to_json

    identity = json.dumps(
        {
            "profile": profile.identity(),
            "workload": workload_digest(workload),
            "traffic": shape_to_json(shape),
            "seed": spec.seed,
            "url": spec.url,
            # several replicas: all of them and how load is spread (one server: as before)
            **({"urls": list(spec.urls), "balance": spec.balance} if len(spec.urls) > 1 else {}),
            "processes": spec.processes,
            # workers on other hosts: a different client from one host's processes
            **({"workers_expected": spec.workers_expected} if spec.workers_expected else {}),
            "tokenizer": spec.tokenizer,
            "tokenizer_files": tokenizer_digest(spec.tokenizer or tokenizer),
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    parts = (profile.name, Path(spec.workload).stem, shape.name, digest)
    return name_of(*parts) + (f"--r{repeat}" if repeat > 1 else "")


def _shape(traffic: str | TrafficShape) -> TrafficShape:
    from vprof.traffic import get_shape

    return traffic if not isinstance(traffic, str) else get_shape(traffic)


def check_before_running(profiles: Sequence[Profile], spec: BenchSpec, say: Progress) -> _Resolved:
    """Resolve the workload and shapes, plan every profile's server and find the tokenizer of
    each one's model before any starts: a bad profile, workload or traffic name fails now.
    Warns when a profile's max-model-len would reject part of the workload."""
    from vprof.server import plan_server
    from vprof.traffic.shape import check_pairing
    from vprof.workloads import get_workload

    workload = get_workload(spec.workload)
    shapes = tuple(_shape(t) for t in spec.traffic)
    for shape in shapes:
        check_pairing(shape, workload)
    if spec.tokenizer is not None:
        from vprof.workloads.synthesis import load_tokenizer

        try:
            load_tokenizer(spec.tokenizer)
        except WorkloadError as exc:
            raise WorkloadError(
                exc.message, path=exc.path, key="--tokenizer", hint=exc.hint
            ) from None
    plans: dict[str, ServerPlan] = {}
    tokenizers: dict[str, TokenizerChoice] = {}
    for profile in profiles:
        if spec.url:
            continue
        plans[profile.name] = plan_server(profile, model_overridden=spec.model_overridden)
        limit = plans[profile.name].profile.engine_args.get("max-model-len")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            check_fits(workload, limit, profile.name, say)
        tokenizers[profile.name] = _find_tokenizer(spec, [plans[profile.name].profile.model])
    if spec.url and (served := _served_model_names(spec.url)):
        choice = _find_tokenizer(spec, served)
        tokenizers = {profile.name: choice for profile in profiles}
    return _Resolved(workload, shapes, plans, tokenizers)


def _find_tokenizer(spec: BenchSpec, models: Sequence[str | None]) -> TokenizerChoice:
    from vprof.workloads.modeltokenizer import find_tokenizer

    return find_tokenizer(models, given=spec.tokenizer, fetch=spec.fetch_tokenizer)


def _served_model_names(url: str) -> list[str]:
    """What ``/v1/models`` says the server at ``url`` serves: the model it loaded (``root``,
    a hub id or folder) before the name it serves it as (``id``); empty if it does not answer
    (its start then says why)."""
    from vprof.runs.warmup import served_models

    try:
        first = served_models(url, timeout_s=5.0)[0]
    except LaunchError:
        return []
    return [str(first[key]) for key in ("root", "id") if first.get(key)]


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
        self.server: Server | None = None
        self.serving = -1  # the profile index whose server is up
        self.starts = 0  # servers this bench tried to start
        self._said: set[str] = set()  # tokenizer notes already printed (each is said once)
        self.certificates: dict[str, dict[str, Any]] = {}  # by shape name (--calibrate)
        for choice in self.resolved.tokenizers.values():
            self._say_once(choice.note())

    def _say_once(self, note: str) -> None:
        if note and note not in self._said:
            self._said.add(note)
            self.say(note)

    def run(self) -> list[RunOutcome]:
        spec = self.spec
        made = _missing_folders(spec.out_dir)
        spec.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            if spec.calibrate:  # before any server starts: the client alone on this host
                from vprof.runs.calibrate import certify_shapes

                self.certificates = certify_shapes(self.resolved.shapes, spec.processes, self.say)
            for index, repeat in block_order(
                len(self.profiles), spec.repeat, spec.order, spec.seed
            ):
                self._block(index, repeat)
        finally:
            self._stop_server()
            _remove_if_empty(made)
        return self.outcomes

    def _cells(self, profile: Profile, repeat: int) -> list[tuple[TrafficShape, RunDir]]:
        workload = self.resolved.workload
        choice = self.resolved.tokenizers.get(profile.name)
        tokenizer = choice.path if choice is not None else None
        return [
            (
                shape,
                RunDir(
                    self.spec.out_dir
                    / run_key(profile, self.spec, workload, shape, repeat, tokenizer=tokenizer)
                ),
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
        pending = [(shape, run) for shape, run in cells if not _reusable(run, say)]
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
                retire_attempt(run, say)
            say(f"{profile.name} × {shape.name}{_of(repeat, spec)}: running")
            outcome = run_one(
                server,
                spec,
                self.resolved.workload,
                shape,
                run,
                self._placed(len(self.outcomes) + 1),
                repeat,
                calibration=self.certificates.get(shape.name),
            )
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

    def _placed(self, number: int) -> Progress:
        """``say``, with each Tick given the run's place in the matrix (number, of)."""
        of = len(self.profiles) * len(self.resolved.shapes) * self.spec.repeat
        return placing(self.say, lambda _: (number, of))

    def _server_for(self, index: int) -> Server | None:
        """The running server of profile ``index``, started if needed; None if it failed."""
        server, spec = self.server, self.spec
        # interleaved rounds alternate in direction (A B | B A): a profile that runs twice in a
        # row still gets a fresh server, so each pair of runs has instances of its own
        fresh = spec.fresh_server or (spec.order == "interleaved" and len(self.profiles) > 1)
        if server is not None and (self.serving != index or fresh or not server.alive()):
            self._stop_server()
        if self.server is not None:
            return self.server
        profile = self.profiles[index]
        using = " and ".join(spec.urls) + (f" ({spec.balance})" if len(spec.urls) > 1 else "")
        self.say(f"{profile.name}: " + (f"using {using}" if spec.url else "starting its server"))
        log_path = spec.out_dir / f"{name_of(profile.name)}.server.log"
        server = Server(profile, self.resolved.plans.get(profile.name), spec, log_path)
        server.tokenizer = self.resolved.tokenizers.get(profile.name)
        self.starts += 1
        try:
            server.start(self.say, self.resolved.workload)
            self._tokenizer_after_start(server)
        except LaunchError as exc:
            server.stop()
            self.say(f"{profile.name}: the server did not start: {exc}")
            self.broken[index] = str(exc)
            if spec.on_failure == "stop":
                self.stopped = f"the bench stopped after {profile.name} failed (--on-failure stop)"
            return None
        self.server, self.serving = server, index
        return server

    def _tokenizer_after_start(self, server: Server) -> None:
        """Decide the tokenizer now if its server did not answer before, and look again for a
        launched model's once its server is up (vLLM downloads a hub model into the cache)."""
        choice = server.tokenizer
        if choice is not None and not (choice.is_stand_in and server.plan is not None):
            return
        models = [server.profile.model] if server.plan is not None else []
        models += _served_model_names(server.url) if server.url else []
        found = _find_tokenizer(self.spec, models)
        if choice is None or not found.is_stand_in:
            server.tokenizer = found
            self._say_once(found.note())

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server, self.serving = None, -1


def retire_attempt(run: RunDir, say: Progress) -> None:
    """Move an unfinished earlier attempt of ``run`` aside before it runs again, saying what
    it was and where it is kept (the new run's summary lists it under earlier_attempts)."""
    abandoned = run.abandon_if_orphaned()
    status = run.status()
    state = status.get("state", "unfinished")
    why = abandoned or status.get("reason") or ""
    kept = run.retire()
    say(
        f"{run.name}: an earlier attempt was {state}"
        + (f" ({why.splitlines()[0]})" if why else "")
        + f"; it is kept as {kept}, and the run starts again"
    )


def _reusable(run: RunDir, say: Progress) -> bool:
    """A completed run whose records still read: its results are kept, not measured again."""
    from vprof.records.store import read_records_file

    if run.state != RunState.COMPLETED:
        return False
    try:
        damage = read_records_file(run.records).describe(run.locust_info().get("records"))
    except VprofError as exc:
        damage = str(exc)
    if damage:
        say(f"{run.name}: completed, but its records are damaged ({damage}); running it again")
    return not damage


def _missing_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove_if_empty(folders: Sequence[Path]) -> None:
    """Remove folders this bench made and left empty (nothing ran): never one holding a file."""
    for folder in folders:
        try:
            folder.rmdir()  # refuses a folder that is not empty
        except OSError:
            return


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
