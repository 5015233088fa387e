"""Run a matrix of server profiles × traffic shapes, one real server per profile.

For each profile: launch its server (or use ``url`` for one already running), wait until
healthy, then for each traffic shape run Locust headless from the shipped locustfile while
sampling ``/metrics``; stop the server. Runs already completed are skipped, so re-running the
same command resumes. A dead server fails that run with its records kept; Ctrl-C stops
cleanly, keeps what was measured and leaves no process behind.
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

from vprof.common.errors import LaunchError
from vprof.runs.environment import client_versions, hardware, vllm_version
from vprof.runs.loadgen import LoadProcess, LoadSpec
from vprof.runs.rundir import RunDir
from vprof.runs.sampler import MetricsSampler

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.server import ServerProcess

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchSpec:
    """What to run; the CLI builds one from its options."""

    traffic: tuple[str, ...]
    workload: str = "chat"
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
    extra_meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOutcome:
    run: RunDir
    profile: str
    traffic: str
    state: str  # completed | failed | interrupted | skipped | not-started
    reason: str = ""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def run_key(profile: Profile, spec: BenchSpec, traffic: str) -> str:
    """Folder name of a run: readable parts plus a hash of everything that defines it."""
    identity = json.dumps(
        {
            "profile": profile.identity(),
            "workload": spec.workload,
            "traffic": traffic,
            "seed": spec.seed,
            "url": spec.url,
            "processes": spec.processes,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    parts = (profile.name, Path(spec.workload).stem, Path(traffic).stem, digest)
    return "--".join(_slug(part) for part in parts)


def _health_ok(url: str) -> bool:
    import requests

    try:
        return requests.get(url.rstrip("/") + "/health", timeout=5).status_code == 200
    except requests.RequestException:
        return False


class _Server:
    """The server a profile's runs go to: launched here, or already running at ``url``."""

    def __init__(self, profile: Profile, spec: BenchSpec, log_path: Path, say: Progress) -> None:
        self.profile = profile
        self.spec = spec
        self.process: ServerProcess | None = None
        self.changes: list[str] = []
        self.argv: list[str] = []
        self.settings: dict[str, Any] = {}
        self.log_path = log_path
        self.say = say
        self.url = spec.url or ""

    def start(self) -> None:
        self._launch()
        from vprof.runs.warmup import warm_up

        self.settings["warmup_s"] = round(warm_up(self.url), 3)
        self.say(f"  warmed up in {self.settings['warmup_s']:.1f} s")

    def _launch(self) -> None:
        if self.spec.url:
            if not _health_ok(self.spec.url):
                raise LaunchError(f"no healthy server at {self.spec.url}/health")
            return
        from vprof.registry import render, validate
        from vprof.server import ServerProcess, adapt_for_host  # noqa: F811 - lazy

        validate(self.profile)
        adapted, self.changes = adapt_for_host(
            self.profile, model_overridden=self.spec.model_overridden
        )
        for change in self.changes:
            self.say(f"  {change}")
        validate(adapted)
        self.profile = adapted
        self.argv = render(adapted, python=sys.executable)
        process = self.process = ServerProcess(
            self.argv,
            env=dict(adapted.env),
            log_path=self.log_path,
            host=adapted.host,
            port=adapted.port,
        )
        process.start()
        self.url = process.url
        self.say(f"  waiting for {self.url}/health (log: {self.log_path})")
        process.wait_healthy(timeout_s=self.spec.health_timeout_s)
        self.settings = dict(process.effective_settings())

    def alive(self) -> bool:
        return self.process.alive() if self.process else _health_ok(self.url)

    def death_note(self) -> str:
        if self.process is None:
            return f"the server at {self.url} stopped answering"
        return self.process.death_report("during the run")

    def log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _copy_log_segment(src: Path, start: int, dest: Path) -> None:
    try:
        with src.open("rb") as f:
            f.seek(start)
            dest.write_bytes(f.read())
    except OSError:
        pass


def _run_meta(server: _Server, spec: BenchSpec, traffic: str, salt: str) -> dict[str, Any]:
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    workload = get_workload(spec.workload)
    shape = get_shape(traffic)
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


def _duration_s(traffic: str) -> float:
    from vprof.traffic import get_shape

    return get_shape(traffic).total_s


