"""One run, measured: the server it goes to, its run folder's metadata, Locust as a child
process, the /metrics sampler, the live progress, and how it ended."""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import LaunchError, RunError, VprofError
from vprof.common.interrupt import interruption
from vprof.locustfiles.optiontable import (
    FAULT_EXIT_CODE,
    FINISH_GRACE_S,
    STOP_TIMEOUT_S,
    open_loop_lead_s,
)
from vprof.records.rundir import RunDir, RunState
from vprof.runs.clientwatch import ClientWatch
from vprof.runs.environment import client_versions, hardware, server_hardware, vllm_version
from vprof.runs.hostprobe import HostProbe
from vprof.runs.loadgen import LoadProcess, LoadSpec, start_spare
from vprof.runs.sampler import MetricsSampler
from vprof.runs.spec import BenchSpec, Progress, RunOutcome, Tick

FAULT_STOP_S = 10.0  # how long a load generator that cannot write is given to stop
# After a level whose answers in flight were cut off: how long the server is given to drop
# them (vLLM aborts a request whose client went away) before the next level starts anyway.
IDLE_WAIT_S = 10.0

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.server import ServerPlan, StartedServer
    from vprof.server.process import ServerProcess
    from vprof.traffic import TrafficShape
    from vprof.workloads import Workload
    from vprof.workloads.modeltokenizer import TokenizerChoice


def _health_problem(url: str) -> str:
    """Why ``url`` has no healthy server (``""``: it has one)."""
    import requests

    try:
        response = requests.get(url.rstrip("/") + "/health", timeout=5)
    except requests.RequestException as exc:
        return f"no server answers at {url}/health ({type(exc).__name__}: {exc})"
    if response.status_code != 200:
        return f"the server at {url} is not healthy: /health answered HTTP {response.status_code}"
    return ""


def _health_ok(url: str) -> bool:
    return not _health_problem(url)


def check_fits(workload: Workload, max_model_len: int, server: str, say: Progress) -> None:
    """Refuse a workload none of whose requests fit ``max_model_len`` (the server would reject
    every one); warn when only some may not."""
    shortest, longest = workload.min_request_tokens(), workload.max_request_tokens()
    if shortest > max_model_len:
        raise RunError(
            f"every request of workload {workload.name} asks for at least {shortest:,} tokens "
            f"(prompt + output), but {server} has max-model-len {max_model_len:,}: it would "
            "reject them all",
            key="--workload",
            hint="choose a workload with shorter requests, or serve a longer max-model-len",
        )
    if longest > max_model_len:
        say(
            f"warning: {server} has max-model-len {max_model_len:,}, but workload "
            f"{workload.name} can ask for {longest:,} tokens (prompt + output); the server "
            "will reject those requests"
        )


