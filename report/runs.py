"""One run's pictures: its latency distributions, its timelines and its provenance.

Distributions are over the requests the summary counts (completed, sent at or after the
warm-up boundary); a check against the summary's ``completed`` keeps the two in step.
Timelines cover the whole run, warm-up included (it is shaded), from the first send.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from vprof.analysis import Run
from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.samples import (
    KV_USAGE,
    RUNNING,
    SATURATED_CPU_PERCENT,
    WAITING,
    deployment_samples,
)
from vprof.report.series import (
    binned_percentiles,
    cdf_curve,
    curve_positions,
    envelope,
    nice_interval_s,
    significant,
)

GENERATION_TOKENS = "vllm:generation_tokens_total"
METRICS = ("ttft", "tpot", "itl", "e2el")
_PER_REQUEST = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
_FLOATS = (
    "scheduled_at",
    "sent_at",
    "first_token_at",
    "last_token_at",
    "finished_at",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "schedule_lag_ms",
)


def columns(run: Run) -> dict[str, Any]:
    """The record columns the pictures need, as numpy arrays (the run's own, read once and
    shared with its summary); ``ok`` is True where a record's status is ok."""
    shared = run.columns
    cols = {name: shared.floats[name] for name in _FLOATS}
    cols["ok"] = shared.status.isin("ok")
    return cols


def _completed(cols: dict[str, Any], warmup_until: float | None) -> Any:
    """The summary's population: status ok, sent (else scheduled) at or after the warm-up."""
    import numpy as np

    started = np.where(np.isnan(cols["sent_at"]), cols["scheduled_at"], cols["sent_at"])
    keep = np.ones(started.size, dtype=bool)
    if warmup_until is not None:
        keep &= ~(started < warmup_until)
    return keep & cols["ok"]


def distributions(
    run: Run, summary: dict[str, Any], cols: dict[str, Any], *, seed: int = 0
) -> dict[str, Any]:
    """Per metric: the curve (downsampled) and the summary's percentiles (from every value)."""
    ok = _completed(cols, run.warmup_until)
    if int(ok.sum()) != summary.get(K.COMPLETED):
        raise RuntimeError(
            f"{run.path}: the report counts {int(ok.sum())} completed requests, the summary "
            f"{summary.get(K.COMPLETED)}: the two selection rules have drifted apart"
        )
    out: dict[str, Any] = {}
    for metric in METRICS:
        if metric == "itl":
            # the gaps of those requests (in record order; finite, as reading the records
            # checked), of many only those the curve is drawn from
            n = run.columns.gap_count(ok)
            picked = curve_positions(n, seed=seed)
            if picked is None:
                curve = cdf_curve(run.columns.gaps(ok)[0], seed=seed)
            else:
                curve = cdf_curve(run.columns.gaps_at(ok, picked), drawn_of=n)
        else:
            curve = cdf_curve(cols[_PER_REQUEST[metric]][ok], seed=seed)
        curve["percentiles"] = _percentiles(summary, metric)
        out[metric] = curve
    return out


def _percentiles(summary: dict[str, Any], metric: str) -> dict[str, Any]:
    """The summary's ``median``/``pNN`` values of ``metric``, keyed by percentile (50, 95, …)."""
    out: dict[str, Any] = {}
    suffix = f"_{metric}_ms"
    for key, value in summary.items():
        if not key.endswith(suffix):
            continue
        stat = key[: -len(suffix)]
        if stat == "median":
            out["50"] = value
        elif stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit():
            out[stat[1:]] = value
    return dict(sorted(out.items(), key=lambda kv: float(kv[0])))


def timelines(run: Run, summary: dict[str, Any], cols: dict[str, Any]) -> dict[str, Any]:
    """Tokens/s, the server's queue and KV cache, TTFT, schedule lag and load-generator CPU."""
    import numpy as np

    from vprof.analysis.summary import TIMELINE_SERIES, timeline_series

    started = np.where(np.isnan(cols["sent_at"]), cols["scheduled_at"], cols["sent_at"])
    if not np.isfinite(started).any():
        return {"empty": "no request was sent"}
    t0 = float(np.nanmin(started))  # the timeline's own origin: the first send
    ends = np.where(np.isnan(cols["finished_at"]), cols["last_token_at"], cols["finished_at"])
    last = np.nanmax(np.concatenate([ends, started]))
    interval_s = nice_interval_s(float(last - t0))
    frame = timeline_series(run.columns, interval_s)
    assert frame is not None  # something was sent
    out: dict[str, Any] = {
        "t0": t0,
        "interval_s": interval_s,
        "warmup_s": (run.warmup_until - t0) if run.warmup_until is not None else None,
        "t_s": frame["t_s"].astype(float).tolist(),
    }
    for key in (*TIMELINE_SERIES, K.FAILED):
        out[key] = significant(frame[key].astype(float))
    n_bins = len(frame["t_s"])
    sent = np.isfinite(cols["sent_at"])
    if summary.get(K.OPEN_LOOP):  # closed-loop users send when ready: there is no schedule
        lag = binned_percentiles(
            cols["scheduled_at"][sent] - t0,
            cols["schedule_lag_ms"][sent],
            interval_s,
            n_bins,
            qs=(50, 99),
        )
        out["schedule_lag_ms"] = {k: significant(v) for k, v in lag.items()}
    out["server"] = _server(run, t0)
    out["loadgen"] = _loadgen(run, t0)
    return out


