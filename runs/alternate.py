"""``vprof bench A B --alternate``: every side's server up at once, the load switched between
them in short slices inside one load-generator run, measured until precise.

Every compared profile's server is started (at the same time where they share no device; one
after the other on a shared GPU, where each one's memory profiling must see the others loaded;
``vprof.server.placement`` says who gets which devices, KV cache or memory share), warmed up,
and kept up. One Locust run then sends all the
load to one side at a time, switching every ``slice_s`` in ABBA blocks (``traffic.slices``):
the same request stream on every side of a block, a fresh one (and a fresh salt) per block.
No process starts and nothing is summarised between slices, so the wall time is the measured
time plus each slice's warm-up. With ``precision_pct`` the parent reads the records after
every block and stops once every headline metric's paired interval is that narrow (or the
time budget is spent). ``swap`` restarts the servers halfway with the profiles exchanged
(their devices, ports and start order), so an offset of one server instance is not taken for
a difference of profiles; the second half is a second phase (``…--p2``) of as many blocks.

Servers already running work too (``--url NAME=URL``): the sides are then named by the user.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import LaunchError, RunError, VprofError
from vprof.common.interrupt import interruption
from vprof.locustfiles.optiontable import CUT_IN_FLIGHT_S
from vprof.records.rundir import RunDir, RunState, name_of
from vprof.runs.bench import check_before_running, retire_attempt, workload_digest
from vprof.runs.clientwatch import ClientWatch
from vprof.runs.environment import client_versions, hardware, server_hardware, vllm_version
from vprof.runs.hostprobe import HostProbe
from vprof.runs.loadgen import LoadProcess, LoadSpec
from vprof.runs.measure import (
    Server,
    asdict_deep,
    how_it_ended,
    launched_gpus,
    summarize_run_folder,
    workload_file,
)
from vprof.runs.sampler import MetricsSampler
from vprof.runs.spec import NOT_STARTED, SKIPPED, BenchSpec, Progress, RunOutcome, Tick

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.traffic import TrafficShape
    from vprof.traffic.slices import SliceSchedule
    from vprof.workloads import Workload

DEFAULT_BUDGET_S = 600.0  # --precision without --time-budget
MIN_BLOCKS = 3  # a precision target is judged on at least this many whole blocks
# What a phase costs besides its blocks: the load generator's start, the summary and report
# after it (about 4 s and 3-5 s against two emulators), kept inside the time budget.
PHASE_OVERHEAD_S = 10.0
# With a time budget and no --slice: slices may shorten by at most this share so that one
# more whole block fills the budget (a block of two 20-s slices left up to 40 s unused per
# phase; more blocks narrow a paired interval more than slightly shorter slices widen it).
MAX_SLICE_SHRINK = 0.2


@dataclass(frozen=True)
class AlternateSpec:
    """How to alternate: slices, when to stop, whether to swap halfway."""

    slice_s: float
    warmup_s: float
    precision_pct: float | None = None
    time_budget_s: float | None = None
    swap: bool = False
    fit_slice: bool = False  # the slice length was not asked for: it may shorten to fill the budget
    metrics: tuple[str, ...] = ()  # judged by precision; empty: the headline metrics
    url_sides: tuple[tuple[str, tuple[str, ...]], ...] = ()  # --url NAME=URL: servers running

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slice_s) and self.slice_s > 0):
            raise RunError("a slice must last a positive time", key="--slice")
        if not 0 <= self.warmup_s < self.slice_s:
            raise RunError(
                f"a slice's warm-up ({self.warmup_s:g} s) must be shorter than the slice "
                f"({self.slice_s:g} s)",
                key="--slice-warmup",
            )
        if self.swap and self.url_sides:
            raise RunError(
                "--swap restarts the servers with their profiles exchanged, but with --url "
                "vprof did not start them",
                key="--swap",
                hint="leave out --swap, or let vprof launch the profiles",
            )


@dataclass
class _Side:
    """One side: its label, profile, and server(s)."""

    name: str
    profile: Profile
    server: Server | None = None
    urls: tuple[str, ...] = ()  # where it answers: given with --url, or its launched server's
    given: bool = False  # --url: running already, never started nor stopped by vprof


@dataclass
class _Phase:
    run: RunDir
    number: int
    blocks: int  # planned whole blocks
    measured_blocks: int = 0
    outcome: RunOutcome | None = None
    notes: list[str] = field(default_factory=list)


def side_names(names: Sequence[str]) -> list[str]:
    """Labels for the sides: the profile names, numbered where one profile is on two sides
    (an A/A of two copies of one profile)."""
    counts = {n: names.count(n) for n in names}
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(f"{name}#{seen[name]}" if counts[name] > 1 else name)
    return out


def plan_blocks(alt: AlternateSpec, shape: TrafficShape, sides: int) -> tuple[int, str]:
    """How many whole blocks to plan, and a line saying where that came from."""
    from vprof.traffic.slices import whole_blocks

    block_s = alt.slice_s * sides
    if alt.time_budget_s is not None or alt.precision_pct is not None:
        budget = alt.time_budget_s if alt.time_budget_s is not None else DEFAULT_BUDGET_S
        blocks = whole_blocks(budget, alt.slice_s, sides)
        why = f"at most {blocks} blocks ({blocks * block_s:g} s) by the time budget"
        if alt.precision_pct is not None:
            why += f", fewer once every headline interval is within ±{alt.precision_pct:g} %"
        return blocks, why
    if not shape.duration_s:
        raise RunError(
            f"traffic shape {shape.name!r} has no duration to alternate over",
            key="--traffic",
            hint="give the shape a duration_s, or --time-budget 10m",
        )
    blocks = whole_blocks(shape.duration_s, alt.slice_s, sides)
    return blocks, (
        f"{blocks} blocks ({blocks * block_s:g} s) from the traffic shape's {shape.duration_s:g} s"
    )


def _check_inputs(workload: Workload, shape: TrafficShape) -> None:
    if workload.sessions:
        raise RunError(
            f"workload {workload.name} sends sessions: a session's later turns belong to the "
            "server that holds its context, so it cannot alternate between servers",
            key="--alternate",
            hint="compare session workloads with --repeat",
        )
    if workload.trace is not None or (shape.open_loop and shape.process == "trace"):
        raise RunError(
            "a trace keeps its own clock and cannot be cut into alternating slices",
            key="--alternate",
            hint="replay traces with --repeat",
        )
    if shape.kind not in ("steady", "open-loop"):
        raise RunError(
            f"traffic shape {shape.name!r} is {shape.kind}: alternating slices need a steady "
            "load (a steady user count or an open-loop rate)",
            key="--traffic",
        )


def alternate_key(
    sides: Sequence[_Side], spec: BenchSpec, alt: AlternateSpec, workload: Workload, shape: Any
) -> str:
    """Folder name of an alternating run: its sides, workload and shape, and a hash of all
    that defines it."""
    from vprof.traffic import shape_to_json

    identity = json.dumps(
        {
            "sides": [(s.name, s.profile.identity(), list(s.urls)) for s in sides],
            "workload": workload_digest(workload),
            "traffic": shape_to_json(shape),
            "seed": spec.seed,
            "slice_s": alt.slice_s,
            "warmup_s": alt.warmup_s,
            "precision": alt.precision_pct,
            "budget": alt.time_budget_s,
            "swap": alt.swap,
            "processes": spec.processes,
            "tokenizer": spec.tokenizer,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:8]
    names = "-vs-".join(name_of(s.name) for s in sides)
    return name_of("alt", names[:120], Path(spec.workload).stem, shape.name, digest)


class AlternatingBench:
    """Starts the sides' servers, runs the phases, stops everything."""

    def __init__(
        self, profiles: Sequence[Profile], spec: BenchSpec, alt: AlternateSpec, say: Progress
    ) -> None:
        if len(profiles) + len(alt.url_sides) < 2:
            raise RunError(
                "--alternate compares two or more sides", hint="vprof bench A B --alternate"
            )
        self.spec, self.alt, self.say = spec, alt, say
        self.began = time.monotonic()  # the time budget counts from here
        self.start_s = 0.0  # how long the servers took to start, for a swap's restart
        resolved = check_before_running((), spec, say)
        self.workload = resolved.workload
        if len(resolved.shapes) != 1:
            raise RunError("--alternate takes one traffic shape", key="--traffic")
        self.shape = resolved.shapes[0]
        _check_inputs(self.workload, self.shape)
        names = side_names([p.name for p in profiles] + [n for n, _ in alt.url_sides])
        self.sides = [_Side(name, p) for name, p in zip(names, profiles, strict=False)]
        if alt.url_sides:
            from vprof.locustfiles.balance import check_replicas
            from vprof.runs.bench import url_profile

            all_urls = check_replicas([u for _, urls in alt.url_sides for u in urls])
            start = 0
            for name, urls in alt.url_sides:
                mine = all_urls[start : start + len(urls)]
                start += len(urls)
                self.sides.append(_Side(name, url_profile(name, mine[0]), urls=mine, given=True))
            self.placed: list[Profile] = []
            self.plans: dict[int, Any] = {}
        else:
            self._place(profiles)
        self.blocks, self.why = plan_blocks(alt, self.shape, len(self.sides))

    def _place(self, profiles: Sequence[Profile]) -> None:
        from vprof.server import plan_server
        from vprof.server.placement import side_by_side

        placed, placement = side_by_side(profiles)
        for line in placement.summary:
            self.say(line)
        self.placement = placement
        self.placed = placed
        self.plans = {
            i: plan_server(p, model_overridden=self.spec.model_overridden)
            for i, p in enumerate(placed)
        }
        limit = None
        for plan in self.plans.values():
            limit = plan.profile.engine_args.get("max-model-len")
            if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
                from vprof.runs.measure import check_fits

                check_fits(self.workload, limit, plan.profile.name, self.say)

    # -- servers --------------------------------------------------------------------------
    def _start(self, order: Sequence[int], phase: int) -> None:
        """Start (or check) every side's server; ``order[i]`` is the slot side ``i`` takes
        (its placement, port and place in the start order)."""
        spec = self.spec
        ordered = sorted(range(len(self.sides)), key=lambda i: order[i])
        for i in ordered:
            side = self.sides[i]
            log_path = spec.out_dir / f"{name_of(side.name)}.server.log"
            if side.given:  # already running (a launched side restarts at a --swap)
                side.server = Server(side.profile, None, replace(spec, urls=side.urls), log_path)
            else:
                plan = self._plan_for(i, order[i])
                side.server = Server(side.profile, plan, spec, log_path)
        together = not getattr(self, "placement", None) or not self.placement.shared_gpu
        if together:  # no shared device: every server loads at once, then each is waited for
            for i in ordered:
                self._say_starting(i, order)
                self.sides[i].server.spawn(lambda line: self.say(line))  # type: ignore[union-attr]
        for i in ordered:
            side = self.sides[i]
            assert side.server is not None
            if not together:  # a shared GPU: each one's memory profiling sees the others loaded
                self._say_starting(i, order)
            if together and side.server.plan is not None:
                self.say(f"{side.name}: waiting for its server")
            side.server.start(lambda line: self.say(line), self.workload)
            side.urls = side.server.urls or (side.server.url,)
        self._check_models()
        self._say_kv_caches()

    def _say_starting(self, i: int, order: Sequence[int]) -> None:
        side = self.sides[i]
        if side.given:
            self.say(f"{side.name}: using {' and '.join(side.urls)}")
        else:
            where = f" (slot of {self.sides[order[i]].name})" if order[i] != i else ""
            self.say(f"{side.name}: starting its server{where}")

    def _plan_for(self, side: int, slot: int) -> Any:
        """Side ``side``'s profile planned in slot ``slot``'s place (its devices and port)."""
        from vprof.server import plan_server

        if side == slot:
            return self.plans[side]
        mine, theirs = self.sides[side].profile, self.placed[slot]
        moved = mine.with_overrides(
            env=dict(self.placement.slots[slot].env) or None,
            set_args=dict(self.placement.slots[slot].set_args) or None,
            port=theirs.port,
        )
        return plan_server(moved, model_overridden=self.spec.model_overridden)

    def _check_models(self) -> None:
        from vprof.runs.warmup import served_model

        served = {s.name: served_model(s.urls[0]) for s in self.sides}
        if len(set(served.values())) > 1:
            listed = ", ".join(f"{n} serves {m!r}" for n, m in served.items())
            raise RunError(
                f"the sides serve different models ({listed}): one request stream cannot go "
                "to all of them",
                key="--alternate",
                hint="alternate between settings of one model (same served-model-name)",
            )
        self.model = next(iter(served.values()))

    def _say_kv_caches(self) -> None:
        from vprof.server.placement import kv_cache_warning

        sizes = {}
        for side in self.sides:
            settings = side.server.settings if side.server else {}
            tokens = settings.get("kv_cache_tokens")
            sizes[side.name] = float(tokens) if isinstance(tokens, (int, float)) else None
            if tokens:
                self.say(f"  {side.name}: KV cache {tokens:,.0f} tokens")
        if warning := kv_cache_warning(sizes):
            self.say(f"warning: {warning}")

    def _stop(self) -> None:
        for side in self.sides:
            if side.server is not None:
                side.server.stop()
                side.server = None

    # -- phases ---------------------------------------------------------------------------
    def run(self) -> list[RunOutcome]:
        spec, say = self.spec, self.say
        spec.out_dir.mkdir(parents=True, exist_ok=True)
        key = alternate_key(self.sides, spec, self.alt, self.workload, self.shape)
        phases = [_Phase(RunDir(spec.out_dir / key), 1, self.blocks)]
        if self.alt.swap:
            half = max(1, self.blocks // 2)
            phases = [
                _Phase(RunDir(spec.out_dir / key), 1, half),
                _Phase(RunDir(spec.out_dir / f"{key}--p2"), 2, half),
            ]
        say(f"alternating {' / '.join(s.name for s in self.sides)}: {self.why}")
        outcomes: list[RunOutcome] = []
        n = len(self.sides)
        try:
            for phase in phases:
                if phase.run.state == RunState.COMPLETED:
                    say(f"phase {phase.number}: already completed ({phase.run.path})")
                    phase.measured_blocks = _blocks_in(phase.run)
                    self._resume_slices(phase.run)
                    outcomes.append(self._outcome(phase, SKIPPED, ""))
                    continue
                if phase.number == 2:
                    # as many blocks as the first phase measured: the halves weigh the same
                    phase.blocks = max(1, phases[0].measured_blocks or phase.blocks)
                    self._stop()
                    say("swapping: the servers restart with the profiles exchanged")
                order = list(range(n)) if phase.number == 1 else list(reversed(range(n)))
                if any(s.server is None for s in self.sides):
                    started = time.monotonic()
                    try:
                        self._start(order, phase.number)
                    except LaunchError as exc:
                        say(f"a server did not start: {exc}")
                        outcomes.append(self._outcome(phase, NOT_STARTED, str(exc)))
                        break
                    self.start_s = max(self.start_s, time.monotonic() - started)
                if phase.run.path.exists():
                    retire_attempt(phase.run, say)
                self._fit_to_budget(phase)
                outcomes.append(self._measure(phase, swapped=phase.number == 2, earlier=phases))
                if outcomes[-1].state != RunState.COMPLETED.value:
                    break
        finally:
            self._stop()
        return outcomes

    def _fit_to_budget(self, phase: _Phase) -> None:
        """Fewer blocks when the time budget (counted from the command's start) would not hold
        the planned ones: server starts, the load generator's start and the summary count too,
        and with a swap ahead, the restart and a second phase as long as this one."""
        from vprof.traffic.slices import whole_blocks

        alt = self.alt
        if alt.time_budget_s is None and alt.precision_pct is None:
            return  # blocks from the shape's duration: no budget to keep
        budget = alt.time_budget_s if alt.time_budget_s is not None else DEFAULT_BUDGET_S
        left = budget - (time.monotonic() - self.began) - PHASE_OVERHEAD_S
        if alt.swap and phase.number == 1:
            left = (left - self.start_s - PHASE_OVERHEAD_S) / 2
        n = len(self.sides)
        fit = max(whole_blocks(max(left, 0.0), alt.slice_s, n), 1)
        if alt.fit_slice and phase.number == 1 and fit < phase.blocks:
            shorter = math.floor(left / ((fit + 1) * n) * 10) / 10
            if shorter >= (1 - MAX_SLICE_SHRINK) * alt.slice_s and shorter > alt.warmup_s:
                self.alt = alt = replace(alt, slice_s=shorter)
                fit += 1
                self.say(
                    f"phase 1: {shorter:g}-s slices, so that {fit} whole blocks fill what is "
                    "left of the time budget"
                )
        fit = max(fit, min(phase.blocks, MIN_BLOCKS))
        if fit < phase.blocks:
            self.say(
                f"phase {phase.number}: {fit} blocks ({fit * alt.slice_s * len(self.sides):g} s) "
                f"fit in what is left of the time budget"
            )
            phase.blocks = fit

    def _resume_slices(self, run: RunDir) -> None:
        """A completed phase's slice length, which the phases after it keep (the time budget
        may have shortened it)."""
        section = run.meta().get("alternate")
        slice_s = section.get("slice_s") if isinstance(section, dict) else None
        if isinstance(slice_s, (int, float)) and self.alt.warmup_s < slice_s <= self.alt.slice_s:
            self.alt = replace(self.alt, slice_s=float(slice_s))

    def _outcome(self, phase: _Phase, state: str, reason: str) -> RunOutcome:
        label = " vs ".join(s.name for s in self.sides)
        return RunOutcome(phase.run, label, self.shape.name, state, reason, phase.number)

    def _meta(self, phase: _Phase, salt: str, swapped: bool) -> dict[str, Any]:
        sides = []
        for side in self.sides:
            server = side.server
            described: dict[str, Any] = {
                "name": side.name,
                "identity": side.profile.identity(),
                "description": side.profile.description,
                "launched": bool(server and server.plan),
            }
            if server is not None and server.plan is not None:
                described |= {
                    "argv": server.argv,
                    "env": dict(server.profile.env),
                    "engine_args": dict(server.profile.engine_args),
                    **launched_gpus(server.profile),
                }
            sides.append(
                {
                    "name": side.name,
                    "urls": list(side.urls),
                    "profile": described,
                    "server": server.settings if server else {},
                }
            )
        host = hardware()
        return {
            "profile": {"name": " vs ".join(s.name for s in self.sides)},
            "alternate": {
                "sides": sides,
                "phase": phase.number,
                "swapped": swapped,
                "slice_s": self.alt.slice_s,
                "warmup_s": self.alt.warmup_s,
                "precision_pct": self.alt.precision_pct,
                "time_budget_s": self.alt.time_budget_s,
                "planned_blocks": phase.blocks,
            },
            "url": self.sides[0].urls[0],
            "urls": [u for s in self.sides for u in s.urls],
            "workload": asdict_deep(self.workload),
            **(self.sides[0].server.tokenizer_choice().record() if self.sides[0].server else {}),
            "traffic": asdict_deep(self.shape),
            "seed": self.spec.seed,
            "salt": salt,
            "open_loop": self.shape.open_loop,
            "vllm_version": vllm_version() if not self.alt.url_sides else None,
            "hardware": (
                server_hardware([u for s in self.sides for u in s.urls], host)
                if self.alt.url_sides
                else host
            ),
            "load_host": host,
            "client": client_versions(),
            "created_at": time.time(),
            "command": sys.argv,
            **self.spec.extra_meta,
        }

    def _measure(self, phase: _Phase, *, swapped: bool, earlier: Sequence[_Phase]) -> RunOutcome:
        from vprof.traffic import shape_to_json

        spec, alt, say, run = self.spec, self.alt, self.say, phase.run
        n = len(self.sides)
        block_s = alt.slice_s * n
        salt = "" if spec.reuse_prefix_cache else secrets.token_hex(4)
        run.create(self._meta(phase, salt, swapped))
        urls = tuple(u for s in self.sides for u in s.urls)
        sides = tuple(i for i, s in enumerate(self.sides) for _ in s.urls)
        shape = replace(self.shape, duration_s=phase.blocks * block_s, warmup_s=0.0)
        logs = [(s.server.log_path, s.server.log_offset()) for s in self.sides if s.server]
        sampler = MetricsSampler(
            urls,
            run.metrics_jsonl,
            spec.metrics_interval_s,
            enabled=spec.metrics,
            slices=_slice_schedule(run),
        )
        sampler.start()
        probe = HostProbe(run.host_jsonl).start()
        first = self.sides[0]
        load = LoadProcess(
            LoadSpec(
                url=urls[0],
                run_dir=run,
                workload=workload_file(spec, self.workload),
                traffic=shape_to_json(shape),
                seed=spec.seed,
                salt=salt,
                model=self.model,
                tokenizer=first.server.tokenizer_choice().path if first.server else spec.tokenizer,
                processes=spec.processes,
                urls=urls,
                balance=spec.balance,
                sides=sides,
                slice_s=alt.slice_s,
                slice_warmup_s=alt.warmup_s,
                on_worker_loss=spec.on_worker_loss,
                # the last slice's answers get as long as any other slice's had (the next
                # slice, at least): cut sooner, a slower side would lose its slowest answers
                cut_in_flight_s=max(CUT_IN_FLIGHT_S, alt.slice_s),
            )
        )
        watch = ClientWatch(run)
        state, reason = RunState.COMPLETED, ""
        started = time.monotonic()
        judged = 0  # blocks the precision was last judged on
        try:
            while load.running():
                time.sleep(1.0)
                dead = [s for s in self.sides if s.server and not s.server.alive()]
                if dead:
                    state, reason = RunState.FAILED, dead[0].server.death_note()  # type: ignore[union-attr]
                    say(f"  ! {reason.splitlines()[0]}; stopping the load generator")
                    break
                if warning := watch.check():
                    say(f"\n  ! {warning}")
                elapsed = time.monotonic() - started
                done = int(elapsed // block_s)
                answered, failed = watch.counts() or (None, None)
                tick = Tick(
                    run.name,
                    elapsed,
                    shape.duration_s,
                    done=answered,
                    failed=failed,
                    detail=f"block {done}",
                )
                if alt.precision_pct is not None and done > judged:
                    judged = done
                    worst, met = self._precision([*earlier[: phase.number - 1], phase])
                    if worst is not None:
                        widest = f"widest ±{worst:.1f} % (target ±{alt.precision_pct:g} %)"
                        tick = replace(tick, detail=f"{tick.detail}, {widest}")
                    if met and phase.number == 1 and self._may_stop(phase):
                        say(tick)
                        say(f"\n  every headline metric within ±{alt.precision_pct:g} %: stopping")
                        break
                say(tick)
            if state is RunState.COMPLETED:  # the load is over: a display's bar ends full
                answered, failed = watch.counts() or (None, None)
                total_s = shape.duration_s
                say(Tick(run.name, total_s, total_s, done=answered, failed=failed, final=True))
        except KeyboardInterrupt as exc:
            state, reason = RunState.INTERRUPTED, interruption(exc)
            raise
        finally:
            rc = load.stop()
            sampler.stop(final_sample=state is not RunState.FAILED)
            probe.stop()
            _copy_logs(logs, self.sides, run.server_log)
            while not load.events.empty():
                say(f"\n  ! {load.events.get()}")
            state, reason = how_it_ended(run, load, rc, state, reason, spec)
            run.set_status(state, reason)
            summarize_run_folder(run, spec, say)  # after the state, which the summary repeats
            phase.measured_blocks = _blocks_in(run)
            say(
                f"\n  {state}: {run.path} ({phase.measured_blocks} whole blocks)"
                + (f" — {reason.splitlines()[0]}" if reason else "")
            )
        return self._outcome(phase, state.value, reason)

    def _may_stop(self, phase: _Phase) -> bool:
        return _blocks_in(phase.run) >= MIN_BLOCKS

    def _precision(self, phases: Sequence[_Phase]) -> tuple[float | None, bool]:
        """The widest headline half-width (%) over the phases' whole blocks so far, and whether
        every one is within the target."""
        from vprof.analysis.alternation import HEADLINE_METRICS
        from vprof.analysis.run import load_run

        runs = [load_run(p.run.path) for p in phases if p.run.records.exists()]
        metrics = self.alt.metrics or HEADLINE_METRICS
        widths = precision_widths(runs, metrics, self.shape.open_loop)
        if not widths or any(w is None for w in widths.values()):
            return None, False
        worst = max(w for w in widths.values() if w is not None)
        return worst, worst <= (self.alt.precision_pct or 0.0)


def precision_widths(
    runs: Sequence[Any], metrics: Sequence[str], open_loop: bool
) -> dict[str, float | None]:
    """Each metric's widest 95 % half-width (%) against the first side over the runs' whole
    blocks (None: fewer than MIN_BLOCKS), by compare's own interval."""
    from vprof.analysis.alternation import blocks_interval, paired_blocks
    from vprof.analysis.compare import from_schedule

    names = [from_schedule(m) if open_loop else m for m in metrics]
    order, blocks = paired_blocks(runs, names)
    widths: dict[str, float | None] = {}
    for metric in names:
        found = [blocks_interval(blocks, order[0], other, metric) for other in order[1:]]
        if not found or any(i is None or n < MIN_BLOCKS for i, n in found):
            widths[metric] = None
        else:
            widths[metric] = max(i.half_width_pct for i, _ in found)
    return widths


def _slice_schedule(run: RunDir) -> Callable[[], SliceSchedule | None]:
    """The slice schedule the load generator wrote into the run's ``locust.json`` when its test
    started (``None`` until then), read once found."""
    from vprof.traffic.slices import SliceSchedule

    found: list[SliceSchedule] = []

    def read() -> SliceSchedule | None:
        if not found:
            try:
                slices = run.locust_info().get("slices") if run.locust_json.exists() else None
                if isinstance(slices, dict):
                    found.append(SliceSchedule.from_dict(slices))
            except (VprofError, OSError, KeyError, TypeError, ValueError):
                return None
        return found[0] if found else None

    return read


def _blocks_in(run: RunDir) -> int:
    from vprof.analysis.alternation import paired_blocks
    from vprof.analysis.run import load_run

    try:
        return len(paired_blocks([load_run(run.path)], ())[1])
    except VprofError:
        return 0


def _copy_logs(logs: Sequence[tuple[Path, int]], sides: Sequence[_Side], dest: Path) -> None:
    """Each side's server log over the run, one after the other under a header."""
    parts = []
    for (path, offset), side in zip(logs, sides, strict=False):
        try:
            with path.open("rb") as f:
                f.seek(offset)
                parts.append(f"===== {side.name} =====\n".encode() + f.read())
        except OSError:
            continue
    if parts:
        dest.write_bytes(b"\n".join(parts))


def run_alternating(
    profiles: Sequence[Profile], spec: BenchSpec, alt: AlternateSpec, say: Progress = print
) -> list[RunOutcome]:
    """Run the sides side by side with the load alternating between them; one outcome per
    phase (two with ``swap``)."""
    return AlternatingBench(profiles, spec, alt, say).run()
