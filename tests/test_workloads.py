"""Workload synthesis: determinism, exact token lengths, prefixes, distributions, conversations,
YAML errors and the ``vprof workloads`` command. Pure and fast: no server."""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from vprof.cli.main import cli
from vprof.common.errors import WorkloadError
from vprof.workloads.loading import (
    PRESETS_DIR,
    get_workload,
    load_workload_file,
    load_workloads,
    workload_from_dict,
)
from vprof.workloads.spec import ConversationSpec, Distribution, PrefixSpec, Workload, fixed
from vprof.workloads.synthesis import HFTokenizer, RequestSynthesizer, load_tokenizer

PRESETS = (
    "chat",
    "long-prompt-short-answer",
    "rag-shared-prefix",
    "multi-turn",
    "fixed-800-64",
    "tiny-smoke",
    "sample-trace",
    "chat-sessions",
    "agent-fanout",
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> HFTokenizer:
    """The embedded tiny model's byte-level BPE (the tokenizer the test server uses)."""
    return load_tokenizer(tiny_model)


def _train_bpe(lines: list[str], *, vocab_size: int = 600) -> HFTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return HFTokenizer(tok)


def _server_count(tok: HFTokenizer, plan) -> int:
    """What the server would count: BOS + prompt for completions, contents for chat."""
    if plan.prompt is not None:
        return len(tok.encode(plan.prompt)) + tok.num_special_tokens
    return sum(len(tok.encode(m["content"])) for m in plan.messages)


def _workload(**changes) -> Workload:
    base = dict(
        name="t",
        description="",
        endpoint="completions",
        prompt_tokens=fixed(50),
        output_tokens=fixed(8),
        seed=3,
    )
    base.update(changes)
    return Workload(**base)


# --- determinism ---------------------------------------------------------------------------


def test_same_seed_and_salt_reproduce_every_plan(tokenizer):
    w = get_workload("rag-shared-prefix")
    a = RequestSynthesizer(w, tokenizer, salt="run-1")
    b = RequestSynthesizer(w, tokenizer, salt="run-1")
    assert [a.plan(i) for i in range(30)] == [b.plan(i) for i in range(30)]


def test_plan_depends_on_its_index_alone_so_workers_can_split_a_schedule(tokenizer):
    w = get_workload("chat")
    in_order = RequestSynthesizer(w, tokenizer, salt="s")
    worker = RequestSynthesizer(w, tokenizer, salt="s")
    wanted = [in_order.plan(i) for i in range(20)]
    # another worker builds only the odd indices, backwards
    assert all(worker.plan(i) == wanted[i] for i in range(19, 0, -2))


def test_different_salt_changes_all_text_but_not_lengths_or_groups(tokenizer):
    w = get_workload("rag-shared-prefix")
    a = RequestSynthesizer(w, tokenizer, salt="monday")
    b = RequestSynthesizer(w, tokenizer, salt="tuesday")
    for i in range(20):
        pa, pb = a.plan(i), b.plan(i)
        assert pa.prompt != pb.prompt
        assert pa.prompt[:200] != pb.prompt[:200]  # the shared prefixes differ too
        assert (pa.expected_prompt_tokens, pa.max_tokens, pa.prefix_group) == (
            pb.expected_prompt_tokens,
            pb.max_tokens,
            pb.prefix_group,
        )
    assert a.prefix_text(0) != b.prefix_text(0)


def test_different_seed_changes_the_sampled_lengths(tokenizer):
    w = get_workload("chat")
    a = [RequestSynthesizer(w, tokenizer, seed=1).plan(i).expected_prompt_tokens for i in range(20)]
    b = [RequestSynthesizer(w, tokenizer, seed=2).plan(i).expected_prompt_tokens for i in range(20)]
    assert a != b


def test_determinism_holds_across_processes(tokenizer, tiny_model):
    code = (
        "from vprof.workloads.loading import get_workload\n"
        "from vprof.workloads.synthesis import RequestSynthesizer, load_tokenizer\n"
        f"s = RequestSynthesizer(get_workload('chat'), load_tokenizer({str(tiny_model)!r}),"
        " salt='x')\n"
        "print(repr(s.plan(7).messages[-1]['content'][:80]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = RequestSynthesizer(get_workload("chat"), tokenizer, salt="x").plan(7)
    assert out.stdout.strip() == repr(here.messages[-1]["content"][:80])


# --- exact lengths -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_preset_prompts_encode_to_exactly_the_planned_tokens(tokenizer, name):
    synth = RequestSynthesizer(get_workload(name), tokenizer, salt="exact")
    for i in range(25):
        plan = synth.plan(i)
        assert _server_count(tokenizer, plan) == plan.expected_prompt_tokens


def test_completion_length_counts_the_bos_token_like_the_server(tokenizer):
    assert tokenizer.num_special_tokens == 1
    plan = RequestSynthesizer(get_workload("fixed-800-64"), tokenizer).plan(0)
    assert plan.expected_prompt_tokens == 800
    assert len(tokenizer.encode(plan.prompt)) == 799


def test_fallback_builder_reaches_exact_lengths_without_word_tokens():
    # No spaces in the corpus, so no " word" tokens: the decode/re-encode/trim loop is used.
    rng = random.Random(0)
    lines = ["".join(rng.choice("abcdefgh") for _ in range(60)) for _ in range(300)]
    tok = _train_bpe(lines)
    synth = RequestSynthesizer(
        _workload(prompt_tokens=Distribution("uniform", {"min": 5.0, "max": 200.0})), tok
    )
    assert not synth._builder.exact
    plans = [synth.plan(i) for i in range(40)]
    exact = sum(_server_count(tok, p) == p.expected_prompt_tokens for p in plans)
    assert exact >= 38  # vllm bench's loop is best effort; nearly all land exactly


# --- shared prefixes -----------------------------------------------------------------------


def _groups(prefix: PrefixSpec, n: int, tokenizer) -> list[int]:
    synth = RequestSynthesizer(_workload(prefix=prefix), tokenizer)
    return [synth.planned_lengths(i)[0] for i in range(n)]


def test_zipf_popularity_follows_its_weights(tokenizer):
    spec = PrefixSpec(groups=4, length_tokens=32, popularity="zipf", zipf_s=1.1, share=1.0)
    counts = Counter(_groups(spec, 8000, tokenizer))
    for group, weight in enumerate(spec.weights()):
        assert counts[group] / 8000 == pytest.approx(weight, abs=0.02)
    assert counts[0] > counts[1] > counts[2] > counts[3]


def test_uniform_popularity_spreads_requests_evenly(tokenizer):
    spec = PrefixSpec(groups=5, length_tokens=32, popularity="uniform", share=1.0)
    counts = Counter(_groups(spec, 5000, tokenizer))
    assert all(counts[g] / 5000 == pytest.approx(0.2, abs=0.02) for g in range(5))


@pytest.mark.parametrize("share", [0.0, 0.3, 0.9, 1.0])
def test_share_is_the_fraction_of_requests_with_a_shared_prefix(tokenizer, share):
    spec = PrefixSpec(groups=3, length_tokens=32, share=share)
    groups = _groups(spec, 4000, tokenizer)
    assert sum(g >= 0 for g in groups) / 4000 == pytest.approx(share, abs=0.025)


def test_prefix_sits_at_the_start_and_unprefixed_requests_keep_their_length(tokenizer):
    w = get_workload("rag-shared-prefix")
    synth = RequestSynthesizer(w, tokenizer, salt="p")
    plans = [synth.plan(i) for i in range(60)]
    with_prefix = [p for p in plans if p.prefix_group >= 0]
    without = [p for p in plans if p.prefix_group < 0]
    assert with_prefix and without
    for p in with_prefix:
        assert p.prompt.startswith(synth.prefix_text(p.prefix_group))
    for p in without:
        assert not any(p.prompt.startswith(synth.prefix_text(g)) for g in range(4))
        assert p.expected_prompt_tokens >= 1024 + 32  # a unique lead of the prefix's length
    prefix_ids = tokenizer.encode(synth.prefix_text(0))
    assert len(prefix_ids) == 1024


def test_chat_prefix_is_the_system_message(tokenizer):
    w = _workload(endpoint="chat", prefix=PrefixSpec(groups=2, length_tokens=40, share=1.0))
    synth = RequestSynthesizer(w, tokenizer)
    plan = synth.plan(0)
    assert plan.prompt is None
    assert [m["role"] for m in plan.messages] == ["system", "user"]
    assert plan.messages[0]["content"] == synth.prefix_text(plan.prefix_group)
    assert plan.expected_prompt_tokens == 40 + 50


# --- distributions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dist", "mean", "stdev"),
    [
        (Distribution("normal", {"mean": 500.0, "stddev": 50.0}), 500, 50),
        (Distribution("uniform", {"min": 100.0, "max": 300.0}), 200, 200 / math.sqrt(12)),
        (
            Distribution("lognormal", {"mean": 300.0, "sigma": 0.5}),
            300,
            300 * math.sqrt(math.exp(0.25) - 1),
        ),
        (Distribution("lognormal", {"median": 200.0, "sigma": 0.3}), 200 * math.exp(0.045), None),
        (Distribution("empirical", {}, values=(10, 20, 30, 40)), 25, math.sqrt(125)),
        (fixed(64), 64, 0),
    ],
)
def test_distribution_moments_match_their_parameters(dist, mean, stdev):
    rng = random.Random(11)
    xs = [dist.sample(rng) for _ in range(20000)]
    assert statistics.fmean(xs) == pytest.approx(mean, rel=0.02, abs=0.5)
    assert dist.mean() == pytest.approx(mean, rel=1e-9)
    if stdev is not None:
        assert statistics.pstdev(xs) == pytest.approx(stdev, rel=0.05, abs=0.6)


def test_samples_are_clipped_to_min_and_max_and_never_below_one():
    rng = random.Random(1)
    d = Distribution("normal", {"mean": 100.0, "stddev": 80.0, "min": 40.0, "max": 150.0})
    xs = [d.sample(rng) for _ in range(5000)]
    assert min(xs) == 40 and max(xs) == 150
    wide = Distribution("normal", {"mean": 2.0, "stddev": 5.0})
    assert min(wide.sample(rng) for _ in range(2000)) == 1


def test_max_request_tokens_covers_the_longest_request():
    w = get_workload("rag-shared-prefix")
    assert w.max_request_tokens() == 1024 + 768 + 64
    assert get_workload("multi-turn").max_request_tokens() == 2000
    for name in PRESETS:  # everything ships inside max-model-len 2048
        assert get_workload(name).max_request_tokens() <= 2048


def test_fixed_output_asks_for_exactly_that_many_tokens(tokenizer):
    plan = RequestSynthesizer(get_workload("tiny-smoke"), tokenizer).plan(0)
    assert (plan.max_tokens, plan.min_tokens, plan.ignore_eos) == (16, 16, True)
    free = RequestSynthesizer(_workload(fixed_output=False), tokenizer).plan(0)
    assert (free.max_tokens, free.min_tokens, free.ignore_eos) == (8, None, False)
    assert plan.request_body("tiny") == {
        "model": "tiny",
        "max_tokens": 16,
        "prompt": plan.prompt,
        "min_tokens": 16,
        "ignore_eos": True,
    }


# --- conversations -------------------------------------------------------------------------


def test_conversation_history_grows_with_the_actual_replies(tokenizer):
    synth = RequestSynthesizer(get_workload("multi-turn"), tokenizer, salt="c")
    conv = synth.start_conversation(4)
    assert 3 <= conv.turns <= 6
    first = conv.next_turn(None)
    assert first == synth.plan(4)
    assert [m["role"] for m in first.messages] == ["system", "user"]
    previous = first
    replies = []
    while True:
        reply = f" answer number {len(replies)} about the river"
        plan = conv.next_turn(reply)
        if plan is None:
            break
        replies.append(reply)
        # the previous messages, then the assistant's reply, then one new user message
        assert plan.messages[: len(previous.messages)] == previous.messages
        assert plan.messages[len(previous.messages)] == {"role": "assistant", "content": reply}
        assert plan.messages[-1]["role"] == "user"
        assert len(plan.messages) == len(previous.messages) + 2
        assert plan.turn == previous.turn + 1
        assert plan.expected_prompt_tokens > previous.expected_prompt_tokens
        assert _server_count(tokenizer, plan) == plan.expected_prompt_tokens
        assert plan.conversation_id == 4 and plan.prefix_group == 0
        previous = plan
    assert 1 <= len(replies) <= 5
    assert conv.next_turn("more") is None


def test_conversation_stops_before_exceeding_its_context_budget(tokenizer):
    conversation = ConversationSpec(turns=fixed(50), max_context_tokens=600)
    w = _workload(
        endpoint="chat",
        conversation=conversation,
        prompt_tokens=fixed(100),
        output_tokens=fixed(40),
    )
    conv = RequestSynthesizer(w, tokenizer).start_conversation(0)
    plans = [conv.next_turn(None)]
    while (plan := conv.next_turn(" ok" * 40)) is not None:
        plans.append(plan)
    assert 2 <= len(plans) < 50
    assert all(p.expected_prompt_tokens + p.max_tokens <= 600 for p in plans)


def test_conversations_need_the_chat_endpoint():
    with pytest.raises(WorkloadError, match="endpoint: chat"):
        _workload(conversation=ConversationSpec(turns=fixed(3)))


# --- empirical lengths and real prompts ----------------------------------------------------


def test_empirical_lengths_from_a_file(tmp_path, tokenizer):
    (tmp_path / "lengths.txt").write_text("# measured\n30\n60\n\n90\n")
    (tmp_path / "w.yaml").write_text(
        "prompt_tokens: {empirical: {file: lengths.txt}}\noutput_tokens: 4\n"
    )
    w = load_workload_file(tmp_path / "w.yaml")
    assert w.name == "w" and w.prompt_tokens.values == (30, 60, 90)
    synth = RequestSynthesizer(w, tokenizer)
    seen = {synth.plan(i).expected_prompt_tokens for i in range(60)}
    assert seen == {30, 60, 90}


def test_jsonl_prompts_are_sent_as_they_are_and_measured(tmp_path, tokenizer):
    rows = [
        {"prompt": "Explain the river of tokens.", "output_tokens": 12},
        {"prompt": "Write a poem about the night city and its servers.", "output_tokens": 30},
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "real.yaml").write_text(
        "endpoint: completions\nprompt_tokens: {kind: empirical, file: p.jsonl}\n"
    )
    w = load_workload_file(tmp_path / "real.yaml")
    synth = RequestSynthesizer(w, tokenizer)
    plans = [synth.plan(i) for i in range(20)]
    by_prompt = {p.prompt: p for p in plans}
    assert set(by_prompt) == {r["prompt"] for r in rows}
    for r in rows:
        p = by_prompt[r["prompt"]]
        assert p.max_tokens == r["output_tokens"]
        assert p.expected_prompt_tokens == len(tokenizer.encode(r["prompt"])) + 1


# --- presets, search folders, CLI ----------------------------------------------------------


def test_shipped_presets_all_load():
    names = set(load_workloads())
    assert set(PRESETS) <= names
    assert {p.stem for p in PRESETS_DIR.glob("*.yaml")} == set(PRESETS)


def test_user_folders_override_presets_by_name(tmp_path, monkeypatch):
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "mine.yaml").write_text("prompt_tokens: 10\noutput_tokens: 2\n")
    (env_dir / "chat.yaml").write_text(
        "name: chat\ndescription: my chat\nendpoint: chat\nprompt_tokens: 10\noutput_tokens: 2\n"
    )
    monkeypatch.setenv("VPROF_WORKLOADS_DIR", str(env_dir))
    monkeypatch.chdir(tmp_path)
    found = load_workloads()
    assert found["mine"].prompt_tokens == fixed(10)
    assert found["chat"].description == "my chat"
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "x.yml").write_text("name: mine\nprompt_tokens: 20\noutput_tokens: 2\n")
    assert get_workload("mine", [extra]).prompt_tokens == fixed(20)


