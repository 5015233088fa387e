"""The registry commands through click's CliRunner: set up with files, act, assert exact output."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vprof.cli.main import cli
from vprof.registry import get_profile, render


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VPROF_PROFILES_DIR", raising=False)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_profiles_lists_names_descriptions_and_key_settings(run):
    result = run("profiles")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "name",
        "max_model_len",
        "batched_tokens",
        "chunked",
        "prefix_cache",
        "eager",
        "gpu_mem",
    ]  # the descriptions are sentences: below the table, so it fits 120 columns
    row = next(line for line in lines if line.startswith("chunked-256 "))
    assert row.split()[1:4] == ["4096", "256", "yes"]
    assert lines[lines.index("description:") + 1 :][3].startswith(
        "chunked-256: Chunked prefill with a budget of 256"
    )
    assert max(map(len, lines)) <= 120


def test_profiles_json_has_every_field(run):
    rows = json.loads(run("profiles", "--format", "json").output)
    by_name = {row["name"]: row for row in rows}
    assert by_name["baseline"]["chunked"] is False
    assert by_name["guide-chunked"]["entrypoint"] == "api-server"
    assert by_name["guide-chunked"]["extends"] == "guide-prefix-caching"


def test_profiles_include_user_folders(run, tmp_path):
    write(tmp_path / "mine" / "tiny-chunked.yaml", "description: Mine\nextends: chunked-256\n")
    result = run("profiles", "--profiles-dir", str(tmp_path / "mine"))
    assert any(line.startswith("tiny-chunked ") for line in result.output.splitlines())


def test_show_prints_resolved_values_and_their_origins(run):
    result = run("profiles", "show", "guide-chunked")
    assert result.exit_code == 0
    out = result.output
    assert out.startswith("guide-chunked: The guide's second command")
    assert "extends guide-prefix-caching" in out

    # a deep checkout's absolute paths widen the table past 120 columns, and its origins
    # continue in a second block led by the setting: read a row's cells from every block
    def cells(setting: str) -> list[str]:
        rows = [line.split()[1:] for line in out.splitlines() if line.split()[:1] == [setting]]
        return [cell for row in rows for cell in row]

    assert cells("max-num-batched-tokens")[0] == "256"
    assert cells("max-num-batched-tokens")[-1].endswith("guide-chunked.yaml:6")
    assert cells("dtype")[-1].endswith("guide-prefix-caching.yaml:8")
    assert "command: python3 -m vllm.entrypoints.api_server" in out
    assert "note: " in out


def test_show_names_origins_in_the_profiles_own_folder_by_file_name(run, tmp_path):
    write(
        tmp_path / "mine" / "mine.yaml",
        "description: Mine\nextends: chunked-256\nengine_args:\n  max-num-seqs: 8\n",
    )
    out = run("profiles", "show", "mine", "--profiles-dir", str(tmp_path / "mine")).output
    assert "defined in mine/mine.yaml" in out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.strip()}
    assert rows["max-num-seqs"] == "mine.yaml:4"  # the heading names its folder
    # inherited from another folder: the path says which
    assert rows["max-num-batched-tokens"].endswith("profiles/chunked-256.yaml:7")


def test_show_json(run):
    data = json.loads(run("profiles", "show", "eager", "--format", "json").output)
    assert data["engine_args"]["enforce-eager"] is True
    assert data["argv"][:2] == ["vllm", "serve"]
    assert data["identity"].startswith("eager-")


def test_unknown_profile_exits_2_with_did_you_mean(run):
    for args in (["render", "chunked-265"], ["profiles", "show", "chunked-265"]):
        result = run(*args)
        assert result.exit_code == 2
        assert result.output == "Error: no profile 'chunked-265' — did you mean 'chunked-256'?\n"


def test_render_shell_is_the_profiles_command(run):
    result = run("render", "chunked-256")
    assert result.exit_code == 0
    assert shlex.split(result.output) == render(get_profile("chunked-256"))


def test_render_argv_with_overrides(run):
    result = run(
        "render",
        "chunked-256",
        "--format",
        "argv",
        "--model",
        "/models/tiny",
        "--port",
        "8123",
        "--set",
        "max-num-seqs=8",
        "--set",
        "enable-chunked-prefill=null",
        "--entrypoint",
        "openai-module",
        "--python",
        "/venv/bin/python",
    )
    argv = json.loads(result.output)
    assert argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/tiny",
    ]
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert argv[argv.index("--port") + 1] == "8123"
    assert "--enable-chunked-prefill" not in argv


def test_render_validates_overrides_first(run):
    result = run("render", "baseline", "--set", "max-num-batched-tokens=256")
    assert result.exit_code == 2
    assert result.output.startswith("Error: --set: max-num-batched-tokens: 256 is below")


def test_render_set_without_equals_is_an_error(run):
    result = run("render", "baseline", "--set", "max-num-seqs")
    assert result.exit_code == 2
    assert result.output.startswith("Error: --set 'max-num-seqs' is not KEY=VALUE")


def test_render_env_and_empty_set_value(run):
    result = run("render", "chunked-256", "--env", "A=x y", "--set", "enable-chunked-prefill=")
    assert result.output.startswith("A='x y' vllm serve ")
    assert "chunked" not in result.output


def test_render_docker_and_k8s(run):
    docker = run("render", "chunked-512", "--format", "docker").output
    assert docker.startswith("docker run ")
    assert "vllm/vllm-openai:latest --model meta-llama/Meta-Llama-3-8B-Instruct" in docker
    manifest = run("render", "chunked-512", "--format", "k8s", "--replicas", "4").output
    deployment, service = yaml.safe_load_all(manifest)
    assert deployment["spec"]["replicas"] == 4
    assert service["kind"] == "Service"


def test_validate_all_profiles_passes(run):
    result = run("validate")
    assert result.exit_code == 0
    assert "ok    chunked-256" in result.output
    assert "note: " in result.output
    quiet = run("validate", "--quiet")
    assert "note: " not in quiet.output


def test_validate_reports_path_line_key_message_and_exits_2(run, tmp_path):
    write(
        tmp_path / "bad" / "refused.yaml",
        "description: refused by vLLM\nextends: base\nengine_args:\n"
        "  enable-chunked-prefill: false\n  max-num-batched-tokens: 256\n"
        "  gpu-memory-utilisation: 0.8\n",
    )
    write(tmp_path / "bad" / "broken.yaml", "description: [unclosed\n")
    write(tmp_path / "bad" / "good.yaml", "description: fine\nextends: chunked-128\n")
    result = run("validate", "bad")
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert "ok    good" in result.output
    assert "Error: bad/refused.yaml:5: max-num-batched-tokens: 256 is below max-model-len" in (
        result.output
    )
    assert (
        "Error: bad/refused.yaml:6: gpu-memory-utilisation: unknown vLLM engine argument "
        "(vLLM 0.32.0) (did you mean 'gpu-memory-utilization'?)"
    ) in lines
    broken = [line for line in lines if "broken.yaml" in line]
    assert broken and broken[0].startswith("Error: bad/broken.yaml:2: malformed YAML")
    assert "Traceback" not in result.output


def test_validate_a_single_file(run, tmp_path):
    path = write(tmp_path / "one.yaml", "description: one\nextends: eager\n")
    result = run("validate", str(path), "--quiet")
    assert result.exit_code == 0
    assert result.output.split()[:2] == ["ok", "one"]


def test_diff_shows_only_what_differs(run):
    result = run("diff", "baseline", "chunked-256")
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[2:]}
    assert rows == {
        "enable-chunked-prefill": ["no", "yes"],
        "max-num-batched-tokens": ["4096", "256"],
        "enable-prefix-caching": ["yes", "(default)"],
    }
    same = run("diff", "chunked-256", "chunked-256")
    assert same.output == "chunked-256 and chunked-256 have the same settings\n"


def test_diff_of_the_guides_commands(run):
    rows = json.loads(
        run("diff", "guide-prefix-caching", "guide-chunked", "--format", "json").output
    )
    assert {row["setting"] for row in rows} == {
        "max-num-batched-tokens",
        "enable-prefix-caching",
        "enable-chunked-prefill",
    }


@pytest.mark.parametrize(
    "args", [["profiles"], ["profiles", "show"], ["validate"], ["render"], ["diff"]]
)
def test_every_registry_command_has_an_example(run, args):
    result = run(*args, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output
    assert "  vprof " in result.output
