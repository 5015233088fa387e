"""The run folder: its layout, the names of its files, and how they are read and written.

This module is the only place that spells a run folder's file names; writers (the bench
orchestrator, the Locust side, the metrics sampler) and readers (summaries, comparisons,
plans, reports) ask a :class:`RunDir` for a file instead::

    <run>/run.json       what was run: profile as rendered (name, identity, argv, env), workload,
                         traffic shape, seeds, url, vLLM version, hardware, client versions
    <run>/status.json    running | completed | failed | interrupted | degraded | abandoned,
                         why it stopped, and the process that ran it (pid, host)
    <run>/records.arrow  per-request records (written by the Locust side as they arrive)
    <run>/locust.json    what the load generator saw: start/stop, warm-up end, workers
    <run>/loadgen.jsonl  the load generator's own health (CPU, event-loop lag)
    <run>/metrics.jsonl  server /metrics samples
    <run>/host.jsonl     the host's own pace during the run (a probe in vprof's process)
    <run>/server.log     the server's log during this run
    <run>/locust.log     the load generator's log (locust.out: its stdout and stderr)
    <run>/summary.json   the summary (written last)
    <run>/timeline.csv   per-interval activity

A *bench* folder holds run folders (and each launched server's log); a sweep also writes
``sweep.json`` there, and a tune ``tune.json``. A run that was started again keeps its
earlier, unfinished attempt beside it as ``<run>.attempt-N``: nothing is deleted. A command
that writes a bench, sweep or tune folder holds its lock file (``LOCK_FILE``, see
:mod:`vprof.records.folderlock`) while it runs.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from vprof.common.errors import RunError
from vprof.common.numbers import check_number

RETIRED_MARK = ".attempt-"
SWEEP_FILE = "sweep.json"
TUNE_FILE = "tune.json"
REPORT_FILE = "report.html"  # the HTML report a bench, sweep or tune writes into its folder
LOCK_FILE = ".vprof-lock"


class RunState(StrEnum):
    """Where a run stands, as ``status.json`` says."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    DEGRADED = "degraded"  # a load-generator worker was lost: less load than asked for
    ABANDONED = "abandoned"  # still "running" when a later command found its vprof gone


MISSING = "missing"  # no readable status.json: the run never started or its folder is damaged


# -- what readers rely on in each file -------------------------------------------------------
# A check returns nothing or raises FieldError. Keys absent from a file are allowed (older
# files, runs that died early); a key that is present must hold what vprof writes there, so
# no reader meets text where it does arithmetic, or infinity where it expects a time.
Check = Callable[[Any, str], None]


class FieldError(Exception):
    """A key of a run file holds what vprof never writes there (``key`` is dotted)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.message, self.key = message, key


def check_fields(data: Mapping[str, Any], fields: Mapping[str, Check], prefix: str = "") -> None:
    """Apply each field's check to ``data[key]`` when the key is present."""
    for key, check in fields.items():
        if key in data:
            check(data[key], prefix + key)


def _number(
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    integer: bool = False,
    null: bool = False,
) -> Check:
    """A finite number in ``[minimum, maximum]`` (a whole one when ``integer``; ``null`` ok)."""
    low = -math.inf if minimum is None else minimum
    high = math.inf if maximum is None else maximum

    def check(value: Any, key: str) -> None:
        # the common case at once (samples run to thousands of lines): an int, or a finite
        # float where a whole number is not asked for, within the bounds
        kind = type(value)
        if (kind is int or (kind is float and not integer and -math.inf < value < math.inf)) and (
            low <= value <= high
        ):
            return
        if value is None and null:
            return
        try:
            check_number(value, minimum=minimum, maximum=maximum, integer=integer, error=RunError)
        except RunError as exc:
            raise FieldError(exc.message, key) from None

    return check


def _text(*, null: bool = False) -> Check:
    """A string (or ``null`` when allowed)."""

    def check(value: Any, key: str) -> None:
        if not (isinstance(value, str) or (value is None and null)):
            raise FieldError(f"expected text, found {_kind(value)}", key)

    return check


def _flag(value: Any, key: str) -> None:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise FieldError(f"expected true or false, found {_kind(value)}", key)


