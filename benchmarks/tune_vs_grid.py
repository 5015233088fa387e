"""`vprof tune` against an exhaustive grid over the same space, on recorded trials.

**Recording** (``--record``, on the CPU build; each candidate takes the heavy-work lock on
its own, so other work can run between candidates): every candidate of the space that the
validator accepts gets its own real vLLM server and climbs a fixed ladder of open-loop rates
past saturation (a level the load generator could not keep up with, other work on the
machine holding its core, is measured again: up to three times); each level's summary
numbers and wall times, and each server's start-up time, go to a JSON file
(``benchmarks/data/tune_grid_cpu.json``). Resumable: the levels are bench runs in
``--runs``, and candidates already in the JSON file are not measured again.

**Replay** (the default): the grid's answer is each candidate's capacity plan over its whole
recorded ladder, the best of them all. Tune's search (``vprof.runs.tuner``, unchanged)
runs on a trial runner that answers any rate from the candidate's recorded ladder: latency
percentiles, throughput and flags interpolated linearly between the two recorded levels around
it. Printed: both bests, tune's pick as the grid measured it (target: within 5 % of the grid's
best), the servers each starts (target: tune at most a third of the grid's), and the wall time
each would take from the recorded start-up and level times — once with no budget (the search
runs until a pass finds nothing better) and once with ``--budget-trials`` set so the whole
tune, its final ``--repeat`` check included, starts at most a third of the grid's servers;
with ``--every-start``, each of those from every possible starting point too.

**Guided** (``--guided``): ``tune --guided`` on the same recording, with a budget of a quarter
of the grid's servers, the final check included (targets: within 5 % of the grid's best, and the
model's predicted ranking puts the grid's best three within its top five). The recording keeps
each level's summary only — no per-request records and no server log, so none of what
``vprof forecast fit`` fits on, nor the server's KV cache size (taken as holding every
request) — which is what ``forecast/levelfit.py`` fits on. Printed: the guided pick, the staged
search at the same budget, and the model's ranking of the whole grid fitted on the start alone,
on the guided tune's trials and (``--fit-all``) on every candidate, with its median error, and
again with each group of twins (candidates the fit runs step for step alike) as one setting.
With ``--noise N``, the ranking target's noise ceiling: the grid simulated N times by the
model fitted on every candidate (:func:`replay_noise`).

    python benchmarks/tune_vs_grid.py                       # replay the recorded grid
    python benchmarks/tune_vs_grid.py --guided --fit-all    # and tune --guided
    python benchmarks/tune_vs_grid.py --guided --noise 20   # and the ranking's noise ceiling
    flock /tmp/vprof-heavy.lock true; python benchmarks/tune_vs_grid.py --record
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import stat_key
from vprof.analysis.plan import plan
from vprof.analysis.slo import parse_slo
from vprof.records.hardware import hardware_summary
from vprof.runs.tunecheck import MAX_CONTENDERS
from vprof.runs.tuneevidence import Measurement, Objective, Verdict
from vprof.runs.tuner import tune_on
from vprof.runs.tunesearch import SearchSettings
from vprof.runs.tunespace import Candidate, Dim, Space, refusal
from vprof.runs.tunetrial import RateSearch

HERE = Path(__file__).resolve().parent
RECORD = HERE / "data" / "tune_grid_cpu.json"
LOCK = "/tmp/vprof-heavy.lock"

# What was recorded: a prefill-bound workload (long prompts, short answers) on a server whose
# CPU threads keep to core 0, so the server saturates (near 3 req/s) while the load generator,
# on the other core, has little to do.
PROFILE_YAML = """description: chunked-512 with vLLM's CPU threads on core 0
extends: chunked-512
env:
  VLLM_CPU_OMP_THREADS_BIND: '0'
