"""Predicted curves for a report: a capacity model's summaries over the rates each measured
profile was run at (and a little past them), for the configurations the model was fitted on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vprof.analysis.keys import SummaryKey as K


def predicted_curves(runs: Sequence[Any], summaries: Sequence[dict[str, Any]], model: Any) -> dict:
    """``{"curves": [...], "notes": [...]}``: one curve per measured profile, workload and
    traffic shape (open loop) whose configuration the model holds; a note for each profile it
    does not."""
    from vprof.analysis.plan import plan_labels
    from vprof.forecast.capacity import around, ladder
    from vprof.forecast.rules import config_key
    from vprof.forecast.scenario import scenario_of_run
    from vprof.records.rundir import RunDir
    from vprof.traffic.shape import ladder_name

    # the plan's groups (one profile's levels of one workload and traffic), measured ones only
    groups: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for run, summary, label in zip(runs, summaries, plan_labels(summaries), strict=True):
        if not summary.get(K.PREDICTED) and summary.get(K.OPEN_LOOP):
            groups.setdefault(label, []).append((run, summary))
    curves, notes = [], []
    for label, members in groups.items():
        run, first = members[0]
        profile, workload = str(first.get(K.PROFILE)), str(first.get(K.WORKLOAD))
        config = model.find(config_key(run.meta))
        if config is None:
            notes.append(
                f"{profile}: the model ({model.path}) holds no configuration of this profile on "
                "this hardware; no predicted curve"
            )
            continue
        s = scenario_of_run(run.meta, str(RunDir(run.path).run_json), run.locust)
        rates = around([float(m[1][K.OFFERED_LOAD]) for m in members if m[1].get(K.OFFERED_LOAD)])
        predicted = ladder(config, s, rates, model_path=model.path, pace=True)
        curve_notes: list[str] = []
        for p in predicted:
            for note in (p.get(K.FORECAST) or {}).get("notes") or []:
                if note not in curve_notes:
                    curve_notes.append(note)
        curves.append(
            {
                "profile": label,  # the measured levels' group: its colour
                "name": (label if label != profile else f"{profile} × {workload}") + " (predicted)",
                "workload": workload,
                "traffic": ladder_name(s.shape.name),
                "error": config.error_text(),
                "notes": curve_notes,
                "summaries": predicted,
            }
        )
    return {"curves": curves, "notes": notes}
