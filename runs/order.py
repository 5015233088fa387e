"""In which order a bench runs its (profile, repeat) blocks: pure, so it is tested alone."""

from __future__ import annotations

import random

ORDERS = ("interleaved", "blocked", "shuffled")


def block_order(profiles: int, repeats: int, order: str, seed: int = 0) -> list[tuple[int, int]]:
    """The (profile index, repeat) blocks in the order they run.

    ``interleaved``: A1 B1 A2 B2 … so drift over time hits every profile alike; ``blocked``:
    A1 A2 B1 B2 … (fewest server starts); ``shuffled``: the interleaved blocks in a random
    order drawn from ``seed``.
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}")
    blocks = [(p, r) for r in range(1, repeats + 1) for p in range(profiles)]
    if order == "blocked":
        blocks.sort()
    elif order == "shuffled":
        random.Random(seed).shuffle(blocks)
    return blocks