"""
WORKLOAD_YAML = """description: 6000 tokens in, exactly 8 out
endpoint: completions
prompt_tokens: 6000
output_tokens: 8
fixed_output: true
"""
SPACE = (
    "enable-chunked-prefill=true,false",
    "max-num-batched-tokens=128,256,512,1024,2048,4096,8192",
    "max-num-seqs=1,2,4,8",
)
SLO = "ttft_p95=1500ms"
LADDER = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)
# The numbers of a level a replay needs: every latency the SLO could name, and the flags.
KEPT = (K.REQUEST_THROUGHPUT, K.CLIENT_LIMITED, K.NUM_PREEMPTIONS, K.ERROR_RATE, K.STATE)
LATENCY = tuple(
    stat_key(stat, metric)
    for metric in ("ttft", "ttft_from_schedule", "tpot", "itl", "e2el", "e2el_from_schedule")
    for stat in ("median", "p90", "p95", "p99")
)


# --------------------------------------------------------------------------- recording


def record(out: Path, runs: Path, level_s: float, warmup_s: float, port: int) -> None:
    """Run the grid for real and write what each level measured. Each candidate climbs the
    ladder on its own server (:func:`climb_ladder`)."""
    from vprof.runs.bench import ServerSession
    from vprof.runs.tunerequest import TuneRequest, prepare
    from vprof.runs.tunespace import variant

    folder = Path(tempfile.mkdtemp(prefix="tune-grid-"))
    (folder / "profiles").mkdir()
    (folder / "profiles" / "pinned.yaml").write_text(PROFILE_YAML)
    (folder / "workload.yaml").write_text(WORKLOAD_YAML)
    request = TuneRequest(
        profile="pinned",
        slo=SLO,
        workload=str(folder / "workload.yaml"),
        space=SPACE,
        set_args=("enforce-eager=true",),
        level_s=level_s,
        warmup_s=warmup_s,
        port=port,
        out_dir=runs,
        profiles_dirs=(folder / "profiles",),
    )
    prepared = prepare(request)
    space, slo = prepared.space, prepared.slo
    candidates = [c for c in space.grid() if refusal(prepared.base, space, c) is None]
    entries = _recorded(out, level_s, warmup_s)
    done = {e["label"] for e in entries}
    print(
        f"recording {len(candidates)} candidates ({len(done)} already in {out}), up to "
        f"{len(LADDER)} levels each, in {runs}"
    )
    for i, candidate in enumerate(candidates, 1):
        profile = variant(prepared.base, space, candidate)
        if profile.name in done:
            continue
        entry: dict[str, Any] = {
            "label": profile.name,
            "settings": candidate.as_dict(),
            "levels": [],
            "started": True,
        }
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one candidate at a time; others may go between
            began = time.monotonic()
            with ServerSession(profile, prepared.spec, lambda line: None) as session:
                climb_ladder(entry, LADDER, slo, partial(_level, session, prepared, entry))
            entry["wall_s"] = time.monotonic() - began
        entries.append(entry)
        print(
            f"  {i}/{len(candidates)} {profile.name}: {_capacity_text(entry)} "
            f"({entry['wall_s']:.0f} s)"
        )
        _write(out, prepared, entries, level_s, warmup_s)
    print(f"wrote {out}")


def climb_ladder(
    entry: dict, ladder: Sequence[float], slo: Any, measure: Callable[[float], dict | None]
) -> None:
    """Climb ``ladder`` with ``measure(rate)`` (a level, or None: stop), adding each level to
    ``entry``, until the SLO is missed at two rates in a row (past that, a level only adds
    queue)."""
    misses = 0
    for rate in ladder:
        level = measure(rate)
        if level is None:
            return
        entry["levels"].append(level)
        misses = 0 if _met(entry, level["summary"], rate, slo) else misses + 1
        if misses == 2:
            return


def _level(session: Any, prepared: Any, entry: dict, rate: float) -> dict | None:
    """One level of the ladder, measured again (as a further repeat) while the load generator
    was held back (client-limited: such a level says nothing of the server, and a plan never
    counts it as met); None when the server did not start."""
    from vprof.records.rundir import RunDir, read_json
    from vprof.runs.tunebench import CLIENT_LIMITED_ATTEMPTS
    from vprof.runs.tunerequest import rate_shape

    for attempt in range(1, CLIENT_LIMITED_ATTEMPTS + 1):
        outcome = session.run(rate_shape(prepared.level_shape, rate), repeat=attempt)
        if outcome.state == "not-started":
            entry["started"] = False
            entry["reason"] = outcome.reason.strip().splitlines()[0][:200]
            return None
        run = RunDir(outcome.run.path)
        meta, status = run.meta(), run.status()
        summary = read_json(run.summary_json, strict=False)
        healthy = (meta.get("server") or {}).get("healthy_after_s")
        if healthy is not None:
            entry["healthy_after_s"] = healthy
        kept = _kept(summary)
        wall = status.get("finished_at", 0) - status.get("started_at", 0)
        if not kept.get(K.CLIENT_LIMITED):
            break
    return {
        "rate_rps": rate,
        "state": outcome.state,
        "wall_s": wall or None,
        "attempts": attempt,
        "summary": kept,
    }


def _kept(summary: dict) -> dict:
    """What the recording keeps of a level's summary."""
    return {k: summary.get(k) for k in (*KEPT, *LATENCY) if k in summary}


def _recorded(out: Path, level_s: float, warmup_s: float) -> list[dict]:
    """The candidates an earlier recording of the same grid on this hardware finished. A
    recording of another grid, with other level times or from other hardware (whose speed is
    another: an AVX-512 host prefilled these prompts ~4× faster than an AVX2-only one) is
    neither mixed in nor overwritten."""
    from vprof.runs.environment import hardware

    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        return []
    same = (data.get("profile"), data.get("workload"), data.get("slo"), data.get("ladder"))
    if same != (PROFILE_YAML, WORKLOAD_YAML, SLO, list(LADDER)) or (
        data.get("level_s"),
        data.get("warmup_s"),
    ) != (level_s, warmup_s):
        raise SystemExit(f"{out} records another grid or other level times: give --data a new file")
    (theirs, their_id), (ours, our_id) = map(hardware_summary, (data["hardware"], hardware()))
    if their_id != our_id:
        raise SystemExit(
            f"{out} was recorded on {theirs}, this host is {ours}: give --data a new file"
        )
    return list(data.get("candidates", []))


def _met(entry: dict, summary: dict, rate: float, slo: Any) -> bool:
    if not summary.get(K.REQUEST_THROUGHPUT):
        return False
    one = {**summary, K.RUN: "x", **_level_of(entry["label"], rate)}
    levels = plan([one], target_rps=1.0, slo=slo).profiles[0].levels
    return bool(levels and levels[0].passed)


def _write(out: Path, prepared: Any, entries: list[dict], level_s: float, warmup_s: float) -> None:
    from vprof.runs.environment import hardware, vllm_version

    out.parent.mkdir(parents=True, exist_ok=True)
    space = prepared.space
    data = {
        "recorded_at": time.strftime("%Y-%m-%d %H:%M"),
        "vllm": vllm_version(),
        "hardware": hardware(),
        "profile": PROFILE_YAML,
        "workload": WORKLOAD_YAML,
        "slo": SLO,
        "level_s": level_s,
        "warmup_s": warmup_s,
        "ladder": list(LADDER),
        "space": {
            "dims": [
                {"key": d.key, "values": list(d.values), "ordered": d.ordered} for d in space.dims
            ],
            "fixed": dict(space.fixed),
            "longest_request": space.longest_request,
        },
        "start": prepared.start.as_dict(),
        "candidates": entries,
    }
    out.write_text(json.dumps(data, indent=1) + "\n")


