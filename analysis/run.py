"""Reading run folders (the edge around the pure summary code) and writing their summaries.

The folder's layout and file names belong to :mod:`vprof.records.rundir`; any of its files may
be missing in a run that died early. A *bench* folder holds several run folders.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from vprof.analysis.alternation import is_alternating, side_views
from vprof.analysis.keys import SummaryKey as K
from vprof.analysis.slo import Slo
from vprof.analysis.stats import DEFAULT_PERCENTILES
from vprof.common.errors import ProfileError, RunError
from vprof.common.memory import keep_freed_memory
from vprof.records.rundir import (
    RunDir,
    is_run_dir,
    read_json,
    replace_atomically,
    write_json_atomic,
)


@dataclass(frozen=True)
class Run:
    """A run folder as read from disk; ``records`` is the Arrow table of request records."""

    path: Path
    meta: dict[str, Any] = field(default_factory=dict)  # run.json
    locust: dict[str, Any] = field(default_factory=dict)  # locust.json
    status: dict[str, Any] = field(default_factory=dict)  # status.json
    records: Any = None  # pyarrow.Table
    metrics: tuple[dict[str, Any], ...] = ()
    loadgen: tuple[dict[str, Any], ...] = ()
    host: tuple[dict[str, Any], ...] = ()  # host.jsonl: the host's pace during the run
    calibration: dict[str, Any] = field(default_factory=dict)  # the client's error certificate
    records_note: str = ""  # how much of a damaged records file was readable ("": all of it)
    # the records' gaps per batch as the reader's check read them (see Columns.itl_blocks):
    # the columns use them instead of reading them again; () when not read with the records
    gap_blocks: tuple[tuple[Any, Any], ...] = ()
    # one side of an alternating run: the length of its measured slices (throughputs divide by
    # it instead of first send → last answer, which spans the other sides' slices too)
    measured_s: float | None = None
    # and its requests' time in flight inside those slices (every request of its slices,
    # clipped to the measured part): the closed loop's mean in flight is this over measured_s
    in_flight_s: float | None = None

    @property
    def name(self) -> str:
        """The run's name from ``run.json``, else its folder name."""
        return str(self.meta.get("name") or self.path.name)

    @property
    def profile(self) -> str:
        """The profile's name, else the run's name."""
        profile = self.meta.get("profile")
        if isinstance(profile, dict) and profile.get("name"):
            return str(profile["name"])
        return self.name

    @property
    def warmup_until(self) -> float | None:
        value = self.locust.get("warmup_until")
        return float(value) if value is not None else None

    def frame(self) -> Any:
        """The records as a pandas DataFrame (``itl_ms`` a list column)."""
        return self.records.to_pandas()

    @cached_property
    def columns(self) -> Any:  # vprof.analysis.columns.Columns
        """The records as numpy columns, read once and shared by the summary, comparisons and
        pictures of this run (each column read when first used)."""
        from vprof.analysis.columns import from_records

        return from_records(self.records, self.gap_blocks)


