"""Run folders → the report's data: one JSON-safe dict that the HTML embeds and draws from.

Every number comes from the analysis API: summaries from ``summarize_loaded``, the plan from
``plan``, differences from ``compare``; this module only arranges them by section.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.common.cpus import usable_cpus
from vprof.common.errors import ReportError
from vprof.records.rundir import RunDir, RunState
from vprof.report.options import ReportOptions, check_options

SCHEMA_VERSION = 1


def build_data(
    paths: Iterable[str | Path], *, progress: Callable[[str], None] | None = None, **options: Any
) -> dict[str, Any]:
    """The report's data for run, bench or sweep folders; ``options`` as :func:`check_options`,
    ``progress`` is told what is being done (the comparisons' bootstrap can take a while).

    Example:
        >>> build_data(["vprof-runs/"], slo="ttft_p95=500ms", target_rps=40)  # doctest: +SKIP
    """
    from vprof.analysis import load_run
    from vprof.analysis.alternation import side_views
    from vprof.analysis.run import display_names, json_safe, summarize_loaded
    from vprof.report.capacity import capacity, cost
    from vprof.report.inputs import resolve_inputs
    from vprof.report.runs import columns, distributions, provenance, timelines
    from vprof.report.sweeps import from_load_levels, from_manifests

    opts = check_options(**options)
    started = time.perf_counter()
    paths = list(paths)
    inputs = resolve_inputs(paths)

    def pictures(run: Any, summary: dict[str, Any]) -> dict[str, Any]:
        cols = columns(run)
        return {
            "summary": json_safe(summary),
            "distributions": json_safe(distributions(run, summary, cols, seed=opts.seed)),
            "timeline": json_safe(timelines(run, summary, cols)),
            "provenance": json_safe(provenance(run)),
        }

    def read(path: Path) -> tuple[Any, list[tuple[Any, dict[str, Any], dict[str, Any]]]]:
        """A run folder read, and each of its views (an alternating run's sides) summarised
        and drawn."""
        run = load_run(path)
        views = [(view, summarize_loaded(view, slo=opts.slo)) for view in side_views(run)]
        return run, [(view, summary, pictures(view, summary)) for view, summary in views]

    # Runs are read, summarised and drawn one per core, each in one go: each is its own, numpy
    # lets go of the interpreter in the work on its arrays, and the two cores' parts that hold
    # it (reading samples, drawing) fall at different times, not all in one phase.
    with each_run() as each:
        read_runs = each(read, inputs.runs)
    loaded = [run for run, _ in read_runs]
    done = [view for _, views in read_runs for view in views]
    order = _reading_order([summary for _, summary, _ in done])
    runs = [done[i][0] for i in order]
    summaries = [done[i][1] for i in order]
    labels = display_names(summaries)
    ids = [f"r{i}" for i in range(len(runs))]
    entries = [
        {"id": run_id, "label": label, **done[i][2]}
        for run_id, label, i in zip(ids, labels, order, strict=True)
    ]
    forecast: dict[str, Any] = {"curves": [], "notes": []}
    if opts.model is not None:
        from vprof.report.forecast import predicted_curves

        if progress is not None:
            progress(f"predicting curves with {opts.model.path}")
        forecast = predicted_curves(runs, summaries, opts.model)
    capacity_data = capacity(ids, summaries, opts, forecast["curves"])
    capacity_data["predicted_notes"] = forecast["notes"]
    metas: dict[str, tuple[dict[str, Any], str]] = {}
    for run, summary in zip(runs, summaries, strict=True):
        folder = str(run.path).partition("#")[0]  # a side's run folder is its run's
        metas.setdefault(
            str(summary.get(K.PROFILE) or summary.get(K.RUN)),
            (run.meta, str(RunDir(folder).run_json)),
        )
    recorded = [r.meta["hardware"] for r in runs if isinstance(r.meta.get("hardware"), dict)]
    on_gpus = any(h.get("gpus") for h in recorded) if recorded else None
    run_ids = {r.path.resolve(): i for r, i in zip(runs, ids, strict=True)}
    by_id = dict(zip(ids, summaries, strict=True))
    sweeps = from_manifests(inputs.sweeps, run_ids, by_id, capacity_data)
    covered = {row["run_id"] for s in sweeps for row in s["rows"] if row.get("run_id")}
    sweeps += from_load_levels(capacity_data, covered)
    from vprof.analysis.alternation import is_alternating
    from vprof.analysis.compare import cell_key

    sides = {i for i, r in enumerate(runs) if is_alternating(r)}
    groups = [
        g
        for g in (
            [i for i in group if i not in sides]
            for group in comparison_groups(summaries, labels, opts.baseline)
        )
        if len({cell_key(runs[i].path) for i in g}) >= 2  # not only one configuration's repeats
    ]
    if groups and progress is not None:
        progress(
            f"comparing {len(groups)} group(s) of runs under the same traffic with "
            + (
                f"{opts.n_boot:,} bootstrap resamples"
                if opts.n_boot is not None
                else "as many bootstrap resamples as their precision needs"
            )
            + " (--n-boot sets how many)"
        )
    with each_run() as each:  # each comparison is its own (and mostly numpy's work)
        comparisons = each(lambda group: _compare(runs, summaries, ids, group, opts), groups)
    alternated = _alternating_cells(loaded, runs, sides)
    comparisons += [_compare_sides(phases, views, summaries, ids) for phases, views in alternated]
    groups += [views for _, views in alternated]
    data = json_safe(
        {
            "schema": SCHEMA_VERSION,
            "title": opts.title or _title(summaries),
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "vprof_version": _version(),
            "inputs": [str(p) for p in paths],
            "options": opts.to_dict(),
            "runs": None,
            "capacity": capacity_data,
            "cost": cost(capacity_data, metas, opts, measured_on_gpus=on_gpus),
            "sweeps": sweeps,
            "comparisons": comparisons,
            "distribution_groups": _distribution_groups(summaries, ids, groups),
            "warnings": _warnings(labels, summaries),
        }
    )
    data["runs"] = entries  # each part already JSON-safe: not walked again
    data["build_s"] = round(time.perf_counter() - started, 3)
    return data


@contextmanager
def each_run() -> Iterator[Callable[..., list[Any]]]:
    """``each(fn, items, …)``: ``[fn(*args) for args in zip(items, …)]``, two at a time when
    the process may use two cores (results in order; the first failure is raised). A single
    item is done by the caller, whose reading and summary then use both cores themselves (in
    a worker thread they keep to one, as two runs at a time do)."""

    def in_turn(fn: Callable[..., Any], *items: Sequence[Any]) -> list[Any]:
        return [fn(*args) for args in zip(*items, strict=True)]

    workers = min(2, usable_cpus())
    if workers < 2:
        yield in_turn
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="vprof-report") as pool:

        def two_at_a_time(fn: Callable[..., Any], *items: Sequence[Any]) -> list[Any]:
            return in_turn(fn, *items) if len(items[0]) < 2 else list(pool.map(fn, *items))

        yield two_at_a_time


def _reading_order(summaries: Sequence[dict[str, Any]]) -> list[int]:
    """Runs grouped by profile (in the order profiles first appear), each profile's by the
    load offered; otherwise as given. Comparison baselines are then each group's first."""
    first: dict[str, int] = {}
    for i, s in enumerate(summaries):
        first.setdefault(str(s.get(K.PROFILE)), i)

    def key(i: int) -> tuple[int, float, int]:
        s = summaries[i]
        load = s.get(K.OFFERED_LOAD)
        return (first[str(s.get(K.PROFILE))], float(load) if load is not None else math.inf, i)

    return sorted(range(len(summaries)), key=key)


def _version() -> str | None:
    from importlib import metadata  # 20 ms of imports (email, zipfile): not at start-up

    try:
        return metadata.version("vprof")
    except metadata.PackageNotFoundError:
        return None


def _title(summaries: Sequence[dict[str, Any]]) -> str:
    profiles = list(dict.fromkeys(str(s.get(K.PROFILE)) for s in summaries))
    shown = ", ".join(profiles[:4]) + (
        f" and {len(profiles) - 4} more" if len(profiles) > 4 else ""
    )
    return f"vprof report: {shown} ({len(summaries)} run{'s' if len(summaries) != 1 else ''})"


def comparison_groups(
    summaries: Sequence[dict[str, Any]], labels: Sequence[str], baseline: str | None
) -> list[list[int]]:
    """Indices of runs to compare: runs under the same workload and traffic shape, two or more.

    Runs at different loads are not compared (their differences are the load's). The first
    run of a group is its baseline, unless ``baseline`` names a run, label or profile in it.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for i, s in enumerate(summaries):
        groups.setdefault((str(s.get(K.WORKLOAD)), str(s.get(K.TRAFFIC))), []).append(i)
    chosen = [g for g in groups.values() if len(g) >= 2]
    if baseline is not None:

        def matches(i: int) -> bool:
            s = summaries[i]
            return baseline in (labels[i], s.get(K.RUN), s.get(K.PROFILE))

        if not any(matches(i) for g in chosen for i in g):
            names = sorted({str(s.get(K.PROFILE)) for s in summaries} | set(labels))
            raise ReportError(
                f"no compared run is {baseline!r}",
                key="--baseline",
                hint=f"name a run or profile: {', '.join(names[:8])}",
            )
        chosen = [sorted(g, key=lambda i: not matches(i)) for g in chosen]
    return chosen


def _compare(
    runs: Sequence[Any],
    summaries: Sequence[dict[str, Any]],
    ids: Sequence[str],
    group: Sequence[int],
    opts: ReportOptions,
) -> dict[str, Any]:
    from vprof.analysis.compare import comparison
    from vprof.analysis.run import display_names, json_safe

    known = {runs[i].path: summaries[i] for i in group}
    frame = comparison(
        [runs[i] for i in group], n_boot=opts.n_boot, seed=opts.seed, summaries=known
    )
    names = display_names([summaries[i] for i in group])
    by_name = {name: ids[i] for name, i in zip(names, group, strict=True)}
    rows = json_safe(frame.records())
    for row in rows:
        row["run_id"] = by_name.get(row["run"])
        row["baseline_id"] = by_name.get(row["baseline"])
    first = summaries[group[0]]
    return {
        "workload": first.get(K.WORKLOAD),
        "traffic": first.get(K.TRAFFIC),
        "run_ids": [ids[i] for i in group],
        "baseline_id": ids[group[0]],
        "n_boot": frame.attrs.get("n_boot", opts.n_boot),
        "seed": opts.seed,
        "notes": list(frame.attrs.get("notes", [])),
        "rows": rows,
    }


def _alternating_cells(
    loaded: Sequence[Any], runs: Sequence[Any], sides: set[int]
) -> list[tuple[list[Any], list[int]]]:
    """Each alternating run given (its phases together, a ``--p2`` with its first): the phases
    and the indices of their sides' views in ``runs``."""
    from vprof.analysis.alternation import is_alternating
    from vprof.analysis.compare import cell_key

    cells: dict[tuple[str, str], tuple[list[Any], list[int]]] = {}
    for run in loaded:
        if is_alternating(run):
            cells.setdefault(cell_key(run.path), ([], []))[0].append(run)
    for i in sorted(sides):
        folder = Path(str(runs[i].path).partition("#")[0])
        cells[cell_key(folder)][1].append(i)
    return list(cells.values())


def _compare_sides(
    phases: Sequence[Any],
    views: Sequence[int],
    summaries: Sequence[dict[str, Any]],
    ids: Sequence[str],
) -> dict[str, Any]:
    """An alternating run's paired comparison of its sides (its first side the baseline)."""
    from vprof.analysis.compare import comparison
    from vprof.analysis.run import json_safe

    frame = comparison(list(phases))
    by_side: dict[str, str] = {}
    for i in views:  # the first phase's view of each side stands for it
        by_side.setdefault(str(summaries[i].get(K.PROFILE)), ids[i])
    rows = json_safe(frame.records())
    for row in rows:
        row["run_id"] = by_side.get(row["run"])
        row["baseline_id"] = by_side.get(row["baseline"])
    first = summaries[views[0]]
    return {
        "workload": first.get(K.WORKLOAD),
        "traffic": first.get(K.TRAFFIC),
        "run_ids": list(by_side.values()),
        "baseline_id": ids[views[0]],
        "notes": list(frame.attrs.get("notes", [])),
        "rows": rows,
    }


def _distribution_groups(
    summaries: Sequence[dict[str, Any]], ids: Sequence[str], groups: Sequence[Sequence[int]]
) -> list[dict[str, Any]]:
    """Runs whose distributions share a chart: each comparison group, then the other runs of
    one profile (a load ladder's levels side by side)."""
    out = []
    shown: set[int] = set()
    for group in groups:
        first = summaries[group[0]]
        out.append(
            {
                "title": f"{first.get(K.WORKLOAD)} × {first.get(K.TRAFFIC)}",
                "run_ids": [ids[i] for i in group],
            }
        )
        shown.update(group)
    by_profile: dict[str, list[int]] = {}
    for i, s in enumerate(summaries):
        if i not in shown:
            by_profile.setdefault(str(s.get(K.PROFILE)), []).append(i)
    for profile, members in by_profile.items():
        out.append({"title": profile, "run_ids": [ids[i] for i in members]})
    return out


def _warnings(labels: Sequence[str], summaries: Sequence[dict[str, Any]]) -> list[str]:
    """What a reader must know before trusting the numbers: damaged records, failed runs, a
    saturated client."""
    from vprof.analysis.run import damage

    out = damage(summaries, labels)
    for label, s in zip(labels, summaries, strict=True):
        if s.get(K.STATE) not in (RunState.COMPLETED, None):
            why = f": {s[K.REASON]}" if s.get(K.REASON) else ""
            out.append(f"{label}: the run is {s.get(K.STATE)}{why}")
        if s.get(K.LOADGEN_SATURATED):
            out.append(f"{label}: {s.get(K.LOADGEN_VERDICT)}")
    return out


def write_report(
    paths: Iterable[str | Path],
    out: str | Path,
    *,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
    force: bool = False,
    **options: Any,
) -> Path:
    """Write one self-contained HTML report of ``paths`` (run, bench or sweep folders) to ``out``.

    ``options``: ``slo``, ``target_rps``, ``headroom``, ``gpu_hour_price``, ``baseline``,
    ``n_boot``, ``seed``, ``title`` (see :func:`vprof.report.options.check_options`).
    ``warn`` is told each of the report's warnings (damaged records, failed runs). An
    existing ``out`` that is not a vprof report is left alone (``OutputError``) unless
    ``force``; a file of the runs read is never written over.

    Example:
        >>> write_report(["vprof-runs/"], "report.html", slo="ttft_p95=500ms", target_rps=40)
        ... # doctest: +SKIP
    """
    from vprof.records.outputs import REPORT, claim_output, protected_inputs, write_output
    from vprof.report.html import render

    paths = list(paths)
    target = claim_output(out, REPORT, force=force, protected=protected_inputs(paths))
    data = build_data(paths, progress=progress, **options)
    if warn is not None:
        for line in data["warnings"]:
            warn(line)
    return write_output(target, render(data))
