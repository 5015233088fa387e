"""Prompts for a trace's requests: each of its exact length, sharing blocks where the trace does.

Request i of a trace, with P prompt tokens and block ids h0, h1, …, gets a prompt whose tokens
k·B to (k+1)·B — counted as the server counts them, a completion's BOS included — are block
(h_k, k): text drawn from a generator seeded by (seed, salt, h_k, k). Every request that has h_k
at position k therefore sends the same tokens there, and the server's prefix cache sees what
production's did. A last, partial block is the start of the same text. Tokens after the blocks
are the request's own. A closed loop that runs past the trace's end starts lap n = i // len with
fresh text, so a second pass is not a free cache hit.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING

from vprof.workloads.requestplan import RequestPlan
from vprof.workloads.trace import Trace

if TYPE_CHECKING:  # a synthesizer hands itself to its trace planner
    from vprof.workloads.synthesis import RequestSynthesizer

_BLOCK_CACHE = 4096  # blocks kept drawn (~15 MB at 512 tokens); shared ones are reused often


class TracePlanner:
    """Plans request i of a trace (``RequestSynthesizer.plan`` hands trace workloads here)."""

    def __init__(self, synth: RequestSynthesizer, trace: Trace) -> None:
        self.trace = trace
        self._synth = synth
        self._pool = synth._builder.pieces
        # The BOS the server puts before a completion's prompt is token 0 of block 0.
        self._specials = synth._specials if synth.workload.endpoint == "completions" else 0
        self._blocks: OrderedDict[tuple[int, int, int], list[str]] = OrderedDict()
        firsts = Counter(r.prefix_blocks[0] for r in trace.requests if r.prefix_blocks)
        self._shared_firsts = {block for block, n in firsts.items() if n > 1}

    def _draw(self, n: int, rng: random.Random) -> list[str]:
        # One draw per token in order, so the first n pieces of a block are the same whatever
        # its length: a partial block is a prefix of the full one.
        pool = self._pool
        m = len(pool)
        draw = rng.random
        return [pool[int(draw() * m)] for _ in range(n)]

    def block_pieces(self, lap: int, block_id: int, position: int) -> list[str]:
        """The one-token strings of block ``block_id`` at ``position`` (full length)."""
        key = (lap, block_id, position)
        pieces = self._blocks.get(key)
        if pieces is not None:
            self._blocks.move_to_end(key)
            return pieces
        size = self.trace.spec.block_size - (self._specials if position == 0 else 0)
        rng = self._synth._text_rng("trace-block", lap, block_id, position)
        pieces = self._draw(max(size, 0), rng)
        self._blocks[key] = pieces
        if len(self._blocks) > _BLOCK_CACHE:
            self._blocks.popitem(last=False)
        return pieces

    def _request(self, index: int) -> tuple[int, int]:
        if index < 0:
            raise IndexError(f"request index {index} is negative")
        return divmod(index, len(self.trace.requests))

    def planned_lengths(self, index: int) -> tuple[int, int, int]:
        """(prefix group, prompt tokens, output tokens) of ``plan(index)``."""
        _, j = self._request(index)
        r = self.trace.requests[j]
        return self._group(j), max(r.prompt_tokens, self._specials + 1), r.output_tokens

    def _group(self, j: int) -> int:
        blocks = self.trace.requests[j].prefix_blocks
        return blocks[0] if blocks and blocks[0] in self._shared_firsts else -1

    def plan(self, index: int) -> RequestPlan:
        """Request ``index`` of the trace (wrapping round, with fresh text, past its end)."""
        lap, j = self._request(index)
        r = self.trace.requests[j]
        block = self.trace.spec.block_size
        specials = self._specials
        # A prompt needs one token of its own text; a 1-token completion is its BOS alone.
        target = max(r.prompt_tokens, specials + 1)
        parts: list[str] = []
        content = 0  # tokens of text so far (the server adds ``specials`` in front)
        for k, block_id in enumerate(r.prefix_blocks):
            count = min((k + 1) * block, target) - max(k * block, specials)
            if count <= 0:
                continue
            parts.extend(self.block_pieces(lap, block_id, k)[:count])
            content += count
        rest = target - specials - content
        if rest > 0:
            parts.extend(self._draw(rest, self._synth._text_rng("trace", lap, j)))
        text = "".join(parts)
        max_tokens, min_tokens, ignore_eos = self._synth._output(r.output_tokens)
        chat = self._synth.workload.endpoint == "chat"
        return RequestPlan(
            index=index,
            prompt=None if chat else text,
            messages=[{"role": "user", "content": text}] if chat else None,
            expected_prompt_tokens=target,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=ignore_eos,
            prefix_group=self._group(j),
        )
