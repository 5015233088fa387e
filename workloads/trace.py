"""Request traces: when each request arrived and how long it was, as production saw it.

Three schemas are read, detected from the file or named with ``format``:

- ``mooncake`` (JSONL): ``timestamp`` (milliseconds), ``input_length``, ``output_length`` and
  ``hash_ids``, one id per ``block_size`` tokens of the prompt (512 in Mooncake's traces); two
  requests whose ``hash_ids`` start alike share that many blocks of prefix.
- ``azure`` (CSV, Azure's LLM inference traces): ``TIMESTAMP`` (a date-time), ``ContextTokens``,
  ``GeneratedTokens``; no prefix information.
- ``vprof`` (JSONL or CSV): ``t_s`` (seconds), ``prompt_tokens``, ``output_tokens``, and
  optionally ``prefix_blocks`` (ids as in ``hash_ids``; space-separated in CSV) and
  ``session_id``.

Reading is strict, so a bad file fails before any run with ``file:line: key: message``: missing
columns, timestamps that go backwards, lengths that are negative, zero, fractional or not
finite, lengths above ``max_model_len``, more block ids than the prompt has blocks, text that is
not UTF-8, an empty file, more requests than ``MAX_REQUESTS``. Rows after the selected window
are not read.

Pure standard library (csv, json, datetime), so ``vprof trace stats`` starts fast.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.numbers import MAX_TOKENS, check_number, parse_number
from vprof.common.suggest import did_you_mean

FORMATS = ("auto", "mooncake", "azure", "vprof")
DEFAULT_BLOCK_SIZE = 512  # Mooncake's traces hash 512-token blocks
MAX_REQUESTS = 1_000_000  # selected requests held in memory (~150 MB); select a window beyond
MAX_BLOCK_SIZE = 1 << 16
_MAX_SECONDS = 1e9  # ~30 years of trace: beyond that a window is a typo
_MAX_TIME_SCALE = 1e6
_MAX_BLOCK_ID = (1 << 63) - 1
# The longest CSV cell a valid trace can have: the prefix_blocks of a MAX_TOKENS prompt at block
# size 1 (ids of up to 19 digits and a space); csv's own limit, 128 KiB, is a 1M-token prompt's
# ids at block size 16. The line is in memory before csv reads it: the limit guards nothing.
_MAX_CSV_FIELD = MAX_TOKENS * 20

# Required and optional fields of each schema (CSV column or JSON key).
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mooncake": (("timestamp", "input_length", "output_length"), ("hash_ids",)),
    "azure": (("TIMESTAMP", "ContextTokens", "GeneratedTokens"), ()),
    "vprof": (("t_s", "prompt_tokens", "output_tokens"), ("prefix_blocks", "session_id")),
}


# Each numeric setting's range (``check_number`` keywords) and a hint for a bad value.
_SETTINGS: tuple[tuple[str, dict[str, Any], str | None], ...] = (
    ("block_size", {"minimum": 1, "maximum": MAX_BLOCK_SIZE, "integer": True}, None),
    ("time_scale", {"above": 0, "maximum": _MAX_TIME_SCALE}, "2 = twice as fast"),
    ("start_s", {"minimum": 0, "maximum": _MAX_SECONDS}, None),
    ("duration_s", {"above": 0, "maximum": _MAX_SECONDS}, None),
    ("max_requests", {"minimum": 1, "maximum": MAX_REQUESTS, "integer": True}, None),
    ("max_model_len", {"minimum": 2, "maximum": MAX_TOKENS, "integer": True}, None),
)
_OPTIONAL = {"duration_s", "max_requests", "max_model_len"}


@dataclass(frozen=True)
class TraceSpec:
    """Which trace to replay and which part of it.

    ``start_s`` and ``duration_s`` select a window in the trace's own seconds, counted from its
    first request; ``max_requests`` keeps the first that many of the window; ``time_scale``
    then compresses time (2 = twice as fast). ``max_model_len`` makes longer requests an error.
    """

    file: str
    format: str = "auto"
    block_size: int = DEFAULT_BLOCK_SIZE
    time_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    max_requests: int | None = None
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.file, str) or not self.file:
            raise WorkloadError("must be a path to a trace file", key="file")
        if self.format not in FORMATS:
            raise WorkloadError(
                f"unknown trace format {self.format!r}{did_you_mean(str(self.format), FORMATS)}",
                key="format",
                hint=f"one of {', '.join(FORMATS)}",
            )
        for key, limits, hint in _SETTINGS:
            value = getattr(self, key)
            if value is None and key in _OPTIONAL:
                continue
            value = check_number(value, error=WorkloadError, key=key, hint=hint, **limits)
            object.__setattr__(self, key, value if limits.get("integer") else float(value))

    def to_dict(self) -> dict[str, Any]:
        """The settings as YAML-ready data (only those that differ from the defaults)."""
        out: dict[str, Any] = {"file": self.file, "format": self.format}
        for key, default in (
            ("block_size", DEFAULT_BLOCK_SIZE),
            ("time_scale", 1.0),
            ("start_s", 0.0),
            ("duration_s", None),
            ("max_requests", None),
            ("max_model_len", None),
        ):
            value = getattr(self, key)
            if value != default:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. ``t_s`` is seconds of trace time since the file's first request;
    ``prefix_blocks`` are the ids of its leading ``block_size``-token blocks."""

    t_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_blocks: tuple[int, ...] = ()
    session_id: str | None = None
    line: int = 0  # where it was in the file


