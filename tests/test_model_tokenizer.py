"""The served model's own tokenizer, found without a network.

A fake Hugging Face cache holds a tokenizer of its own (not the tiny model's, so a stand-in
cannot pass for it); ``bench --url`` against an emulator that serves that model name and counts
prompts with that tokenizer must measure no prompt-token mismatch, and with an empty cache the
output must say which stand-in was used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vprof.workloads.modeltokenizer import (
    GIVEN,
    HF_CACHE,
    MODEL_FOLDER,
    STAND_IN,
    find_tokenizer,
)

MODEL = "acme/m"
_WORDS = "apple river stone cloud ember violet harbor quill maple ridge sonnet lantern".split()


def _own_tokenizer(path: Path) -> Path:
    """A byte-level BPE of its own vocabulary, with a BOS like Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [" ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(12)) for i in range(400)]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bos = tokenizer.token_to_id("<s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def _hub_cache(root: Path, model: str, tokenizer: Path) -> Path:
    """A Hugging Face hub cache as ``huggingface_hub`` lays it out, holding one file."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = root / f"models--{model.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    return root


@pytest.fixture(scope="module")
def own_tokenizer(tmp_path_factory) -> Path:
    return _own_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture
def cache(tmp_path, monkeypatch, own_tokenizer) -> Path:
    import huggingface_hub.constants

    root = _hub_cache(tmp_path / "hub", MODEL, own_tokenizer)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    return root


def test_a_hub_id_in_the_local_cache_is_found_without_a_network(cache, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("no download without --fetch-tokenizer")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    choice = find_tokenizer([MODEL])
    assert choice.source == HF_CACHE and not choice.is_stand_in and choice.model == MODEL
    assert (Path(choice.path) / "tokenizer.json").read_bytes() == next(
        cache.rglob("tokenizer.json")
    ).read_bytes()
    assert MODEL in choice.note() and "Hugging Face cache" in choice.note()


def test_tokenizer_flag_wins_and_a_model_folder_is_read_directly(cache, tmp_path, own_tokenizer):
    assert find_tokenizer([MODEL], given="/x/tok.json").source == GIVEN
    assert find_tokenizer([str(own_tokenizer.parent), MODEL]).source == MODEL_FOLDER
    assert find_tokenizer([str(tmp_path / "nothing"), MODEL]).source == HF_CACHE


def test_an_empty_cache_gives_the_stand_in_and_says_so(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    choice = find_tokenizer([MODEL])
    assert choice.source == STAND_IN and choice.is_stand_in
    assert "stand-in" in choice.note() and MODEL in choice.note()
    record = choice.record()
    assert record["tokenizer_is_stand_in"] is True and record["tokenizer"]["model"] == MODEL
    assert "stand-in" in record["tokenizer"]["label"]


def test_fetch_downloads_only_when_asked(tmp_path, monkeypatch, own_tokenizer):
    import huggingface_hub
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    asked = []

    def download(model, filename, **kwargs):
        asked.append((model, filename))
        if filename != "tokenizer.json":
            raise FileNotFoundError(filename)
        return str(own_tokenizer)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    assert find_tokenizer([MODEL]).is_stand_in and asked == []
    choice = find_tokenizer([MODEL], fetch=True)
    assert choice.source == "downloaded" and choice.path == str(own_tokenizer.parent)
    assert asked[0] == (MODEL, "tokenizer.json")


def test_fetch_without_a_hub_id_or_with_a_failing_download_is_an_error(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants

    from vprof.common.errors import WorkloadError

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))

    def offline(*args, **kwargs):
        raise OSError("no route to host")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(WorkloadError, match="could not download") as caught:
        find_tokenizer([MODEL], fetch=True)
    assert caught.value.key == "--fetch-tokenizer"
    with pytest.raises(WorkloadError, match="not a Hugging Face hub id"):
        find_tokenizer(["/models/llama/"], fetch=True)


def _bench(tmp_path: Path, url: str, cache: Path, out: str) -> subprocess.Popen:
    """``vprof bench --url`` as a user runs it, with ``cache`` as the Hugging Face cache."""
    shape = tmp_path / "short.yaml"
    shape.write_text("kind: open-loop\nrate_rps: 8\nwarmup_s: 0\nduration_s: 2\nmax_in_flight: 4\n")
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "bench",
            "emu",
            "--url",
            url,
            "--workload",
            "tiny-smoke",
            "--traffic",
            str(shape),
            "--format",
            "json",
            "--out",
            str(tmp_path / out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(bench: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = bench.communicate(timeout=240)
    return subprocess.CompletedProcess(bench.args, bench.returncode, stdout, stderr)


def test_bench_url_builds_prompts_with_the_served_models_cached_tokenizer(tmp_path, own_tokenizer):
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator

    cache = _hub_cache(tmp_path / "hub", MODEL, own_tokenizer)
    config = EmulatorConfig(ttft_ms=5, itl_ms=1, model=MODEL, tokenizer_path=str(own_tokenizer))
    with Emulator(config) as emulator:  # both at once: most of a bench is waiting
        benches = [
            _bench(tmp_path, emulator.url, c, o)
            for c, o in ((cache, "found"), (tmp_path / "none", "missing"))
        ]
        found, missing = (_finish(b) for b in benches)
    assert found.returncode == 0, found.stderr
    (summary,) = json.loads(found.stdout)["summaries"]
    assert summary["completed"] > 0
    assert summary["prompt_token_mismatch_rate"] == 0.0
    assert summary["tokenizer_is_stand_in"] is False and MODEL in summary["tokenizer"]
    assert "stand-in" not in found.stderr
    run = json.loads((Path(summary["path"]) / "run.json").read_text())
    assert run["tokenizer"]["source"] == HF_CACHE and run["tokenizer_is_stand_in"] is False

    assert missing.returncode == 0, missing.stderr
    (summary,) = json.loads(missing.stdout)["summaries"]
    assert summary["tokenizer_is_stand_in"] is True and "stand-in" in summary["tokenizer"]
    assert missing.stderr.count("as a stand-in") == 1, missing.stderr  # said once
    assert "vprof's tiny model's tokenizer" in missing.stderr
    # the stand-in's prompts are other lengths to this model, and the summary says why
    assert summary["prompt_token_mismatch_rate"] > 0.5
    assert "stand-in" in summary["prompt_token_warning"]


def _chat_frame(template: int = 15, off: int = 0):
    """Chat records: the server counts the template's tokens on top of the plan (``template``
    with the shared system prompt, 7 without), and ``off`` requests one token more."""
    import pandas as pd
    from test_analysis_data import synth_records

    records = synth_records(120, seed=3)
    for i, rec in enumerate(records):
        rec.endpoint = "chat"
        rec.prefix_group = 0 if i % 4 else -1
        if rec.status == "ok":
            rec.prompt_tokens = rec.expected_prompt_tokens + (template if i % 4 else 7)
            rec.prompt_tokens += 1 if i < off else 0
    return pd.DataFrame([r.to_dict() for r in records])


def test_the_chat_template_is_counted_as_such_not_as_a_mismatch():
    from vprof.analysis.summary import summarize

    summary = summarize(_chat_frame())
    assert summary["prompt_token_mismatch_rate"] == 0.0
    assert summary["mean_prompt_token_excess"] == 0.0
    assert summary["chat_template_prompt_tokens"] == pytest.approx((15 * 90 + 7 * 30) / 120)
    summary = summarize(_chat_frame(off=12))
    assert summary["prompt_token_mismatch_rate"] == pytest.approx(12 / 120)


def test_a_mismatch_beyond_the_tolerance_is_a_warning_naming_the_likely_cause(tmp_path):
    from test_analysis_data import synth_records, write_run

    from vprof.analysis.run import summarize_run

    records = synth_records(100, seed=4)  # prompt_tokens 90..109 against a plan of 100
    run = write_run(tmp_path / "own", records)
    meta = json.loads((run / "run.json").read_text())
    own = {"path": "/m", "source": HF_CACHE, "model": MODEL, "label": f"{MODEL} ({HF_CACHE})"}
    (run / "run.json").write_text(json.dumps({**meta, "tokenizer": own}))
    warning = summarize_run(run)["prompt_token_warning"]
    assert "although prompts were built with acme/m" in warning and "another model" in warning
    stand_in = {**own, "source": STAND_IN, "label": "vprof's tiny model (stand-in for acme/m)"}
    (run / "run.json").write_text(
        json.dumps({**meta, "tokenizer": stand_in, "tokenizer_is_stand_in": True})
    )
    summary = summarize_run(run)
    assert summary["tokenizer_is_stand_in"] is True
    assert "stand-in" in summary["prompt_token_warning"]
    assert "--fetch-tokenizer" in summary["prompt_token_warning"]
    exact = synth_records(100, seed=4)
    for rec in exact:
        rec.prompt_tokens = rec.expected_prompt_tokens if rec.status == "ok" else -1
    assert "prompt_token_warning" not in summarize_run(write_run(tmp_path / "exact", exact))
