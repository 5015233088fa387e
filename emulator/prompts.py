"""How many tokens a prompt is: a cheap estimate, or a real tokenizer when given one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from vprof.common.errors import VprofError


def estimate_tokens(text: str) -> int:
    """Whitespace words or bytes/4, whichever is larger (BPE rarely beats either)."""
    if not text:
        return 0
    return max(len(text.split()), (len(text.encode()) + 3) // 4)


def _load_tokenizer(tokenizer_path: str):  # -> tokenizers.Tokenizer
    path = Path(tokenizer_path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise VprofError(
            "no tokenizer.json here",
            path=str(path),
            hint="pass a tokenizer.json or a model folder that holds one",
        )
    from tokenizers import Tokenizer  # lazy: only when a tokenizer is asked for

    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exceptions for bad files
        raise VprofError(
            f"not a tokenizer.json: {' '.join(str(exc).split())[:200]}",
            path=str(path),
            key="--tokenizer",
            hint="pass a Hugging Face tokenizer.json or a model folder that holds one",
        ) from None


def load_counter(tokenizer_path: str | None) -> Callable[[str], int]:
    """A function text -> token count: the tokenizer's if a path is given, else the estimate."""
    if tokenizer_path is None:
        return estimate_tokens
    tokenizer = _load_tokenizer(tokenizer_path)
    # vLLM adds the model's special tokens (BOS) to completion prompts
    return lambda text: len(tokenizer.encode(text, add_special_tokens=True).ids)


def chat_prompt_text(messages: Any) -> str:
    """The text a chat request's messages contribute to the prompt (template left out)."""
    parts: list[str] = []
    if not isinstance(messages, list):
        raise ValueError("'messages' must be a list")
    for message in messages:
        if not isinstance(message, dict):
            raise ValueError("each message must be an object")
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"{message.get('role', 'user')}: {content}\n")
    return "".join(parts)


def output_vocabulary(tokenizer_path: str | None, words: tuple[str, ...]) -> tuple[str, ...]:
    """The words the emulator emits, one token each.

    With a tokenizer, only the words it encodes as a single token are kept, so a client
    that counts generated text with the same tokenizer (the legacy ``/generate`` API sends
    no usage) counts exactly the tokens that were streamed.
    """
    if tokenizer_path is None:
        return words
    tokenizer = _load_tokenizer(tokenizer_path)
    single = tuple(w for w in words if len(tokenizer.encode(w, add_special_tokens=False).ids) == 1)
    return single if len(single) >= 4 else words
