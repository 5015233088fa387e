"""The per-request record and its columnar schema.

Times named ``*_at`` are wall-clock seconds since the epoch taken from a monotonic clock
anchored once per process (``vprof.common.clock``); durations are milliseconds. Metric
definitions follow ``vllm bench serve``:

- ``ttft_ms``: send → first chunk with non-empty ``choices``;
- ``itl_ms``: gaps between consecutive content chunks of this request;
- ``e2e_ms``: send → last content chunk;
- ``tpot_ms``: (e2e − ttft) / (completion_tokens − 1), only when completion_tokens > 1.

For open-loop traffic ``scheduled_at`` is the intended send time; for closed-loop traffic it
equals ``sent_at``. Latency "from the schedule" is ``(first_token_at − scheduled_at)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from vprof.common.errors import RunError


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"  # HTTP error, bad stream, connection failure
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # cut off at the end of a test or by Ctrl-C


# The error of a request cut off in flight because its test (a ladder's level) ended: its
# outcome is unknown, only that it took longer than its age then (see analysis.summary).
CUT_AT_END = "cut off: the test ended"

NAN = math.nan

# The load generator's health samples (``loadgen.jsonl``) carry a histogram of event-loop lag:
# bucket i counts wake-ups late by at most LOOP_LAG_BUCKETS_MS[i] ms (the last, by more).
LOOP_LAG_BUCKETS_MS: tuple[float, ...] = (
    0.25,
    0.5,
    1,
    2,
    3,
    5,
    7.5,
    10,
    15,
    20,
    30,
    50,
    75,
    100,
    150,
    200,
    300,
    500,
    1000,
    2000,
)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    user_class: str = ""
    endpoint: str = ""  # "completions" | "chat" | "generate"
    worker: str = ""  # which Locust process produced it
    replica: str = ""  # the server (base URL) it went to, when a bench spreads load over several
    open_loop: bool = False
    prefix_group: int = -1  # -1: no shared prefix
    conversation_id: int = -1  # -1: single-turn; else the session (conversation, agent chain)
    turn: int = 0  # the session's step: a conversation's turn, an agent's call
    session_last: bool = False  # open loop: this answer completed its session
    slice: int = -1  # alternating servers (bench --alternate): the slice it was sent in
    scheduled_at: float = NAN
    sent_at: float = NAN
    first_token_at: float = NAN
    last_token_at: float = NAN
    finished_at: float = NAN
    ttft_ms: float = NAN
    e2e_ms: float = NAN
    tpot_ms: float = NAN
    schedule_lag_ms: float = 0.0
    # closed loop: from this user's previous answer (its last byte) to this send; NaN for a
    # user's first request and for open-loop ones
    idle_before_ms: float = NAN
    # closed-loop sessions: the think time this step was due after the previous answer (its
    # scheduled_at is that answer's end plus this); 0: sent at once
    think_ms: float = 0.0
    itl_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = -1  # from the server's usage; -1 when not reported
    completion_tokens: int = -1
    cached_tokens: int = -1
    expected_prompt_tokens: int = -1  # what the workload asked for
    expected_output_tokens: int = -1
    status: str = Status.OK.value
    http_status: int = 0
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A msgpack- and JSON-safe dict (plain floats, ints, strings, lists)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{k: data[k] for k in FIELDS if k in data})

    def finalize(self) -> RequestRecord:
        """Derive the durations from the timestamps, the way ``vllm bench serve`` does."""
        if not math.isnan(self.sent_at):
            if math.isnan(self.scheduled_at):
                self.scheduled_at = self.sent_at
            self.schedule_lag_ms = max(0.0, (self.sent_at - self.scheduled_at) * 1000.0)
            if not math.isnan(self.first_token_at):
                self.ttft_ms = (self.first_token_at - self.sent_at) * 1000.0
            if not math.isnan(self.last_token_at):
                self.e2e_ms = (self.last_token_at - self.sent_at) * 1000.0
        if self.completion_tokens > 1 and not math.isnan(self.e2e_ms):
            self.tpot_ms = (self.e2e_ms - self.ttft_ms) / (self.completion_tokens - 1)
        return self


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))

# A records file without these columns is not vprof's (no summary can be made without them);
# any other column an older file lacks reads as its default above.
REQUIRED_FIELDS: tuple[str, ...] = ("request_id", "status", "sent_at", "ttft_ms", "e2e_ms")


def field_default(name: str) -> Any:
    """The value a record holds in ``name`` when nothing set it."""
    return getattr(RequestRecord(request_id=""), name)


def arrow_schema():  # -> pyarrow.Schema, imported lazily
    import pyarrow as pa

    types = {
        "open_loop": pa.bool_(),
        "session_last": pa.bool_(),
        "itl_ms": pa.list_(pa.float64()),
    }
    for name in (
        "prefix_group",
        "conversation_id",
        "turn",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "expected_prompt_tokens",
        "expected_output_tokens",
        "http_status",
        "slice",
    ):
        types[name] = pa.int64()
    for f in fields(RequestRecord):
        if f.name not in types:
            types[f.name] = pa.float64() if f.type == "float" else pa.string()
    return pa.schema([(name, types[name]) for name in FIELDS])


def _fits(found: Any, wanted: Any) -> bool:
    """True when a column of type ``found`` casts losslessly enough to vprof's ``wanted``."""
    import pyarrow as pa

    t = pa.types
    if t.is_null(found) or found == wanted:
        return True
    if t.is_floating(wanted):
        return t.is_integer(found) or t.is_floating(found)
    if t.is_integer(wanted):
        return t.is_integer(found)
    if t.is_string(wanted):
        return t.is_string(found) or t.is_large_string(found)
    if t.is_list(wanted):
        return (t.is_list(found) or t.is_large_list(found)) and _fits(
            found.value_type, wanted.value_type
        )
    return False


