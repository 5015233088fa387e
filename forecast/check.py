"""``vprof forecast check``: each measured run predicted from what it ran (its workload,
traffic shape and seed), beside what it measured; and predicted again with the stalls it
measured where they happened, so that a miss can be told apart: one that stays is the model's
steps or scheduling, one that goes was the stalls' chance."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from vprof.analysis.keys import HEADLINE_KEYS
from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import ForecastError
from vprof.forecast.accuracy import compare_summaries, error_report
from vprof.forecast.model import ConfigModel, ForecastModel
from vprof.forecast.observed import Observed, load_observed
from vprof.forecast.predict import predict
from vprof.forecast.scenario import scenario_of_run
from vprof.forecast.stepfit import step_time_ratio
from vprof.records.rundir import RunDir


def check_observed(
    config: ConfigModel, runs: Sequence[Observed], *, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """The error report of ``config`` on ``runs`` (each predicted from its own scenario)."""
    rows: list[dict[str, Any]] = []
    labels = run_labels(runs)
    for o, label in zip(runs, labels, strict=True):
        s = scenario_of_run(o.meta, str(RunDir(o.path).run_json), o.locust)
        predicted = predict(config, s, slo=o.summary.get(K.SLO)).summary
        rows.extend(compare_summaries(label, o.summary, predicted))
    report = error_report(rows)
    medians = report["median_abs_pct"]
    shown = ", ".join(f"{k} {v:.1f} %" for k, v in medians.items() if k in HEADLINE_KEYS)
    say(f"  median abs error over {report['runs']} runs: {shown}")
    report["step_time"] = step_times(zip(labels, runs, [config] * len(runs), strict=True))
    if report["step_time"]:
        ratios = ", ".join(f"{r['all']:.2f}" for r in report["step_time"].values())
        say(f"  its step costs on each run's own steps, over their measured time: {ratios}")
    return report


def run_labels(runs: Sequence[Observed]) -> list[str]:
    """What names each run in a check: its name, or its folder where another run given has
    the same name (two sittings of one sweep name their runs alike)."""
    names = [o.name for o in runs]
    return [str(o.path) if names.count(o.name) > 1 else o.name for o in runs]


def step_times(
    runs: Iterable[tuple[str, Observed, ConfigModel]],
) -> dict[str, dict[str, float]]:
    """Per run with token times (by its label), the time its configuration's step costs give
    the steps the run showed, over the time they took
    (:func:`~vprof.forecast.stepfit.step_time_ratio`): near 1 the step is right for that run,
    and a miss lies in the queue, the stalls or the scheduling; far from 1 the step costs
    themselves miss."""
    return {label: r for label, o, config in runs if (r := step_time_ratio(o, config.cost))}


def matching_config(model: ForecastModel, o: Observed) -> ConfigModel:
    """The configuration of ``model`` that ``o`` ran; :class:`ForecastError` naming the run's
    file and key when there is none."""
    found = model.find(o.key)
    if found is not None:
        return found
    where = str(RunDir(o.path).run_json)
    fitted = "; ".join(
        f"{c.key.profile} ({c.key.identity}) on {c.key.hardware}" for c in model.configs
    )
    same_profile = [c for c in model.configs if c.key.identity == o.key.identity]
    if same_profile:
        raise ForecastError(
            f"the run measured {o.key.profile} on other hardware ({o.key.hardware}); the model "
            f"was fitted on {same_profile[0].key.hardware}",
            path=where,
            key="hardware",
            hint="fit a model on runs from this hardware",
        )
    raise ForecastError(
        f"the run measured profile {o.key.profile} ({o.key.identity}); the model was fitted on "
        f"{fitted}",
        path=where,
        key="profile.identity",
        hint="check runs of the configuration the model was fitted on, or fit one for this",
    )


def check_runs(
    model: ForecastModel, runs: Sequence[str | Path]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Predicted against measured for each run (rows), and the error report over them."""
    from vprof.records import expand_runs

    observed = [load_observed(p) for p in expand_runs(runs)]
    configs = [matching_config(model, o) for o in observed]  # every run checked before any work
    rows: list[dict[str, Any]] = []
    labels = run_labels(observed)
    for o, config, label in zip(observed, configs, labels, strict=True):
        s = scenario_of_run(o.meta, str(RunDir(o.path).run_json), o.locust)
        slo = o.summary.get(K.SLO)
        predicted = predict(
            config, s, slo=slo, model_path=model.path, spread=True, pace=True
        ).summary
        # the run as it ran, its stalls where they happened: what is left of a miss is the
        # model's
        own = predict(config, s, slo=slo, own=o).summary if o.stalls else None
        rows.extend(compare_summaries(label, o.summary, predicted, own))
    report = error_report(rows)
    report["step_time"] = step_times(zip(labels, observed, configs, strict=True))
    return rows, report
