"""When each emulated token leaves: absolute deadlines, so delays never drift."""

from __future__ import annotations

import random

from vprof.emulator.config import EmulatorConfig


def token_deadlines(
    config: EmulatorConfig,
    start_s: float,
    prompt_tokens: int,
    output_tokens: int,
    rng: random.Random | None = None,
) -> list[float]:
    """Send times (same clock as ``start_s``) of ``output_tokens`` tokens.

    Token k is due at ``start + ttft + prefill·prompt_tokens + k·itl`` plus its own jitter
    in ``[0, jitter_ms]``; deadlines never go backwards.
    """
    first_s = start_s + (config.ttft_ms + config.prefill_ms_per_token * prompt_tokens) / 1000.0
    itl_s = config.itl_ms / 1000.0
    jitter_s = config.jitter_ms / 1000.0
    deadlines: list[float] = []
    previous = start_s
    for k in range(output_tokens):
        due = first_s + k * itl_s
        if jitter_s and rng is not None:
            due += rng.uniform(0.0, jitter_s)
        previous = max(previous, due)
        deadlines.append(previous)
    return deadlines