def _capacity_text(entry: dict) -> str:
    rate = grid_capacity(entry, parse_slo(SLO))
    return "did not start" if not entry["started"] else f"{rate or 0:.2f} req/s sustainable"


# --------------------------------------------------------------------------- replay


def level_summary(entry: dict, rate: float, n: int) -> dict[str, Any]:
    """What a level at ``rate`` would have shown, from the recorded ladder around it."""
    points = [lv for lv in entry["levels"] if lv["summary"].get(K.REQUEST_THROUGHPUT)]
    points.sort(key=lambda lv: lv["rate_rps"])
    if not points:
        return {}
    if rate <= points[0]["rate_rps"]:
        lo = hi = points[0]
    elif rate >= points[-1]["rate_rps"]:
        lo = hi = points[-1]
    else:
        lo = max((p for p in points if p["rate_rps"] <= rate), key=lambda p: p["rate_rps"])
        hi = min((p for p in points if p["rate_rps"] >= rate), key=lambda p: p["rate_rps"])
    span = hi["rate_rps"] - lo["rate_rps"]
    w = (rate - lo["rate_rps"]) / span if span > 0 else 0.0
    near = hi if w >= 0.5 else lo
    out: dict[str, Any] = {
        K.RUN: f"{entry['label']}@{rate:g}#{n}",
        **_level_of(entry["label"], rate),
        K.STATE: near["summary"].get(K.STATE) or "completed",
        K.CLIENT_LIMITED: bool(near["summary"].get(K.CLIENT_LIMITED)),
        K.NUM_PREEMPTIONS: near["summary"].get(K.NUM_PREEMPTIONS) or 0,
    }
    for key in (K.REQUEST_THROUGHPUT, K.ERROR_RATE, *LATENCY):
        a, b = lo["summary"].get(key), hi["summary"].get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            out[key] = a + w * (b - a)
    if rate < points[0]["rate_rps"]:  # below the ladder: the same latency, the rate served
        out[K.REQUEST_THROUGHPUT] = rate
    elif rate > points[-1]["rate_rps"]:
        out[K.REQUEST_THROUGHPUT] = min(rate, out[K.REQUEST_THROUGHPUT])
    return out


def _level_of(label: str, rate: float) -> dict[str, Any]:
    """What a plan reads of a level besides its numbers: whose it is and what it offered."""
    return {
        K.PROFILE: label,
        K.OPEN_LOOP: True,
        K.OFFERED_LOAD: rate,
        K.OFFERED_LOAD_UNIT: "req/s",
    }


def grid_capacity(entry: dict, slo: Any) -> float | None:
    """The capacity plan over a candidate's whole recorded ladder (the grid's answer)."""
    summaries = []
    for lv in entry["levels"]:
        s = lv["summary"]
        if not s.get(K.REQUEST_THROUGHPUT):
            continue
        run = f"{entry['label']}@{lv['rate_rps']}"
        summaries.append({**s, K.RUN: run, **_level_of(entry["label"], lv["rate_rps"])})
    if not summaries:
        return None
    return plan(summaries, target_rps=1.0, slo=slo).profiles[0].sustainable_rps


class ReplayTrial:
    def __init__(self, runner: ReplayRunner, entry: dict, candidate: Candidate) -> None:
        self.runner, self.entry, self.candidate = runner, entry, candidate
        self.server_started, self.n = False, 0

    def measure(self, rate_rps: float) -> Measurement:
        self.server_started = True
        self.n += 1
        self.runner.levels += 1
        self.runner.rates.setdefault(self.candidate, set()).add(rate_rps)
        if not self.entry["started"]:
            reason = self.entry.get("reason", "did not start")
            return Measurement(
                rate_rps, "not-started", reason=reason, oom="memory" in reason.lower()
            )
        summary = level_summary(self.entry, rate_rps, self.n)
        return Measurement(
            rate_rps, summary.get(K.STATE, "completed"), summary, run=summary.get(K.RUN, "")
        )

    def close(self) -> None:
        pass


class ReplayRunner:
    """Trials answered from the recording; counts levels for the wall-time estimate."""

    def __init__(self, data: dict, space: Space) -> None:
        self.by_key = {_key(space, e["settings"]): e for e in data["candidates"]}
        self.space = space
        self.levels = 0
        self.rates: dict[Candidate, set[float]] = {}  # the rates each trial measured

    def entry(self, candidate: Candidate) -> dict:
        return self.by_key[_key(self.space, candidate.as_dict())]

    def open(self, candidate: Candidate) -> ReplayTrial:
        return ReplayTrial(self, self.entry(candidate), candidate)

    def confirm(self, candidates: Sequence[Candidate], rate: float, repeats: int):
        """As a bench runs them, interleaved (A1 B1 A2 B2): a run the search already made at
        this rate is repeat 1 and costs nothing; a switch of candidate is a server start."""
        out: dict[Candidate, list[Measurement]] = {c: [] for c in candidates}
        serving = None
        for r in range(repeats):
            for c in candidates:
                entry = self.entry(c)
                summary = level_summary(entry, rate, 1000 + r)
                m = Measurement(
                    rate, summary.get(K.STATE, "completed"), summary, run=summary.get(K.RUN, "")
                )
                if r == 0 and rate in self.rates.get(c, ()):
                    m.state = "skipped"
                else:
                    m.started_server = c != serving
                    serving = c
                    self.levels += 1
                out[c].append(m)
        return out

    def verdict(self, base: Any, other: Any, metric: str) -> Verdict:
        return Verdict("replayed: repeats are identical", half_width_pct=0.0)


