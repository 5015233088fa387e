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


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"  # HTTP error, bad stream, connection failure
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # cut off at the end of a test or by Ctrl-C


NAN = math.nan

# The load generator's health samples (``loadgen.jsonl``) carry a histogram of event-loop lag:
# bucket i counts wake-ups late by at most LOOP_LAG_BUCKETS_MS[i] ms (the last, by more).
LOOP_LAG_BUCKETS_MS: tuple[float, ...] = (
    0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 2000,
)  # fmt: skip


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    user_class: str = ""
    endpoint: str = ""  # "completions" | "chat" | "generate"
    worker: str = ""  # which Locust process produced it
    replica: str = ""  # the server (base URL) it went to, when a bench spreads load over several
    open_loop: bool = False
    prefix_group: int = -1  # -1: no shared prefix
    conversation_id: int = -1  # -1: single-turn
    turn: int = 0
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


def arrow_schema():  # -> pyarrow.Schema, imported lazily
    import pyarrow as pa

    types = {
        "open_loop": pa.bool_(),
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
    ):
        types[name] = pa.int64()
    for f in fields(RequestRecord):
        if f.name not in types:
            types[f.name] = pa.float64() if f.type == "float" else pa.string()
    return pa.schema([(name, types[name]) for name in FIELDS])