def _items(check: Check, *, limit: int = 100_000) -> Check:
    """A list whose items all pass ``check``."""

    def check_list(value: Any, key: str) -> None:
        if not isinstance(value, list):
            raise FieldError(f"expected a list, found {_kind(value)}", key)
        if len(value) > limit:
            raise FieldError(f"a list of {len(value):,} items (at most {limit:,})", key)
        for i, item in enumerate(value):
            check(item, f"{key}[{i}]")

    return check_list


def _values(check: Check) -> Check:
    """An object whose values all pass ``check`` (any keys)."""

    def check_map(value: Any, key: str) -> None:
        if not isinstance(value, dict):
            raise FieldError(f"expected an object, found {_kind(value)}", key)
        for name, item in value.items():
            check(item, f"{key}.{name}")

    return check_map


def _obj(fields: Mapping[str, Check], *, or_text: bool = False, null: bool = False) -> Check:
    """An object whose known keys pass their checks (or a name, when ``or_text``)."""

    def check(value: Any, key: str) -> None:
        if (value is None and null) or (isinstance(value, str) and or_text):
            return
        if not isinstance(value, dict):
            raise FieldError(f"expected an object, found {_kind(value)}", key)
        check_fields(value, fields, key + ".")

    return check


_KINDS: dict[type, str] = {
    dict: "an object",
    list: "a list",
    str: "text",
    int: "the number",
    float: "the number",
}


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: ``text 'abc'``, ``the number 5``, ``a list``."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    kind = _KINDS.get(type(value), type(value).__name__)
    shown = repr(value) if isinstance(value, (str, int, float)) else ""
    return f"{kind} {shown}" if shown and len(shown) < 40 else kind


def _line_of(text: str, dotted: str) -> int | None:
    """The line where ``dotted`` (``traffic.rate_rps``) is written, found part by part."""
    at = 0
    for part in dotted.replace("[", ".[").split("."):
        if not part or part.startswith("["):
            continue
        found = text.find(json.dumps(part), at)
        if found < 0:
            return None
        at = found
    return text.count("\n", 0, at) + 1


