"""Planned prompt lengths against the real vLLM CPU server's tokenizer and usage counts."""

from __future__ import annotations

from collections import defaultdict

import pytest
import requests

from vprof.workloads.loading import get_workload
from vprof.workloads.synthesis import RequestSynthesizer, load_tokenizer
from vprof.workloads.tokencheck import check_against_server

pytestmark = pytest.mark.e2e


def _plans(name: str, n: int, tokenizer, salt: str = "e2e"):
    synth = RequestSynthesizer(get_workload(name), tokenizer, salt=salt)
    return [synth.plan(i) for i in range(n)]


def test_completion_prompts_match_the_server_token_for_token(vllm_server):
    tokenizer = load_tokenizer(vllm_server.model_dir)
    plans = (
        _plans("tiny-smoke", 5, tokenizer)
        + _plans("fixed-800-64", 5, tokenizer)
        + _plans("long-prompt-short-answer", 5, tokenizer)
        + _plans("rag-shared-prefix", 15, tokenizer)
    )
    check = check_against_server(plans, vllm_server.url, vllm_server.model)
    print("completions token check:", check.to_dict())
    assert check.completions_requests == 30 and check.chat_requests == 0
    assert check.mismatch_rate == 0.0, check.diffs
    assert check.max_abs_diff == 0


def test_chat_differs_from_the_plan_only_by_the_template_tokens(vllm_server):
    tokenizer = load_tokenizer(vllm_server.model_dir)
    plans = _plans("chat", 8, tokenizer)
    synth = RequestSynthesizer(get_workload("multi-turn"), tokenizer, salt="e2e")
    conversation = synth.start_conversation(0)
    plan = conversation.next_turn(None)
    while plan is not None:
        plans.append(plan)
        plan = conversation.next_turn(" the answer was short and clear")
    check = check_against_server(plans, vllm_server.url, vllm_server.model)
    print("chat token check:", check.to_dict())
    assert check.chat_requests == len(plans) and check.completions_requests == 0
    assert check.mean_template_tokens > 0
    # The template adds a fixed number of tokens per message, so the gap depends only on how
    # many messages there are: the contents themselves are counted exactly.
    gaps: dict[int, set[int]] = defaultdict(set)
    for p, diff in zip(plans, check.diffs, strict=True):
        gaps[len(p.messages)].add(diff)
    assert all(len(v) == 1 for v in gaps.values()), dict(gaps)
    per_message = {n: next(iter(v)) for n, v in gaps.items()}
    steps = sorted(per_message.items())
    assert all(b[1] > a[1] for a, b in zip(steps, steps[1:], strict=False))


def test_server_usage_equals_the_plan_for_a_fixed_output_request(vllm_server):
    tokenizer = load_tokenizer(vllm_server.model_dir)
    plan = _plans("tiny-smoke", 1, tokenizer, salt="usage")[0]
    response = requests.post(
        vllm_server.url + "/v1/completions", json=plan.request_body(vllm_server.model), timeout=120
    )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] == plan.expected_prompt_tokens == 64
    assert usage["completion_tokens"] == plan.max_tokens == 16