class Server:
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
        self.urls: tuple[str, ...] = spec.urls  # with --url: every replica (url is the first)
        self.tokenizer: TokenizerChoice | None = None  # the bench decides it (runs.bench)
        self._spawned: ServerProcess | None = None  # started, not yet waited for

    @property
    def replicas(self) -> tuple[str, ...]:
        """Servers already running that each run spreads its load over (empty: one server)."""
        return self.urls if self.plan is None and len(self.urls) > 1 else ()

    def tokenizer_choice(self) -> TokenizerChoice:
        """The tokenizer prompts for this server are built with (found now if not decided)."""
        if self.tokenizer is None:
            from vprof.workloads.modeltokenizer import find_tokenizer

            self.tokenizer = find_tokenizer([self.profile.model], given=self.spec.tokenizer)
        return self.tokenizer

    @property
    def argv(self) -> list[str]:
        return list(self.plan.argv) if self.plan else []

    @property
    def changes(self) -> list[str]:
        return list(self.plan.changes) if self.plan else []

    def spawn(self, say: Progress) -> None:
        """Start a planned server's process without waiting for it (``start`` waits); servers
        that share no device load at the same time this way."""
        if self.plan is None or self._spawned is not None or self.started is not None:
            return
        from vprof.server import spawn_server

        for line in self.plan.report():
            say(f"  {line}")
        self._spawned = spawn_server(self.plan, log_path=self.log_path)

    def start(self, say: Progress, workload: Workload | None = None) -> None:
        from vprof.runs.warmup import warm_up

        if self.plan is None:
            for url in self.urls:  # every replica must answer before any load goes out
                if problem := _health_problem(url):
                    raise LaunchError(problem)
        else:
            from vprof.server import await_server

            self.spawn(say)
            assert self._spawned is not None
            process, self._spawned = self._spawned, None
            self.started = await_server(
                self.plan,
                process,
                timeout_s=self.spec.health_timeout_s,
                say=lambda line: say(f"  {line}"),
            )
            self.url = self.started.url
            self.settings = self.started.record()
            say(f"  healthy after {self.started.healthy_after_s:.1f} s")
        if workload is not None:
            self._check_context(workload, say)
        from vprof.server.metrics import cache_config

        # the KV cache the server really has (blocks, block size), for capacity models
        if found := cache_config(self.urls[0] if self.urls else self.url):
            self.settings["cache_config"] = found
        self.settings["warmup_s"] = round(sum(warm_up(url) for url in self.urls or [self.url]), 3)
        say(f"  warmed up in {self.settings['warmup_s']:.1f} s")

    def _check_context(self, workload: Workload, say: Progress) -> None:
        """Ask the server its max-model-len (vLLM lists it at ``/v1/models``) before any request:
        a workload none of whose requests fits is refused, one that may not fit is warned of
        (a launched profile that set max-model-len was checked before its server started)."""
        from vprof.runs.warmup import served_models

        if self.plan is None:
            for url in self.urls or (self.url,):  # each has its own limit; the first is kept
                self._check_served(url, workload, say)
            return
        models = served_models(self.url)
        limit = models[0].get("max_model_len")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            return
        self.settings["served_max_model_len"] = limit
        if "max-model-len" in self.profile.engine_args:
            return
        try:
            check_fits(workload, limit, f"{self.profile.name} (max-model-len from its model)", say)
        except RunError as exc:  # this profile cannot serve the workload; others may
            raise LaunchError(exc.message, hint=exc.hint) from None

    def _check_served(self, url: str, workload: Workload, say: Progress) -> None:
        """A server already running (``--url``): what it serves, and whether the workload fits
        its max-model-len."""
        from vprof.runs.warmup import served_models

        models = served_models(url)
        limit = models[0].get("max_model_len")
        self.settings.setdefault("served_models", [str(m.get("id")) for m in models])
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
            self.settings.setdefault("served_max_model_len", limit)
            check_fits(workload, limit, f"the server at {url}", say)

    def alive(self) -> bool:
        if self.started:
            return self.started.process.alive()
        return all(_health_ok(url) for url in self.urls or [self.url])

    def death_note(self) -> str:
        if self.started is None:
            down = [url for url in self.urls if not _health_ok(url)] or [self.url]
            return f"the server at {' and '.join(down)} stopped answering"
        return self.started.process.death_report("during the run")

    def log_offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def stop(self) -> None:
        from vprof.server import stop_quietly

        if self.started is not None:
            stop_quietly(self.started.process)
        if self._spawned is not None:  # spawned, never waited for (another side failed)
            stop_quietly(self._spawned)
            self._spawned = None


def _copy_log_segment(src: Path, start: int, dest: Path) -> None:
    try:
        with src.open("rb") as f:
            f.seek(start)
            dest.write_bytes(f.read())
    except OSError:
        pass


def _run_meta(
    server: Server,
    spec: BenchSpec,
    workload: Workload,
    shape: TrafficShape,
    salt: str,
    repeat: int,
) -> dict[str, Any]:
    profile = server.profile
    host = hardware()
    described: dict[str, Any] = {
        "name": profile.name,
        "identity": profile.identity(),
        "description": profile.description,
        "launched": server.plan is not None,
    }
    if server.plan is not None:  # what vprof started; with --url the name only labels the server
        described |= {
            "argv": server.argv,
            "env": dict(profile.env),
            "engine_args": dict(profile.engine_args),
            **launched_gpus(profile),
            "host_changes": server.changes,
        }
    return {
        "profile": described,
        "server": server.settings,
        "url": server.url,
        **_replica_meta(server, spec),
        **_distributed_meta(spec),
        "workload": asdict_deep(workload),
        **server.tokenizer_choice().record(),
        **_trace_meta(workload),
        "traffic": asdict_deep(shape),
        "seed": spec.seed,
        "salt": salt,
        "repeat": repeat,
        "repeats": spec.repeat,
        "order": spec.order,
        "open_loop": shape.open_loop,
        "vllm_version": vllm_version() if not spec.url else None,
        "hardware": server_hardware(server.replicas or (server.url,), host) if spec.url else host,
        "load_host": host,
        "client": client_versions(),
        "created_at": time.time(),
        "command": sys.argv,
        **spec.extra_meta,
    }