def _key(space: Space, settings: dict) -> tuple:
    return tuple((k, settings[k]) for k in space.keys)


def space_of(data: dict) -> Space:
    dims = tuple(Dim(d["key"], tuple(d["values"]), d["ordered"]) for d in data["space"]["dims"])
    return Space(dims, data["space"]["fixed"], data["space"]["longest_request"])


def replay(
    data: dict, *, repeat: int, every_start: bool, guided: bool, fit_all: bool, noise: int
) -> None:
    from vprof.registry import Profile

    slo = parse_slo(data["slo"])
    space = space_of(data)
    entries = data["candidates"]
    base = Profile(
        name="pinned",
        description="",
        model="m",
        engine_args={"max-model-len": space.fixed.get("max-model-len", 2048)},
    )
    recorded = {_key(space, e["settings"]) for e in entries}
    valid = [c for c in space.grid() if refusal(base, space, c) is None]
    missing = [c for c in valid if c.settings not in recorded]
    if missing:
        raise SystemExit(
            f"the recording covers {len(valid) - len(missing)} of the grid's {len(valid)} "
            f"candidates (missing e.g. {missing[0].label('pinned')}): a replay needs them all; "
            "finish it with --record (it resumes)"
        )
    level_s = statistics.median(
        lv["wall_s"] for e in entries for lv in e["levels"] if lv.get("wall_s")
    )
    start_s = statistics.median(e["healthy_after_s"] for e in entries if e.get("healthy_after_s"))
    capacities = {e["label"]: grid_capacity(e, slo) for e in entries}
    best_label = max(capacities, key=lambda k: capacities[k] or 0.0)
    best_rate = capacities[best_label] or 0.0
    grid_servers = len(entries)
    grid_wall = sum(e["wall_s"] for e in entries)
    print(
        f"recorded {data['recorded_at']} on vLLM {data['vllm']}, "
        f"{hardware_summary(data['hardware'])[0]}: {grid_servers} candidates "
        f"(the validator's refusals left out) × {len(data['ladder'])} levels, SLO {data['slo']}"
    )
    print(
        f"grid: best {best_label} at {best_rate:.2f} req/s; {grid_servers} servers, "
        f"{grid_wall / 60:.0f} min as recorded (fixed ladder)"
    )
    # a grid that climbs and bisects each candidate as tune does, without racing: its cost
    searched_levels = sum(_plain_search_levels(e, slo, data) for e in entries)
    searched_min = (grid_servers * start_s + searched_levels * level_s) / 60
    print(
        f"grid with tune's climb-and-bisect per candidate (no racing): {grid_servers} servers, "
        f"{searched_levels} levels, ~{searched_min:.0f} min"
    )

    def run_from(start: Candidate, budget: int | None, guide: Any = None) -> dict[str, Any]:
        runner = ReplayRunner(data, space)
        settings = SearchSettings(
            start_rps=1.0, max_rps=max(data["ladder"]), repeat=repeat, budget_trials=budget
        )
        began = time.perf_counter()
        result = tune_on(
            space,
            start,
            runner,
            slo=slo,
            objective=Objective(),
            settings=settings,
            refuse=lambda c: refusal(base, space, c),
            label=lambda c: c.label("pinned"),
            guide=guide,
        )
        search_s = time.perf_counter() - began
        pick = result.best
        truth = capacities[runner.entry(pick.candidate)["label"]] if pick else None
        return {
            "pick": pick.label if pick else None,
            "claimed": pick.sustainable_rps if pick else None,
            "truth": truth or 0.0,
            "ratio": (truth or 0.0) / best_rate if best_rate else 0.0,
            "servers": result.servers_started,
            "levels": runner.levels,
            "wall_s": result.servers_started * start_s + runner.levels * level_s,
            "search_s": search_s,
            "stopped": result.stopped_by,
            "trials": result.trials,
        }

    # The budget that keeps a whole tune within a third of the grid's servers: the final
    # check repeats the best and one near tie --repeat times, interleaved, the search's own
    # run being the best's first repeat, so it starts up to repeat × 2 − 1 servers.
    check_servers = repeat * (1 + MAX_CONTENDERS) - 1 if repeat > 1 else 0
    budget = grid_servers // 3 - check_servers
    start = Candidate(tuple((k, data["start"][k]) for k in space.keys))
    for name, trials in (("no budget", None), (f"--budget-trials {budget}", budget)):
        one = run_from(start, trials)
        ok_rate = one["ratio"] >= 0.95
        ok_servers = one["servers"] <= grid_servers / 3
        print(
            f"tune from the profile's own settings ({start.label('pinned')}), --repeat "
            f"{repeat}, {name}: picks {one['pick']} — {one['truth']:.2f} req/s as the grid "
            f"measured it ({one['ratio']:.1%} of the grid's best; claimed "
            f"{one['claimed']:.2f}); {one['servers']} servers ({one['servers'] / grid_servers:.0%} "
            f"of the grid's), {one['levels']} levels, ~{one['wall_s'] / 60:.0f} min; stopped: "
            f"{one['stopped']}"
        )
        print(
            f"  within 5 % of the grid's best: {'yes' if ok_rate else 'NO'}; at most a third "
            f"of the servers: {'yes' if ok_servers else 'NO'} (search logic "
            f"{one['search_s']:.2f} s)"
        )
        if every_start:
            valid = [Candidate(_key(space, e["settings"])) for e in entries]
            runs = [run_from(c, trials) for c in valid]
            ratios = [r["ratio"] for r in runs]
            servers = [r["servers"] for r in runs]
            print(
                f"  from each of the {len(runs)} candidates as the start: share of the grid's "
                f"best min {min(ratios):.1%}, median {statistics.median(ratios):.1%}; within "
                f"5 % in {sum(r >= 0.95 for r in ratios)} of {len(runs)}; servers min "
                f"{min(servers)}, median {statistics.median(servers):g}, max {max(servers)} "
                f"(a third: {grid_servers / 3:.1f})"
            )
    if guided:
        replay_guided(
            data, slo, space, valid, capacities, run_from, repeat, fit_all, every_start, noise
        )


