"""What `vprof tune` may try: --space parsing, the default ladders, pinned keys, refusals."""

from __future__ import annotations

import pytest

from vprof.common.errors import ProfileError
from vprof.registry import get_profile, resolve_profile
from vprof.runs.tunespace import (
    BATCHED,
    CHUNKED,
    EAGER,
    GPU_MEMORY,
    MODEL_LEN,
    PREFIX,
    SEQS,
    Candidate,
    build_space,
    default_model_len,
    needs_more_memory,
    parse_space,
    refusal,
    starting_candidate,
)
from vprof.workloads import get_workload


def test_space_values_are_read_as_set_values_are():
    space = parse_space(
        [
            "max-num-seqs=64,16",
            "enable-chunked-prefill=true,false",
            "gpu_memory_utilization=0.8,0.9",
        ]
    )
    assert space == {SEQS: (64, 16), CHUNKED: (True, False), GPU_MEMORY: (0.8, 0.9)}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("max-num-seqs", "--space: 'max-num-seqs' is not KEY=V1,V2,…"),
        ("max-num-seqs=", "is not KEY=V1,V2"),
        ("max-num-seq=4", "--space max-num-seq: unknown vLLM engine argument"),
        ("max-num-seqs=0,4", "--space max-num-seqs: must be between 1 and 10,000,000, got 0"),
        ("max-num-seqs=4,,8", "--space max-num-seqs: an empty value"),
        ("max-num-seqs=8,8", "--space max-num-seqs: 8 is given twice"),
        ("max-num-seqs=nan", "--space max-num-seqs: must be a whole number, got 'nan'"),
        ("max-num-batched-tokens=1e400", "--space max-num-batched-tokens: must be"),
        ("gpu-memory-utilization=0.9,1.5", "--space gpu-memory-utilization: must be more than 0"),
        ("gpu-memory-utilization=.inf", "--space gpu-memory-utilization: must be a finite"),
        ("enforce-eager=1", "--space enforce-eager: expected true or false, got 1"),
        ("port=8000,8001", "--space port: port is not a setting to tune"),
        ("dtype=float32,float99", "--space dtype: 'float99' is not a valid choice"),
    ],
)
def test_bad_space_values_name_the_key_and_what_is_wrong(item, message):
    with pytest.raises(ProfileError) as caught:
        parse_space([item])
    assert message in caught.value.format()


def test_a_key_given_twice_is_refused():
    with pytest.raises(ProfileError, match="given twice"):
        parse_space(["max-num-seqs=4,8", "max_num_seqs=16,32"])


def test_the_default_space_follows_the_guide_and_the_workload():
    workload = get_workload("long-prompt-short-answer")  # up to 1900 + 32 tokens
    space = build_space(get_profile("chunked-512"), workload, {}, gpu=True)
    assert space.fixed[MODEL_LEN] == default_model_len(1932) == 2048
    dims = {d.key: d.values for d in space.dims}
    assert dims[CHUNKED] == (True, False)  # the profile's own value first
    assert dims[BATCHED] == (128, 256, 512, 1024, 2048, 4096, 6144, 8192)  # × max-model-len too
    assert set(dims) == {CHUNKED, BATCHED, SEQS, EAGER, GPU_MEMORY}
    assert PREFIX not in space.fixed and any("shares no prefixes" in n for n in space.notes)
    assert [name for name, _ in space.stages()] == ["prefill", "concurrency", "memory"]


def test_prefix_caching_is_searched_when_the_workload_shares_prefixes():
    space = build_space(get_profile("chunked-512"), get_workload("rag-shared-prefix"), {}, gpu=True)
    assert space.dim(PREFIX) is not None


def test_a_cpu_host_does_not_search_gpu_memory():
    space = build_space(get_profile("chunked-512"), get_workload("chat"), {}, gpu=False)
    assert space.dim(GPU_MEMORY) is None
    assert any("no GPU" in note for note in space.notes)