def launched_gpus(profile: Profile) -> dict[str, Any]:
    """What run.json's ``profile`` records of a launched server's GPUs (see
    :func:`vprof.analysis.run.gpus_per_server_of`): counted once here, where the flag table is
    at hand, so reading a run never needs it."""
    gpus, how = profile.gpus_per_server()
    return {"gpus_per_server": gpus, "parallelism": how}


def _replica_meta(server: Server, spec: BenchSpec) -> dict[str, Any]:
    """Several replicas: all of them and how load was spread (/metrics is sampled from each)."""
    if not server.replicas:
        return {}
    return {"urls": list(server.replicas), "balance": spec.balance}


def _distributed_meta(spec: BenchSpec) -> dict[str, Any]:
    """Workers on other hosts: how many the master waited for, and where."""
    if not spec.workers_expected:
        return {}
    return {"workers_expected": spec.workers_expected, "master_bind": spec.master_bind}


def _trace_meta(workload: Workload) -> dict[str, Any]:
    """For a replayed trace, the prefix-cache hit rate its shared blocks imply, so the summary
    can put it beside the rate the server measured."""
    if workload.trace is None:
        return {}
    from vprof.workloads.trace import load_trace
    from vprof.workloads.tracestats import trace_stats

    stats = trace_stats(load_trace(workload.trace))["summary"]
    keys = ("requests", "block_size", "implied_token_hit_rate", "implied_block_hit_rate")
    return {"trace": {key: stats[key] for key in keys}}