def _run_one(
    server: _Server, spec: BenchSpec, traffic: str, run: RunDir, say: Progress
) -> RunOutcome:
    salt = spec.extra_meta.get("salt") or ("" if spec.reuse_prefix_cache else secrets.token_hex(4))
    run.create(_run_meta(server, spec, traffic, salt))
    log_start = server.log_offset()
    sampler = MetricsSampler(server.url, run.file("metrics.jsonl"), spec.metrics_interval_s)
    sampler.start()
    load = LoadProcess(
        LoadSpec(
            url=server.url,
            run_dir=run.path,
            workload=spec.workload,
            traffic=traffic,
            seed=spec.seed,
            salt=salt,
            model=server.profile.engine_args.get("served-model-name"),
            tokenizer=spec.tokenizer or _tokenizer_for(server.profile),
            processes=spec.processes,
        )
    )
    total_s = _duration_s(traffic)
    started = time.monotonic()
    done_before: float | None = None  # the server's finished-request count when the run began
    state, reason = "completed", ""
    try:
        while load.running():
            time.sleep(1.0)
            if not server.alive() or (spec.url and sampler.consecutive_failures >= 5):
                state, reason = "failed", server.death_note()
                say(f"  ! {reason.splitlines()[0]}; stopping the load generator")
                break
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
        state, reason = "interrupted", "interrupted by the user (Ctrl-C)"
        raise
    finally:
        rc = load.stop()
        sampler.stop(final_sample=state != "failed")
        _copy_log_segment(server.log_path, log_start, run.file("server.log"))
        if state == "completed" and rc not in (0, None):
            state, reason = "failed", f"the load generator exited with code {rc} (see locust.log)"
        if state == "completed" and not run.file("records.arrow").exists():
            state, reason = "failed", "the load generator wrote no records (see locust.log)"
        _summarize(run, spec, say)
        run.set_status(state, reason)
        say(f"\n  {state}: {run.path}" + (f" — {reason.splitlines()[0]}" if reason else ""))
    return RunOutcome(run, server.profile.name, traffic, state, reason)


def _tokenizer_for(profile: Profile) -> str | None:
    model = Path(str(profile.model))
    return str(model) if (model / "tokenizer.json").exists() else None


def _summarize(run: RunDir, spec: BenchSpec, say: Progress) -> None:
    if not run.file("records.arrow").exists():
        return
    try:
        from vprof.analysis import write_summary

        write_summary(run.path, slo=spec.slo)
    except Exception as exc:  # a summary failure must not lose the run
        say(f"\n  (could not summarise {run.name}: {exc})")


def check_before_running(profiles: Sequence[Profile], spec: BenchSpec, say: Progress) -> None:
    """Fail on a bad profile, workload or traffic name before any server starts, and warn
    when a profile's max-model-len would reject part of the workload."""
    from vprof.registry import validate
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    workload = get_workload(spec.workload)
    for traffic in spec.traffic:
        get_shape(traffic)
    longest = workload.max_request_tokens()
    for profile in profiles:
        if spec.url:
            continue
        validate(profile)
        limit = profile.engine_args.get("max-model-len")
        if isinstance(limit, int) and longest > limit:
            say(
                f"warning: {profile.name} has max-model-len {limit}, but workload "
                f"{workload.name} can ask for {longest} tokens (prompt + output); the server "
                "will reject those requests"
            )


def run_bench(
    profiles: Sequence[Profile], spec: BenchSpec, say: Progress = print
) -> list[RunOutcome]:
    """Run every profile × traffic shape; return one outcome per cell, in order."""
    check_before_running(profiles, spec, say)
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[RunOutcome] = []
    stopped = ""  # why the bench stopped early (--on-failure stop)
    for profile in profiles:
        runs = {t: RunDir(spec.out_dir / run_key(profile, spec, t)) for t in spec.traffic}
        if stopped:
            outcomes += [
                RunOutcome(r, profile.name, t, "not-started", stopped) for t, r in runs.items()
            ]
            continue
        pending = [t for t, r in runs.items() if r.state != "completed"]
        for t in spec.traffic:
            if t not in pending:
                say(f"{profile.name} × {t}: already completed, skipping ({runs[t].path})")
                outcomes.append(RunOutcome(runs[t], profile.name, t, "skipped"))
        if not pending:
            continue
        say(f"{profile.name}: starting its server")
        server = _Server(profile, spec, spec.out_dir / f"{_slug(profile.name)}.server.log", say)
        try:
            server.start()
        except LaunchError as exc:
            server.stop()
            say(f"{profile.name}: the server did not start: {exc}")
            outcomes += [
                RunOutcome(runs[t], profile.name, t, "not-started", str(exc)) for t in pending
            ]
            if spec.on_failure == "stop":
                stopped = f"the bench stopped after {profile.name} failed (--on-failure stop)"
            continue
        try:
            for t in pending:
                if stopped:
                    outcomes.append(RunOutcome(runs[t], profile.name, t, "not-started", stopped))
                    continue
                if runs[t].path.exists():
                    runs[t].retire()
                say(f"{profile.name} × {t}: running")
                outcome = _run_one(server, spec, t, runs[t], say)
                outcomes.append(outcome)
                if outcome.state == "failed":
                    if spec.on_failure == "stop":
                        stopped = f"the bench stopped after {outcome.run.name} failed"
                    elif not server.alive():
                        stopped = f"the server of {profile.name} died"
        finally:
            server.stop()
        if stopped and spec.on_failure != "stop":
            stopped = ""  # only this profile's remaining shapes are lost; go on with the next
    return outcomes