SAMPLED_AT = _number(0, 1e11)  # wall-clock seconds since the epoch
EPOCH_S = _number(0, 1e11, null=True)  # the same, null for a moment not reached
COUNT = _number(0, 1e15, integer=True)
PERCENT = _number(0, 1e6, null=True)  # CPU percentages: above 100 % for many cores
_TRAFFIC = {
    "name": _text(null=True),
    "kind": _text(null=True),
    "rate_rps": _number(0, 1e9, null=True),
    "users": _number(0, 1e9, null=True),
    "duration_s": _number(0, 1e9, null=True),
    "warmup_s": _number(0, 1e9, null=True),
}
RUN_FIELDS: dict[str, Check] = {
    "name": _text(),
    "profile": _obj(
        {
            "name": _text(),
            "identity": _text(null=True),
            "argv": _items(_text()),
            "env": _values(_text()),
            # a launched server's GPUs (tensor × pipeline × data parallel), and how counted
            "gpus_per_server": _number(1, 4096, integer=True, null=True),
            "parallelism": _text(null=True),
        },
        null=True,
    ),
    "workload": _obj({"name": _text(null=True)}, or_text=True, null=True),
    "traffic": _obj(_TRAFFIC, or_text=True, null=True),
    "trace": _obj({"implied_token_hit_rate": _number(0, 1, null=True)}, null=True),
    "url": _text(null=True),
    "urls": _items(_text(), limit=1000),  # several replicas (absent: one server)
    "balance": _text(null=True),
    "metrics_from": _text(null=True),  # older runs: the one replica /metrics was sampled from
    "seed": _number(integer=True, null=True),
    "repeat": _number(1, 1e6, integer=True, null=True),
    "repeats": _number(1, 1e6, integer=True, null=True),
    "open_loop": _flag,
    "vllm_version": _text(null=True),
    "created_at": EPOCH_S,
    # a predicted run: the model that predicted it (vprof forecast predict -o)
    "forecast": _obj(
        {
            "model": _text(null=True),
            "configuration": _text(null=True),
            "error": _text(null=True),
            "notes": _items(_text(), limit=1000),
        },
        null=True,
    ),
}
STATUS_FIELDS: dict[str, Check] = {
    "state": _text(),
    "reason": _text(null=True),
    "started_at": EPOCH_S,
    "finished_at": EPOCH_S,
    # the vprof process that ran it: a running run whose owner is gone was abandoned
    "owner": _obj(
        {
            "pid": _number(1, 2**31, integer=True),
            "host": _text(),
            "started_at": EPOCH_S,
            "command": _items(_text(), limit=10_000),
        }
    ),
}
LOCUST_FIELDS: dict[str, Check] = {
    "started_at": EPOCH_S,
    "warmup_until": EPOCH_S,
    "stopped_at": EPOCH_S,
    "open_loop": _flag,
    "records": COUNT,
    # load-generator workers lost mid-test (vprof.locustfiles.workerloss)
    "workers_lost": _items(
        _obj(
            {
                "worker": _text(),
                "client_id": _text(),
                "lost_at": SAMPLED_AT,
                "after_s": _number(0, 1e9),
                "how": _text(),
                "records": COUNT,
                "last_records_at": EPOCH_S,
            }
        ),
        limit=100_000,
    ),
    "slices": _obj(  # alternating servers: the slice schedule (traffic.slices)
        {
            "epoch": SAMPLED_AT,
            "slice_s": _number(0, 1e6),
            "warmup_s": _number(0, 1e6),
            "sides": _number(2, 1000, integer=True),
        },
        null=True,
    ),
}
# calibration.json: the client's error certificate for the run's load (vprof calibrate, which
# bench --calibrate runs before the runs)
_ERROR_MS = _number(-1e6, 1e6, null=True)
CALIBRATION_FIELDS: dict[str, Check] = {
    "users": _number(1, 1e9, integer=True),
    "rate_rps": _number(0, 1e9),
    "processes": _number(1, 1e6, integer=True),
    "duration_s": _number(0, 1e9),
    "requests": COUNT,
    "events_per_s": _number(0, 1e12),
    "ttft_error_p50_ms": _ERROR_MS,
    "ttft_error_p99_ms": _ERROR_MS,
    "itl_error_p50_ms": _ERROR_MS,
    "itl_error_p99_ms": _ERROR_MS,
    "client_error_ms": _number(0, 1e6, null=True),
    "within_bounds": _flag,
    "loop_lag_verdict": _text(),
    "host": _text(),
    "measured_at": SAMPLED_AT,
}
# What a resumed tune reads back from its tune.json (the rest is for people and the report).
TUNE_FIELDS: dict[str, Check] = {
    "profile": _text(null=True),
    "start_failures": _values(_text()),  # candidate label: why its server did not start
}
# One line of metrics.jsonl: a time and the server's metric values (NaN samples are dropped
# when scraped, so every value is finite).
METRICS_LINE: dict[str, Check] = {
    "t": SAMPLED_AT,
    "scrape_s": _number(0, 1e6),  # how long the scrape took
    "values": _values(_number()),
    "replica": _text(),  # several replicas: whose /metrics (its base URL); absent: one server
    "pass": COUNT,  # several replicas: the sampler's pass, which scraped each replica once
}
# A Locust process's requests answered and failed so far, in its health samples.
LOADGEN_ANSWERED, LOADGEN_FAILED = "requests_answered", "requests_failed"
# One line of loadgen.jsonl (a Locust process's health sample).
LOADGEN_LINE: dict[str, Check] = {
    "t": SAMPLED_AT,
    "worker": _text(),
    "cpu_percent": PERCENT,
    "wait_percent": PERCENT,
    "machine_cpu_percent": PERCENT,
    "steal_percent": PERCENT,
    "per_core_cpu_percent": _items(_number(0, 1e6), limit=100_000),
    "loop_probes": COUNT,
    "loop_lag_p50_ms": _number(0, 1e9, null=True),
    "loop_lag_p99_ms": _number(0, 1e9),
    "loop_lag_max_ms": _number(0, 1e9),
    "loop_lag_histogram": _items(COUNT, limit=1000),
    LOADGEN_ANSWERED: COUNT,
    LOADGEN_FAILED: COUNT,
}


# One line of host.jsonl: the probe's fixed piece of work took work_ms of its thread's CPU time
# (a slower host takes longer for the same work), and its sleep woke late_ms late.
HOST_LINE: dict[str, Check] = {
    "t": SAMPLED_AT,
    "work_ms": _number(0, 1e6),
    "late_ms": _number(0, 1e9),
    "cpu_some_us": _number(0, 2**63, integer=True),  # the kernel's stall totals (optional)
    "io_full_us": _number(0, 2**63, integer=True),
}