def test_keys_pinned_with_set_are_not_searched_and_must_hold_the_workload():
    profile = resolve_profile("chunked-512", set_args=["enforce-eager=true", "max-model-len=4096"])
    space = build_space(profile, get_workload("chat"), {}, gpu=False)
    assert space.fixed[EAGER] is True and space.fixed[MODEL_LEN] == 4096
    assert space.dim(EAGER) is None
    short = resolve_profile("chunked-512", set_args=["max-model-len=512"])
    with pytest.raises(ProfileError) as caught:
        build_space(short, get_workload("long-prompt-short-answer"), {}, gpu=False)
    assert caught.value.key == "--set max-model-len"


def test_max_model_len_below_the_longest_request_is_refused_before_anything_runs():
    with pytest.raises(ProfileError) as caught:
        build_space(
            get_profile("chunked-512"),
            get_workload("long-prompt-short-answer"),
            parse_space(["max-model-len=1024,4096"]),
            gpu=False,
        )
    error = caught.value
    assert error.key == "--space max-model-len"
    assert "below the workload's longest request (1932 tokens" in error.message


def test_the_search_starts_from_the_profiles_own_settings():
    from dataclasses import replace

    base = resolve_profile("baseline")  # as if its file said max-num-seqs: 100
    profile = replace(base, engine_args={**base.engine_args, "max-num-seqs": 100})
    space = build_space(
        profile,
        get_workload("long-prompt-short-answer"),
        parse_space(["max-num-seqs=32,128,512"]),
        gpu=False,
    )
    start = starting_candidate(space, profile)
    assert start.get(CHUNKED) is False and start.get(BATCHED) == 4096
    assert start.get(SEQS) == 128  # the nearest value to 100 on the ladder


def test_the_validators_rules_refuse_candidates_before_they_start():
    profile = get_profile("chunked-512")
    space = build_space(
        profile,
        get_workload("long-prompt-short-answer"),
        parse_space(["max-num-seqs=64,512"]),
        gpu=False,
    )
    keys = space.keys
    short = Candidate(tuple(zip(keys, _values(keys, chunked=False, bt=1024, seqs=64), strict=True)))
    assert "below max-model-len (2048) with chunked prefill off" in (
        refusal(profile, space, short) or ""
    )
    few = Candidate(tuple(zip(keys, _values(keys, chunked=True, bt=256, seqs=512), strict=True)))
    assert "below max-num-seqs (512)" in (refusal(profile, space, few) or "")
    fine = Candidate(tuple(zip(keys, _values(keys, chunked=True, bt=512, seqs=64), strict=True)))
    assert refusal(profile, space, fine) is None


def _values(keys, *, chunked, bt, seqs):
    by_key = {CHUNKED: chunked, BATCHED: bt, SEQS: seqs, EAGER: True}
    return [by_key[k] for k in keys]


def test_labels_name_every_searched_value():
    candidate = Candidate(
        (
            (CHUNKED, False),
            (BATCHED, 4096),
            (SEQS, 64),
            (EAGER, True),
            (GPU_MEMORY, 0.85),
            ("block-size", 32),
        )
    )
    assert candidate.label("baseline") == (
        "baseline@nochunk-bt4096-seqs64-eager-mem0.85-block-size=32"
    )


def test_a_candidate_needing_more_memory_than_one_that_ran_out_is_recognised():
    space = build_space(
        get_profile("chunked-512"),
        get_workload("chat"),
        parse_space(["max-num-seqs=64,256", "enforce-eager=false,true"]),
        gpu=False,
    )
    keys = space.keys

    def c(**kw) -> Candidate:
        values = {CHUNKED: True, BATCHED: 2048, SEQS: 64, EAGER: True, **kw}
        return Candidate(tuple((k, values[k]) for k in keys))

    oom = c()
    assert needs_more_memory(c(**{SEQS: 256}), oom, space)
    assert needs_more_memory(c(**{EAGER: False}), oom, space)  # CUDA graphs need more
    assert not needs_more_memory(c(**{BATCHED: 1024}), oom, space)
    assert not needs_more_memory(c(**{CHUNKED: False}), oom, space)