# A guided tune's whole budget in servers: a quarter of the grid's (the target the README's
# benchmarks table gives for --guided).
GUIDED_SHARE = 0.25


def replay_guided(
    data: dict,
    slo: Any,
    space: Space,
    valid: list[Candidate],
    capacities: dict[str, float | None],
    run_from: Any,
    repeat: int,
    fit_all: bool,
    every_start: bool,
    noise: int,
) -> None:
    """``tune --guided`` on the recording: the model refitted on what each trial measured
    chooses the next candidate; the model's predicted ranking of the whole grid, fitted on the
    start alone, on the guided tune's trials, and (``--fit-all``) on every candidate; and
    (``noise`` seeds) the ranking target's noise ceiling (:func:`replay_noise`)."""
    from vprof.runs.tuneguide import ModelGuide

    model, rules_of = level_model(data, slo)
    grid_servers = len(data["candidates"])
    check_servers = repeat * (1 + MAX_CONTENDERS) - 1 if repeat > 1 else 0
    budget = int(grid_servers * GUIDED_SHARE) - check_servers
    start = Candidate(tuple((k, data["start"][k]) for k in space.keys))
    guide = ModelGuide(model, rules_of, start_rps=1.0)
    began = time.perf_counter()
    one = run_from(start, budget, guide=guide)
    took = time.perf_counter() - began
    best_rate = max(c or 0.0 for c in capacities.values())
    ok_rate = one["ratio"] >= 0.95
    ok_servers = one["servers"] <= grid_servers * GUIDED_SHARE
    print(
        f"tune --guided from {start.label('pinned')}, --repeat {repeat}, --budget-trials "
        f"{budget}: picks {one['pick']} — {one['truth']:.2f} req/s as the grid measured it "
        f"({one['ratio']:.1%} of the grid's best); {one['servers']} servers "
        f"({one['servers'] / grid_servers:.0%} of the grid's), {one['levels']} levels, "
        f"~{one['wall_s'] / 60:.0f} min; stopped: {one['stopped']}; {guide.fits} refits "
        f"({took:.0f} s)"
    )
    staged = run_from(start, budget)
    print(
        f"  the staged search with the same budget: picks {staged['pick']} — "
        f"{staged['truth']:.2f} req/s ({staged['ratio']:.1%} of the grid's best); "
        f"{staged['servers']} servers, {staged['levels']} levels"
    )
    order = [t.label for t in one["trials"] if t.number is not None]
    print(f"  measured, in order: {', '.join(label.split('@')[1] for label in order)}")
    ranked = sorted((c or 0.0 for c in capacities.values()), reverse=True)
    print(
        f"  the grid's own spread: places 1–3 at {', '.join(f'{r:.2f}' for r in ranked[:3])} "
        f"req/s, places 4–12 at {ranked[11]:.2f}–{ranked[3]:.2f} (each one run of each "
        "candidate; two runs of one setting differ by 5–20 % here)"
    )
    print(
        f"  within 5 % of the grid's best: {'yes' if ok_rate else 'NO'}; at most a quarter of "
        f"the servers: {'yes' if ok_servers else 'NO'}"
    )
    if every_start:
        runs = [run_from(c, budget, guide=ModelGuide(model, rules_of)) for c in valid]
        ratios = [r["ratio"] for r in runs]
        servers = [r["servers"] for r in runs]
        print(
            f"  --guided from each of the {len(runs)} candidates as the start: share of the "
            f"grid's best min {min(ratios):.1%}, median {statistics.median(ratios):.1%}; within "
            f"5 % in {sum(r >= 0.95 for r in ratios)} of {len(runs)}; servers max {max(servers)}"
        )
        plain = [run_from(c, budget)["ratio"] for c in valid]
        print(
            f"  the staged search with the same budget from each start: share of the grid's "
            f"best min {min(plain):.1%}, median {statistics.median(plain):.1%}; within 5 % in "
            f"{sum(r >= 0.95 for r in plain)} of {len(plain)}"
        )
    by_label = {e["label"]: e for e in data["candidates"]}
    rules = {
        e["label"]: rules_of(Candidate(_key(space, e["settings"]))) for e in data["candidates"]
    }
    grid_top = sorted(capacities, key=lambda k: -(capacities[k] or 0.0))[:3]
    measured = [t for t in one["trials"] if t.number is not None and t.measurements]
    fits = [("the start alone", measured[:1]), ("the guided tune's trials", measured)]
    if fit_all or noise:
        fits.append(
            (
                "every candidate",
                [_trial_of(by_label[e["label"]], space, slo, data) for e in data["candidates"]],
            )
        )
    for what, trials in fits:
        began = time.perf_counter()
        guide = ModelGuide(model, rules_of, start_rps=best_rate)
        ranking = predicted_ranking(guide, trials, valid)
        labels = [c.label("pinned") for c, _ in ranking]
        top5 = labels[:5]
        inside = sum(label in top5 for label in grid_top)
        errors = [
            abs((r or 0.0) / (capacities[c.label("pinned")] or math.inf) - 1) for c, r in ranking
        ]
        print(
            f"  ranking fitted on {what} ({len(trials)} candidates, "
            f"{time.perf_counter() - began:.0f} s): the grid's best three at predicted places "
            f"{', '.join(str(labels.index(label) + 1) for label in grid_top)} — {inside} of 3 "
            f"in its top five; median error against the grid's capacities "
            f"{statistics.median(errors):.1%} (top five: "
            + ", ".join(f"{c.label('pinned').split('@')[1]} {r or 0:.2f}" for c, r in ranking[:5])
            + ")"
        )
        twins = _twins(model, rules, guide.cost, data["ladder"], slo)
        grid = _as_settings({k: capacities[k] or 0.0 for k in rules}, twins)
        predicted = _as_settings({c.label("pinned"): r or 0.0 for c, r in ranking}, twins)
        print(
            f"    each of the {len(twins)} groups of twins (candidates this fit runs step for step "
            f"alike) as one setting, its measured capacity its members' mean ({len(grid)} "
            f"settings): the grid's best three at predicted places "
            f"{', '.join(str(_top(predicted, len(predicted)).index(k) + 1) for k in _top(grid, 3))}"
            f" — {_inside(grid, predicted)} of 3 in its top five"
        )
    if noise:  # the last fit is the one on every candidate
        replay_noise(data, slo, model, rules, guide.cost, capacities, noise)


