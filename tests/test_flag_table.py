"""The flag table follows the installed vLLM: shipped when versions match, generated once per
other version and cached, the shipped one with a note when generation fails.

The installed version is faked (one vLLM is installed here); the generator is a small script
that writes a table the way ``vprof.registry.gen_vllm_args`` does, and counts its runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import vprof.registry.vllm_args as vllm_args
from vprof.registry import Profile, validate
from vprof.registry.vllm_args import SHIPPED, flag_table

SHIPPED_VERSION = json.loads(SHIPPED.read_text())["vllm_version"]

# argv[1]: where to write; argv[2]: the version to claim; argv[3]: a file counting runs
_FAKE_GENERATOR = """
import json, sys
out, version, counter = sys.argv[1:4]
with open(counter, "a") as f:
    f.write("run\\n")
table = json.load(open(sys.argv[4]))
table["vllm_version"] = version
del table["args"]["max-num-batched-tokens"]  # an "older" vLLM without this flag
json.dump(table, open(out, "w"))
"""
_FAILING_GENERATOR = "import sys; print('ImportError: no make_arg_parser', file=sys.stderr); " + (
    "open(sys.argv[3], 'a').write('run\\n'); sys.exit(1)"
)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Set the installed version and the generator; returns the run counter's path."""
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "cache"))
    counter = tmp_path / "runs.txt"

    def setup(version: str | None, script: str = _FAKE_GENERATOR) -> Path:
        monkeypatch.setattr(vllm_args, "installed_vllm_version", lambda: version)
        monkeypatch.setattr(
            vllm_args,
            "generator_argv",
            lambda out: [
                sys.executable,
                "-c",
                script,
                str(out),
                str(version),
                str(counter),
                str(SHIPPED),
            ],
        )
        flag_table.cache_clear()
        return counter

    yield setup
    flag_table.cache_clear()


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_the_shipped_table_is_used_when_the_versions_match(fake):
    counter = fake(f"{SHIPPED_VERSION}+cpu")  # a local build tag does not change the flags
    table = flag_table()
    assert (table.vllm_version, table.note) == (SHIPPED_VERSION, None)
    assert runs(counter) == 0


def test_another_version_gets_its_own_table_generated_once_and_cached(fake, tmp_path):
    counter = fake("0.25.1")
    table = flag_table()
    assert (table.vllm_version, table.note) == ("0.25.1", None)
    assert table.lookup("max-num-batched-tokens") is None  # the generated table, not shipped
    cached = tmp_path / "cache" / "vllm-args" / "0.25.1.json"
    assert json.loads(cached.read_text())["vllm_version"] == "0.25.1"
    flag_table.cache_clear()  # a new command
    assert flag_table().vllm_version == "0.25.1"
    assert runs(counter) == 1
    # messages name the version the table describes
    with pytest.raises(Exception, match=r"unknown vLLM engine argument \(vLLM 0\.25\.1\)"):
        validate(Profile("p", "d", "m", {"max-num-batched-tokens": 512}))


def test_a_damaged_cache_entry_is_generated_again(fake, tmp_path):
    counter = fake("0.25.1")
    folder = tmp_path / "cache" / "vllm-args"
    folder.mkdir(parents=True)
    (folder / "0.25.1.json").write_text("{not json")
    assert flag_table().vllm_version == "0.25.1"
    assert runs(counter) == 1


def test_a_failed_generation_falls_back_to_the_shipped_table_and_says_so(fake, tmp_path):
    counter = fake("0.25.1", _FAILING_GENERATOR)
    table = flag_table()
    assert table.vllm_version == SHIPPED_VERSION
    assert table.note is not None
    assert f"vLLM {SHIPPED_VERSION}'s table" in table.note and "vLLM 0.25.1" in table.note
    assert "no make_arg_parser" in table.note
    notes = validate(Profile("p", "d", "m", {"max-num-seqs": 4}))
    assert table.note in notes
    # the failure is remembered: the next command does not wait for the generator again
    flag_table.cache_clear()
    assert flag_table().note == table.note
    assert runs(counter) == 1
    assert (tmp_path / "cache" / "vllm-args" / "0.25.1.failed").is_file()


def test_without_vllm_the_shipped_table_is_used_with_a_note(fake):
    counter = fake(None)
    table = flag_table()
    assert table.vllm_version == SHIPPED_VERSION
    assert table.note == (
        f"vLLM is not installed here; flags are checked against vLLM {SHIPPED_VERSION}"
    )
    assert runs(counter) == 0


def test_the_generator_ships_in_the_package_and_reproduces_the_shipped_table(tmp_path):
    """The real generator against the installed vLLM: the child the registry starts is this
    module's ``main``, run here in the test process (vLLM is imported once in the worker that
    runs the modules importing it, see ``VLLM_CODE`` in conftest.py)."""
    pytest.importorskip("vllm")
    from vprof.registry import gen_vllm_args

    out = tmp_path / "table.json"
    argv = vllm_args.generator_argv(out)
    assert argv[1:3] == ["-m", gen_vllm_args.__name__]
    assert gen_vllm_args.main(argv[3:]) == 0
    assert json.loads(out.read_text()) == json.loads(SHIPPED.read_text())


def test_validate_says_once_which_vllm_the_table_describes(fake, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from vprof.cli.main import cli

    fake("0.25.1", _FAILING_GENERATOR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VPROF_PROFILES_DIR", raising=False)
    result = CliRunner().invoke(cli, ["validate"])
    assert result.exit_code == 0, result.output
    table_notes = [line for line in result.output.splitlines() if "installed vLLM" in line]
    assert table_notes == [f"note: {flag_table().note}"]