def test_get_workload_suggests_a_close_name_and_reads_paths(tmp_path):
    with pytest.raises(WorkloadError, match="did you mean 'rag-shared-prefix'"):
        get_workload("rag-shared-prefx")
    path = tmp_path / "one.yaml"
    path.write_text("prompt_tokens: 10\noutput_tokens: 2\n")
    assert get_workload(str(path)).name == "one"


def test_listing_workloads_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from vprof.cli.main import cli\n"
        "cli(['workloads', '--format', 'json'], standalone_mode=False)\n"
        "heavy = [m for m in ('numpy', 'pandas', 'locust', 'vllm', 'torch', 'tokenizers')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout


def test_cli_lists_presets_with_their_lengths():
    result = CliRunner().invoke(cli, ["workloads", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["fixed-800-64"]["prompt_tokens"] == "800"
    assert rows["rag-shared-prefix"]["prefix"].startswith("4x1024 zipf")
    assert rows["multi-turn"]["endpoint"] == "chat"


def test_cli_show_prints_yaml_and_planned_lengths(tiny_model):
    result = CliRunner().invoke(
        cli, ["workloads", "show", "fixed-800-64", "-n", "3", "--tokenizer", str(tiny_model)]
    )
    assert result.exit_code == 0, result.output
    assert "name: fixed-800-64" in result.output
    table = result.output.split("# max prompt+output tokens: 864")[1].strip().split("\n\n")[0]
    rows = [row.split()[:4] for row in table.splitlines()[2:]]
    assert rows == [[str(i), "-1", "800", "64"] for i in range(3)]
    as_json = CliRunner().invoke(
        cli,
        [
            "workloads",
            "show",
            "multi-turn",
            "-n",
            "1",
            "--format",
            "json",
            "--tokenizer",
            str(tiny_model),
        ],
    )
    turns = json.loads(as_json.output)
    assert [t["turn"] for t in turns] == list(range(len(turns))) and len(turns) >= 3


def test_cli_unknown_workload_is_one_line_and_exit_2():
    result = CliRunner().invoke(cli, ["workloads", "show", "chatt"])
    assert result.exit_code == 2
    assert "did you mean 'chat'" in result.output
    assert "Traceback" not in result.output


# --- YAML errors name file, line and key ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (
            "prompt_tokens: 10\noutput_tokens:\n  kind: normal\n  mean: -5\n  stddev: 2\n",
            4,
            "output_tokens.mean",
            "between 1 and 10,000,000, got -5",
        ),
        (
            "prompt_tokens: {kind: lognormall, mean: 30, sigma: 1}\noutput_tokens: 3\n",
            1,
            "prompt_tokens.kind",
            "did you mean 'lognormal'",
        ),
        (
            "prompt_tokens: 10\noutput_tokens: 3\nprefix:\n  groups: 2\n  length_tokens: 8\n"
            "  share: 1.5\n",
            6,
            "prefix.share",
            "between 0 and 1",
        ),
        (
            "prompt_tokens: 10\noutput_tokens: 3\nprefix: {groups: 0, length_tokens: 8}\n",
            3,
            "prefix.groups",
            "between 1 and 100,000, got 0",
        ),
        (
            "prompt_tokens: 10\noutput_tokens: 3\nprefx: {groups: 2}\n",
            3,
            "prefx",
            "did you mean 'prefix'",
        ),
        ("prompt_tokens: -3\noutput_tokens: 3\n", 1, "prompt_tokens", "got -3"),
        (
            "prompt_tokens: {kind: uniform, min: 50, max: 10}\noutput_tokens: 3\n",
            1,
            "prompt_tokens.min",
            "larger than max",
        ),
        (
            "prompt_tokens: {kind: normal, mean: 50}\noutput_tokens: 3\n",
            1,
            "prompt_tokens",
            "needs mean+stddev",
        ),
        (
            "prompt_tokens: {kind: fixed, value: 5, sigma: 2}\noutput_tokens: 3\n",
            1,
            "prompt_tokens.sigma",
            "take no 'sigma'",
        ),
        (
            "endpoint: completions\nprompt_tokens: 10\noutput_tokens: 3\nconversation:\n"
            "  turns: 3\n",
            4,
            "conversation",
            "endpoint: chat",
        ),
        (
            "endpoint: chatt\nprompt_tokens: 10\noutput_tokens: 3\n",
            1,
            "endpoint",
            "did you mean 'chat'",
        ),
        ("prompt_tokens: 10\n", 1, "output_tokens", "missing"),
    ],
)
def test_malformed_yaml_names_file_line_and_key(tmp_path, text, line, key, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as info:
        load_workload_file(path)
    err = info.value
    assert (err.path, err.line, err.key) == (str(path), line, key)
    assert message in err.message
    assert err.format().startswith(f"{path}:{line}: {key}: ")


def test_yaml_syntax_errors_give_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("prompt_tokens: 10\noutput_tokens: [3\nseed: 1\n")
    with pytest.raises(WorkloadError, match="not valid YAML") as info:
        load_workload_file(path)
    assert info.value.line == 3


def test_bad_lengths_file_names_its_line(tmp_path):
    (tmp_path / "l.txt").write_text("10\n20\nlots\n")
    with pytest.raises(WorkloadError) as info:
        workload_from_dict(
            {"prompt_tokens": {"kind": "empirical", "file": "l.txt"}, "output_tokens": 2},
            source="w.yaml",
            base_dir=tmp_path,
            default_name="w",
        )
    assert info.value.line == 3 and info.value.path.endswith("l.txt")


def test_tokenizer_is_loaded_once_per_file_and_bad_paths_say_so(tiny_model, tmp_path):
    assert load_tokenizer(tiny_model) is load_tokenizer(tiny_model / "tokenizer.json")
    with pytest.raises(WorkloadError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(WorkloadError, match="cannot read the tokenizer"):
        load_tokenizer(tmp_path)


def test_workloads_are_hashable_values():
    a, b = get_workload("rag-shared-prefix"), get_workload("rag-shared-prefix")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, get_workload("chat")}) == 2


@pytest.mark.parametrize("name", PRESETS)
def test_planned_lengths_agree_with_the_built_plans(tokenizer, name):
    synth = RequestSynthesizer(get_workload(name), tokenizer)
    for i in range(10):
        group, prompt_tokens, output_tokens = synth.planned_lengths(i)
        plan = synth.plan(i)
        assert (group, prompt_tokens, output_tokens) == (
            plan.prefix_group,
            plan.expected_prompt_tokens,
            plan.max_tokens,
        )
