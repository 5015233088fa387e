"""When each emulated token leaves: absolute deadlines, so delays never drift."""

from __future__ import annotations

import random

from vprof.emulator.config import EmulatorConfig

_MASK64 = (1 << 64) - 1


def _unit_hash(seed: int, key: int) -> float:
    """A uniform number in [0, 1) fixed by ``(seed, key)`` (splitmix64; same on every platform)."""
    z = (((seed & 0xFFFFFFFF) << 32) ^ (key & 0xFFFFFFFF)) + 0x9E3779B97F4A7C15
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def ttft_offset_ms(config: EmulatorConfig, prompt_tokens: int) -> float:
    """A request's extra first-token delay, in ``[0, ttft_spread_ms)``.

    A seeded function of the prompt's token count rather than a draw per request, so a
    client that knows only a request's usage (``prompt_tokens``) can recompute its true TTFT
    (:func:`true_ttft_ms`); a workload whose prompt lengths vary gets offsets spread evenly.
    """
    if not config.ttft_spread_ms:
        return 0.0
    return config.ttft_spread_ms * _unit_hash(config.seed, prompt_tokens)


def true_ttft_ms(config: EmulatorConfig, prompt_tokens: int) -> float:
    """How long after a request arrives its first token is due (before any jitter)."""
    return (
        config.ttft_ms
        + config.prefill_ms_per_token * prompt_tokens
        + ttft_offset_ms(config, prompt_tokens)
    )


def token_deadlines(
    config: EmulatorConfig,
    start_s: float,
    prompt_tokens: int,
    output_tokens: int,
    rng: random.Random | None = None,
) -> list[float]:
    """Send times (same clock as ``start_s``) of ``output_tokens`` tokens.

    Token k is due at ``start + true_ttft + k·itl`` plus its own jitter in
    ``[0, jitter_ms]``; deadlines never go backwards.
    """
    first_s = start_s + true_ttft_ms(config, prompt_tokens) / 1000.0
    itl_s = config.itl_ms / 1000.0
    jitter_s = config.jitter_ms / 1000.0
    if not (jitter_s and rng is not None):
        return [first_s + k * itl_s for k in range(output_tokens)]
    deadlines: list[float] = []
    previous = start_s
    for k in range(output_tokens):
        previous = max(previous, first_s + k * itl_s + rng.uniform(0.0, jitter_s))
        deadlines.append(previous)
    return deadlines