def asdict_deep(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: asdict_deep(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): asdict_deep(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [asdict_deep(v) for v in obj]
    return obj


def workload_file(spec: BenchSpec, workload: Workload) -> str:
    """The workload as the load generator should load it: its file, so no name is looked up
    again on the other side."""
    source = Path(workload.source) if workload.source else None
    return str(source.resolve()) if source is not None and source.is_file() else spec.workload


def run_one(
    server: Server,
    spec: BenchSpec,
    workload: Workload,
    shape: TrafficShape,
    run: RunDir,
    say: Progress,
    repeat: int = 1,
    calibration: Mapping[str, Any] | None = None,
) -> RunOutcome:
    """Run ``shape`` against ``server`` into ``run``; ``calibration`` is the client's error
    certificate at this load (bench --calibrate), kept in the run folder."""
    from vprof.traffic import shape_to_json

    salt = spec.extra_meta.get("salt") or ("" if spec.reuse_prefix_cache else secrets.token_hex(4))
    run.create(_run_meta(server, spec, workload, shape, salt, repeat))
    if calibration:
        run.write_calibration(calibration)
    log_start = server.log_offset()
    sampler = MetricsSampler(
        server.replicas or server.url,
        run.metrics_jsonl,
        spec.metrics_interval_s,
        enabled=spec.metrics,
    )
    sampler.start()
    probe = HostProbe(run.host_jsonl).start()
    load = LoadProcess(
        LoadSpec(
            url=server.url,
            run_dir=run,
            workload=workload_file(spec, workload),
            traffic=shape_to_json(level_shape(shape, spec)),
            seed=spec.seed,
            salt=salt,
            model=server.profile.engine_args.get("served-model-name"),
            tokenizer=server.tokenizer_choice().path,
            processes=spec.processes,
            urls=server.replicas,
            balance=spec.balance,
            on_worker_loss=spec.on_worker_loss,
            workers_expected=spec.workers_expected,
            master_bind=spec.master_bind,
            cut_in_flight_s=-1.0 if spec.cut_in_flight_s is None else spec.cut_in_flight_s,
        )
    )
    watch = ClientWatch(run)
    total_s = shape.total_s
    started = time.monotonic()
    # Locust ends the shape itself; past this it is hung (a stop that never finishes).
    deadline = started + total_s + STOP_TIMEOUT_S + FINISH_GRACE_S
    if spec.workers_expected:
        from vprof.runs.distributed import WORKERS_WAIT_S, join_hint

        deadline += WORKERS_WAIT_S  # the master waits this long at most for its workers
        say(
            f"  waiting for {spec.workers_expected} Locust worker(s) at {spec.master_bind}: "
            f"on each load host run `{join_hint(spec.master_bind)}`"
        )
    state, reason = RunState.COMPLETED, ""
    ladder = spec.cut_in_flight_s is not None  # another level may follow at once
    try:
        if ladder:
            # the next level's Locust: imported now, while this one starts its test (no
            # request is out before the schedule's epoch), ready when this level has drained
            start_spare()
        while load.running_after(1.0):  # a level's end is seen at once, not a poll later
            while not load.events.empty():
                say(f"\n  ! {load.events.get()}")
            if problem := load.output_error or sampler.write_error:
                state, reason = RunState.FAILED, problem
                say(f"\n  ! {problem}; stopping the load generator")
                break
            if not server.alive() or (spec.url and sampler.consecutive_failures >= 5):
                state, reason = RunState.FAILED, server.death_note()
                say(f"  ! {reason.splitlines()[0]}; stopping the load generator")
                break
            if time.monotonic() > deadline:
                state, reason = (
                    RunState.FAILED,
                    (
                        f"the load generator was still running {time.monotonic() - started:.0f} s "
                        f"after it started: the traffic shape lasts {total_s:g} s, answers in "
                        f"flight get {STOP_TIMEOUT_S} s and {FINISH_GRACE_S:g} s more were allowed "
                        "(see locust.log)"
                    ),
                )
                say(f"\n  ! {reason}; stopping it")
                break
            if warning := watch.check():
                say(f"\n  ! {warning}")
            values = sampler.last_values
            server_side = (
                f"server: {values.get('vllm:num_requests_running', 0):.0f} running, "
                f"{values.get('vllm:num_requests_waiting', 0):.0f} waiting"
                if sampler.enabled
                else "(no /metrics sampling)"
            )
            done, failed = watch.counts() or (None, None)
            say(
                Tick(
                    run.name,
                    time.monotonic() - started,
                    total_s or 0.0,
                    done=done,
                    failed=failed,
                    detail=server_side,
                )
            )
        if state is RunState.COMPLETED:  # the load is over: a display's bar ends full
            done, failed = watch.counts() or (None, None)
            elapsed = total_s or time.monotonic() - started
            say(Tick(run.name, elapsed, total_s, done=done, failed=failed, final=True))
    except KeyboardInterrupt as exc:
        state, reason = RunState.INTERRUPTED, interruption(exc)
        raise
    finally:
        # A write that failed will fail again: stop at once instead of letting answers finish.
        rc = load.stop(grace_s=FAULT_STOP_S if reason and _is_write_fault(load, sampler) else None)
        sampler.stop(final_sample=state is not RunState.FAILED)
        probe.stop()
        if spec.cut_in_flight_s is not None and spec.metrics and state is RunState.COMPLETED:
            waited = wait_idle(server.replicas or (server.url,))
            if waited is None:
                say(f"\n  (the server still had requests running {IDLE_WAIT_S:g} s after the end)")
        _copy_log_segment(server.log_path, log_start, run.server_log)
        while not load.events.empty():
            say(f"\n  ! {load.events.get()}")
        state, reason = how_it_ended(run, load, rc, state, reason, spec)
        if state is RunState.FAILED and _is_write_fault(load, sampler, reason):
            reason = _full_disk_note(run, reason)
        run.set_status(state, reason)
        summarize_run_folder(run, spec, say)  # after the state, which the summary repeats
        say(f"\n  {state}: {run.path}" + (f" — {reason.splitlines()[0]}" if reason else ""))
    return RunOutcome(run, server.profile.name, shape.name, state.value, reason, repeat)


def level_shape(shape: TrafficShape, spec: BenchSpec) -> TrafficShape:
    """The shape Locust runs. A level that cuts its end (``cut_in_flight_s``) also takes the
    open-loop lead (users come up, the schedule is handed out) out of its warm-up instead of
    adding it: its wall time is then its warm-up and measured time and little more."""
    from dataclasses import replace

    if spec.cut_in_flight_s is None or not shape.open_loop:
        return shape
    lead_s = open_loop_lead_s(distributed=spec.processes > 1 or bool(spec.workers_expected))
    return replace(shape, warmup_s=max(0.0, shape.warmup_s - lead_s))


def wait_idle(urls: Sequence[str], timeout_s: float = IDLE_WAIT_S) -> float | None:
    """Poll the servers' ``/metrics`` until none has a request running or waiting; the seconds
    that took, or None when they were still busy at ``timeout_s`` (or have no ``/metrics``)."""
    import requests

    from vprof.server.metrics import scrape

    started = time.monotonic()
    while True:
        try:
            busy = 0.0
            for url in urls:
                values = scrape(url, timeout_s=1.0)
                busy += values.get("vllm:num_requests_running", 0.0)
                busy += values.get("vllm:num_requests_waiting", 0.0)
        except (requests.RequestException, ValueError):
            return None
        waited = time.monotonic() - started
        if busy <= 0:
            return waited
        if waited > timeout_s:
            return None
        time.sleep(0.05)


def how_it_ended(
    run: RunDir, load: LoadProcess, rc: int, state: RunState, reason: str, spec: BenchSpec
) -> tuple[RunState, str]:
    """The run's final state and why: what its watch saw (``state``, ``reason``), then what
    the load generator's exit and the run folder say — a fault it stopped for, no records,
    no answer, or a Locust worker lost on the way (``degraded``)."""
    if rc == FAULT_EXIT_CODE and load.fault and state is not RunState.INTERRUPTED:
        return RunState.FAILED, load.fault
    if state is not RunState.COMPLETED:
        return state, reason
    if rc not in (0, None):
        return RunState.FAILED, f"the load generator exited with code {rc} (see locust.log)"
    if not run.records.exists():
        return RunState.FAILED, "the load generator wrote no records (see locust.log)"
    if reason := nothing_succeeded(run):
        return RunState.FAILED, reason
    if lost := workers_lost_note(run, spec.on_worker_loss):
        return RunState.DEGRADED, lost
    return state, ""


def workers_lost_note(run: RunDir, policy: str) -> str:
    """The Locust workers a run lost (``locust.json``'s ``workers_lost``), in one line."""
    try:
        lost = run.locust_info().get("workers_lost") or []
    except RunError:
        return ""
    if not lost:
        return ""
    first = lost[0]
    names = ", ".join(str(w.get("worker")) for w in lost)
    then = (
        "the test was stopped (--on-worker-loss stop)"
        if policy == "stop"
        else "the test went on with the workers left (--on-worker-loss continue)"
    )
    return (
        f"lost {len(lost)} Locust worker{'s' if len(lost) > 1 else ''} ({names}), the first "
        f"{first.get('after_s', 0):.1f} s into the test: {first.get('how')}; {then}"
    )


def _is_write_fault(load: LoadProcess, sampler: MetricsSampler, reason: str = "") -> bool:
    """The run stopped because a file of its folder could not be written."""
    faults = (load.fault, load.output_error, sampler.write_error)
    return any(faults) and (not reason or reason in faults)


def _full_disk_note(run: RunDir, reason: str) -> str:
    """A write fault, with the space left where the run was written and the records kept."""
    import shutil

    from vprof.records.store import read_records_file

    try:
        free = f"{_bytes(shutil.disk_usage(run.path).free)} free on its filesystem"
    except OSError:
        free = "its free space unknown"
    try:
        kept = f"{read_records_file(run.records).table.num_rows:,} complete records kept"
    except VprofError:
        kept = "no readable records kept"
    return f"{reason} ({free}); the run was stopped at once; {kept}"


def _bytes(n: int) -> str:
    """``0 bytes``, ``12 KiB``, ``3.5 MiB``, ``2.1 GiB``."""
    if n < 1024:
        return f"{n:,} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024  # type: ignore[assignment]
        if n < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}" if n < 10 else f"{n:,.0f} {unit}"
    raise AssertionError("unreachable")


def nothing_succeeded(run: RunDir) -> str:
    """Why a run that ran to its end measured nothing (``""`` when a request succeeded)."""
    import pyarrow.compute as pc

    from vprof.records.schema import Status
    from vprof.records.store import read_records_file

    try:
        table = read_records_file(run.records).table
    except VprofError as exc:
        return f"its records cannot be read: {exc}"
    status = table.column("status")
    if pc.any(pc.equal(status, Status.OK.value)).as_py():
        return ""
    if table.num_rows == 0:
        return "no request was sent (see locust.log)"
    failed = pc.not_equal(status, Status.CANCELLED.value)
    errors = table.filter(failed).column("error")
    if len(errors) == 0:
        return f"no request finished before the test ended ({table.num_rows:,} cut off)"
    return (
        f"every request failed ({len(errors):,} of {table.num_rows:,}); "
        f"the first error: {errors[0].as_py()}"
    )


def summarize_run_folder(run: RunDir, spec: BenchSpec, say: Progress) -> None:
    if not run.records.exists():
        return
    try:
        from vprof.analysis import write_summary

        write_summary(run.path, slo=spec.slo)
    except Exception as exc:  # a summary failure must not lose the run
        say(f"\n  (could not summarise {run.name}: {exc})")