def temporary_beside(path: Path) -> Path:
    """A name for a temporary file next to ``path`` that no other writer picks (this process's
    id and a random part), hidden, so two commands writing one folder never collide."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def replace_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then rename it over ``path``; the
    temporary file is removed when writing fails."""
    tmp = temporary_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_FULL = (errno.ENOSPC, errno.EDQUOT)


def write_json_atomic(path: Path, data: Any, *, in_place_when_full: bool = False) -> None:
    """Write JSON so a reader never sees half a file (a temporary file, then a rename).

    ``in_place_when_full``: on a full disk, overwrite the file where it stands instead (the
    blocks it holds take a small file's new text), so a run's state can still be recorded.
    """
    text = json.dumps(data, indent=2, default=str) + "\n"
    try:
        replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        if not (in_place_when_full and exc.errno in _FULL and path.is_file()):
            raise
        with path.open("r+", encoding="utf-8") as out:
            out.write(text)
            out.truncate()


def read_json(
    path: Path, *, strict: bool = True, fields: Mapping[str, Check] | None = None
) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when the file is absent.

    A file that is not a JSON object, or whose ``fields`` hold what vprof never writes there,
    raises :class:`RunError` naming it, the line and the key (``strict``), or reads as ``{}``
    (not strict: used where a damaged file only means "not finished").
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        if strict:
            raise RunError(f"cannot read it: {exc}", path=str(path)) from None
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if strict:
            raise RunError(
                f"not valid JSON (line {exc.lineno}: {exc.msg})", path=str(path), line=exc.lineno
            ) from None
        return {}
    if not isinstance(data, dict):
        if strict:
            raise RunError(f"expected a JSON object, found {type(data).__name__}", path=str(path))
        return {}
    if fields:
        try:
            check_fields(data, fields)
        except FieldError as exc:
            if not strict:
                return {}
            raise RunError(
                exc.message, path=str(path), line=_line_of(text, exc.key), key=exc.key
            ) from None
    return data


