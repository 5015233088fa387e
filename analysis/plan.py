"""Capacity plans: how many replicas of a profile serve a request rate within an SLO.

For each profile, the measured load levels (runs) are ordered by the load their traffic
shape offered (open-loop rate or user count), else by achieved request throughput. The
sustainable per-replica rate lies between the last level that met the SLO and the first
that did not; it is interpolated linearly on the constraint that breaks first (the
*binding* one). Replicas = ceil(target / sustainable × (1 + headroom)). When no level
met the SLO the answer is unknown, and the plan says so instead of guessing.

A level's rate is, in open loop, the rate its requests were answered at as they arrived
(``served_rate``: the arrival rate over the measured window × the share answered), and
otherwise the achieved ``request_throughput``. vllm bench serve's throughput divides by the
time to the last answer, drain included, so in open loop it would understate what a replica
sustains by the last answers' latency over the level's length.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.keys import client_limit, stat_key
from vprof.analysis.slo import Slo, SloError, parse_slo
from vprof.analysis.stats import pct_key
from vprof.common.numbers import check_number
from vprof.records.rundir import RunState


@dataclass(frozen=True)
class Level:
    """One measured load level of a profile: a run, its throughput and its SLO checks."""

    run: str
    rps: float
    passed: bool
    checks: tuple[dict[str, Any], ...]
    state: str = RunState.COMPLETED.value
    # why the client, not the server, set the pace, and what to do (None: it did not)
    client_limit: tuple[str, str] | None = None
    offered: tuple[float, str] | None = None  # (load, unit) the traffic shape asked for
    repeats: int = 1  # runs merged into this level
    servers: int = 1  # replicas the run spread its load over
    gpus_per_replica: int | None = None
    workload: str | None = None
    predicted: bool = False  # by a capacity model (``vprof forecast``), not measured


@dataclass(frozen=True)
class ProfilePlan:
    """The answer for one profile, with the evidence it rests on."""

    profile: str
    replicas: int | None
    sustainable_rps: float | None
    binding: str | None
    basis: str
    max_measured_rps: float
    levels: tuple[Level, ...]
    notes: tuple[str, ...] = ()
    message: str = ""
    gpus_per_replica: int | None = None
    scaling_efficiency: float | None = None  # measured with several replicas, when given
    warnings: tuple[str, ...] = ()  # its runs read from damaged records files

    @property
    def gpus(self) -> int | None:
        if self.replicas is None or self.gpus_per_replica is None:
            return None
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class Plan:
    """A capacity plan for ``target_rps`` within ``slo``; ``profiles`` best first."""

    target_rps: float
    slo: str
    headroom: float
    profiles: tuple[ProfilePlan, ...] = field(default_factory=tuple)

    @property
    def best(self) -> ProfilePlan | None:
        """The profile needing the fewest replicas, or None when none met the SLO."""
        known = [p for p in self.profiles if p.replicas is not None]
        return min(known, key=lambda p: (p.replicas, -(p.sustainable_rps or 0))) if known else None

    def rows(self) -> list[dict[str, Any]]:
        """One row per profile for ``vprof.cli.output.emit``."""
        return [
            {
                "profile": p.profile,
                "replicas": p.replicas,
                "gpus_per_replica": p.gpus_per_replica,
                "gpus": p.gpus,
                "scaling_efficiency": p.scaling_efficiency,
                "sustainable_rps": p.sustainable_rps,
                "max_measured_rps": p.max_measured_rps,
                "binding": p.binding,
                "levels": len(p.levels),
                "basis": p.basis,
                "plan": p.message,
                "warnings": list(p.warnings),
            }
            for p in self.profiles
        ]

    @property
    def warnings(self) -> list[str]:
        """Every damaged run the plan read (see :func:`vprof.analysis.run.damage`)."""
        return [line for p in self.profiles for line in p.warnings]

    def evidence_rows(self) -> list[dict[str, Any]]:
        """One row per measured level: the evidence behind each profile's answer."""
        rows = []
        for p in self.profiles:
            for level in p.levels:
                rows.append(
                    {
                        "profile": p.profile,
                        "run": level.run,
                        "rps": level.rps,
                        "state": level.state,
                        "slo": "met" if level.passed else "missed",
                        "checks": "; ".join(_check_text(c) for c in level.checks),
                    }
                )
        return rows


