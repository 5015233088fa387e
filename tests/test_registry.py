"""The profile registry as a library: loading, layering, extends, overrides and rendering."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

import pytest
import yaml

import vprof.registry as registry
from vprof.registry import (
    Profile,
    ProfileError,
    get_profile,
    load_profiles,
    render,
    render_docker,
    render_k8s,
    render_shell,
)

GUIDE_PREFIX_CACHING = (
    "python3 -m vllm.entrypoints.api_server --model MaziyarPanahi/Meta-Llama-3-8B-Instruct-GPTQ "
    "--gpu-memory-utilization 0.95 --port 5000 --dtype half --enforce-eager --max-model-len 4096 "
    "--max-num-batched-tokens 8192 --enable-prefix-caching"
)
GUIDE_CHUNKED = (
    "python3 -m vllm.entrypoints.api_server --model MaziyarPanahi/Meta-Llama-3-8B-Instruct-GPTQ "
    "--gpu-memory-utilization 0.95 --port 5000 --dtype half --enforce-eager --max-model-len 4096 "
    "--max-num-batched-tokens 256 --enable-chunked-prefill"
)


def _flag_multiset(argv: list[str]) -> tuple[list[str], Counter]:
    """Split an argv into its launcher part and a multiset of (flag, value) pairs."""
    head = argv[: argv.index("--model") + 2] if "--model" in argv else argv[:3]
    pairs: Counter = Counter()
    rest = argv[len(head) :]
    i = 0
    while i < len(rest):
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            pairs[(rest[i], rest[i + 1])] += 1
            i += 2
        else:
            pairs[(rest[i], None)] += 1
            i += 1
    return head, pairs


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Run in an empty folder with no user profile folders configured."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VPROF_PROFILES_DIR", raising=False)
    return tmp_path


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------- public API


def test_public_api_is_exactly_the_documented_names():
    assert sorted(registry.__all__) == sorted(
        [
            "Profile",
            "ProfileError",
            "get_profile",
            "load_profiles",
            "parse_set_args",
            "render",
            "render_docker",
            "render_k8s",
            "render_k8s_load",
            "render_shell",
            "resolve_profile",
            "validate",
        ]
    )
    for name in registry.__all__:
        assert getattr(registry, name) is not None


def test_profile_error_is_the_common_one():
    from vprof.common.errors import ProfileError as CommonProfileError
    from vprof.common.errors import VprofError

    assert ProfileError is CommonProfileError
    assert issubclass(ProfileError, VprofError)


# ---------------------------------------------------------------------------- shipped profiles


def test_shipped_profiles_cover_the_guides_variants(isolated):
    profiles = load_profiles()
    for name in [
        "base",
        "baseline",
        "chunked-128",
        "chunked-256",
        "chunked-512",
        "chunked-1024",
        "chunked-2048",
        "eager",
        "cuda-graphs",
        "prefix-cached",
        "guide-prefix-caching",
        "guide-chunked",
    ]:
        assert name in profiles, name
        description = profiles[name].description
        assert description and "\n" not in description, name


@pytest.mark.parametrize("tokens", [128, 256, 512, 1024, 2048])
def test_chunked_profile_renders_batched_tokens_flag(isolated, tokens):
    argv = render(get_profile(f"chunked-{tokens}"))
    _, pairs = _flag_multiset(argv)
    assert pairs[("--max-num-batched-tokens", str(tokens))] == 1
    assert pairs[("--enable-chunked-prefill", None)] == 1


def test_baseline_is_non_chunked_with_prefix_caching_and_full_budget(isolated):
    profile = get_profile("baseline")
    args = profile.engine_args
    assert args["enable-chunked-prefill"] is False
    assert args["enable-prefix-caching"] is True
    assert args["max-num-batched-tokens"] == args["max-model-len"]
    assert "--no-enable-chunked-prefill" in render(profile)


def test_eager_and_cuda_graph_variants_differ_only_in_enforce_eager(isolated):
    eager, graphs = get_profile("eager"), get_profile("cuda-graphs")
    assert eager.engine_args["enforce-eager"] is True
    assert graphs.engine_args["enforce-eager"] is False
    rest = {k: v for k, v in eager.engine_args.items() if k != "enforce-eager"}
    assert rest == {k: v for k, v in graphs.engine_args.items() if k != "enforce-eager"}


@pytest.mark.parametrize(
    "name, command",
    [("guide-prefix-caching", GUIDE_PREFIX_CACHING), ("guide-chunked", GUIDE_CHUNKED)],
)
def test_guide_commands_round_trip_exactly(isolated, name, command):
    rendered = render(get_profile(name))
    expected = shlex.split(command)
    assert _flag_multiset(rendered) == _flag_multiset(expected)
    assert Counter(rendered) == Counter(expected)
    assert render_shell(get_profile(name)).split()[:3] == ["python3", "-m", expected[2]]


def test_every_shipped_profile_validates(isolated):
    for profile in load_profiles().values():
        notes = registry.validate(profile)
        assert all(isinstance(n, str) for n in notes)


# ---------------------------------------------------------------------------- extends and origins


def test_origins_point_at_the_file_and_line_that_set_each_value(isolated):
    profile = get_profile("guide-chunked")
    assert profile.extends == "guide-prefix-caching"
    assert profile.origins["max-num-batched-tokens"].endswith("guide-chunked.yaml:6")
    assert profile.origins["dtype"].endswith("guide-prefix-caching.yaml:8")
    path, line = profile.origins["model"].rsplit(":", 1)
    assert "MaziyarPanahi" in Path(path).read_text().splitlines()[int(line) - 1]


def test_null_value_drops_an_inherited_flag(isolated):
    profile = get_profile("guide-chunked")
    assert "enable-prefix-caching" not in profile.engine_args
    assert "enable-prefix-caching" not in profile.origins
    assert "--enable-prefix-caching" not in render(profile)


def test_child_keeps_parent_flag_order_and_appends_new_flags(isolated):
    argv = render(get_profile("guide-chunked"))
    assert argv[-3:] == ["--max-num-batched-tokens", "256", "--enable-chunked-prefill"]


def test_extends_across_layers_and_underscore_spelling(isolated):
    write(
        isolated / "profiles",
        "mine.yaml",
        "description: mine\nextends: chunked-256\nengine_args:\n  max_num_seqs: 32\n"
        "env:\n  VLLM_CPU_KVCACHE_SPACE: 1\n",
    )
    profile = get_profile("mine")
    assert profile.engine_args["max-num-batched-tokens"] == 256
    assert profile.engine_args["max-num-seqs"] == 32
    assert profile.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert profile.origins["max-num-seqs"] == str(Path("profiles/mine.yaml")) + ":4"
    assert profile.origins["env.VLLM_CPU_KVCACHE_SPACE"].endswith("mine.yaml:6")


def test_later_layers_win_by_name_in_documented_order(isolated, monkeypatch):
    write(isolated / "profiles", "eager.yaml", "description: cwd\nmodel: cwd-model\n")
    env_dir = isolated / "envdir"
    write(env_dir, "eager.yaml", "description: env\nmodel: env-model\n")
    monkeypatch.setenv("VPROF_PROFILES_DIR", str(env_dir))
    assert get_profile("eager").model == "env-model"
    extra = isolated / "extra"
    write(extra, "eager.yaml", "description: extra\nmodel: extra-model\n")
    assert get_profile("eager", [extra]).model == "extra-model"
    monkeypatch.delenv("VPROF_PROFILES_DIR")
    assert get_profile("eager").model == "cwd-model"


def test_profile_extending_its_own_name_extends_the_lower_layer(isolated):
    write(
        isolated / "profiles",
        "chunked-256.yaml",
        "extends: chunked-256\nengine_args:\n  max-num-seqs: 16\n",
    )
    profile = get_profile("chunked-256")
    assert profile.engine_args["max-num-batched-tokens"] == 256
    assert profile.engine_args["max-num-seqs"] == 16
    assert profile.description.startswith("Chunked prefill")


def test_extends_cycle_is_reported_with_the_chain(isolated):
    folder = isolated / "profiles"
    write(folder, "a.yaml", "model: m\nextends: b\n")
    write(folder, "b.yaml", "model: m\nextends: a\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert "extends cycle" in info.value.message
    assert info.value.key == "extends"
    assert info.value.line == 2


def test_extends_unknown_profile_suggests_a_name(isolated):
    path = write(isolated / "profiles", "x.yaml", "model: m\nextends: chunked-265\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert info.value.format() == (
        f"{path.relative_to(isolated)}:2: extends: extends unknown profile 'chunked-265' "
        "(did you mean 'chunked-256'?)"
    )


# ---------------------------------------------------------------------------- file errors


def test_malformed_yaml_names_file_and_line(isolated):
    path = write(
        isolated / "profiles",
        "broken.yaml",
        "description: ok\nengine_args:\n  max-model-len: 4096\n   port: 1\n",
    )
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert info.value.path == str(path.relative_to(isolated))
    assert info.value.line == 4
    assert "malformed YAML" in info.value.message


def test_duplicate_key_is_an_error_not_silently_last_wins(isolated):
    write(isolated / "profiles", "dup.yaml", "model: a\nengine_args:\n  port: 1\n  port: 2\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert (info.value.line, info.value.key) == (4, "port")
    assert "first set on line 3" in info.value.message


def test_unknown_top_level_key_suggests_engine_args_for_a_flag(isolated):
    write(isolated / "profiles", "flat.yaml", "model: a\nmax-model-len: 4096\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert (info.value.line, info.value.key) == (2, "max-model-len")
    assert "engine_args" in info.value.hint


def test_misspelled_top_level_key_gets_did_you_mean(isolated):
    write(isolated / "profiles", "typo.yaml", "model: a\ndescripton: hi\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert info.value.hint == "did you mean 'description'?"


def test_env_values_arrive_as_written_even_when_yaml_reads_them_otherwise(isolated):
    write(isolated / "profiles", "env.yaml", "model: a\nenv:\n  FOO: true\n  BAR: 010\n")
    assert load_profiles()["env"].env == {"FOO": "true", "BAR": "010"}


def test_empty_env_value_must_be_quoted(isolated):
    write(isolated / "profiles", "env.yaml", "model: a\nenv:\n  FOO:\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert (info.value.line, info.value.key) == (3, "env.FOO")


def test_same_name_twice_in_one_layer_names_both_files(isolated):
    write(isolated / "profiles", "one.yaml", "name: twin\nmodel: a\n")
    write(isolated / "profiles", "two.yaml", "name: twin\nmodel: b\n")
    with pytest.raises(ProfileError) as info:
        load_profiles()
    assert "one.yaml" in info.value.message
    assert info.value.path.endswith("two.yaml")


def test_missing_profiles_dir_is_a_clear_error(isolated):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profiles([isolated / "nope"])


# ---------------------------------------------------------------------------- get_profile


def test_unknown_profile_message_suggests_the_nearest_name(isolated):
    with pytest.raises(ProfileError) as info:
        get_profile("chunked-265")
    assert info.value.format() == "no profile 'chunked-265' — did you mean 'chunked-256'?"


def test_get_profile_accepts_a_yaml_path(isolated):
    path = write(isolated, "solo.yaml", "extends: eager\nengine_args:\n  port: 8123\n")
    profile = get_profile(str(path))
    assert profile.name == "solo"
    assert profile.port == 8123
    assert profile.engine_args["enforce-eager"] is True


# ---------------------------------------------------------------------------- Profile


def test_port_and_host_defaults():
    profile = Profile(name="p", description="", model="m")
    assert (profile.port, profile.host) == (8000, "127.0.0.1")
    custom = profile.with_overrides(set_args={"host": "0.0.0.0"}, port=9001)
    assert (custom.port, custom.host) == (9001, "0.0.0.0")


def test_overrides_record_their_origin_and_leave_the_original_alone(isolated):
    profile = get_profile("chunked-256")
    changed = profile.with_overrides(
        model="./tiny",
        port=8100,
        entrypoint="openai-module",
        set_args={"max_num_seqs": 8, "enable-chunked-prefill": None},
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    assert profile.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert "max-num-seqs" not in profile.engine_args
    assert changed.origins["model"] == "--model"
    assert changed.origins["max-num-seqs"] == "--set"
    assert changed.origins["port"] == "--port"
    assert "enable-chunked-prefill" not in changed.engine_args
    assert render(changed, python="/usr/bin/python3.11")[:5] == [
        "/usr/bin/python3.11",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "./tiny",
    ]


def test_identity_is_stable_and_changes_with_argv_or_env(isolated):
    profile = get_profile("chunked-256")
    assert profile.identity() == get_profile("chunked-256").identity()
    assert profile.identity().startswith("chunked-256-")
    assert len(profile.identity()) == len("chunked-256-") + 12
    assert profile.identity() != profile.with_overrides(port=8001).identity()
    assert profile.identity() != profile.with_overrides(env={"A": "1"}).identity()


def test_as_dict_is_plain_json_data(isolated):
    data = get_profile("guide-chunked").as_dict()
    assert json.loads(json.dumps(data)) == data
    yaml.safe_dump(data)  # plain dicts, no line-tracking subclasses


# ---------------------------------------------------------------------------- render


def _profile(**engine_args) -> Profile:
    return Profile(name="t", description="d", model="org/model", engine_args=engine_args)


def test_entrypoints_render_their_launchers():
    profile = _profile(**{"max-model-len": 2048})
    assert render(profile) == ["vllm", "serve", "org/model", "--max-model-len", "2048"]
    module = profile.with_overrides(entrypoint="openai-module")
    assert render(module, python="py")[:5] == [
        "py",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "org/model",
    ]
    legacy = profile.with_overrides(entrypoint="api-server")
    assert render(legacy)[:3] == ["python3", "-m", "vllm.entrypoints.api_server"]


def test_booleans_render_as_flag_or_no_flag():
    argv = render(_profile(**{"enforce-eager": True, "enable-prefix-caching": False}))
    assert argv[3:] == ["--enforce-eager", "--no-enable-prefix-caching"]


def test_store_true_flag_false_is_left_out():
    # --disable-log-stats has no --no- form in vLLM's parser
    assert render(_profile(**{"disable-log-stats": False})) == ["vllm", "serve", "org/model"]
    assert render(_profile(**{"disable-log-stats": True}))[-1] == "--disable-log-stats"


def test_lists_and_mappings_render_as_vllm_parses_them():
    argv = render(
        _profile(
            **{
                "served-model-name": ["a", "b"],
                "middleware": ["m.one", "m.two"],
                "compilation-config": {"mode": 0},
            }
        )
    )
    assert argv[3:] == [
        "--served-model-name",
        "a",
        "b",
        "--middleware",
        "m.one",
        "--middleware",
        "m.two",
        "--compilation-config",
        '{"mode":0}',
    ]


def test_shell_form_quotes_values_safely():
    profile = Profile(
        name="t",
        description="d",
        model="dir with space/model",
        engine_args={"served-model-name": "x; rm -rf /"},
        env={"VAR": "a b"},
    )
    line = render_shell(profile)
    assert line.startswith("VAR='a b' ")
    tokens = shlex.split(line)
    assert tokens[1:] == render(profile)


def test_docker_line_uses_official_image_gpus_ipc_port_and_env(isolated):
    profile = get_profile("chunked-256").with_overrides(port=8100, env={"A": "1"})
    line = render_docker(profile)
    tokens = shlex.split(line.replace('"$HOME', '"/home/u'))
    assert tokens[:2] == ["docker", "run"]
    assert tokens[tokens.index("--gpus") + 1] == "all"
    assert "--ipc=host" in tokens
    assert tokens[tokens.index("-p") + 1] == "8100:8100"
    assert "A=1" in tokens
    assert "/home/u/.cache/huggingface:/root/.cache/huggingface" in tokens
    image_at = tokens.index("vllm/vllm-openai:latest")
    assert tokens[image_at + 1 : image_at + 3] == ["--model", profile.model]
    assert "--max-num-batched-tokens" in tokens[image_at:]


def test_docker_line_for_legacy_server_overrides_the_entrypoint(isolated):
    tokens = shlex.split(render_docker(get_profile("guide-chunked")))
    assert tokens[tokens.index("--entrypoint") + 1] == "python3"
    assert "vllm.entrypoints.api_server" in tokens


def test_k8s_manifest_is_a_deployment_and_service(isolated):
    profile = get_profile("chunked-256").with_overrides(set_args={"tensor-parallel-size": 2})
    documents = list(yaml.safe_load_all(render_k8s(profile, replicas=3)))
    deployment, service = documents
    assert (deployment["kind"], service["kind"]) == ("Deployment", "Service")
    assert deployment["metadata"]["name"] == "vllm-chunked-256"
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == render(profile)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    assert container["ports"][0]["containerPort"] == 8000
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == selector
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["port"] == 8000


def test_k8s_and_docker_drop_a_loopback_host(isolated):
    profile = get_profile("eager").with_overrides(set_args={"host": "127.0.0.1"})
    assert "--host" in render(profile)
    assert "--host" not in render_docker(profile)
    container = list(yaml.safe_load_all(render_k8s(profile)))[0]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--host" not in container["args"]


def test_inside_a_checkout_the_shipped_folder_is_read_once(monkeypatch):
    import vprof.profiles

    shipped = next(Path(p) for p in vprof.profiles.__path__ if Path(p).is_dir())
    monkeypatch.chdir(shipped.resolve().parent)
    monkeypatch.delenv("VPROF_PROFILES_DIR", raising=False)
    profiles = load_profiles()  # a second copy of each would be "also defined in" errors
    assert Path(profiles["base"].source).resolve() == (shipped / "base.yaml").resolve()


def test_profiles_dir_variable_takes_several_folders(isolated, monkeypatch):
    import os

    first, second = isolated / "one", isolated / "two"
    write(first, "x.yaml", "description: first\nmodel: a\n")
    write(second, "x.yaml", "description: second\nmodel: b\n")
    write(second, "y.yaml", "description: y\nextends: x\n")
    monkeypatch.setenv("VPROF_PROFILES_DIR", os.pathsep.join([str(first), str(second)]))
    profiles = load_profiles()
    assert profiles["x"].model == "b"
    assert profiles["y"].model == "b"


def test_gpus_per_server_multiplies_tensor_pipeline_and_data_parallel_sizes():
    from vprof.registry.profile import gpus_per_server

    assert gpus_per_server({})[0] == 1
    gpus, why = gpus_per_server(
        {"tensor-parallel-size": 2, "pipeline-parallel-size": 2, "data-parallel-size": 2}
    )
    assert gpus == 8 and "data-parallel-size 2" in why
    with pytest.raises(ProfileError, match="not a parallel size"):
        gpus_per_server({"tensor-parallel-size": 0})


def test_a_profile_and_its_recorded_form_answer_how_many_gpus_a_server_takes():
    from vprof.analysis.run import gpus_per_server_of

    profile = _profile(tp=2, **{"pipeline-parallel-size": 3})  # an alias, as profiles may
    assert profile.gpus_per_server() == (6, "tensor-parallel-size 2 × pipeline-parallel-size 3")
    assert gpus_per_server_of(profile.as_dict()) == profile.gpus_per_server()
    assert gpus_per_server_of({"name": "not launched by vprof"}) is None
    with pytest.raises(ProfileError, match="not a parallel size"):
        gpus_per_server_of({"engine_args": {"tensor-parallel-size": "two"}})