def check_schema(schema: Any, path: str) -> None:
    """Refuse an Arrow schema that is not vprof's records (raises :class:`RunError`): it must
    have the required columns, and every column vprof knows must hold its kind of value."""

    wanted = arrow_schema()
    names = set(schema.names)
    missing = [name for name in REQUIRED_FIELDS if name not in names]
    if missing:
        has = ", ".join(schema.names[:8]) + (", …" if len(schema.names) > 8 else "")
        raise RunError(
            f"not vprof's records: no {', '.join(missing)} column"
            f"{'s' if len(missing) > 1 else ''} (it has: {has or 'no columns'})",
            path=path,
            hint="records.arrow is written by vprof's load generator",
        )
    for name in FIELDS:
        if name in names:
            found = schema.field(name).type
            if not _fits(found, wanted.field(name).type):
                raise RunError(
                    f"the column holds {found} values; vprof's records hold "
                    f"{wanted.field(name).type}",
                    path=path,
                    key=name,
                    hint="records.arrow is written by vprof's load generator",
                )


def conform(table: Any, path: str) -> Any:
    """``table`` with exactly vprof's columns in order: missing optional ones filled with
    their default, others cast to vprof's types (a no-op, zero-copy, for vprof's own files)."""
    import pyarrow as pa

    wanted = arrow_schema()
    if table.schema.equals(wanted):
        return table
    columns = []
    for f in wanted:
        if f.name in table.column_names:
            columns.append(table.column(f.name))
        else:
            columns.append(pa.repeat(pa.scalar(field_default(f.name), f.type), table.num_rows))
    try:
        return pa.Table.from_arrays(columns, names=list(FIELDS)).cast(wanted)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise RunError(f"its columns do not convert to vprof's records: {exc}", path=path) from None


# What a record's numbers can be (NaN aside: "not reached"). A value outside is not something
# vprof wrote, and would make a summary allocate or divide by nonsense.
MAX_EPOCH_S = 1e11  # wall-clock seconds: the year 5138
MAX_RUN_SPAN_S = 30 * 86_400.0  # from the first time in a run to the last
MAX_DURATION_MS = MAX_RUN_SPAN_S * 1000.0
_INT_RANGES = {
    "prefix_group": (-1, 10**12),
    "conversation_id": (-1, 10**12),
    "turn": (0, 10**9),
    "slice": (-1, 10**9),
    "http_status": (0, 999),
    **{
        name: (-1, 10**9)  # token counts; -1: not reported
        for name in (
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "expected_prompt_tokens",
            "expected_output_tokens",
        )
    },
}


def check_values(table: Any, path: str) -> None:
    """Refuse records whose numbers vprof could not have written (raises :class:`RunError`
    naming the row, the request and the column): times outside the epoch or spread over more
    than 30 days, negative or infinite durations and gaps, token counts out of range, rows
    without an id or a status. The checks of :func:`check_scalars`, then :func:`check_gaps`."""
    check_scalars(table, path)
    check_gaps(table, path)


