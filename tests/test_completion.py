"""Shell completion: commands, profile names, workload and traffic presets, as a shell asks.

Each case runs the CLI the way bash's completion script does (``_VPROF_COMPLETE=bash_complete``
with ``COMP_WORDS`` and ``COMP_CWORD``) and reads the ``type,value`` lines it prints.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from vprof.cli.main import cli

PROFILES = {"base", "baseline", "chunked-128", "chunked-256", "eager", "prefix-cached"}
WORKLOADS = {"chat", "chat-sessions", "rag-shared-prefix", "sample-trace", "tiny-smoke"}
SHAPES = {"steady", "step", "spike", "smoke", "poisson", "constant-rate", "sample-trace"}


@pytest.fixture
def complete(tmp_path, monkeypatch):
    """``complete("vprof bench ch")``: what the shell is offered for the last word."""
    monkeypatch.chdir(tmp_path)
    for var in ("VPROF_PROFILES_DIR", "VPROF_WORKLOADS_DIR", "VPROF_TRAFFIC_DIR"):
        monkeypatch.delenv(var, raising=False)

    def offered(line: str, shell: str = "bash") -> list[tuple[str, str]]:
        words = line.split(" ")
        env = {
            "_VPROF_COMPLETE": f"{shell}_complete",
            "COMP_WORDS": line,
            # fish's script passes the word being completed, the others its index
            "COMP_CWORD": words[-1] if shell == "fish" else str(len(words) - 1),
        }
        result = CliRunner().invoke(cli, [], env=env, prog_name="vprof")
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        if shell == "zsh":  # three lines an item: type, value, help
            return [(lines[i], lines[i + 1]) for i in range(0, len(lines), 3)]
        return [(kind, value) for kind, _, value in (item.partition(",") for item in lines)]

    return offered


def names(items: list[tuple[str, str]]) -> set[str]:
    return {value for kind, value in items if kind == "plain"}


def test_commands_complete(complete):
    assert names(complete("vprof sch")) == {"schema"}
    assert {"bench", "sweep", "profiles", "workloads", "traffic"} <= names(complete("vprof "))


@pytest.mark.parametrize(
    "line",
    [
        "vprof bench ",
        "vprof bench base ",  # a second profile
        "vprof render ",
        "vprof launch ",
        "vprof profiles show ",
        "vprof diff base ",
        "vprof sweep chunked ",
        "vprof sweep set ",
        "vprof tune ",
    ],
)
def test_profile_names_complete_where_a_profile_is_taken(complete, line):
    assert PROFILES <= names(complete(line))


def test_a_profile_name_completes_from_its_start(complete):
    assert names(complete("vprof bench chunked-2")) == {"chunked-256", "chunked-2048"}


@pytest.mark.parametrize(
    "line",
    [
        "vprof bench base --workload ",
        "vprof bench base -w ",
        "vprof sweep chunked base -w ",
        "vprof tune base --workload ",
        "vprof workloads show ",
        "vprof forecast predict model.json -w ",
        "vprof render base --workload ",
    ],
)
def test_workload_presets_complete(complete, line):
    assert WORKLOADS <= names(complete(line))


@pytest.mark.parametrize(
    "line",
    [
        "vprof bench base --traffic ",
        "vprof bench base -t steady -t ",
        "vprof tune base --traffic ",
        "vprof traffic show ",
        "vprof plan runs --traffic ",
        "vprof render base --traffic ",
    ],
)
def test_traffic_presets_complete(complete, line):
    assert SHAPES <= names(complete(line))


def test_the_users_own_folders_complete_too(complete, tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.yaml").write_text("name: my-server\nmodel: m\n", "utf-8")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "x.yaml").write_text("name: extra-one\nmodel: m\n", "utf-8")
    (tmp_path / "shapes").mkdir()
    (tmp_path / "shapes" / "burst.yaml").write_text("kind: steady\nduration_s: 5\n", "utf-8")
    assert names(complete("vprof bench my")) == {"my-server"}
    assert names(complete("vprof render --profiles-dir more ex")) == {"extra-one"}
    assert names(complete("vprof traffic --dir shapes show bu")) == {"burst"}


def test_a_path_or_an_unknown_word_completes_as_a_file(complete):
    assert complete("vprof render ./my") == [("file", "./my")]
    assert complete("vprof bench base -w nothing-like-it") == [("file", "nothing-like-it")]
    assert complete("vprof render --profiles-dir missing-folder b") == [("file", "b")]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_shell_is_offered_the_same_names(complete, shell):
    assert names(complete("vprof traffic show ste", shell)) == {"steady", "step"}
