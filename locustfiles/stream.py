"""Timing a streamed completion, the way ``vllm bench serve`` defines it (pure, no locust).

The readers take an iterator of byte lines (``requests``' ``iter_lines()``, which yields each
line as soon as its HTTP chunk arrives) and a ``now()`` clock, so tests can feed them canned
bytes and a fake clock. Definitions (``vllm bench serve``'s, as the README's metric
definitions list them):

- TTFT: to the first message whose JSON has a non-empty ``choices`` list;
- ITL: gaps between consecutive messages with non-empty ``choices`` (per chunk, not per token);
- E2E: to the last such message (not to ``[DONE]``);
- token counts from the final ``usage`` chunk (``stream_options.include_usage``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class StreamError(Exception):
    """The server's stream was not what an OpenAI-compatible server sends."""


@dataclass
class StreamResult:
    """What one streamed response told us; times are ``now()`` readings (seconds)."""

    first_token_s: float | None = None
    last_token_s: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    content_chunks: int = 0
    text: str = ""
    prompt_tokens: int = -1
    completion_tokens: int = -1
    cached_tokens: int = -1
    done: bool = False  # saw ``data: [DONE]`` (SSE) or the end of the body (NDJSON)
    finish_reason: str | None = None
    error: str = ""  # an error object the server sent inside the stream

    def _content(self, at_s: float) -> None:
        if self.first_token_s is None:
            self.first_token_s = at_s
        else:
            self.itl_ms.append((at_s - self.last_token_s) * 1000.0)  # type: ignore[operator]
        self.last_token_s = at_s
        self.content_chunks += 1


def _sse_messages(lines: Iterable[bytes], now: Callable[[], float]) -> Iterable[tuple[str, float]]:
    """Yield (data, arrival time) per SSE message; comments and other fields are skipped."""
    data: list[str] = []
    stamp = 0.0
    for raw in lines:
        line = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        line = line.rstrip("\r")
        if not line:  # a blank line ends a message
            if data:
                yield "\n".join(data), stamp
                data = []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive ping
        name, _, value = line.partition(":")
        if name != "data":
            continue
        if not data:
            stamp = now()  # the message "arrives" with its first data line
        data.append(value[1:] if value.startswith(" ") else value)
    if data:  # servers may omit the final blank line
        yield "\n".join(data), stamp


def _usage(result: StreamResult, usage: dict) -> None:
    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    result.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    if cached is not None:
        result.cached_tokens = int(cached)


def read_sse(
    lines: Iterable[bytes],
    now: Callable[[], float] = time.perf_counter,
    into: StreamResult | None = None,
) -> StreamResult:
    """Read an OpenAI-style SSE stream (completions or chat) and time it.

    ``into`` is filled as the stream goes, so a stream cut off half-way keeps its timings.
    """
    result = into if into is not None else StreamResult()
    for data, at_s in _sse_messages(lines, now):
        if result.done:
            continue  # read to the end of the body so the connection can be kept alive
        if data.strip() == "[DONE]":
            result.done = True
            continue
        try:
            message = json.loads(data)
        except ValueError as exc:
            raise StreamError(f"a stream message is not JSON: {data[:80]!r}") from exc
        if not isinstance(message, dict):
            raise StreamError(f"a stream message is not an object: {data[:80]!r}")
        if "error" in message and not message.get("choices"):
            err = message["error"]
            result.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            continue
        choices = message.get("choices")
        if choices:
            result._content(at_s)
            choice = choices[0]
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if piece:
                result.text += piece
            if choice.get("finish_reason"):
                result.finish_reason = choice["finish_reason"]
        if message.get("usage"):
            _usage(result, message["usage"])
    return result


def _ndjson_lines(lines: Iterable[bytes]) -> Iterable[str]:
    # Older vLLM api_servers ended each JSON with NUL instead of a newline: accept both.
    for raw in lines:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        for part in text.split("\0"):
            if part.strip():
                yield part.strip()


def read_ndjson(
    lines: Iterable[bytes],
    now: Callable[[], float] = time.perf_counter,
    prompt: str = "",
    into: StreamResult | None = None,
) -> StreamResult:
    """Read the legacy ``/generate`` stream: one JSON per line, ``text`` cumulative.

    Every line is a content chunk. The legacy server repeats the prompt at the front of the
    text; it is stripped so ``text`` is the generated part only. No usage is sent: the caller
    counts tokens with the tokenizer.
    """
    result = into if into is not None else StreamResult()
    for line in _ndjson_lines(lines):
        at_s = now()
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise StreamError(f"a /generate line is not JSON: {line[:80]!r}") from exc
        if "error" in message and "text" not in message:
            result.error = str(message["error"])
            continue
        texts = message.get("text") or [""]
        text = texts[0] if isinstance(texts, list) else str(texts)
        if prompt and text.startswith(prompt):
            text = text[len(prompt) :]
        result._content(at_s)
        result.text = text
    result.done = True
    return result
