"""Write the tiny model folder once, atomically, with the same bytes every time."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from vprof.common.errors import LaunchError
from vprof.common.paths import cache_dir

# Bump when any file's content changes, so an old cached copy is never mistaken for the new one.
TINY_MODEL_VERSION = "v2"
# The name vprof serves it under (``--served-model-name``), and the profile value that selects it.
TINY_MODEL_NAME = "tiny"
# vLLM's CPU build turns "auto" into bfloat16, and with bfloat16 on an AMX-capable CPU it picks
# its AMX attention kernel, which died with SIGILL ("Illegal instruction") on these VMs when a
# short prompt was the first request. float32 takes the plain AVX-512 kernel; the model is tiny.
TINY_MODEL_DTYPE = "float32"
# Longest sequence the tiny model accepts (max_position_embeddings): room for 8192+ token profiles.
TINY_MAX_POSITIONS = 16384

_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")

_VOCAB_SIZE = 4096
_CORPUS_SEED = 20240607
_BOS, _EOS, _PAD = "<s>", "</s>", "<pad>"
# Minimal role-tagged template; vLLM's chat endpoint refuses a tokenizer without one.
_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "the a an of to in and or for with on at by from as is are was were be been has have had "
    "model server token tokens request requests latency throughput batch batched prefill decode "
    "cache prefix chunk chunked memory kernel engine queue schedule scheduler user users stream "
    "time first output input prompt length context window sequence sequences capacity replica "
    "profile traffic load steady ramp spike rate second seconds milli percent percentile median "
    "fast slow small large tiny big good bad new old long short high low more less many few "
    "please write explain describe summarise compare list show tell me about how why what when "
    "which where who story poem code function class data table report question answer help "
    "system assistant human message reply chat conversation turn history document page section "
    "water river mountain city country garden forest ocean music light night morning winter "
    "python rust linux network socket thread process file folder disk port health metrics"
).split()
_PUNCT = (".", ".", ".", "?", "!", ",", ";", ":")


def tiny_model_dir() -> Path:
    """Where the tiny model lives (whether or not it has been written yet)."""
    return cache_dir() / "models" / f"tiny-{TINY_MODEL_VERSION}"


def is_tiny_model_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a complete tiny model folder."""
    p = Path(path)
    return all((p / name).is_file() for name in _FILES)


def ensure_tiny_model() -> Path:
    """Return the tiny model folder, writing it first if needed.

    Safe when several processes race: each writes a private temporary folder and renames it
    into place; a loser finds the winner's complete folder and discards its own.
    """
    final = tiny_model_dir()
    if is_tiny_model_dir(final):
        return final
    parent = final.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(
            f"cannot create the model cache folder {parent}: {exc.strerror}",
            hint="set VPROF_CACHE_DIR to a writable folder",
        ) from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=parent))
    try:
        _write_model(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
        try:
            os.rename(tmp, final)
        except OSError:
            # Someone else finished first (the target exists and is not empty).
            if not is_tiny_model_dir(final):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _write_model(folder: Path) -> None:
    tokenizer = _train_tokenizer()
    vocab_size = tokenizer.get_vocab_size()
    tokenizer.save(str(folder / "tokenizer.json"))
    bos_id = tokenizer.token_to_id(_BOS)
    eos_id = tokenizer.token_to_id(_EOS)
    pad_id = tokenizer.token_to_id(_PAD)
    _write_json(folder / "config.json", _model_config(vocab_size, bos_id, eos_id, pad_id))
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": _BOS,
            "eos_token": _EOS,
            "pad_token": _PAD,
            "add_bos_token": True,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": TINY_MAX_POSITIONS,
            "chat_template": _CHAT_TEMPLATE,
        },
    )
    _write_json(
        folder / "special_tokens_map.json",
        {"bos_token": _BOS, "eos_token": _EOS, "pad_token": _PAD},
    )
    _write_json(
        folder / "generation_config.json",
        {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id},
    )
    (folder / "README.md").write_text(
        "vprof's embedded tiny Llama model (no weights).\n"
        "Serve it with real vLLM and random weights:\n\n"
        "    python -m vllm.entrypoints.openai.api_server --model THIS_FOLDER \\\n"
        "        --load-format dummy --dtype float32 --served-model-name tiny --enforce-eager\n",
        encoding="utf-8",
    )


def _model_config(vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> dict[str, object]:
    # head_dim 64: the CPU attention kernel rejects small head sizes such as 16.
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 2,
        "max_position_embeddings": TINY_MAX_POSITIONS,
        "vocab_size": vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        # Serve with --dtype float32 (TINY_MODEL_DTYPE): see the note there.
        "torch_dtype": TINY_MODEL_DTYPE,
    }


def _write_json(path: Path, data: dict[str, object]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _corpus(n_lines: int = 4000) -> list[str]:
    """A seeded pseudo-English corpus with some digits, so numbers tokenise sensibly too."""
    rng = random.Random(_CORPUS_SEED)
    lines = []
    for _ in range(n_lines):
        words = []
        for _ in range(rng.randint(4, 24)):
            roll = rng.random()
            if roll < 0.06:
                words.append(str(rng.randint(0, 9999)))
            elif roll < 0.12:
                words.append(rng.choice(_WORDS).capitalize())
            else:
                words.append(rng.choice(_WORDS))
        lines.append(" ".join(words) + rng.choice(_PUNCT))
    return lines


def _train_tokenizer():  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[_PAD, _BOS, _EOS],
        # Every byte is a token, so any text (and any random token id) round-trips.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    bos_id = tokenizer.token_to_id(_BOS)
    # Prepend <s> like Llama tokenizers, so usage.prompt_tokens matches what clients count.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{_BOS} $A",
        pair=f"{_BOS} $A {_BOS} $B",
        special_tokens=[(_BOS, bos_id)],
    )
    return tokenizer