def plan(
    runs_or_summaries: Sequence[str | Path | dict[str, Any]],
    *,
    target_rps: float,
    slo: Slo | str,
    headroom: float = 0.2,
) -> Plan:
    """Replicas of each profile needed to serve ``target_rps`` within ``slo``.

    Accepts run folders, loaded runs or summary dicts (``summarize_run``'s output).
    ``headroom`` (0.2 = 20 %) is spare capacity on top of the measured sustainable rate.

    Example:
        >>> plan(["runs/a-2rps", "runs/a-4rps"], target_rps=40, slo="ttft_p95=500ms")
    """
    slo = parse_slo(slo) if isinstance(slo, str) else slo

    check_number(target_rps, above=0, error=SloError, key="--rps")
    check_number(headroom, minimum=0, error=SloError, key="--headroom")
    if not any(t.percentile is not None for t in slo.targets) and slo.max_error_rate is None:
        raise SloError(
            "a plan needs percentile targets such as ttft_p95=500ms (or errors=1%)", key="--slo"
        )
    from vprof.analysis.run import damage

    summaries = [summary for item in runs_or_summaries for summary in _summaries(item, slo)]
    by_profile: dict[str, list[Level]] = {}
    damaged: dict[str, list[str]] = {}
    forecasts: dict[str, list[dict[str, Any]]] = {}
    for summary, name in zip(summaries, plan_labels(summaries), strict=True):
        by_profile.setdefault(name, []).append(_level(summary, slo))
        damaged.setdefault(name, []).extend(damage([summary]))
        if isinstance(summary.get(K.FORECAST), dict):
            forecasts.setdefault(name, []).append(summary[K.FORECAST])

    def planned(name: str, levels: list[Level]) -> ProfilePlan:
        made = _plan_profile(name, levels, target_rps, headroom, str(slo))
        if name in forecasts:
            made = _predicted(made, forecasts[name], target_rps, headroom)
        return dataclasses.replace(made, warnings=tuple(damaged[name]))

    plans = [planned(name, levels) for name, levels in by_profile.items()]
    plans.sort(key=lambda p: (p.replicas is None, p.replicas or 0, -(p.sustainable_rps or 0)))
    return Plan(target_rps, str(slo), headroom, tuple(plans))


def plan_label(summary: dict[str, Any], detail: str = "") -> str:
    """The name a summary's levels are planned under: its profile (and ``detail``), and apart
    from the measured levels when it was predicted (``vprof forecast``)."""
    name = str(summary.get(K.PROFILE) or summary.get(K.RUN)) + detail
    return f"{name} (predicted)" if summary.get(K.PREDICTED) else name