def append_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append one JSON object per line (a sampler's lines are complete when written)."""
    lines = "".join(json.dumps(row, default=str) + "\n" for row in rows)
    if lines:
        with path.open("a", encoding="utf-8") as out:
            out.write(lines)


_DECODER = json.JSONDecoder()


def _json_line(line: str) -> Any:
    """``json.loads(line)``, without its per-call work for a line that is one JSON value and
    nothing else (samples run to thousands of lines: that work was a third of their reading)."""
    try:
        value, end = _DECODER.raw_decode(line)
    except json.JSONDecodeError:
        return json.loads(line)  # leading whitespace, or json.loads's own error
    if end < len(line) and line[end:].strip(" \t\n\r"):
        return json.loads(line)  # raises "Extra data", as it does
    return value


def read_jsonl(
    path: Path, *, fields: Mapping[str, Check] | None = None
) -> tuple[dict[str, Any], ...]:
    """Every JSON object line of ``path`` (``()`` when absent), each checked against ``fields``.

    A torn *last* line (a sampler killed mid-write) is dropped; a bad line anywhere else
    means the file is not what vprof wrote, and raises :class:`RunError` with its line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as exc:
        raise RunError(f"cannot read it: {exc}", path=str(path)) from None
    lines = text.split("\n")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = _json_line(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the last line, with no newline after it: torn
                continue
            raise RunError("not a JSON line", path=str(path), line=number) from None
        if not isinstance(row, dict):
            raise RunError("expected a JSON object per line", path=str(path), line=number)
        if fields:
            try:
                check_fields(row, fields)
            except FieldError as exc:
                raise RunError(exc.message, path=str(path), line=number, key=exc.key) from None
        rows.append(row)
    return tuple(rows)


@dataclass(frozen=True)
class RunDir:
    """One run folder. Its files are attributes; nothing else spells their names."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name

    # -- the files ---------------------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def status_json(self) -> Path:
        return self.path / "status.json"

    @property
    def records(self) -> Path:
        return self.path / "records.arrow"

    @property
    def locust_json(self) -> Path:
        return self.path / "locust.json"

    @property
    def loadgen_jsonl(self) -> Path:
        return self.path / "loadgen.jsonl"

    @property
    def metrics_jsonl(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def host_jsonl(self) -> Path:
        return self.path / "host.jsonl"

    @property
    def server_log(self) -> Path:
        return self.path / "server.log"

    @property
    def locust_log(self) -> Path:
        return self.path / "locust.log"

    @property
    def locust_out(self) -> Path:
        return self.path / "locust.out"

    @property
    def summary_json(self) -> Path:
        return self.path / "summary.json"

    @property
    def timeline_csv(self) -> Path:
        return self.path / "timeline.csv"

    @property
    def calibration_json(self) -> Path:
        return self.path / "calibration.json"

    # -- what ran and how it ended -----------------------------------------------------------
    def create(self, meta: Mapping[str, Any]) -> None:
        """Make the folder and record what is about to run."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.run_json, dict(meta))
        self.set_status(RunState.RUNNING)

    def meta(self, *, strict: bool = False) -> dict[str, Any]:
        """``run.json`` (``{}`` when absent; damaged: ``{}``, or an error when ``strict``)."""
        return read_json(self.run_json, strict=strict, fields=RUN_FIELDS)

    def status(self, *, strict: bool = False) -> dict[str, Any]:
        """``status.json`` (``{}`` when absent; damaged: ``{}``, or an error when ``strict``)."""
        return read_json(self.status_json, strict=strict, fields=STATUS_FIELDS)

    @property
    def state(self) -> str:
        """A :class:`RunState` value, or ``"missing"`` when there is no readable status."""
        return str(self.status().get("state", MISSING))

    def set_status(self, state: RunState | str, reason: str = "") -> None:
        """Record the run's state; a running run is owned by this process (``owner``)."""
        state = RunState(state)
        previous = self.status()
        status: dict[str, Any] = {
            "state": state.value,
            "reason": reason,
            "started_at": previous.get("started_at", time.time()),
        }
        if state is not RunState.RUNNING:
            status["finished_at"] = time.time()
        owner = this_process() if state is RunState.RUNNING else previous.get("owner")
        if owner:
            status["owner"] = owner
        write_json_atomic(self.status_json, status, in_place_when_full=True)

    def abandon_if_orphaned(self) -> str:
        """A run that says ``running`` although the process that ran it is gone (killed, or its
        machine restarted) is marked ``abandoned``, its records kept; returns why (``""``:
        the run is not such a run). A folder that cannot be written is only reported."""
        status = self.status()
        owner = status.get("owner")
        if status.get("state") != RunState.RUNNING or not isinstance(owner, dict):
            return ""
        if not owner_gone(owner):
            return ""
        reason = (
            f"the vprof that ran it (pid {owner['pid']} on {owner['host']}) is gone; what it "
            "recorded is kept"
        )
        try:
            self.set_status(RunState.ABANDONED, reason)
        except OSError:
            pass
        return reason

    def locust_info(self) -> dict[str, Any]:
        """``locust.json``, checked (a damaged file raises :class:`RunError`)."""
        return read_json(self.locust_json, fields=LOCUST_FIELDS)

    def metric_samples(self) -> tuple[dict[str, Any], ...]:
        """The lines of ``metrics.jsonl``, checked."""
        return read_jsonl(self.metrics_jsonl, fields=METRICS_LINE)

    def loadgen_samples(self) -> tuple[dict[str, Any], ...]:
        """The lines of ``loadgen.jsonl``, checked."""
        return read_jsonl(self.loadgen_jsonl, fields=LOADGEN_LINE)

    def host_samples(self) -> tuple[dict[str, Any], ...]:
        """The lines of ``host.jsonl``, checked."""
        return read_jsonl(self.host_jsonl, fields=HOST_LINE)

    def write_locust_info(self, info: Mapping[str, Any]) -> None:
        write_json_atomic(self.locust_json, dict(info))

    def calibration(self) -> dict[str, Any]:
        """``calibration.json``: the client's error certificate at this run's load, checked
        (``{}`` when the run was not calibrated; damaged: :class:`RunError`)."""
        return read_json(self.calibration_json, fields=CALIBRATION_FIELDS)

    def write_calibration(self, certificate: Mapping[str, Any]) -> None:
        write_json_atomic(self.calibration_json, dict(certificate))

    def earlier_attempts(self) -> list[Path]:
        """Unfinished earlier attempts of this run kept beside it (see :meth:`retire`)."""
        prefix = f"{self.path.name}{RETIRED_MARK}"
        try:
            found = [p for p in self.path.parent.iterdir() if p.name.startswith(prefix)]
        except OSError:
            return []
        return sorted(found, key=lambda p: (len(p.name), p.name))

    def retire(self) -> Path:
        """Move an unfinished earlier attempt aside (nothing is deleted) and return its path."""
        n = 1
        while (target := self.path.with_name(f"{self.path.name}{RETIRED_MARK}{n}")).exists():
            n += 1
        self.path.rename(target)
        return target


def this_process() -> dict[str, Any]:
    """Who is writing: this process's pid, host, start time and command (``owner``)."""
    import socket
    import sys

    import psutil  # here, not at the top: registry commands must start fast

    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": psutil.Process().create_time(),
        "command": list(sys.argv),
    }


def owner_gone(owner: Any) -> bool:
    """True when ``owner`` (see :func:`this_process`) no longer runs: its pid is free, a
    zombie, or another process's (a different start time). A process on another host
    cannot be asked, and counts as running."""
    import socket

    import psutil

    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return False
    pid, started = owner.get("pid"), owner.get("started_at")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        return isinstance(started, (int, float)) and abs(process.create_time() - started) > 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def is_run_dir(path: Path) -> bool:
    """True when ``path`` looks like a run folder (it has run.json or records)."""
    run = RunDir(path)
    return run.run_json.is_file() or run.records.is_file()


def is_retired(path: Path) -> bool:
    """An earlier, unfinished attempt kept beside the run that replaced it."""
    return RETIRED_MARK in path.name


def _runs_inside(folder: Path) -> Iterator[Path]:
    for child in sorted(folder.iterdir()):
        if child.is_dir() and is_run_dir(child) and not is_retired(child):
            yield child


def expand_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Run folders named by ``paths``: a run folder itself, or the runs inside a bench folder
    (retired attempts left out)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise RunError("no such run folder", path=str(path), hint="give a run or bench folder")
        if is_run_dir(path):
            found.append(path)
            continue
        inner = list(_runs_inside(path)) if path.is_dir() else []
        if not inner:
            raise RunError(
                "not a run folder (no run.json or records.arrow) and holds no runs",
                path=str(path),
                hint="point at a folder written by `vprof bench`",
            )
        found.extend(inner)
    return found


# Names of run folders and of the files beside them, in bytes: filesystems allow 255, and a
# folder gets suffixes (``--rN``, ``.attempt-N``) and temporary files a prefix and a suffix.
MAX_NAME_BYTES = 160
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


def name_of(*parts: str) -> str:
    """``parts`` (a profile or ``--url`` label, a workload, a traffic shape, …) as one file or
    folder name, joined with ``--``: in each part, characters other than ``A-Za-z0-9_.=-``
    become ``_``, and none of ``_.-`` leads (no hidden file, nothing read as an option). A name
    longer than ``MAX_NAME_BYTES`` has its longest parts cut, each ending in a hash of the whole
    part, so two long names stay two names."""
    slugs = [_NAME_UNSAFE.sub("_", part).lstrip("_.-").rstrip("_") for part in parts]
    budget = MAX_NAME_BYTES - 2 * (len(slugs) - 1)
    if sum(map(len, slugs)) <= budget:
        return "--".join(slugs)
    cap = budget  # the longest a part may stay: shorter parts keep their whole length
    while sum(min(len(s), cap) for s in slugs) > budget:
        cap -= 1
    cap = max(cap, 16)
    return "--".join(
        s
        if len(s) <= cap
        else f"{s[: cap - 9]}-{hashlib.sha256(part.encode(errors='replace')).hexdigest()[:8]}"
        for part, s in zip(parts, slugs, strict=True)
    )


def sweep_manifest(folder: Path) -> Path:
    """Where a sweep writes its ladder, its rows and its recommendation."""
    return Path(folder) / SWEEP_FILE


def tune_manifest(folder: Path) -> Path:
    """Where a tune writes its space, its trials and its best (what a resumed tune reads)."""
    return Path(folder) / TUNE_FILE
