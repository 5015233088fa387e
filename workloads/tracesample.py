"""The sample trace shipped with vprof, and the deterministic generator that writes it.

``python -m vprof.workloads.tracesample > workloads/traces/sample-trace.jsonl`` rewrites the
file; a test checks that the shipped file is exactly this generator's output.

About 330 Mooncake-style requests (JSONL, 512-token blocks) over 90 s: first requests arrive as
a Poisson process whose rate swells from 1.4 to 2.8 req/s mid-trace and bursts by 6 req/s for
6 s; most start with one of four shared system prompts (1 to 3 blocks, Zipf-popular); a quarter
of those open conversations whose later turns arrive 4-15 s apart and resend the history
(sharing its full blocks); a fifth are one-off requests that share nothing. Every request fits a
2048-token context with its output, so the tiny model serves it on two CPU cores.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any, TextIO

SAMPLE_PATH = Path(__file__).parent / "traces" / "sample-trace.jsonl"
SEED = 13
BLOCK_TOKENS = 512
SPAN_S = 90.0
MAX_CONTEXT_TOKENS = 2048  # inside every shipped profile's max-model-len
SYSTEM_PROMPT_BLOCKS = (1, 2, 2, 3)
_BURST = (52.0, 58.0, 6.0)  # from, to, extra req/s
_PEAK_RPS = 2.8 + _BURST[2]


def _rate_rps(t_s: float) -> float:
    swell = 1.4 + 1.4 * math.sin(math.pi * t_s / SPAN_S) ** 2
    return swell + (_BURST[2] if _BURST[0] <= t_s < _BURST[1] else 0.0)


def _length(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return min(hi, max(lo, round(rng.lognormvariate(math.log(median), sigma))))


def _blocks_for(prompt_tokens: int) -> int:
    return -(-prompt_tokens // BLOCK_TOKENS)


def sample_trace_rows(seed: int = SEED) -> list[dict[str, Any]]:
    """The sample trace's rows in file order (Mooncake's keys; block ids renumbered by first
    appearance, as Mooncake's are)."""
    rng = random.Random(seed)
    counter = iter(range(1 << 30))

    def fresh(n: int) -> list[int]:
        return [next(counter) for _ in range(n)]

    systems = [fresh(n) for n in SYSTEM_PROMPT_BLOCKS]
    popularity = [1.0 / (k + 1) for k in range(len(systems))]
    events: list[tuple[float, int, dict[str, Any]]] = []

    def add(t_s: float, prompt: int, output: int, ids: list[int]) -> None:
        row = {"input_length": prompt, "output_length": output, "hash_ids": ids}
        events.append((t_s, len(events), row))

    t_s = 0.0
    while True:
        t_s += rng.expovariate(_PEAK_RPS)  # thinning: a Poisson process of varying rate
        if t_s >= SPAN_S:
            break
        if rng.random() * _PEAK_RPS > _rate_rps(t_s):
            continue
        output = _length(rng, 40, 0.6, 4, 200)
        room = MAX_CONTEXT_TOKENS - output
        if rng.random() < 0.2:  # a one-off request: nothing shared
            prompt = _length(rng, 400, 0.8, 32, room)
            add(t_s, prompt, output, fresh(_blocks_for(prompt)))
            continue
        system = rng.choices(systems, weights=popularity)[0]
        prompt = min(len(system) * BLOCK_TOKENS + _length(rng, 200, 0.7, 16, 1200), room)
        ids = system + fresh(_blocks_for(prompt) - len(system))
        add(t_s, prompt, output, ids)
        if rng.random() >= 0.25:
            continue
        # A conversation: each later turn resends the history plus a new user message.
        turn_t_s = t_s
        for _ in range(rng.randint(1, 3)):
            turn_t_s += rng.uniform(4.0, 15.0)
            user = _length(rng, 120, 0.6, 16, 600)
            next_output = _length(rng, 40, 0.6, 4, 200)
            next_prompt = prompt + output + user
            if turn_t_s >= SPAN_S or next_prompt + next_output > MAX_CONTEXT_TOKENS:
                break
            kept = ids[: prompt // BLOCK_TOKENS]  # the history's full blocks are unchanged
            ids = kept + fresh(_blocks_for(next_prompt) - len(kept))
            prompt, output = next_prompt, next_output
            add(turn_t_s, prompt, output, ids)
    events.sort(key=lambda e: (e[0], e[1]))
    start_s = events[0][0]  # Mooncake's timestamps count from the first request
    renumber: dict[int, int] = {}
    rows = []
    for when, _, row in events:
        ids = [renumber.setdefault(i, len(renumber)) for i in row["hash_ids"]]
        rows.append({"timestamp": round((when - start_s) * 1000.0), **row, "hash_ids": ids})
    return rows


def write_sample_trace(out: TextIO, seed: int = SEED) -> None:
    """Write the sample trace as JSON lines to ``out``."""
    for row in sample_trace_rows(seed):
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    write_sample_trace(sys.stdout)