def level_model(data: dict, slo: Any) -> tuple[Any, Any]:
    """The level model of the recorded workload and levels, and each candidate's scheduler
    rules (the recording has no server log: its KV cache is taken as holding every request)."""
    from vprof.forecast.levelfit import AMPLE_KV_TOKENS, LevelModel
    from vprof.forecast.rules import rules_from_run
    from vprof.forecast.scenario import Scenario
    from vprof.traffic import get_shape
    from vprof.workloads import load_workload_file

    folder = Path(tempfile.mkdtemp(prefix="tune-guided-"))
    (folder / "workload.yaml").write_text(data["workload"])
    workload = load_workload_file(folder / "workload.yaml")
    shape = replace(
        get_shape("constant-rate"),
        duration_s=data["level_s"],
        warmup_s=data["warmup_s"],
        max_in_flight=256,
    )
    model = LevelModel(Scenario(workload, shape, 0), slo)
    fixed = data["space"]["fixed"]

    def rules_of(candidate: Candidate) -> Any:
        meta = {
            "profile": {"engine_args": {**fixed, **candidate.as_dict()}},
            "hardware": data["hardware"],
            "server": {"kv_cache_tokens": AMPLE_KV_TOKENS},
        }
        return rules_from_run(meta)[0]

    return model, rules_of


def predicted_ranking(
    guide: Any, trials: list, candidates: list[Candidate]
) -> list[tuple[Candidate, float | None]]:
    """Every candidate with its predicted capacity, by ``guide`` fitted on ``trials``."""
    predicted = guide.predict(trials, candidates)
    return sorted(predicted.items(), key=lambda kv: -(kv[1] or 0.0))


# The levels whose median TTFT shows a server's level-to-level noise: those offered at most this
# share of the candidate's capacity (no queue forms under evenly spaced arrivals).
QUIET_SHARE = 0.75