def _refuse(table: Any, path: str, name: str, bad: Any, what: str) -> None:
    """Raise the :class:`RunError` of the first ``bad`` row of column ``name``."""
    import numpy as np

    row = int(np.argmax(bad))
    request = table.column("request_id")[row].as_py()
    raise RunError(
        f"row {row + 1}"
        + (f" (request {request!r})" if request is not None else "")
        + f" holds {what}",
        path=path,
        key=name,
        hint="records.arrow is written by vprof's load generator",
    )


def check_scalars(table: Any, path: str) -> None:
    """:func:`check_values` of every column but the inter-token gaps."""
    import numpy as np

    from vprof.records import arrays

    def refuse(name: str, bad: Any, what: str) -> None:
        _refuse(table, path, name, bad, what)

    for name in ("request_id", "status"):
        if table.column(name).null_count:
            refuse(name, ~arrays.bools(table.column(name).is_valid()), "no value")

    def whole(name: str) -> Any:
        """A column as one array (the file's pages stay until the reader is done)."""
        column = table.column(name)
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

    def low_high(name: str) -> tuple[float, float]:
        # fmin/fmax skip NaN (not reached): one pass each, no mask unless something is out
        # of range.
        values = arrays.floats(whole(name))
        if not values.size:
            return math.nan, math.nan
        return np.fmin.reduce(values), np.fmax.reduce(values)

    first, last = math.inf, -math.inf
    for f in fields(RequestRecord):
        if f.type == "float":
            lo, hi = low_high(f.name)
            if math.isnan(lo):
                continue
            is_time = f.name.endswith("_at")
            top = MAX_EPOCH_S if is_time else MAX_DURATION_MS
            if is_time:
                first, last = min(first, float(lo)), max(last, float(hi))
            if lo < 0 or hi > top:
                values = arrays.floats(table.column(f.name))
                bad = (values < 0) | (values > top)
                what = "not a time (seconds since 1970)" if is_time else "not a duration in ms"
                refuse(f.name, bad, f"{float(values[bad][0]):g}, {what}")
        elif f.name in _INT_RANGES:
            low, high = _INT_RANGES[f.name]
            values = arrays.ints(whole(f.name), fill=low)
            if values.size and (values.min() < low or values.max() > high):
                bad = (values < low) | (values > high)
                refuse(f.name, bad, f"{int(values[bad][0]):,}, outside {low}…{high:,}")
    if last - first > MAX_RUN_SPAN_S:
        raise RunError(
            f"its times span {(last - first) / 86_400:,.0f} days (a run lasts at most 30)",
            path=path,
            hint="records.arrow is written by vprof's load generator",
        )


def check_gaps(table: Any, path: str) -> tuple[tuple[Any, Any], ...]:
    """:func:`check_values` of the inter-token gaps: each a non-negative, finite float.

    Returns each non-empty batch's gaps as read ((values, lengths), views into the table's
    batches), so that the summary's columns use them instead of reading them again.
    """
    import numpy as np

    from vprof.records import arrays
    from vprof.records.store import Releaser

    # A gap is a non-negative, finite float: read as unsigned integers, those are exactly the
    # bit patterns up to the limit's (a sign bit, NaN or inf reads as larger): one pass, the
    # exact test only when it fails (-0.0 passes it).
    limit = np.float64(MAX_DURATION_MS).view(np.uint64)
    row = 0
    pages = Releaser()  # the gaps checked, their pages handed back a few MB at a time
    blocks = []
    for chunk in table.column("itl_ms").chunks:
        gaps, lengths = arrays.list_block(chunk)
        if len(chunk):
            blocks.append((gaps, lengths))
        if gaps.size and not (
            gaps.view(np.uint64).max() <= limit
            or (gaps.min() >= 0 and gaps.max() <= MAX_DURATION_MS)
        ):
            bad = ~((gaps >= 0) & (gaps <= MAX_DURATION_MS))
            rows = np.repeat(np.arange(lengths.size), lengths)
            mask = np.zeros(table.num_rows, dtype=bool)
            mask[row + rows[int(np.argmax(bad))]] = True
            _refuse(table, path, "itl_ms", mask, f"a gap of {float(gaps[bad][0]):g} ms")
        row += len(chunk)
        pages.add(gaps)  # a call per batch cost a tenth of the check
    pages.close()
    return tuple(blocks)
