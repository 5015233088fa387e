"""What an emulated server looks like: its model name, limits and timing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vprof.common.errors import VprofError


@dataclass(frozen=True)
class EmulatorConfig:
    """Timing and identity of an emulated vLLM server.

    Token ``k`` (0-based) of a request received at ``t0`` is sent at
    ``t0 + ttft_ms + prefill_ms_per_token * prompt_tokens + offset + k * itl_ms`` plus a
    non-negative jitter drawn per token, so delays never accumulate drift. ``offset`` is in
    ``[0, ttft_spread_ms)``, a seeded function of the prompt's token count (see
    ``timing.ttft_offset_ms``): streams do not all get their chunks in the same millisecond,
    and a client can still recompute each request's true TTFT from its usage.
    """

    host: str = "127.0.0.1"
    port: int = 0  # 0: pick a free port; read it back from Emulator.url
    model: str = "emulated"
    ttft_ms: float = 20.0
    itl_ms: float = 10.0
    jitter_ms: float = 0.0  # each token is late by U(0, jitter_ms), on top of its deadline
    ttft_spread_ms: float = 0.0  # first token later by an offset in [0, spread) per prompt length
    prefill_ms_per_token: float = 0.0
    default_max_tokens: int = 16  # output length when a request names none
    max_model_len: int = 2048
    tokenizer_path: str | None = None  # tokenizer.json (or a model dir holding one)
    seed: int = 0
    precise_timers: bool = True  # spin out the last <0.5 ms before a deadline (see http.py)
    send_log: str | None = None  # a folder: log when each chunk really left (see sendlog.py)

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "itl_ms", "jitter_ms", "ttft_spread_ms", "prefill_ms_per_token"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise VprofError(
                    f"must be a finite number, zero or more, got {value}",
                    key=name,
                    hint="timings are in ms",
                )
        if self.default_max_tokens < 1:
            raise VprofError("must be at least 1", key="default_max_tokens")
        if self.max_model_len < 2:
            raise VprofError("must be at least 2", key="max_model_len")
        if not 0 <= self.port <= 65535:
            raise VprofError(f"{self.port} is not a TCP port", key="port")