def replay_noise(
    data: dict,
    slo: Any,
    model: Any,
    rules: dict[str, Any],
    cost: Any,
    capacities: dict[str, float | None],
    seeds: int,
) -> None:
    """The ranking target's noise ceiling: the recorded grid simulated with ``seeds`` seeds
    (each fixes the lengths, the arrivals and the step-time draws), every candidate climbing
    the recorded ladder with the recording's stop rule, its capacity the plan's over what the
    recording keeps of the simulated levels (as :func:`grid_capacity` reads the recorded
    ones); once with the model's own noise, once with the recording's level-to-level noise
    added (each level's steps all slower or faster by one factor, its sd what the recorded
    quiet levels show beyond the model's own). Printed: (a) the spread of one candidate's
    capacity over seeds beside the grid's, the quiet levels' noise, simulated against
    recorded, and the grid's own repeats (:func:`_twins`); (b) how often one simulated grid's
    best three are within another's top five; (c) how often the model's expected ranking
    (capacities averaged over the other seeds) has a simulated grid's best three in its top
    five; (d) that ranking on the recorded grid. ``rules``: each candidate's scheduler rules."""
    entries = data["candidates"]
    quiet_below = {e["label"]: QUIET_SHARE * (capacities[e["label"]] or 0.0) for e in entries}
    real = statistics.median(x for e in entries for x in _quiet_noise(e, quiet_below[e["label"]]))
    began = time.perf_counter()
    simulate = partial(_simulated_grids, data, slo, model, rules, cost, quiet_below, seeds)
    own, own_noise = simulate(0.0)
    level_sd = math.sqrt(max(real**2 - own_noise**2, 0.0))
    added, added_noise = simulate(level_sd)
    print(
        f"  the noise ceiling: the model fitted on every candidate, the recorded ladder "
        f"simulated with seeds 0–{seeds - 1} ({seeds} grids, twice: "
        f"{time.perf_counter() - began:.0f} s)"
    )
    if own_noise < real:
        smaller = f"{real / own_noise:.0f}× smaller" if own_noise else "it has none"
        verdict = (
            f"the model's noise is smaller than the real one ({smaller}): its ceilings are "
            "upper bounds"
        )
    else:
        verdict = "the model's noise is not smaller than the real one"
    print(
        f"      the quiet levels' median TTFT (offered at most {QUIET_SHARE:.0%} of the "
        f"capacity), one candidate's from level to level: sd {real:.1%} of their mean "
        f"recorded, {own_noise:.1%} simulated (medians over candidates); {verdict}. Added: "
        f"each level's steps slower or faster by a factor with sd {level_sd:.1%} (simulated "
        f"quiet levels then {added_noise:.1%})"
    )
    ranked = sorted((c or 0.0 for c in capacities.values()), reverse=True)[:12]
    print(
        f"  (a) one candidate's capacity over the seeds: {_spread_text(own)}; with the level "
        f"noise added {_spread_text(added)}; the recorded grid's places 1–12 span "
        f"{ranked[-1]:.2f}–{ranked[0]:.2f} req/s (sd {_relative_sd(ranked):.1%})"
    )
    twins = _twins(model, rules, cost, data["ladder"], slo)
    if twins:
        measured = [[capacities[k] or 0.0 for k in group] for group in twins]
        alike = statistics.median(statistics.stdev(c) / statistics.fmean(c) for c in measured)
        print(
            "      candidates the model runs step for step alike (repeats of one setting in all "
            "but name), as the grid measured them: "
            + "; ".join(
                ", ".join(f"{k.split('@')[1]} {capacities[k] or 0.0:.2f}" for k in group)
                for group in twins
            )
            + f" — sd {alike:.1%} of a group's mean (median over groups)"
        )
    print(
        "  (b) one simulated grid's best three within another's top five: "
        f"{_pairs_text(own)}; with the level noise added {_pairs_text(added)}"
    )
    print(
        "  (c) the model's expected ranking (capacities averaged over the other seeds) with a "
        f"simulated grid's best three in its top five: {_expected_text(own)}; with the level "
        f"noise added {_expected_text(added)}"
    )
    mean = {k: statistics.fmean(g[k] for g in own) for k in rules}
    order = sorted(rules, key=lambda k: -mean[k])
    recorded = {k: capacities[k] or 0.0 for k in rules}
    error = statistics.median(abs(mean[k] / (recorded[k] or math.inf) - 1) for k in rules)
    print(
        f"  (d) the expected ranking over all {seeds} seeds on the recorded grid: its best three "
        f"at places {', '.join(str(order.index(k) + 1) for k in _top(recorded, 3))} — "
        f"{_inside(recorded, mean)} of 3 in its top five; median error against the grid's "
        f"capacities {error:.1%} (top five: "
        + ", ".join(f"{k.split('@')[1]} {mean[k]:.2f}" for k in order[:5])
        + ")"
    )


def _simulated_grids(
    data: dict,
    slo: Any,
    model: Any,
    rules: dict[str, Any],
    cost: Any,
    quiet_below: dict[str, float],
    seeds: int,
    level_sd: float,
) -> tuple[list[dict[str, float]], float]:
    """Each seed's simulated grid (every candidate's capacity), each level's steps slower or
    faster by a factor with sd ``level_sd``; and the quiet levels' noise in them (the median
    over candidates and seeds, as :func:`_quiet_noise`)."""
    import numpy as np

    from vprof.forecast.levelfit import LevelModel

    sigma = math.sqrt(math.log1p(level_sd**2))
    grids, noise = [], []
    for seed in range(seeds):
        seeded = LevelModel(replace(model.scenario, seed=seed), slo)
        speed = partial(np.random.default_rng(seed).lognormal, -(sigma**2) / 2, sigma)
        grid = {}
        for label, r in rules.items():
            entry = _simulated_entry(seeded, r, cost, label, data["ladder"], slo, speed)
            grid[label] = grid_capacity(entry, slo) or 0.0
            noise.extend(_quiet_noise(entry, quiet_below[label]))
        grids.append(grid)
    return grids, statistics.median(noise)


def _simulated_entry(
    model: Any,
    rules: Any,
    cost: Any,
    label: str,
    ladder: Sequence[float],
    slo: Any,
    speed: Callable[[], float],
) -> dict:
    """A candidate's ladder as the recording would hold it, the levels predicted (each with its
    steps ``speed()`` times as long)."""
    from vprof.forecast.stepcost import COEFFICIENTS

    entry: dict[str, Any] = {"label": label, "levels": []}

    def measure(rate: float) -> dict:
        factor = speed()
        slower = replace(cost, **{k: getattr(cost, k) * factor for k in COEFFICIENTS})
        return {"rate_rps": rate, "summary": _kept(model.level(rules, slower, rate))}

    climb_ladder(entry, ladder, slo, measure)
    return entry


def _twins(
    model: Any, rules: dict[str, Any], cost: Any, ladder: Sequence[float], slo: Any
) -> list[list[str]]:
    """Groups of candidates whose simulated ladders are alike, level for level, with the same
    seed: the scheduler runs them step for step alike."""
    groups: dict[str, list[str]] = {}
    for label, r in rules.items():
        entry = _simulated_entry(model, r, cost, label, ladder, slo, lambda: 1.0)
        groups.setdefault(json.dumps(entry["levels"], sort_keys=True), []).append(label)
    return [g for g in groups.values() if len(g) > 1]


def _as_settings(capacity: dict[str, float], twins: list[list[str]]) -> dict[str, float]:
    """``capacity`` with each group of ``twins`` as one setting: its members' mean."""
    merged = dict(capacity)
    for group in twins:
        values = [merged.pop(k) for k in group]
        merged[" = ".join(k.split("@")[1] for k in group)] = statistics.fmean(values)
    return merged


