"""Predictions: a scenario replayed on a fitted configuration, summarised by the code that
summarises measured runs, and marked as predicted (with the model's error and any warning that
the scenario lies outside what the model was fitted on)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vprof.analysis.keys import SummaryKey as K
from vprof.forecast.accuracy import CHECK_METRICS, OPEN_LOOP_METRICS, finite_value
from vprof.forecast.model import ConfigModel
from vprof.forecast.observed import Observed
from vprof.forecast.replayrecords import RecordContext, replay_metrics, replay_table
from vprof.forecast.rules import SchedulerRules
from vprof.forecast.scenario import Scenario, Stream, as_plain, build_stream
from vprof.forecast.simulate import OpenLoop, Replayed, Requests, simulate
from vprof.forecast.stalls import RunStalls, StallProcess

SEED = 0
DRAWS = 5  # replays of a model with stalls, of which the median one is kept
EPOCH_S = 1.7e9  # predicted runs are dated here (only differences of times are read)
# A scenario this far beyond what a model was fitted on (×) is named in the prediction.
FAR = 1.5
# The band of step time a prediction is also replayed at (±, a share): what a model's step
# costs miss by. On the AMX recording (benchmarks/forecast_accuracy.py) the fitted runs' steps
# summed to 0.97–1.05 of the measured steps' time, the held-out runs' to 0.80–1.06.
PACE = 0.05
# A level whose median TTFT or TPOT moves by more than KNEE × PACE when the steps do is near
# the knee: there queueing multiplies any error in the step time (fixed-800-64 at 15 req/s on
# that recording: ±5 % moved the predicted median TTFT from 293 ms to 179 and 640 ms;
# measured 129).
KNEE = 4.0


@dataclass(frozen=True)
class Prediction:
    """One predicted run: its summary, and what a run folder of it would hold."""

    summary: dict[str, Any]
    table: Any  # the records (pyarrow.Table)
    metrics: list[dict[str, Any]]
    meta: dict[str, Any]
    replayed: Replayed
    # with ``pace``: the summaries with every step PACE faster, then slower
    paced: tuple[dict[str, Any], ...] = ()


def replay(
    config: ConfigModel, s: Scenario, *, rules: SchedulerRules | None = None
) -> tuple[Replayed, Stream]:
    """Replay scenario ``s`` on ``config`` (with other scheduler ``rules``, for a candidate's
    settings). A closed loop plans requests until the users stop asking for more."""
    replayed, stream, _ = _replay_draws(config, s, rules or config.rules)
    return replayed, stream


def _replay_draws(
    config: ConfigModel,
    s: Scenario,
    rules: SchedulerRules,
    seed: int | None = None,
    own: Observed | None = None,
) -> tuple[Replayed, Stream, list[Replayed]]:
    """:func:`replay`, with every draw of the stalls beside the one it keeps (only the draw of
    ``seed``, when given); with ``own``, that measured run as it ran instead of the scenario:
    its requests as it sent them, its stalls where they happened (the draws differ by the
    steps' jitter alone)."""
    if own is not None:
        stream = _own_stream(own, s)
        draws = _draws(config, stream, rules, seed, own.stalls)
        return _median_draw(draws), stream, draws
    n = None
    while True:
        stream = build_stream(
            s,
            n=n,
            chat_template_tokens=config.chat_template_tokens,
            gap_ms=config.closed_loop_gap_ms,
        )
        draws = _draws(config, stream, rules, seed)
        replayed = _median_draw(draws)
        if stream.open_loop or not _asked_for_more(replayed, stream):
            return replayed, stream, draws
        n = stream.requests.n * 4


def _own_stream(o: Observed, s: Scenario) -> Stream:
    """A measured run's requests as it meant to send them (its time 0 the stream's): an open
    loop at its own schedule, held back by the shape's in-flight cap as it was; else at the
    times it sent them."""
    client: Any = o.client
    requests, scheduled = o.requests, None
    if o.open_loop and o.scheduled_s is not None:
        order = np.argsort(o.scheduled_s, kind="stable")  # an open loop sends in this order
        requests = Requests(
            prompt_tokens=o.requests.prompt_tokens[order],
            output_tokens=o.requests.output_tokens[order],
            known_hit=np.asarray(o.requests.known_hit)[order],
        )
        scheduled = np.asarray(o.scheduled_s, dtype=np.float64)[order]
        client = OpenLoop(scheduled, int(s.shape.max_in_flight), float(s.shape.total_s))
    return Stream(
        requests=requests,
        client=client,
        warmup_s=o.warmup_s,
        open_loop=o.open_loop,
        endpoint=str((o.meta.get("workload") or {}).get("endpoint") or "completions"),
        prefix_group=np.full(requests.n, -1, dtype=np.int64),
        expected_prompt_tokens=requests.prompt_tokens,
        scheduled_s=scheduled,
    )


def _draws(
    config: ConfigModel,
    stream: Stream,
    rules: SchedulerRules,
    seed: int | None = None,
    recorded: RunStalls | None = None,
) -> list[Replayed]:
    """The replays of ``stream``: one, or with stalls (a random process, or ``recorded``: a
    run's own in the stream's time) ``DRAWS`` of them (or the one of ``seed``)."""
    stalls: StallProcess | RunStalls | None = recorded if recorded is not None else config.stalls
    if stalls is None:
        return [simulate(stream.requests, stream.client, rules, config.cost, seed=SEED)]
    seeds = range(SEED, SEED + DRAWS) if seed is None else (seed,)
    return [
        simulate(stream.requests, stream.client, rules, config.cost, seed=seed, stalls=stalls)
        for seed in seeds
    ]


def _median_draw(draws: Sequence[Replayed]) -> Replayed:
    """The median of the draws by p95 TTFT, so one lucky or unlucky draw of a few episodes
    does not decide the tail."""
    tails = []
    for d in draws:
        ok = np.isfinite(d.first_s) & np.isfinite(d.sent_s)
        ttft = (d.first_s - d.sent_s)[ok]
        tails.append(float(np.percentile(ttft, 95)) if ttft.size else np.inf)
    return draws[int(np.argsort(tails)[len(tails) // 2])]


def _asked_for_more(replayed: Replayed, stream: Stream) -> bool:
    import numpy as np

    return bool(np.isfinite(replayed.sent_s).all())


def predict(
    config: ConfigModel,
    s: Scenario,
    *,
    slo: Any = None,
    model_path: str = "",
    rules: SchedulerRules | None = None,
    label: str | None = None,
    spread: bool = False,
    pace: bool = False,
    own: Observed | None = None,
) -> Prediction:
    """The predicted summary of scenario ``s`` on ``config`` (keys as ``vprof summarize``).

    With ``own`` (a measured run of scenario ``s``), that run is replayed as it ran: its
    requests as it sent them, and the engine paused where its stalls were instead of as the
    model's process draws. What it then misses by is the model's steps and scheduling alone,
    not the stalls' chance.

    With ``spread``, and a model that replays the server's stalls (a random process), every
    draw is summarised too, and the prediction's ``forecast`` says the range of the draws'
    values of each checked metric (``spread``: metric → [lowest, highest]): how far the
    stalls alone move a run's figures, which a measured run is one draw of.

    With ``pace``, the scenario is also replayed with every step ``PACE`` faster and slower,
    and ``forecast`` says the range of each checked metric over the three (``pace``:
    ``step_time_pct`` and ``range``); a level that the band moves by more than ``KNEE`` ×
    ``PACE`` gets a note that it is near the knee.
    """
    from vprof.analysis.run import Run, summarize_loaded

    replayed, stream, draws = _replay_draws(config, s, rules or config.rules, own=own)
    meta = predicted_meta(config, s, model_path=model_path, rules=rules, label=label)
    meta["forecast"]["notes"] = outside_span(config, stream, replayed, rules)

    def run_of(
        draw: Replayed, stream: Stream = stream
    ) -> tuple[Run, Any, list[dict[str, Any]], dict[str, Any]]:
        ctx = RecordContext(
            epoch_s=EPOCH_S,
            open_loop=stream.open_loop,
            scheduled_s=stream.scheduled_s,
            endpoint=stream.endpoint,
            prefix_group=stream.prefix_group,
            expected_prompt_tokens=stream.expected_prompt_tokens,
        )
        table = replay_table(draw, stream.requests, ctx)
        metrics = replay_metrics(draw, stream.requests, EPOCH_S)
        locust = {
            "started_at": EPOCH_S,
            "warmup_until": EPOCH_S + stream.warmup_s,
            "stopped_at": EPOCH_S + float(s.shape.total_s),
            "open_loop": stream.open_loop,
            "records": table.num_rows,
        }
        run = Run(
            path=Path(meta["name"]),
            meta=meta,
            locust=locust,
            status={"state": "completed", "reason": ""},
            records=table,
            metrics=tuple(metrics),
        )
        return run, table, metrics, locust

    ranged = spread and len(draws) > 1  # each draw summarised once; the kept one among them
    built = [run_of(d) for d in draws] if ranged else [run_of(replayed)]
    summaries = [summarize_loaded(b[0], slo=slo) for b in built]
    index = next(i for i, d in enumerate(draws) if d is replayed)  # the kept draw's
    kept = index if ranged else 0
    run, table, metrics, locust = built[kept]
    summary = summaries[kept]
    if ranged:
        meta["forecast"]["spread"] = _spread(summaries)
    paced: list[dict[str, Any]] = []
    if pace:
        for factor in (1.0 - PACE, 1.0 + PACE):
            # the kept draw's stalls again, so that only the pace differs
            faster_or_slower = dataclasses.replace(config, cost=config.cost.paced(factor))
            draw, its_stream, _ = _replay_draws(
                faster_or_slower, s, rules or config.rules, SEED + index, own
            )
            paced.append(summarize_loaded(run_of(draw, its_stream)[0], slo=slo))
        meta["forecast"]["pace"] = {
            "step_time_pct": PACE * 100.0,
            "range": _spread([paced[0], summary, paced[1]]),
        }
        if note := _knee_note(summary, *paced):
            meta["forecast"]["notes"].append(note)
    if ranged or pace:
        summary[K.FORECAST] = meta["forecast"]  # the ranges are known only after the summaries
    summary[K.PATH] = None
    return Prediction(summary, table, metrics, {**meta, "locust": locust}, replayed, tuple(paced))


def _spread(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per checked metric, the lowest and highest of the draws' values (finite ones)."""
    out = {}
    for key in (*CHECK_METRICS, *OPEN_LOOP_METRICS):
        values = [v for s in summaries if (v := finite_value(s, key)) is not None]
        if values:
            out[str(key)] = [min(values), max(values)]
    return out


def _knee_note(
    kept: Mapping[str, Any], faster: Mapping[str, Any], slower: Mapping[str, Any]
) -> str:
    """The note of a level near the knee: where a median latency moves by more than ``KNEE``
    × ``PACE`` with the steps' pace (empty where none does; the tail is the stalls' more than
    the pace's)."""
    for key, words in ((K.MEDIAN_TTFT_MS, "median TTFT"), (K.MEDIAN_TPOT_MS, "median TPOT")):
        middle, low, high = (finite_value(m, key) for m in (kept, faster, slower))
        if middle is None or low is None or high is None or middle <= 0:
            continue
        if max(abs(low / middle - 1.0), abs(high / middle - 1.0)) > KNEE * PACE:
            pct = f"{PACE * 100:g} %"
            return (
                f"near the knee: steps {pct} faster or slower would make the {words} "
                f"{low:.3g} or {high:.3g} ms (predicted {middle:.3g} ms); here the answer "
                "is only as good as the step time: measure this level"
            )
    return ""


def predicted_meta(
    config: ConfigModel,
    s: Scenario,
    *,
    model_path: str = "",
    rules: SchedulerRules | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """``run.json`` of a predicted run: what was predicted, with which model."""
    shape = s.shape
    load = f"{shape.rate_rps:g}rps" if shape.open_loop else f"{shape.users}u"
    profile = label or config.key.profile
    name = f"{profile}--{s.workload.name}--{shape.name}--{load}--predicted"
    held_out = (config.errors.get("held_out") or {}).get("median_abs_pct")
    fitted = (config.errors.get("fitted") or {}).get("median_abs_pct")
    return {
        "name": name,
        "profile": {
            "name": profile,
            "identity": config.key.identity if rules is None else f"{profile} (candidate)",
            "engine_args": dict(config.engine_args),
        },
        "server": {"kv_cache_tokens": (rules or config.rules).kv_cache_tokens},
        "workload": as_plain(s.workload),
        "traffic": as_plain(shape),
        "seed": s.seed,
        "open_loop": bool(shape.open_loop),
        "vllm_version": config.key.vllm_version,
        "created_at": time.time(),
        "forecast": {
            "model": model_path,
            "configuration": config.key.profile,
            "hardware": config.key.hardware,
            "error": config.error_text(),
            "held_out_error_pct": held_out,
            "fitted_error_pct": fitted,
            "rules": (rules or config.rules).to_json(),
        },
    }


def outside_span(
    config: ConfigModel, stream: Stream, replayed: Replayed, rules: SchedulerRules | None
) -> list[str]:
    """Sentences for each way this prediction reaches past the runs the model was fitted on."""
    import numpy as np

    notes = []
    span = config.span
    checks = (
        ("prompt_tokens", float(np.mean(stream.requests.prompt_tokens)), "prompts of"),
        ("output_tokens", float(np.mean(stream.requests.output_tokens)), "answers of"),
    )
    for key, value, words in checks:
        lo, hi = _span(span, key)
        if lo is None or hi is None:
            continue
        if value > hi * FAR or value < lo / FAR:
            notes.append(
                f"{words} about {_round2(value):,.0f} tokens on average, where the model was "
                f"fitted on {lo:,.0f}–{hi:,.0f}: far outside the measured range"
            )
    sent = replayed.sent_s[np.isfinite(replayed.sent_s)]
    if sent.size > 1:
        rate = (sent.size - 1) / max(float(sent.max() - sent.min()), 1e-9)
        lo, hi = _span(span, "rate_rps")
        if hi is not None and rate > hi * FAR:
            notes.append(
                f"rates above {FAR:g} × the fastest level the model was fitted on ({hi:.3g} "
                "req/s): far outside the measured range"
            )
    if rules is not None and rules != config.rules:
        changed = [
            f.name
            for f in dataclasses.fields(rules)
            if f.name != "sources" and getattr(rules, f.name) != getattr(config.rules, f.name)
        ]
        if changed:
            notes.append(
                "scheduler settings never measured on this configuration ("
                + ", ".join(changed)
                + "): the step costs are carried over"
            )
    return notes


def _round2(x: float) -> float:
    """Two significant digits (a note reads the same for every level of a ladder)."""
    if x <= 0:
        return x
    digits = 1 - int(np.floor(np.log10(x)))
    return round(x, digits)


def _span(span: Mapping[str, Sequence[float]], key: str) -> tuple[float | None, float | None]:
    values = span.get(key)
    if not values or len(values) != 2:
        return None, None
    return float(values[0]), float(values[1])


def predict_rates(
    config: ConfigModel,
    s: Scenario,
    rates: Sequence[float],
    *,
    slo: Any = None,
    model_path: str = "",
    rules: SchedulerRules | None = None,
    label: str | None = None,
    spread: bool = False,
    pace: bool = False,
) -> list[Prediction]:
    """One prediction per open-loop rate (or the scenario as it is, when ``rates`` is empty)."""
    scenarios = [s.at_rate(r) for r in rates] if rates else [s]
    return [
        predict(
            config,
            one,
            slo=slo,
            model_path=model_path,
            rules=rules,
            label=label,
            spread=spread,
            pace=pace,
        )
        for one in scenarios
    ]


def write_prediction(prediction: Prediction, folder: Path) -> Path:
    """A predicted run as a run folder (``vprof summarize``, ``compare``, ``plan`` and
    ``report`` read it as they read a measured one)."""
    from vprof.analysis.run import json_safe
    from vprof.records.rundir import RunDir, RunState, append_jsonl, write_json_atomic
    from vprof.records.store import write_records_table

    meta = dict(prediction.meta)
    locust = meta.pop("locust")
    run = RunDir(Path(folder) / meta["name"])
    if run.path.exists():
        run.retire()
    run.create(json_safe(meta))
    write_records_table(run.records, prediction.table)
    append_jsonl(run.metrics_jsonl, prediction.metrics)
    run.write_locust_info(locust)
    run.set_status(RunState.COMPLETED)
    # last, as every writer of a run folder does: the summary comes after the final state
    write_json_atomic(run.summary_json, json_safe({**prediction.summary, K.PATH: str(run.path)}))
    return run.path
