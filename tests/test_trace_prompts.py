"""Prompts for trace requests, built with the tiny model's tokenizer: exact lengths, and the
same tokens exactly where requests share block ids, so the implied hit rate is what a prefix
cache would see. Pure and fast: no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from vprof.workloads.loading import get_workload, workload_from_dict
from vprof.workloads.synthesis import HFTokenizer, RequestSynthesizer, load_tokenizer
from vprof.workloads.trace import load_trace
from vprof.workloads.tracestats import prefix_sharing

BLOCK = 512


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> HFTokenizer:
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def sample():
    return get_workload("sample-trace")


def _server_ids(tok: HFTokenizer, plan) -> list[int]:
    """The token ids the server sees: BOS + prompt for completions, the content for chat."""
    if plan.prompt is not None:
        return [-1] * tok.num_special_tokens + tok.encode(plan.prompt)
    return tok.encode(plan.messages[-1]["content"])


def _write_trace(tmp_path: Path, rows: list[tuple[int, int, list[int]]]) -> str:
    lines = [
        f'{{"timestamp": {i * 100}, "input_length": {p}, "output_length": {o}, "hash_ids": {ids}}}'
        for i, (p, o, ids) in enumerate(rows)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _workload(path: str, **extra):
    return workload_from_dict({"kind": "trace", "file": path, **extra}, default_name="t")


def test_every_sample_prompt_has_exactly_the_trace_length(tokenizer, sample):
    synth = RequestSynthesizer(sample, tokenizer, salt="run-1")
    trace = load_trace(sample.trace)
    for i, request in enumerate(trace.requests):
        plan = synth.plan(i)
        assert (
            len(_server_ids(tokenizer, plan))
            == request.prompt_tokens
            == (plan.expected_prompt_tokens)
        )
        assert plan.max_tokens == plan.min_tokens == request.output_tokens and plan.ignore_eos


def test_chat_trace_prompts_count_their_content_exactly(tmp_path, tokenizer):
    path = _write_trace(tmp_path, [(700, 5, [1, 2]), (40, 3, [1])])
    synth = RequestSynthesizer(_workload(path, endpoint="chat"), tokenizer)
    for i, length in enumerate((700, 40)):
        plan = synth.plan(i)
        assert plan.prompt is None and len(_server_ids(tokenizer, plan)) == length


def test_shared_block_ids_share_exactly_those_prefix_tokens(tokenizer, sample):
    synth = RequestSynthesizer(sample, tokenizer, salt="s")
    requests = load_trace(sample.trace).requests
    ids = [_server_ids(tokenizer, synth.plan(i)) for i in range(len(requests))]
    checked = 0
    for a in range(0, len(requests), 3):
        for b in range(a + 1, len(requests), 7):
            ra, rb = requests[a], requests[b]
            shared = 0
            while (
                shared < min(len(ra.prefix_blocks), len(rb.prefix_blocks))
                and ra.prefix_blocks[shared] == rb.prefix_blocks[shared]
            ):
                shared += 1
            # The shared blocks are the same tokens (a partial last block: as far as both go).
            end = min(shared * BLOCK, ra.prompt_tokens, rb.prompt_tokens)
            assert ids[a][:end] == ids[b][:end]
            # The first block where they differ is different text.
            if shared < min(len(ra.prefix_blocks), len(rb.prefix_blocks)):
                lo, hi = shared * BLOCK, (shared + 1) * BLOCK
                assert ids[a][lo:hi] != ids[b][lo:hi]
                checked += 1
    assert checked > 100


def test_a_partial_last_block_is_the_start_of_the_full_one(tmp_path, tokenizer):
    # AIPerf's example: 655 and 672 tokens both end in block 47, holding 143 and 160 tokens.
    path = _write_trace(tmp_path, [(655, 5, [46, 47]), (672, 5, [46, 47]), (1024, 5, [46, 47])])
    synth = RequestSynthesizer(_workload(path), tokenizer)
    a, b, full = (_server_ids(tokenizer, synth.plan(i)) for i in range(3))
    assert a == b[:655] == full[:655] and b == full[:672]


def test_the_implied_hit_rate_is_what_the_prompts_share(tokenizer, sample):
    """The cached tokens the trace implies equal the tokens each prompt shares with an earlier
    one (longest common prefix), up to a chance match of a word or two where they part."""
    synth = RequestSynthesizer(sample, tokenizer, salt="x")
    requests = load_trace(sample.trace).requests
    seen: dict[tuple[int, ...], None] = {}
    prefixes_total = 0
    for i in range(len(requests)):
        tokens = tuple(_server_ids(tokenizer, synth.plan(i)))
        best = 0
        for earlier in seen:
            n = 0
            limit = min(len(tokens), len(earlier))
            while n < limit and tokens[n] == earlier[n]:
                n += 1
            best = max(best, n)
        prefixes_total += best
        seen[tokens] = None
    implied = prefix_sharing(requests, BLOCK)
    assert implied.cached_tokens > 0.3 * implied.prompt_tokens
    assert implied.cached_tokens <= prefixes_total <= implied.cached_tokens + 3 * len(requests)


def test_salt_changes_the_text_but_not_lengths_or_sharing(tokenizer, sample):
    one = RequestSynthesizer(sample, tokenizer, salt="a")
    two = RequestSynthesizer(sample, tokenizer, salt="b")
    p1, p2 = one.plan(3), two.plan(3)
    assert p1.prompt != p2.prompt
    assert p1.expected_prompt_tokens == p2.expected_prompt_tokens
    assert p1.prefix_group == p2.prefix_group
    assert one.plan(3) == p1  # and the same salt gives the same request


def test_plans_depend_on_their_index_alone(tokenizer, sample):
    forward = RequestSynthesizer(sample, tokenizer, salt="w")
    backward = RequestSynthesizer(sample, tokenizer, salt="w")
    indices = [0, 5, 17, 40]
    planned = {i: forward.plan(i) for i in indices}
    assert all(backward.plan(i) == planned[i] for i in reversed(indices))
    assert forward.planned_lengths(17) == (
        planned[17].prefix_group,
        planned[17].expected_prompt_tokens,
        planned[17].max_tokens,
    )


def test_a_closed_loop_past_the_end_gets_fresh_text(tmp_path, tokenizer):
    path = _write_trace(tmp_path, [(600, 5, [1, 2]), (600, 5, [1, 3])])
    synth = RequestSynthesizer(_workload(path), tokenizer)
    first, again = synth.plan(0), synth.plan(2)
    assert again.expected_prompt_tokens == 600 and again.prompt != first.prompt
    # within the second lap the trace's sharing holds again
    assert _server_ids(tokenizer, synth.plan(3))[:BLOCK] == _server_ids(tokenizer, again)[:BLOCK]


def test_the_prefix_group_is_a_shared_first_block(tmp_path, tokenizer):
    path = _write_trace(tmp_path, [(600, 5, [1, 2]), (600, 5, [1, 3]), (300, 5, [4]), (9, 1, [])])
    synth = RequestSynthesizer(_workload(path), tokenizer)
    assert [synth.plan(i).prefix_group for i in range(4)] == [1, 1, -1, -1]


def test_a_one_token_completion_keeps_one_token_of_text(tmp_path, tokenizer):
    path = _write_trace(tmp_path, [(1, 2, [7])])
    plan = RequestSynthesizer(_workload(path), tokenizer).plan(0)
    assert plan.prompt and plan.expected_prompt_tokens == 2 == len(_server_ids(tokenizer, plan))


def test_free_output_lengths_are_a_ceiling(tmp_path, tokenizer):
    path = _write_trace(tmp_path, [(50, 9, [])])
    plan = RequestSynthesizer(_workload(path, fixed_output=False), tokenizer).plan(0)
    assert (plan.max_tokens, plan.min_tokens, plan.ignore_eos) == (9, None, False)