def _quiet_noise(entry: dict, below_rps: float) -> list[float]:
    """The sd of a candidate's quiet levels' median TTFT, as a share of their mean (none with
    fewer than two): the server's level-to-level noise, queueing aside."""
    ttft = [
        lv["summary"][K.MEDIAN_TTFT_MS]
        for lv in entry["levels"]
        if lv["rate_rps"] <= below_rps and lv["summary"].get(K.MEDIAN_TTFT_MS)
    ]
    return [statistics.stdev(ttft) / statistics.fmean(ttft)] if len(ttft) >= 2 else []


def _spread_text(grids: list[dict[str, float]]) -> str:
    spread = {k: _relative_sd([g[k] for g in grids]) for k in grids[0]}
    widest = max(spread, key=lambda k: spread[k])
    low, high = min(g[widest] for g in grids), max(g[widest] for g in grids)
    return (
        f"sd {statistics.median(spread.values()):.1%} of its mean at the median, "
        f"{spread[widest]:.1%} at the widest ({widest.split('@')[1]}: {low:.2f}–{high:.2f} req/s)"
    )


def _pairs_text(grids: list[dict[str, float]]) -> str:
    inside = [_inside(a, b) for a in grids for b in grids if a is not b]
    return _share(inside, "pairs")


def _expected_text(grids: list[dict[str, float]]) -> str:
    inside = [
        _inside(grid, {k: statistics.fmean(g[k] for g in grids if g is not grid) for k in grid})
        for grid in grids
    ]
    return _share(inside, "grids")


def _top(capacity: dict[str, float], n: int) -> list[str]:
    return sorted(capacity, key=lambda k: -capacity[k])[:n]


def _inside(grid: dict[str, float], ranking: dict[str, float]) -> int:
    """How many of ``grid``'s best three are in ``ranking``'s top five."""
    top5 = _top(ranking, 5)
    return sum(k in top5 for k in _top(grid, 3))


def _relative_sd(values: list[float]) -> float:
    """The sd of ``values`` as a share of their mean (0 when the mean is)."""
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 0.0


def _share(inside: list[int], of: str) -> str:
    """How often all of the best three were inside, over ``inside`` (each a count of 3)."""
    share = sum(k == 3 for k in inside) / len(inside)
    return f"all three in {share:.0%} of {len(inside)} {of} ({statistics.fmean(inside):.1f} of 3)"


def _trial_of(entry: dict, space: Space, slo: Any, data: dict) -> Any:
    """A recorded candidate's whole ladder as a trial (for a fit on every candidate)."""
    from vprof.runs.tuneevidence import Evidence, TrialResult, plan_levels

    evidence = Evidence()
    for lv in entry["levels"]:
        if lv["summary"].get(K.REQUEST_THROUGHPUT):
            summary = {**lv["summary"], **_level_of(entry["label"], lv["rate_rps"])}
            evidence.measurements.append(Measurement(lv["rate_rps"], "completed", summary))
    plan_levels(evidence, entry["label"], slo, Objective())
    candidate = Candidate(_key(space, entry["settings"]))
    return TrialResult.of(evidence, candidate=candidate, label=entry["label"], stage="grid")


def _plain_search_levels(entry: dict, slo: Any, data: dict) -> int:
    if not entry["started"]:
        return 1
    search = RateSearch(start_rps=1.0, max_rps=max(data["ladder"]))
    met: dict[float, bool] = {}
    n = 0
    while True:
        rate, _ = search.next_rate(met)
        if rate is None:
            return n
        n += 1
        summary = level_summary(entry, rate, n)
        answer = plan([summary], target_rps=1.0, slo=slo).profiles[0]
        met[rate] = bool(answer.levels and answer.levels[0].passed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="run the grid on this machine")
    parser.add_argument("--data", type=Path, default=RECORD, help="the recording (JSON)")
    parser.add_argument(
        "--runs",
        type=Path,
        default=Path("vprof-tune-grid"),
        help="where --record keeps its run folders (resumable)",
    )
    parser.add_argument("--level-s", type=float, default=8.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--port", type=int, default=18777)
    parser.add_argument("--repeat", type=int, default=2, help="tune's --repeat in the replay")
    parser.add_argument(
        "--guided",
        action="store_true",
        help="also replay tune --guided (a capacity model chooses what to measure)",
    )
    parser.add_argument(
        "--fit-all",
        action="store_true",
        help="with --guided: also rank the grid by a model fitted on every candidate (slow)",
    )
    parser.add_argument(
        "--noise",
        type=int,
        default=0,
        metavar="SEEDS",
        help="with --guided: simulate the recorded grid with this many seeds, the model fitted "
        "on every candidate (the ranking target's noise ceiling)",
    )
    parser.add_argument(
        "--every-start",
        action="store_true",
        help="also replay tune from every candidate as its start",
    )
    args = parser.parse_args()
    if args.noise < 0 or args.noise == 1:
        parser.error("--noise takes two seeds or more (0: none)")
    if args.noise and not args.guided:
        parser.error("--noise goes with --guided")
    if args.record:
        record(args.data, args.runs, args.level_s, args.warmup_s, args.port)
    data = json.loads(args.data.read_text())
    replay(
        data,
        repeat=args.repeat,
        every_start=args.every_start,
        guided=args.guided,
        fit_all=args.fit_all,
        noise=args.noise,
    )


if __name__ == "__main__":
    import signal

    def _stop(signum, frame):  # noqa: ARG001 - SIGTERM unwinds like Ctrl-C: the server stops
        raise KeyboardInterrupt

    # a shell without job control starts a background job with SIGINT ignored: listen anyway
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _stop)
    main()