@dataclass(frozen=True)
class Trace:
    """The requests a :class:`TraceSpec` selects, in arrival order."""

    spec: TraceSpec
    format: str  # the schema read: mooncake, azure or vprof
    requests: tuple[TraceRequest, ...]
    rows_read: int  # rows of the file read, the skipped ones before the window included
    content_sha256: str = ""  # of the bytes read: an edited trace is a different workload

    def __len__(self) -> int:
        return len(self.requests)

    def offsets_s(self) -> list[float]:
        """Intended send times in seconds from the first selected request, time-scaled: the
        open-loop schedule of a replay (the same list in every process that reads the file)."""
        if not self.requests:
            return []
        first = self.requests[0].t_s
        scale = self.spec.time_scale
        return [(r.t_s - first) / scale for r in self.requests]

    def max_request_tokens(self) -> int:
        """The longest prompt plus output of the selection (for max-model-len checks)."""
        return max((r.prompt_tokens + r.output_tokens for r in self.requests), default=0)


def load_trace(spec: TraceSpec) -> Trace:
    """Read and check the requests ``spec`` selects; cached per process until the file changes,
    so every Locust user, the workload and the traffic shape share one read."""
    path = Path(spec.file)
    try:
        stat = path.stat()
    except OSError as exc:
        raise WorkloadError(
            f"cannot read the trace: {exc.strerror or exc}", path=spec.file, key="file"
        ) from None
    if not path.is_file():
        raise WorkloadError("the trace is not a file", path=spec.file, key="file")
    return _load(spec, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _load(spec: TraceSpec, _mtime_ns: int, _size: int) -> Trace:
    digest = hashlib.sha256()
    # Closed as soon as the selection ends: the rest of the file is never read.
    with contextlib.closing(_lines(Path(spec.file), digest)) as lines:
        trace = _read(spec, lines)
    return dataclasses.replace(trace, content_sha256=digest.hexdigest())


def _read(spec: TraceSpec, lines: Iterator[tuple[int, str]]) -> Trace:
    source = spec.file
    first = _first_data_line(lines)
    if first is None:
        raise WorkloadError("no requests in the file (it is empty)", path=source)
    number, text = first
    container = "jsonl" if text.lstrip().startswith("{") else "csv"
    if container == "csv" and not _names_a_field(text):
        raise WorkloadError(
            "not a trace: its first line is neither a JSON object nor a CSV header naming a "
            "trace format's fields",
            path=source,
            line=number,
            hint=f"the formats need {_formats_hint()}",
        )
    rows: Iterator[tuple[int, Mapping[str, Any]]]
    if container == "jsonl":
        rows = _json_rows(_chain(first, lines), source)
    else:
        rows = _csv_rows(_chain(first, lines), source)
    schema, rows = _schema(spec.format, container, rows, source, number)
    return _select(spec, schema, rows)


# --- lines, rows and schemas ------------------------------------------------------------------


def _lines(path: Path, digest: Any) -> Generator[tuple[int, str], None, None]:
    """(line number, text) of every line, decoded strictly as UTF-8 (a BOM is dropped); the
    bytes go into ``digest`` as they are read."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            digest.update(raw)
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise WorkloadError(
                    f"not UTF-8 text (byte {exc.start + 1} of the line is {raw[exc.start]:#04x})",
                    path=str(path),
                    line=number,
                    hint="a trace is UTF-8 JSONL or CSV; re-encode it",
                ) from None
            yield number, text


def _first_data_line(lines: Iterator[tuple[int, str]]) -> tuple[int, str] | None:
    for number, text in lines:
        if text.strip():
            return number, text
    return None


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _names_a_field(line: str) -> bool:
    """Whether ``line``, read as a CSV header, names a field of any trace format."""
    known = {name for required, optional in _FIELDS.values() for name in (*required, *optional)}
    try:
        cells = next(csv.reader([line]), [])
    except csv.Error:
        return False
    return any(cell.strip() in known for cell in cells)


def _formats_hint() -> str:
    return "; ".join(f"{s}: {', '.join(req)}" for s, (req, _) in _FIELDS.items())


def _json_rows(
    lines: Iterator[tuple[int, str]], source: str
) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for number, text in lines:
        if not text.strip():
            continue
        try:
            row = json.loads(text, parse_constant=_reject_constant)
        except ValueError as exc:  # JSONDecodeError, or NaN/Infinity
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise WorkloadError(f"not JSON: {message}", path=source, line=number) from None
        if not isinstance(row, dict):
            raise WorkloadError(
                f"each line must be a JSON object, got {type(row).__name__}",
                path=source,
                line=number,
            )
        yield number, row


def _csv_rows(
    lines: Iterator[tuple[int, str]], source: str
) -> Iterator[tuple[int, Mapping[str, Any]]]:
    next_number = 0

    def texts() -> Iterator[str]:
        nonlocal next_number
        for number, text in lines:
            next_number = number
            yield text

    # The lines given start at the first non-blank one: the row's line is the last line read.
    csv.field_size_limit(max(csv.field_size_limit(), _MAX_CSV_FIELD))
    reader = csv.reader(texts())
    header: list[str] | None = None
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a NUL byte, an unterminated quote, a cell beyond the limit
            raise WorkloadError(f"not CSV: {exc}", path=source, line=next_number) from None
        if not cells or all(not c.strip() for c in cells):
            continue
        if header is None:
            header = [c.strip() for c in cells]
            continue
        yield next_number, _CsvRow(header, cells, next_number, source)


class _CsvRow(Mapping[str, Any]):
    """One CSV row by column name; a row with a different number of fields is an error."""

    def __init__(self, header: list[str], cells: list[str], line: int, source: str) -> None:
        if len(cells) != len(header):
            raise WorkloadError(
                f"expected {len(header)} fields like the header, got {len(cells)}",
                path=source,
                line=line,
            )
        self._data = dict(zip(header, cells, strict=True))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def _schema(
    wanted: str,
    container: str,
    rows: Iterator[tuple[int, Mapping[str, Any]]],
    source: str,
    first_line: int,
) -> tuple[str, Iterator[tuple[int, Mapping[str, Any]]]]:
    """The schema to read (``wanted``, or detected from the first row's fields)."""
    try:
        number, row = next(rows)
    except StopIteration:
        raise WorkloadError(
            "no requests in the file (only a header)", path=source, line=first_line
        ) from None
    fields = set(row)
    if wanted == "auto":
        found = [s for s, (required, _) in _FIELDS.items() if set(required) <= fields]
        if not found:
            raise WorkloadError(
                f"cannot tell the trace format from its fields ({', '.join(sorted(fields))})",
                path=source,
                line=first_line if container == "csv" else number,
                hint=f"the formats need {_formats_hint()}",
            )
        wanted = found[0]
    expected = {"mooncake": "jsonl", "azure": "csv"}.get(wanted)
    if expected is not None and expected != container:
        kinds = {"jsonl": "JSON lines", "csv": "CSV"}
        raise WorkloadError(
            f"the {wanted} format is {kinds[expected]}, but this file reads as {kinds[container]}",
            path=source,
            line=number,
            key="format",
        )
    if container == "csv":
        missing = [f for f in _FIELDS[wanted][0] if f not in fields]
        if missing:
            raise WorkloadError(
                f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                path=source,
                line=first_line,
                hint=f"a {wanted} trace has columns {', '.join(_FIELDS[wanted][0])}",
            )

    def again() -> Iterator[tuple[int, Mapping[str, Any]]]:
        yield number, row
        yield from rows

    return wanted, again()


class _Where:
    """Builds errors located at one row."""

    __slots__ = ("source", "line")

    def __init__(self, source: str, line: int) -> None:
        self.source = source
        self.line = line

    def error(self, key: str | None, message: str, hint: str | None = None) -> WorkloadError:
        return WorkloadError(message, path=self.source, line=self.line, key=key, hint=hint)


def _get(row: Mapping[str, Any], key: str, where: _Where) -> Any:
    if key not in row:
        raise where.error(key, "missing", hint="every row needs it")
    return row[key]


def _checked(value: Any, key: str, where: _Where, **limits: Any) -> Any:
    """A number of a row under the one rule for numbers: CSV gives text, JSON numbers."""
    read = parse_number if isinstance(value, str) else check_number
    return read(value, error=WorkloadError, path=where.source, line=where.line, key=key, **limits)


def _tokens(value: Any, key: str, where: _Where) -> int:
    # At least 1: a request has a prompt and asks for output.
    count: int = _checked(value, key, where, minimum=1, maximum=MAX_TOKENS, integer=True)
    return count


def _seconds(value: Any, key: str, where: _Where, unit_s: float) -> float:
    return float(_checked(value, key, where)) * unit_s


def _datetime_s(value: Any, key: str, where: _Where) -> float:
    text = str(value).strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise where.error(
            key, f"not a date-time: {text!r}", hint="e.g. 2023-11-16 18:15:46.6805900"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # Azure's traces are UTC
    return moment.timestamp()


def _blocks(value: Any, key: str, where: _Where) -> tuple[int, ...]:
    if value is None:
        return ()
    items: list[Any]
    if isinstance(value, str):
        items = value.replace(",", " ").split()
    elif isinstance(value, list):
        # The common case, checked in one pass (a Mooncake row carries dozens of ids).
        if all(type(v) is int and 0 <= v <= _MAX_BLOCK_ID for v in value):
            return tuple(value)
        items = value
    else:
        raise where.error(key, f"must be a list of block ids, got {type(value).__name__}")
    return tuple(
        _checked(v, key, where, minimum=0, maximum=_MAX_BLOCK_ID, integer=True) for v in items
    )


def _session(value: Any, key: str, where: _Where) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise where.error(key, f"must be a string or a whole number, got {value!r}")
    return str(value)


Body = tuple[int, int, tuple[int, ...], str | None]


def _mooncake(row: Mapping[str, Any], where: _Where) -> Body:
    return (
        _tokens(_get(row, "input_length", where), "input_length", where),
        _tokens(_get(row, "output_length", where), "output_length", where),
        _blocks(row.get("hash_ids"), "hash_ids", where),
        None,
    )


def _azure(row: Mapping[str, Any], where: _Where) -> Body:
    return (
        _tokens(_get(row, "ContextTokens", where), "ContextTokens", where),
        _tokens(_get(row, "GeneratedTokens", where), "GeneratedTokens", where),
        (),
        None,
    )


def _vprof(row: Mapping[str, Any], where: _Where) -> Body:
    return (
        _tokens(_get(row, "prompt_tokens", where), "prompt_tokens", where),
        _tokens(_get(row, "output_tokens", where), "output_tokens", where),
        _blocks(row.get("prefix_blocks"), "prefix_blocks", where),
        _session(row.get("session_id"), "session_id", where),
    )


def _mooncake_time(row: Mapping[str, Any], where: _Where) -> float:
    return _seconds(_get(row, "timestamp", where), "timestamp", where, 1e-3)


def _azure_time(row: Mapping[str, Any], where: _Where) -> float:
    return _datetime_s(_get(row, "TIMESTAMP", where), "TIMESTAMP", where)


def _vprof_time(row: Mapping[str, Any], where: _Where) -> float:
    return _seconds(_get(row, "t_s", where), "t_s", where, 1.0)


# Each schema's readers: the arrival time (read first, to stop at the window's end) and the rest.
_PARSERS: dict[
    str,
    tuple[
        Callable[[Mapping[str, Any], _Where], float], Callable[[Mapping[str, Any], _Where], Body]
    ],
] = {
    "mooncake": (_mooncake_time, _mooncake),
    "azure": (_azure_time, _azure),
    "vprof": (_vprof_time, _vprof),
}
# The field each check points at, per schema.
_TIME_KEY = {"mooncake": "timestamp", "azure": "TIMESTAMP", "vprof": "t_s"}
_TIME_UNIT = {"mooncake": "milliseconds", "azure": "a date-time", "vprof": "seconds"}
_PROMPT_KEY = {"mooncake": "input_length", "azure": "ContextTokens", "vprof": "prompt_tokens"}
_BLOCKS_KEY = {"mooncake": "hash_ids", "vprof": "prefix_blocks"}


def _select(spec: TraceSpec, schema: str, rows: Iterator[tuple[int, Mapping[str, Any]]]) -> Trace:
    parse_time, parse_body = _PARSERS[schema]
    source = spec.file
    block = spec.block_size
    lo = spec.start_s
    hi = lo + spec.duration_s if spec.duration_s is not None else math.inf
    cap = spec.max_requests or MAX_REQUESTS + 1
    selected: list[TraceRequest] = []
    first_t: float | None = None
    last_t = -math.inf
    last_line = 0
    read = 0
    for number, row in rows:
        where = _Where(source, number)
        t_abs = parse_time(row, where)
        if t_abs < last_t:
            raise where.error(
                _TIME_KEY[schema],
                f"the time goes backwards ({t_abs - last_t:+.3f} s after line {last_line})",
                hint="a trace must be sorted by arrival time",
            )
        last_t, last_line = t_abs, number
        if first_t is None:
            first_t = t_abs
        t_s = t_abs - first_t
        if t_s >= hi:
            break
        if t_s > _MAX_SECONDS:
            raise where.error(
                _TIME_KEY[schema],
                f"is {t_s:.3g} s after the first request (more than {_MAX_SECONDS:g} s, ~30 "
                "years): a time in another unit?",
                hint=f"{_TIME_KEY[schema]} is {_TIME_UNIT[schema]} in a {schema} trace",
            )
        read += 1
        prompt, output, blocks, session = parse_body(row, where)
        if t_s < lo:
            continue
        if blocks and len(blocks) > -(-prompt // block):
            raise where.error(
                _BLOCKS_KEY[schema],
                f"{len(blocks)} blocks of {block} tokens, but the prompt of {prompt} tokens "
                f"fills only {-(-prompt // block)}",
                hint=f"is block_size right? Mooncake's traces use {DEFAULT_BLOCK_SIZE}",
            )
        if spec.max_model_len is not None and prompt + output > spec.max_model_len:
            raise where.error(
                _PROMPT_KEY[schema],
                f"prompt {prompt} + output {output} = {prompt + output} tokens exceeds "
                f"max_model_len {spec.max_model_len}",
                hint="the server would reject it; raise max_model_len or select other requests",
            )
        selected.append(TraceRequest(t_s, prompt, output, blocks, session, number))
        if len(selected) >= cap:
            break
    if len(selected) > MAX_REQUESTS:
        raise WorkloadError(
            f"more than {MAX_REQUESTS:,} requests selected",
            path=source,
            hint="select fewer with max_requests or start_s/duration_s (--max-requests, "
            "--start, --duration)",
        )
    if not selected:
        if read == 0:
            raise WorkloadError("no requests in the file", path=source)
        t_s = last_t - (first_t or 0.0)
        after = (
            f"the next request is at {t_s:g} s"
            if t_s >= hi
            else f"the trace's {read} requests span {t_s:g} s"
        )
        raise WorkloadError(
            f"the window from {lo:g} s for {spec.duration_s or math.inf:g} s selects no request; "
            + after,
            path=source,
            key="start_s",
        )
    return Trace(spec=spec, format=schema, requests=tuple(selected), rows_read=read)


def resolve_trace_path(file: str, base_dir: Path | None) -> str:
    """``file`` with ``~`` expanded and, when relative, taken from ``base_dir``."""
    path = Path(os.path.expanduser(file))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)