def plan_labels(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """:func:`plan_label` of each summary, with its workload where one profile ran several,
    and its traffic shape where one profile ran one workload under several (a load ladder's
    levels are one shape): levels of other traffic are never one plan's."""
    from vprof.traffic.shape import ladder_name

    def traffic(s: dict[str, Any]) -> tuple[str, str]:
        return str(s.get(K.WORKLOAD) or ""), ladder_name(str(s.get(K.TRAFFIC) or ""))

    bases = [plan_label(s) for s in summaries]
    seen: dict[str, set[tuple[str, str]]] = {}
    for s, base in zip(summaries, bases, strict=True):
        seen.setdefault(base, set()).add(traffic(s))
    labels = []
    for s, base in zip(summaries, bases, strict=True):
        workload, shape = traffic(s)
        kinds = seen[base]
        detail = ""
        if len({w for w, _ in kinds}) > 1:
            detail += f" × {workload or '(workload unknown)'}"
        if len({t for w, t in kinds if w == workload}) > 1:
            detail += f" × {shape or '(traffic unknown)'}"
        labels.append(plan_label(s, detail))
    return labels


def _predicted(
    answer: ProfilePlan, forecasts: list[dict[str, Any]], target: float, headroom: float
) -> ProfilePlan:
    """A plan over predicted levels says so, with the model's error beside the answer, what
    steps a little slower or faster would make of it, and every way the predictions reach
    past the runs the model was fitted on."""
    error = next((f.get("error") for f in forecasts if f.get("error")), "error unknown")
    notes = list(answer.notes)
    band = next(
        (f["pace"] for f in forecasts if (f.get("pace") or {}).get("sustainable_rps")), None
    )
    if band and answer.sustainable_rps is not None:
        notes.append(_band_note(band, target, headroom))
    for forecast in forecasts:
        for note in forecast.get("notes") or []:
            if note not in notes:
                notes.append(note)
    where = next((f.get("model") for f in forecasts if f.get("model")), None)
    by = f"predicted by {where}" if where else "predicted"
    message = f"{answer.message} — {by}, not measured; {error}"
    basis = f"{answer.basis} ({by})"
    return dataclasses.replace(answer, message=message, notes=tuple(notes), basis=basis)


def _band_note(band: dict[str, Any], target: float, headroom: float) -> str:
    """What the plan would be with steps ``step_time_pct`` slower or faster: the sustainable
    rate of each (``sustainable_rps``: [slower, faster], None where no level met the SLO) and
    the replicas it needs."""
    pct = f"{float(band.get('step_time_pct', 0)):g} %"
    slower, faster = band["sustainable_rps"]
    if not (isinstance(slower, (int, float)) and slower > 0):
        return f"with steps {pct} slower no predicted level met the SLO: measure before buying"
    low, high = sorted((float(slower), float(faster or slower)))
    fewest, most = (replicas_for(target, r, headroom) for r in (high, low))
    if fewest == most:
        needs = f"{fewest} replica" + ("s" if fewest != 1 else "")
    else:
        needs = f"{fewest} to {most} replicas"
    return (
        f"with steps {pct} faster or slower (what a model's step times may miss by) one replica "
        f"sustains {low:.2f}–{high:.2f} req/s: {needs}"
    )


def _summaries(item: Any, slo: Slo) -> list[dict[str, Any]]:
    """A summary given, or a run's: one, or one per side of an alternating run."""
    from vprof.analysis.alternation import side_views
    from vprof.analysis.run import Run, load_run, summarize_loaded

    if isinstance(item, dict):
        return [item]
    run = item if isinstance(item, Run) else load_run(item)
    return [summarize_loaded(view, slo=slo) for view in side_views(run)]


def _level(summary: dict[str, Any], slo: Slo) -> Level:
    """Evaluate the SLO on one summary (reusing its own checks when computed for this SLO)."""
    if summary.get(K.SLO) == str(slo) and summary.get(K.SLO_CHECKS) is not None:
        checks = [dict(c) for c in summary[K.SLO_CHECKS]]
    else:
        checks = []
        for target in slo.targets:
            if target.percentile is None:
                continue
            # open loop: TTFT and E2E from the intended send time, as the summary judges them
            metric = target.metric
            if summary.get(K.OPEN_LOOP) and metric in ("ttft", "e2el"):
                metric += "_from_schedule"
            key = stat_key(pct_key(target.percentile), metric)
            if key not in summary:
                raise SloError(
                    f"summary of {summary.get(K.RUN, '?')!r} has no {key}",
                    key="--slo",
                    hint="summarise with that percentile, or pass the run folder instead",
                )
            value = _num(summary[key])
            met = value <= target.threshold_ms
            checks.append(
                {
                    "key": target.key,
                    "threshold_ms": target.threshold_ms,
                    "value_ms": value,
                    "met": met,
                }
            )
        if slo.max_error_rate is not None:
            rate = _num(summary.get(K.ERROR_RATE))
            checks.append(
                {
                    "key": "errors",
                    "threshold": slo.max_error_rate,
                    "value": rate,
                    "met": rate <= slo.max_error_rate,
                }
            )
    state = str(summary.get(K.STATE) or RunState.COMPLETED.value)
    limited = bool(summary.get(K.CLIENT_LIMITED) or summary.get(K.LOADGEN_SATURATED))
    passed = all(c["met"] for c in checks) and state != RunState.FAILED and not limited
    rps = level_rate(summary)
    return Level(
        run=str(summary.get(K.RUN, "?")),
        rps=rps,
        passed=passed and not math.isnan(rps),
        checks=tuple(checks),
        state=state,
        client_limit=client_limit(summary) if limited else None,
        servers=int(summary.get(K.REPLICAS) or 1),
        gpus_per_replica=summary.get(K.GPUS_PER_REPLICA),
        workload=str(summary[K.WORKLOAD]) if summary.get(K.WORKLOAD) is not None else None,
        predicted=bool(summary.get(K.PREDICTED)),
        offered=(
            (float(summary[K.OFFERED_LOAD]), str(summary.get(K.OFFERED_LOAD_UNIT, "")))
            if summary.get(K.OFFERED_LOAD) is not None
            else None
        ),
    )


def level_rate(summary: dict[str, Any]) -> float:
    """The rate a load level served, as plans read it: in open loop its ``served_rate`` (the
    rate requests were answered at as they arrived), else ``request_throughput``. In closed
    loop that one holds: the requests sent in the window number its rate × (window + one
    answer's latency), as users keep sending to the end (emulator, 8 users, 3.17 s answers:
    2.522 req/s against 8 / 3.171 = 2.523)."""
    rate = _num(summary.get(K.SERVED_RATE))
    return rate if not math.isnan(rate) else _num(summary.get(K.REQUEST_THROUGHPUT))


def _num(value: Any) -> float:
    if value == "inf":
        return math.inf
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def _observed(check: dict[str, Any]) -> tuple[float, float]:
    if "value_ms" in check:
        return _num(check["value_ms"]), float(check["threshold_ms"])
    return _num(check.get("value")), float(check["threshold"])


def _check_text(check: dict[str, Any]) -> str:
    value, threshold = _observed(check)
    unit = " ms" if "value_ms" in check else ""
    if unit:
        shown, limit = f"{value:.1f}{unit}", f"{threshold:g}{unit}"
    else:
        shown, limit = f"{value:.2%}", f"{threshold:.2%}"
    return f"{check['key']} {shown} {'≤' if check['met'] else '>'} {limit}"


def _plan_profile(
    name: str, levels: list[Level], target: float, headroom: float, slo_text: str
) -> ProfilePlan:
    """One profile's plan: from its single-replica levels, checked against its multi-replica
    levels when there are some (see :func:`_scaling_check`)."""
    single = [lv for lv in levels if lv.servers == 1]
    several = [lv for lv in levels if lv.servers > 1]
    gpus = next((lv.gpus_per_replica for lv in levels if lv.gpus_per_replica), None)
    if not single:
        # only runs over several replicas: plan on what each replica served among the others
        plan = _plan_single(name, [_per_replica(lv) for lv in several], target, headroom, slo_text)
        note = (
            "measured only with several replicas: the rate per replica is each run's total "
            "over its replicas, so the plan already includes how they scaled together"
        )
        return dataclasses.replace(plan, notes=(*plan.notes, note), gpus_per_replica=gpus)
    plan = _plan_single(name, single, target, headroom, slo_text)
    efficiency, notes = _scaling_check(single, several) if several else (None, [])
    if efficiency is not None and efficiency < 1 and plan.sustainable_rps is not None:
        # replicas lose some of their rate together: plan on what was measured
        plan = _plan_single(name, single, target, headroom, slo_text, efficiency=efficiency)
    plan = dataclasses.replace(plan, notes=(*plan.notes, *notes))
    return dataclasses.replace(plan, gpus_per_replica=gpus, scaling_efficiency=efficiency)


def _per_replica(level: Level) -> Level:
    """A multi-replica level as the load and rate of one of its replicas."""
    k = level.servers
    offered = (level.offered[0] / k, level.offered[1]) if level.offered else None
    return dataclasses.replace(level, rps=level.rps / k, offered=offered)


# A multi-replica level is compared with one replica at the same load per replica: the load
# of a single-replica level (or the span between two) must be this close to it.
SAME_LOAD = 0.10


def _scaling_check(single: list[Level], several: list[Level]) -> tuple[float | None, list[str]]:
    """How the measured multi-replica levels scaled, and what the plan should say about it.

    Scaling efficiency = a multi-replica level's throughput / (its replicas × one replica's
    throughput at the same offered load per replica), one replica's being interpolated on
    the single-replica levels of the same workload and load unit. Levels only compare when
    that load lies within the single-replica levels' span (±10 %). The lowest efficiency
    seen is the one the plan uses. A multi-replica level that missed the SLO where one
    replica met it at that load is named too: throughput scaled, latency did not.
    """
    ratios: list[float] = []
    notes: list[str] = []
    for multi in several:
        k = multi.servers
        if multi.offered is None or math.isnan(multi.rps):
            notes.append(f"{multi.run} ({k} replicas) says no offered load: scaling not checked")
            continue
        load, unit = multi.offered[0] / k, multi.offered[1]
        alike = _comparable(single, multi)
        one = _at_load(alike, load)
        if one is None:
            loads = [lv.offered[0] for lv in alike if lv.offered]
            span = (
                f"they span {loads[0]:g}–{loads[-1]:g} {unit}"
                if loads
                else "there are none of its workload"
            )
            notes.append(
                f"{multi.run} ({k} replicas, {load:g} {unit} each): no single-replica run at "
                f"that load to compare with ({span}); scaling not checked"
            )
            continue
        rps_one, passed_one = one
        efficiency = multi.rps / (k * rps_one)
        ratios.append(efficiency)
        notes.append(
            f"measured with {k} replicas at {load:g} {unit} each: {multi.rps:.2f} req/s, "
            f"{efficiency:.0%} of {k} × one replica's {rps_one:.2f} req/s at that load"
            + ("; the plan counts on it" if efficiency < 1 else "")
        )
        if passed_one and not multi.passed:
            missed = "; ".join(_check_text(c) for c in multi.checks if not c["met"])
            notes.append(
                f"linear scaling did not hold at the SLO: {k} replicas at {load:g} {unit} each "
                f"missed it ({missed or 'run ' + multi.state}) where one replica met it at that "
                "load; plan with fewer requests per replica, or measure more multi-replica levels"
            )
    return (min(ratios) if ratios else None), notes


def _comparable(single: list[Level], multi: Level) -> list[Level]:
    """The single-replica levels of ``multi``'s workload and load unit, repeats merged, by
    offered load."""
    unit = multi.offered[1] if multi.offered else None
    alike = [
        lv
        for lv in single
        if lv.offered
        and lv.offered[1] == unit
        and lv.workload == multi.workload
        and not math.isnan(lv.rps)
    ]
    return sorted(_merge_repeats(alike), key=lambda lv: lv.offered[0] if lv.offered else 0.0)


def _at_load(levels: list[Level], load: float) -> tuple[float, bool] | None:
    """One replica's throughput at ``load`` (linear between the levels around it) and whether
    the SLO held there (both neighbours met it); None outside the levels' span."""
    if not levels:
        return None
    loads = [lv.offered[0] for lv in levels]  # type: ignore[index]
    if not loads[0] * (1 - SAME_LOAD) <= load <= loads[-1] * (1 + SAME_LOAD):
        return None
    if load <= loads[0]:
        return levels[0].rps, levels[0].passed
    if load >= loads[-1]:
        return levels[-1].rps, levels[-1].passed
    hi = next(i for i, x in enumerate(loads) if x >= load)
    a, b = levels[hi - 1], levels[hi]
    share = (load - loads[hi - 1]) / (loads[hi] - loads[hi - 1]) if loads[hi] > loads[hi - 1] else 0
    return a.rps + share * (b.rps - a.rps), a.passed and b.passed


def _plan_single(
    name: str,
    levels: list[Level],
    target: float,
    headroom: float,
    slo_text: str,
    *,
    efficiency: float = 1.0,
) -> ProfilePlan:
    # Order by the load that was asked for when every level says it in the same unit: past
    # saturation the achieved rate can fall while the offered load still rises.
    units = {lv.offered[1] if lv.offered else None for lv in levels}
    if len(units) == 1 and None not in units:
        levels = sorted(_merge_repeats(levels), key=lambda lv: (lv.offered or (0.0, ""))[0])
    else:
        levels = sorted(levels, key=lambda lv: (math.isnan(lv.rps), lv.rps))
    measured = [lv.rps for lv in levels if not math.isnan(lv.rps)]
    max_rps = max(measured) if measured else math.nan
    # a model's levels were predicted: the plan's words say so
    predicted = bool(levels) and all(lv.predicted for lv in levels)
    seen, seek = ("predicted", "predict") if predicted else ("measured", "measure")
    notes: list[str] = []
    first_fail = next((i for i, lv in enumerate(levels) if not lv.passed), None)
    if first_fail == 0:
        worst = levels[0]
        missed = "; ".join(_check_text(c) for c in worst.checks if not c["met"])
        why = missed or (worst.client_limit[0] if worst.client_limit else f"run {worst.state}")
        return ProfilePlan(
            name,
            None,
            None,
            None,
            f"no {seen} level met the SLO",
            max_rps,
            tuple(levels),
            (f"lowest level {worst.rps:.2f} req/s ({worst.run}) missed: {why}",),
            f"{name}: no {seen} level met {slo_text} (lowest, {worst.rps:.2f} req/s, missed "
            f"{why}); replicas unknown: {seek} lower load levels",
        )
    if first_fail is None:
        last = levels[-1]
        sustainable, binding = last.rps, _closest(last)
        basis = f"highest {seen} level; every level met the SLO, so capacity may be higher"
    else:
        last, fail = levels[first_fail - 1], levels[first_fail]
        sustainable, binding, basis = _interpolate(last, fail)
        if any(lv.passed for lv in levels[first_fail + 1 :]):
            notes.append(
                f"a level above the first failure passed again; the plan uses the first "
                f"failure at {fail.rps:.2f} req/s (conservative)"
            )
    for lv in levels:
        if lv.client_limit:
            what, fix = lv.client_limit
            notes.append(f"{what} in {lv.run}: that level is not counted as met ({fix})")
    if sustainable <= 0 or math.isnan(sustainable):
        return ProfilePlan(
            name,
            None,
            None,
            binding,
            f"no positive sustainable rate {seen}",
            max_rps,
            tuple(levels),
            tuple(notes),
            f"{name}: no positive sustainable rate {seen}",
        )
    replicas = replicas_for(target, sustainable, headroom, efficiency)
    if target > max_rps and efficiency == 1.0:
        notes.append(
            f"one replica was {seen} up to {max_rps:.2f} req/s; {target:g} req/s assumes "
            "replicas scale linearly behind a load balancer"
        )
    message = (
        f"to serve {target:g} req/s of this traffic within {slo_text} you need {replicas} "
        f"replica{'s' if replicas != 1 else ''} of {name} ({sustainable:.2f} req/s each"
        + (f" alone, {efficiency:.0%} of that together" if efficiency < 1 else "")
        + ", "
        f"{binding} binds, {headroom:.0%} headroom)"
    )
    return ProfilePlan(
        name, replicas, sustainable, binding, basis, max_rps, tuple(levels), tuple(notes), message
    )


def replicas_for(
    target: float, sustainable: float, headroom: float, efficiency: float = 1.0
) -> int:
    """Replicas that serve ``target`` req/s with ``headroom`` when each sustains
    ``sustainable`` (``efficiency`` of it together)."""
    return math.ceil(target / (sustainable * efficiency) * (1.0 + headroom) - 1e-9)


def _merge_repeats(levels: list[Level]) -> list[Level]:
    """Repeats of one offered load as one level: it met the SLO only if every repeat did, its
    rate is their mean, and each check keeps its worst value (a plan must hold on a bad run)."""
    by_load: dict[tuple[float, str] | None, list[Level]] = {}
    for level in levels:
        by_load.setdefault(level.offered, []).append(level)
    merged = []
    for group in by_load.values():
        if len(group) == 1:
            merged.append(group[0])
            continue
        checks: dict[str, dict[str, Any]] = {}
        for level in group:
            for check in level.checks:
                kept = checks.get(check["key"])
                if kept is None or _observed(check)[0] > _observed(kept)[0]:
                    checks[check["key"]] = dict(check)
        rates = [lv.rps for lv in group if not math.isnan(lv.rps)]
        failed = next((lv.state for lv in group if lv.state != RunState.COMPLETED), None)
        merged.append(
            Level(
                run=", ".join(lv.run for lv in group),
                rps=sum(rates) / len(rates) if rates else math.nan,
                passed=all(lv.passed for lv in group),
                checks=tuple(checks.values()),
                state=failed or RunState.COMPLETED.value,
                client_limit=next((lv.client_limit for lv in group if lv.client_limit), None),
                offered=group[0].offered,
                repeats=len(group),
                predicted=all(lv.predicted for lv in group),
            )
        )
    return merged


def _closest(level: Level) -> str | None:
    """The constraint with the least margin at a passing level."""
    ratios = []
    for check in level.checks:
        value, threshold = _observed(check)
        if threshold > 0 and not math.isnan(value):
            ratios.append((value / threshold, check["key"]))
    return max(ratios)[1] if ratios else None


def _interpolate(last: Level, fail: Level) -> tuple[float, str | None, str]:
    """Sustainable rate between a passing and a failing level, and the binding constraint."""
    if fail.client_limit and all(c["met"] for c in fail.checks):
        return (
            last.rps,
            "client limit",
            f"last passing level {last.rps:.2f} req/s; {fail.client_limit[0]} in the next "
            f"({fail.run}), so capacity there is unknown",
        )
    if fail.state == RunState.FAILED and all(c["met"] for c in fail.checks):
        return (
            last.rps,
            "run failure",
            (f"last passing level {last.rps:.2f} req/s; the next run ({fail.run}) failed"),
        )
    if not fail.rps > last.rps:
        binding = next((c["key"] for c in fail.checks if not c["met"]), None)
        return (
            last.rps,
            binding,
            (f"last passing level {last.rps:.2f} req/s; throughput did not grow beyond it"),
        )
    before = {c["key"]: c for c in last.checks}
    candidates = []
    for check in fail.checks:
        if check["met"] or check["key"] not in before:
            continue
        v1, threshold = _observed(before[check["key"]])
        v2, _ = _observed(check)
        if math.isfinite(v2) and v2 > v1:
            rate = last.rps + (threshold - v1) / (v2 - v1) * (fail.rps - last.rps)
        else:  # failures counted as unbounded latency: no slope to follow
            rate = last.rps
        candidates.append((min(max(rate, last.rps), fail.rps), check["key"]))
    if not candidates:
        return last.rps, None, f"last passing level {last.rps:.2f} req/s"
    rate, binding = min(candidates)
    return (
        rate,
        binding,
        (f"interpolated between {last.rps:.2f} req/s (met) and {fail.rps:.2f} req/s (missed)"),
    )
