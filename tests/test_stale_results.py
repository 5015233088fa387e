"""Stale results are never reused: a bench re-runs a cell when anything that defines it
changed — the workload file, a lengths file or prompt dataset it reads, the traffic shape
file, the profile, the tokenizer — and skips it only when nothing did.

The bench runs real Locust against the emulator (``--url``), in process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator
from vprof.registry import resolve_profile
from vprof.runs.bench import run_bench, run_key
from vprof.runs.spec import BenchSpec
from vprof.traffic import get_shape
from vprof.workloads import get_workload


@pytest.fixture(scope="module")
def emulator():
    with Emulator(EmulatorConfig(ttft_ms=5, itl_ms=1, model="tiny")) as emu:
        yield emu


@pytest.fixture
def files(tmp_path):
    """A workload that reads a lengths file, and a short traffic shape, as YAML files."""
    (tmp_path / "lengths.txt").write_text("20\n30\n40\n")
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "endpoint: completions\nprompt_tokens: {kind: empirical, file: lengths.txt}\n"
        "output_tokens: 4\n"
    )
    shape = tmp_path / "t.yaml"
    shape.write_text("kind: steady\nusers: 1\nduration_s: 2\n")
    return tmp_path


def bench(emulator, files: Path) -> list[str]:
    """Run the bench once; return what it said."""
    said: list[str] = []
    spec = BenchSpec(
        traffic=(str(files / "t.yaml"),),
        workload=str(files / "w.yaml"),
        out_dir=files / "out",
        url=emulator.url,
        metrics_interval_s=0.5,
    )
    profile = resolve_profile("base")
    outcomes = run_bench([profile], spec, said.append)
    assert len(outcomes) == 1 and outcomes[0].finished, said
    return said


def ran(said: list[str]) -> bool:
    """True when the bench ran its cell; False when it skipped it as already completed."""
    skipped = any("already completed" in line for line in map(str, said))
    running = any(line.endswith(": running") for line in map(str, said))
    assert skipped != running, said
    return running


# (what is edited, how)
EDITS = [
    (
        "the workload file",
        lambda d: (d / "w.yaml").write_text(
            (d / "w.yaml").read_text().replace("output_tokens: 4", "output_tokens: 5")
        ),
    ),
    (
        "a lengths file it reads (same count)",
        lambda d: (d / "lengths.txt").write_text("20\n30\n41\n"),
    ),
    (
        "the traffic shape file",
        lambda d: (d / "t.yaml").write_text("kind: steady\nusers: 2\nduration_s: 2\n"),
    ),
]


def test_editing_what_a_run_read_runs_it_again(emulator, files):
    """Each edit in turn (a real run per edit; the one before each edit is its baseline)."""
    assert ran(bench(emulator, files))
    assert not ran(bench(emulator, files))  # nothing changed: resumed, not re-run
    for what, edit in EDITS:
        edit(files)
        assert ran(bench(emulator, files)), f"editing {what} reused the old results"
        assert not ran(bench(emulator, files)), f"after editing {what}"
    runs = sorted(p.name for p in (files / "out").iterdir() if p.is_dir())
    assert len(runs) == 1 + len(EDITS)  # the old runs are kept beside the new ones


def _key(files: Path, profiles_dir: Path | None = None, tokenizer: str | None = None) -> str:
    spec = BenchSpec(
        traffic=(str(files / "t.yaml"),), workload=str(files / "w.yaml"), tokenizer=tokenizer
    )
    dirs = [profiles_dir] if profiles_dir else []
    profile = resolve_profile("mine" if profiles_dir else "base", dirs)
    return run_key(profile, spec, get_workload(spec.workload), get_shape(spec.traffic[0]))


def test_a_prompt_dataset_edit_changes_the_run_key(files):
    (files / "prompts.jsonl").write_text('{"prompt": "hello there"}\n{"prompt": "bye now"}\n')
    (files / "w.yaml").write_text(
        "prompt_tokens: {kind: empirical, file: prompts.jsonl}\noutput_tokens: 4\n"
    )
    before = _key(files)
    (files / "prompts.jsonl").write_text('{"prompt": "hello there"}\n{"prompt": "bye then"}\n')
    assert _key(files) != before


def test_a_profile_edit_changes_the_run_key_and_a_comment_does_not(files):
    profiles = files / "profiles"
    profiles.mkdir()
    (profiles / "mine.yaml").write_text("extends: base\nengine_args: {max-num-seqs: 16}\n")
    before = _key(files, profiles)
    (profiles / "mine.yaml").write_text("# tuned\nextends: base\nengine_args: {max-num-seqs: 16}\n")
    assert _key(files, profiles) == before  # the same server command: the same run
    (profiles / "mine.yaml").write_text("extends: base\nengine_args: {max-num-seqs: 32}\n")
    assert _key(files, profiles) != before


def test_a_tokenizer_edit_changes_the_run_key(files):
    from vprof.tinymodel.build import ensure_tiny_model

    tiny = Path(ensure_tiny_model())
    copy = files / "tok"
    copy.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).write_bytes((tiny / name).read_bytes())
    before = _key(files, tokenizer=str(copy))
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert _key(files, tokenizer=str(copy)) != before


def test_a_completed_run_whose_records_were_damaged_runs_again_and_keeps_them(emulator, files):
    assert ran(bench(emulator, files))
    (run,) = [p for p in (files / "out").iterdir() if p.is_dir()]
    (run / "records.arrow").write_bytes(b"\xff" * 100)
    said = bench(emulator, files)
    assert ran(said)
    assert any("completed, but its records are damaged" in line for line in map(str, said))
    kept = run.with_name(run.name + ".attempt-1")
    assert (kept / "records.arrow").read_bytes() == b"\xff" * 100  # moved aside, not deleted
