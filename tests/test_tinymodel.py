"""The embedded tiny model: deterministic, complete, atomic, and usable by vLLM's loaders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vprof.tinymodel.build import (
    TINY_MAX_POSITIONS,
    TINY_MODEL_VERSION,
    ensure_tiny_model,
    is_tiny_model_dir,
    tiny_model_dir,
)

TINY_DIR = f"tiny-{TINY_MODEL_VERSION}"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    return tmp_path


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_tiny_model_is_written_into_the_cache_with_every_file(cache: Path) -> None:
    folder = ensure_tiny_model()
    assert folder == cache / "models" / TINY_DIR == tiny_model_dir()
    assert is_tiny_model_dir(folder)
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= set(_contents(folder))
    # nothing left behind from the atomic write
    assert [p.name for p in folder.parent.iterdir()] == [TINY_DIR]


def test_tiny_model_bytes_are_the_same_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "a"))
    first = _contents(ensure_tiny_model())
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "b"))
    second = _contents(ensure_tiny_model())
    assert first == second


def test_second_call_reuses_the_folder_without_rewriting(cache: Path) -> None:
    folder = ensure_tiny_model()
    before = (folder / "tokenizer.json").stat().st_mtime_ns
    assert ensure_tiny_model() == folder
    assert (folder / "tokenizer.json").stat().st_mtime_ns == before


def test_racing_processes_all_get_one_complete_folder(cache: Path) -> None:
    code = "from vprof.tinymodel.build import ensure_tiny_model; print(ensure_tiny_model())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert outputs == {str(cache / "models" / TINY_DIR)}
    assert [p.name for p in (cache / "models").iterdir()] == [TINY_DIR]


def test_config_is_a_llama_the_cpu_kernels_accept(cache: Path) -> None:
    from tokenizers import Tokenizer

    folder = ensure_tiny_model()
    config = json.loads((folder / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] == 64  # 16 is refused by the CPU attention kernel
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]
    assert config["max_position_embeddings"] == TINY_MAX_POSITIONS >= 8192
    # random weights emit any id below vocab_size: every one must detokenize
    assert config["vocab_size"] == tokenizer.get_vocab_size()
    assert config["bos_token_id"] == tokenizer.token_to_id("<s>")
    assert config["eos_token_id"] == tokenizer.token_to_id("</s>")


def test_tokenizer_prepends_bos_and_round_trips_any_text(cache: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ensure_tiny_model() / "tokenizer.json"))
    text = "Explain the prefill queue, in 12 words — ünïcode too! ✓"
    encoding = tokenizer.encode(text)
    assert encoding.ids[0] == tokenizer.token_to_id("<s>")
    assert tokenizer.decode(encoding.ids) == text
    # common words of the training corpus are single tokens, so prompts are not all bytes
    assert len(tokenizer.encode("the model server", add_special_tokens=False).ids) == 3


def test_chat_template_renders_roles_and_generation_prompt(cache: Path) -> None:
    import jinja2

    config = json.loads((ensure_tiny_model() / "tokenizer_config.json").read_text())
    template = jinja2.Environment().from_string(config["chat_template"])
    text = template.render(
        messages=[{"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        bos_token=config["bos_token"],
        eos_token=config["eos_token"],
    )
    assert text == "<s><|user|>\nhi</s>\n<|assistant|>\n"
