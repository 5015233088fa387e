"""``vprof forecast fit``: one model per server configuration from measured run folders, with
its error on the runs it was fitted on (and on held-out runs, when given)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import ForecastError
from vprof.forecast.check import check_observed
from vprof.forecast.model import ConfigModel, ForecastModel
from vprof.forecast.observed import Observed, load_observed
from vprof.forecast.stalls import fit_stalls
from vprof.forecast.stepfit import calibrate, linear_estimate
from vprof.records.rundir import RunDir

Say = Callable[[str], None]


def fit_model(
    runs: Sequence[str | Path],
    *,
    holdout: Sequence[str | Path] = (),
    say: Say = lambda _: None,
    max_evaluations: int | None = None,
) -> ForecastModel:
    """Fit every configuration the runs cover; ``holdout`` runs are predicted, not fitted on,
    and their error is kept with the model."""
    from vprof.records import expand_runs

    observed = [load_observed(p) for p in expand_runs(runs)]
    held = [load_observed(p) for p in expand_runs(holdout)] if holdout else []
    groups: dict[tuple[str, str], list[Observed]] = {}
    for o in observed:
        groups.setdefault((o.key.identity, o.key.hardware_id), []).append(o)
    configs = []
    for members in groups.values():
        say(f"{members[0].key.profile} on {members[0].key.hardware}: {len(members)} runs")
        config = fit_config(members, say=say, max_evaluations=max_evaluations)
        errors: dict[str, Any] = {"fitted": check_observed(config, members, say=say)}
        mine = [
            o
            for o in held
            if (o.key.identity, o.key.hardware_id) == (config.key.identity, config.key.hardware_id)
        ]
        if mine:
            errors["held_out"] = check_observed(config, mine, say=say)
        configs.append(_with_errors(config, errors))
    unmatched = [o for o in held if (o.key.identity, o.key.hardware_id) not in groups]
    if unmatched:
        o = unmatched[0]
        raise ForecastError(
            f"held-out run {o.name} is of another configuration ({o.key.profile} on "
            f"{o.key.hardware}) than any fitted run",
            path=str(RunDir(o.path).run_json),
            key="profile.identity",
        )
    return ForecastModel(tuple(configs))


def _with_errors(config: ConfigModel, errors: dict[str, Any]) -> ConfigModel:
    import dataclasses

    return dataclasses.replace(config, errors=errors)


def fit_config(
    runs: Sequence[Observed], *, say: Say = lambda _: None, max_evaluations: int | None = None
) -> ConfigModel:
    """The model of one configuration from its runs (all of one profile identity and
    hardware)."""
    import numpy as np

    first = runs[0]
    kv = sorted({o.rules.kv_cache_tokens for o in runs})
    if len(kv) > 1:
        say(f"  note: the runs' servers had {kv[0]:,}–{kv[-1]:,} KV-cache tokens; using the least")
    rules = min((o.rules for o in runs), key=lambda r: r.kv_cache_tokens)
    linear, active = linear_estimate(runs, say=lambda line: say("  " + line))
    say(f"  linear estimate: {_cost_text(linear)}")
    stalls = fit_stalls([o.stalls for o in runs if o.stalls is not None])
    say(f"  stalls: {stalls.text() if stalls else 'none seen'}")
    kwargs = {} if max_evaluations is None else {"max_evaluations": max_evaluations}
    fitted = calibrate(
        runs, linear, active, say=lambda line: say("  " + line), stalls=stalls, **kwargs
    )
    say(f"  fitted: {_cost_text(fitted.cost)}")
    extra = [o.chat_extra_tokens for o in runs if o.chat_extra_tokens is not None]
    idle = [o.idle_ms for o in runs if o.idle_ms is not None and not o.open_loop]
    profile = first.meta.get("profile") or {}
    return ConfigModel(
        key=first.key,
        rules=rules,
        cost=fitted.cost,
        engine_args=dict(profile.get("engine_args") or {}) if isinstance(profile, dict) else {},
        chat_template_tokens=int(round(float(np.median(extra)))) if extra else 0,
        closed_loop_gap_ms=float(np.median(idle)) if idle else 1.0,
        fitted_on=tuple(_run_row(o) for o in runs),
        span=_span(runs),
        stalls=stalls,
    )


def _cost_text(cost: Any) -> str:
    return (
        f"step {cost.base_ms:.3g} ms + {cost.prefill_token_ms * 1e3:.3g} µs/prefill token + "
        f"{cost.decode_seq_ms:.3g} ms/decode"
        + (f" × decodes^{cost.decode_exponent:g}" if cost.decode_exponent != 1.0 else "")
        + f" + {cost.decode_context_ms_per_1k:.3g} ms/1k context"
        f" + {cost.prefill_attention_ms_per_1m:.3g} ms/1M attention pairs"
        f" + {cost.prefill_chunk_ms:.3g} ms/prefill chunk"
        f" + {cost.prefill_prompt_ms:.3g} ms/prompt prefilled; front end "
        f"{cost.frontend_ms:.3g} ms + {cost.frontend_ms_per_1k_prompt:.3g} ms/1k prompt + "
        f"{cost.frontend_ms_per_in_flight:.3g} ms/request in flight; "
        f"an arrival {cost.arrival_ms:.3g} ms + {cost.arrival_ms_per_1k_prompt:.3g} ms/1k prompt; "
        f"jitter {cost.jitter:.2f}"
    )


def _run_row(o: Observed) -> dict[str, Any]:
    import numpy as np

    s = o.summary
    return {
        K.RUN: o.name,
        K.PATH: str(o.path),
        K.WORKLOAD: o.workload_name,
        K.TRAFFIC: s.get(K.TRAFFIC),
        K.OFFERED_LOAD: s.get(K.OFFERED_LOAD),
        K.OFFERED_LOAD_UNIT: s.get(K.OFFERED_LOAD_UNIT),
        K.REQUESTS: int(o.requests.n),
        "mean_prompt_tokens": float(np.mean(o.requests.prompt_tokens)),
        "mean_output_tokens": float(np.mean(o.requests.output_tokens)),
    }


def _rate(summary: Any) -> float | None:
    for key in (K.SERVED_RATE, K.REQUEST_THROUGHPUT):
        value = summary.get(key)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    return None


def _span(runs: Sequence[Observed]) -> dict[str, tuple[float, float]]:
    import numpy as np

    prompts = [float(np.mean(o.requests.prompt_tokens)) for o in runs]
    outputs = [float(np.mean(o.requests.output_tokens)) for o in runs]
    rates = [r for o in runs if (r := _rate(o.summary)) is not None]
    out = {
        "prompt_tokens": (min(prompts), max(prompts)),
        "output_tokens": (min(outputs), max(outputs)),
    }
    if rates:
        out["rate_rps"] = (min(rates), max(rates))
    return out