def _server(run: Run, t0: float) -> dict[str, Any]:
    import numpy as np

    samples = deployment_samples(
        [s for s in run.metrics if _finite(s.get("t")) and isinstance(s.get("values"), dict)]
    )
    if not samples:
        return {"empty": "no /metrics samples (metrics.jsonl is missing or empty)"}
    t = np.array([float(s["t"]) for s in samples]) - t0
    values = [s["values"] for s in samples]
    out: dict[str, Any] = {"samples": len(samples)}
    for key, name, scale in (
        ("running", RUNNING, 1.0),
        ("waiting", WAITING, 1.0),
        ("kv_cache_percent", KV_USAGE, 100.0),  # vLLM reports a fraction, 1 = full
    ):
        y = _series(values, name)
        if np.isfinite(y).any():  # the points without a value are left out by envelope
            out[key] = dict(zip(("t_s", "y"), envelope(t, y * scale), strict=True))
    counter = _series(values, GENERATION_TOKENS)
    step, grown = np.diff(t), np.diff(counter)
    rated = np.isfinite(counter[1:]) & np.isfinite(counter[:-1]) & (step > 0)
    if rated.any():
        # a restarted server resets its counters: a negative step is not a rate
        rates = np.where(grown < 0, 0.0, grown)[rated] / step[rated]
        out["generation_tokens_per_s"] = dict(
            zip(("t_s", "y"), envelope(t[1:][rated], rates), strict=True)
        )
    return out


def _series(values: Sequence[Mapping[str, Any]], name: str) -> Any:
    """Each sample's ``name`` as a float, NaN where it has none (or not a finite number)."""
    import numpy as np

    column = [sample.get(name, math.nan) for sample in values]
    if _NUMBERS.issuperset(map(type, column)):  # as read (numbers only): at once, not each
        y = np.array(column, dtype=np.float64)
        y[~np.isfinite(y)] = math.nan
        return y
    return np.array([float(v) if _finite(v) else math.nan for v in column])


_NUMBERS = frozenset((int, float))  # not bool, which _finite leaves out


def _loadgen(run: Run, t0: float) -> dict[str, Any]:
    import numpy as np

    t, cpu = _series(run.loadgen, "t") - t0, _series(run.loadgen, "cpu_percent")
    kept = np.flatnonzero(np.isfinite(t) & (cpu >= 0) & (cpu <= 100_000))  # NaN fails both
    if not kept.size:
        return {"empty": "no load-generator samples (loadgen.jsonl is missing or empty)"}
    by_worker: dict[str, list[int]] = {}
    for i in kept.tolist():
        by_worker.setdefault(str(run.loadgen[i].get("worker", "")), []).append(i)
    workers = {}
    for worker, rows in sorted(by_worker.items()):
        mine = np.array(rows)
        mine = mine[np.lexsort((cpu[mine], t[mine]))]  # in time order (then by CPU)
        workers[worker] = dict(zip(("t_s", "y"), envelope(t[mine], cpu[mine]), strict=True))
    return {"workers": workers, "saturated_cpu_percent": SATURATED_CPU_PERCENT}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _when(value: Any) -> str | None:
    """A wall-clock time (epoch seconds) as ISO 8601 in UTC."""
    if not _finite(value) or not 0 < float(value) < 1e11:
        return None
    return datetime.fromtimestamp(float(value), UTC).isoformat(timespec="seconds")


def _argv(value: Any) -> str | None:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return shlex.join(value)
    return None


def provenance(run: Run) -> dict[str, Any]:
    """What ran, on what, when, with what seeds: from run.json, status.json and locust.json."""
    meta, status, locust = run.meta, run.status, run.locust
    profile = meta.get("profile") if isinstance(meta.get("profile"), dict) else {}
    assert isinstance(profile, dict)
    return {
        "run": run.name,
        "path": str(run.path),
        "state": status.get("state", "unknown"),
        "reason": status.get("reason") or None,
        "command": _argv(meta.get("command")),
        "server_command": _argv(profile.get("argv")),
        "profile": {
            k: profile.get(k)
            for k in ("name", "identity", "description", "engine_args", "env", "host_changes")
            if profile.get(k) not in (None, "", [], {})
        },
        "url": meta.get("url"),
        "server": meta.get("server") or None,
        "vllm_version": meta.get("vllm_version"),
        "hardware": meta.get("hardware") or None,
        "load_host": meta.get("load_host") or None,
        "client": meta.get("client") or None,
        "workload": meta.get("workload"),
        "traffic": meta.get("traffic"),
        "open_loop": meta.get("open_loop", locust.get("open_loop")),
        "seed": meta.get("seed"),
        "salt": meta.get("salt") or None,
        "dates": {
            "created": _when(meta.get("created_at")),
            "load started": _when(locust.get("started_at")),
            "warm-up ended": _when(locust.get("warmup_until")),
            "load stopped": _when(locust.get("stopped_at")),
            "finished": _when(status.get("finished_at")),
        },
        "locust_version": locust.get("locust_version"),
        "workers": locust.get("workers"),
    }