def display_names(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Short, unique labels for runs: the profile, then profile × traffic (× workload), else
    the run folder's name (with its parent, or a number, when those collide too)."""

    def label(s: dict[str, Any], *keys: str) -> str:
        return " × ".join(str(s.get(k)) for k in keys if s.get(k) not in (None, ""))

    for keys in ((K.PROFILE,), (K.PROFILE, K.TRAFFIC), (K.PROFILE, K.TRAFFIC, K.WORKLOAD)):
        names = [label(s, *keys) for s in summaries]
        if all(names) and len(set(names)) == len(names):
            return names
    names = [str(s.get(K.RUN)) for s in summaries]
    if len(set(names)) == len(names):
        return names
    longer = [
        f"{Path(str(s.get(K.PATH, ''))).parent.name}/{n}"
        for s, n in zip(summaries, names, strict=True)
    ]
    if len(set(longer)) == len(longer):
        return longer
    return [f"{n}#{i + 1}" for i, n in enumerate(names)]


def damage(summaries: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> list[str]:
    """What was damaged in the runs read, one line per run (``NAME: 46 of 70 records
    readable …``): every command that reads runs prints these on stderr and keeps them in its
    JSON, so a number from part of a run is never shown as if from all of it."""
    labels = names if names is not None else [str(s.get(K.RUN)) for s in summaries]
    return [
        f"{label}: {s[K.RECORDS_NOTE]}"
        for label, s in zip(labels, summaries, strict=True)
        if s.get(K.RECORDS_NOTE)
    ]


def replica_rows(names: Sequence[str], summaries: Sequence[dict[str, Any]]) -> list[dict]:
    """Runs that spread their load over several servers: one row per run and replica (its
    requests, completed, throughput and TTFT percentiles), for tables."""
    from vprof.analysis.keys import REPLICA_TABLE_KEYS

    rows = []
    for name, summary in zip(names, summaries, strict=True):
        for replica, stats in (summary.get(K.PER_REPLICA) or {}).items():
            rows.append(
                {"run": name, "replica": replica, **{k: stats.get(k) for k in REPLICA_TABLE_KEYS}}
            )
    return rows


def load_run(path: str | Path) -> Run:
    """Read a run folder. Raises :class:`RunError` when it is not one, or when one of its files
    is not what vprof writes (naming the file, line and key)."""
    from vprof.records.schema import arrow_schema
    from vprof.records.store import read_records_file

    keep_freed_memory()  # what reads a run goes on to make many large arrays
    path = Path(path)
    if not path.is_dir() or not is_run_dir(path):
        raise RunError(
            "not a run folder (no run.json or records.arrow)",
            path=str(path),
            hint="point at a folder written by `vprof bench`",
        )
    folder = RunDir(path)
    folder.abandon_if_orphaned()  # "running" for a vprof that is gone: say it was abandoned
    locust = folder.locust_info()
    if folder.records.exists():
        read = read_records_file(folder.records)
        records, note = read.table, read.describe(locust.get("records"))
        gap_blocks = read.gap_blocks
    else:
        records, note, gap_blocks = arrow_schema().empty_table(), "", ()
    return Run(
        path=path,
        meta=folder.meta(strict=True),
        locust=locust,
        status=folder.status(strict=True),
        records=records,
        metrics=folder.metric_samples(),
        loadgen=folder.loadgen_samples(),
        host=folder.host_samples(),
        calibration=folder.calibration(),
        records_note=note,
        gap_blocks=gap_blocks,
    )


def summarize_loaded(
    run: Run, *, slo: Slo | str | None = None, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, Any]:
    """The summary of an already loaded :class:`Run`, headed by what the run was."""
    from vprof.analysis.summary import summarize

    profile: dict[str, Any] = run.meta.get("profile") or {}
    if not isinstance(profile, dict):
        profile = {}
    head: dict[str, Any] = {
        K.RUN: run.name,
        K.PATH: str(run.path),
        K.PROFILE: run.profile,
        K.PROFILE_IDENTITY: profile.get("identity"),
        K.WORKLOAD: _label(run.meta.get("workload")),
        K.TRAFFIC: _label(run.meta.get("traffic")),
        K.STATE: run.status.get("state", "unknown"),
        K.REASON: run.status.get("reason"),
        K.VLLM_VERSION: run.meta.get("vllm_version"),
        K.WARMUP_UNTIL: run.warmup_until,
        **_offered(run.meta.get("traffic")),
    }
    head[K.GPUS_PER_REPLICA] = _gpus(profile)
    if run.meta.get("metrics_from") and len(run.meta.get("urls") or ()) > 1:
        # the sampler scrapes one server: its numbers are that replica's, not the deployment's
        head[K.METRICS_FROM] = f"{run.meta['metrics_from']} only (of {len(run.meta['urls'])})"
    trace = run.meta.get("trace")
    if isinstance(trace, dict) and trace.get("implied_token_hit_rate") is not None:
        # what the trace's shared blocks imply, beside the server's prefix_cache_hit_rate
        head[K.TRACE_IMPLIED_HIT_RATE] = trace["implied_token_hit_rate"]
    head |= _tokenizer(run.meta)
    if run.records_note:
        head[K.RECORDS_NOTE] = run.records_note
    if lost := run.locust.get("workers_lost"):
        head[K.WORKERS_LOST] = lost
    if run.calibration:  # bench --calibrate: how exact the client was at this load, here
        from vprof.analysis.clienterror import certificate_line

        head[K.CLIENT_ERROR_MS] = run.calibration.get("client_error_ms")
        head[K.CLIENT_ERROR] = certificate_line(run.calibration)
    if earlier := RunDir(run.path).earlier_attempts():
        head[K.EARLIER_ATTEMPTS] = [str(p) for p in earlier]
    forecast = run.meta.get("forecast")
    if isinstance(forecast, dict):  # a predicted run (vprof forecast predict -o)
        head[K.PREDICTED] = True
        head[K.FORECAST] = forecast
    body = summarize(
        run.columns,
        warmup_until=run.warmup_until,
        slo=slo,
        percentiles=percentiles,
        metrics=run.metrics,
        loadgen=run.loadgen,
        host=run.host,
        in_flight_cap=_in_flight_cap(run.meta.get("traffic") or run.locust.get("traffic")),
        users=_closed_loop_users(run.meta.get("traffic") or run.locust.get("traffic")),
        measured_s=run.measured_s,
        in_flight_s=run.in_flight_s,
    )
    open_loop = run.meta.get("open_loop", run.locust.get("open_loop"))
    if open_loop is not None:
        body[K.OPEN_LOOP] = bool(open_loop) or body[K.OPEN_LOOP]
    if warning := prompt_token_warning(head, body):
        body[K.PROMPT_TOKEN_WARNING] = warning
    return head | body


# Above this share of requests whose prompt the server counted differently from the plan (the
# chat template set apart), the summary says so and names the likely cause.
PROMPT_MISMATCH_TOLERANCE = 0.02


def _tokenizer(meta: dict[str, Any]) -> dict[str, Any]:
    """What ``run.json`` says prompts were built with (runs from before it said nothing)."""
    given = meta.get("tokenizer")
    if not isinstance(given, dict):
        return {}
    label = given.get("label") or given.get("path")
    return {K.TOKENIZER: label, K.TOKENIZER_IS_STAND_IN: bool(meta.get("tokenizer_is_stand_in"))}


def prompt_token_warning(head: dict[str, Any], body: dict[str, Any]) -> str:
    """A sentence when the server counted other prompt lengths than planned, with the likely
    cause ("" when they agree within :data:`PROMPT_MISMATCH_TOLERANCE`)."""
    rate = body.get(K.PROMPT_TOKEN_MISMATCH_RATE)
    if not isinstance(rate, float) or rate <= PROMPT_MISMATCH_TOLERANCE:
        return ""
    excess = body.get(K.MEAN_PROMPT_TOKEN_EXCESS) or 0.0
    what = (
        f"the server counted other prompt lengths than planned for {rate:.0%} of requests "
        f"({excess:+.1f} tokens on average)"
    )
    if head.get(K.TOKENIZER_IS_STAND_IN):
        return (
            f"{what}: prompts were built with {head.get(K.TOKENIZER)}; pass --tokenizer or "
            "--fetch-tokenizer for the served model's own"
        )
    built = f" with {head[K.TOKENIZER]}" if head.get(K.TOKENIZER) else ""
    return (
        f"{what}, although prompts were built{built}: the server may serve another model or "
        "revision than that tokenizer's, or add special tokens (BOS) differently"
    )


def _gpus(profile: dict[str, Any]) -> int | None:
    """GPUs one server of the run's profile used; None when not known."""
    try:
        found = gpus_per_server_of(profile)
    except ProfileError:
        return None
    return found[0] if found else None


def gpus_per_server_of(profile: Mapping[str, Any]) -> tuple[int, str] | None:
    """GPUs one server of a run's profile (``run.json``'s ``profile``) used (tensor × pipeline ×
    data parallel), and how that is known; None when it recorded no engine arguments (a server
    vprof did not launch). A launched server's count is in the run; a run from before vprof
    recorded it is counted from its engine arguments by the profile registry (its imports and
    flag table cost ~60 ms, and a vLLM other than the table's, a child process once), whose bad
    parallel size raises :class:`ProfileError` naming the flag."""
    gpus, how = profile.get("gpus_per_server"), profile.get("parallelism")
    if isinstance(gpus, int) and not isinstance(gpus, bool) and isinstance(how, str):
        return gpus, how
    args = profile.get("engine_args")
    if not isinstance(args, Mapping):
        return None
    from vprof.registry.profile import gpus_per_server

    return gpus_per_server(args)


def _in_flight_cap(traffic: Any) -> int | None:
    """An open-loop shape's cap on requests in flight (its ``max_in_flight``)."""
    if isinstance(traffic, dict) and traffic.get("kind") == "open-loop":
        cap = traffic.get("max_in_flight")
        return int(cap) if isinstance(cap, (int, float)) and cap > 0 else None
    return None


def _closed_loop_users(traffic: Any) -> int | None:
    """A steady closed-loop shape's users (the load the mean in flight is held against)."""
    if isinstance(traffic, dict) and traffic.get("kind") == "steady":
        users = traffic.get("users")
        return int(users) if isinstance(users, (int, float)) and users > 0 else None
    return None


def _offered(traffic: Any) -> dict[str, Any]:
    """The load the traffic shape asked for: a rate (open loop) or a user count (steady)."""
    if not isinstance(traffic, dict):
        return {}
    if traffic.get("kind") == "open-loop" and traffic.get("rate_rps"):
        return {K.OFFERED_LOAD: float(traffic["rate_rps"]), K.OFFERED_LOAD_UNIT: "req/s"}
    if traffic.get("kind") == "steady" and traffic.get("users"):
        return {K.OFFERED_LOAD: float(traffic["users"]), K.OFFERED_LOAD_UNIT: "users"}
    return {}


def _label(spec: Any) -> Any:
    if isinstance(spec, dict):
        return spec.get("name") or json.dumps(spec, sort_keys=True, default=str)
    return spec


def summaries_of(
    path: str | Path,
    *,
    slo: Slo | str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> list[dict[str, Any]]:
    """A run folder's summaries: one, or one per side of an alternating run."""
    run = load_run(path)
    return [summarize_loaded(view, slo=slo, percentiles=percentiles) for view in side_views(run)]


def summarize_run(
    path: str | Path,
    *,
    slo: Slo | str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> dict[str, Any]:
    """Read a run folder and summarise it; writes nothing.

    Example:
        >>> summarize_run("runs/chunked-256-steady", slo="ttft_p95=500ms")  # doctest: +SKIP
    """
    return summarize_loaded(load_run(path), slo=slo, percentiles=percentiles)


def write_summary(
    path: str | Path,
    *,
    slo: Slo | str | None = None,
    interval_s: float = 5.0,
    force: bool = False,
) -> dict[str, Any]:
    """Summarise a run folder and write ``summary.json`` and ``timeline.csv`` into it (an
    alternating run's summary holds one summary per side under ``sides``).

    A summary already there that counted more requests than this read (a records file damaged
    since) is kept: :class:`RunError`, unless ``force``.
    """
    from vprof.analysis.summary import timeline

    run = load_run(path)
    if is_alternating(run):
        sides = [summarize_loaded(view, slo=slo) for view in side_views(run)]
        summary = {
            K.RUN: run.name,
            K.ALTERNATING: True,
            K.REQUESTS: sum(s[K.REQUESTS] for s in sides),
            K.EXCLUDED_WARMUP: run.records.num_rows - sum(s[K.REQUESTS] for s in sides),
            K.SIDES: sides,
        }
    else:
        summary = summarize_loaded(run, slo=slo)
    folder = RunDir(run.path)
    if not force:
        _keep_better_summary(folder, summary)
    frame = timeline(run.records, interval_s)
    write_json_atomic(folder.summary_json, json_safe(summary))
    replace_atomically(folder.timeline_csv, lambda tmp: frame.to_csv(tmp, index=False))
    return summary


def _read_requests(summary: dict[str, Any]) -> int | None:
    """How many records a summary was made from (kept plus warm-up), if it says."""
    counts = [summary.get(K.REQUESTS), summary.get(K.EXCLUDED_WARMUP)]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    return sum(counts)  # type: ignore[arg-type]


def _keep_better_summary(folder: RunDir, summary: dict[str, Any]) -> None:
    """Refuse to replace a summary made from more records than this one."""
    before = _read_requests(read_json(folder.summary_json, strict=False))
    now = _read_requests(summary)
    if before is None or now is None or now >= before:
        return
    note = summary.get(K.RECORDS_NOTE)
    raise RunError(
        f"kept as it is: it counted {before:,} requests, this read of the records only "
        f"{now:,}" + (f": {note}" if note else ""),
        path=str(folder.summary_json),
        hint="the records file was damaged since; restore it, or pass --force to replace "
        "the summary anyway",
    )


def json_safe(value: Any) -> Any:
    """NaN → null and ±inf → ``"inf"``/``"-inf"`` (as vllm's encoder does): strict JSON."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # a finite float is kept as it is, without a call (a report's curves are long lists)
        return [v if type(v) is float and math.isfinite(v) else json_safe(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        return json_safe(value.item())
    return value
