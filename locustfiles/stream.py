"""Timing a streamed completion, the way ``vllm bench serve`` defines it (pure, no locust).

A scanner is fed the response body as it arrives, ``feed(bytes, at_s)`` with the moment those
bytes came off the socket, and only splits it into messages and stamps each one: that is all
the work done while a stream is running. ``result()`` decodes the messages once the stream has
ended (or was cut off) and applies the definitions (``vllm bench serve``'s, as the README's
metric definitions list them):

- TTFT: to the first message whose JSON has a non-empty ``choices`` list;
- ITL: gaps between consecutive messages with non-empty ``choices`` (per chunk, not per token);
- E2E: to the last such message (not to ``[DONE]``);
- token counts from the final ``usage`` chunk (``stream_options.include_usage``).

``read_sse`` and ``read_ndjson`` run a scanner over an iterator of byte lines and a ``now()``
clock, so tests can feed canned bytes and a fake clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


class StreamError(Exception):
    """The server's stream was not what an OpenAI-compatible server sends."""


@dataclass
class StreamResult:
    """What one streamed response told us; times are the stamps the scanner was fed (seconds)."""

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


_DONE = b"[DONE]"


class SseScanner:
    """Splits a ``text/event-stream`` body into messages as it arrives and stamps each one.

    A message's time is the arrival of its first ``data:`` line. Comments, other fields and
    everything after ``[DONE]`` are dropped; nothing is decoded until :meth:`result`.
    """

    __slots__ = ("datas", "stamps", "done", "_pending", "_lines", "_stamp")

    def __init__(self) -> None:
        self.datas: list[bytes] = []  # each message's data (lines joined by "\n")
        self.stamps: list[float] = []
        self.done = False
        self._pending = b""  # an incomplete line
        self._lines: list[bytes] = []  # data lines of the message being read
        self._stamp = 0.0

    def feed(self, data: bytes, at_s: float) -> None:
        """Take the next bytes of the body, which arrived at ``at_s``."""
        if self.done:
            return  # the rest of the body only has to be read, for keep-alive
        if (
            not self._pending
            and not self._lines
            and data.startswith(b"data: ")
            and data.find(b"\n") == len(data) - 2
            and data.endswith(b"\n\n")
        ):
            # One whole one-line message: what vLLM sends in each HTTP chunk.
            value = data[6:-2]
            if value == _DONE:
                self.done = True
                return
            self.datas.append(value)
            self.stamps.append(at_s)
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line, at_s)
            if self.done:
                return

    def _line(self, line: bytes, at_s: float) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:  # a blank line ends a message
            self._end_message()
            return
        if line.startswith(b":"):
            return  # comment / keep-alive ping
        name, _, value = line.partition(b":")
        if name != b"data":
            return
        if not self._lines:
            self._stamp = at_s
        self._lines.append(value[1:] if value.startswith(b" ") else value)

    def _end_message(self) -> None:
        if not self._lines:
            return
        data = self._lines[0] if len(self._lines) == 1 else b"\n".join(self._lines)
        self._lines = []
        if data.strip() == _DONE:
            self.done = True
            return
        self.datas.append(data)
        self.stamps.append(self._stamp)

    def close(self, at_s: float) -> None:
        """The body ended: a last line without a newline, a message without a blank line."""
        if self._pending and not self.done:
            pending, self._pending = self._pending, b""
            self._line(pending, at_s)
        if not self.done:
            self._end_message()

    def result(self, into: StreamResult | None = None) -> StreamResult:
        """Decode the messages read so far and time them (call after the body ended, or after
        it was cut off: a partial stream keeps its timings)."""
        result = into if into is not None else StreamResult()
        result.done = self.done
        for message, at_s in zip(_decode(self.datas, "a stream message"), self.stamps, strict=True):
            _apply(result, message, at_s)
        return result


def _decode(datas: list[bytes], what: str) -> Iterable[dict[str, Any]]:
    """Each message as a dict; one ``json.loads`` for the whole stream when all are objects."""
    if not datas:
        return []
    try:
        messages = json.loads(b"[" + b",".join(datas) + b"]")
        if len(messages) == len(datas) and all(type(m) is dict for m in messages):
            return messages
    except ValueError:
        pass
    return (_decode_one(data, what) for data in datas)  # find the culprit, in order


def _decode_one(data: bytes, what: str) -> dict[str, Any]:
    try:
        message = json.loads(data)
    except ValueError as exc:
        raise StreamError(f"{what} is not JSON: {data[:80]!r}") from exc
    if not isinstance(message, dict):
        raise StreamError(f"{what} is not an object: {data[:80]!r}")
    return message


def _apply(result: StreamResult, message: dict[str, Any], at_s: float) -> None:
    choices = message.get("choices")
    if "error" in message and not choices:
        err = message["error"]
        result.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        return
    if choices:
        choice = choices[0] if isinstance(choices, list) else None
        if not isinstance(choice, dict):
            raise StreamError(f"a message's choices are not a list of objects: {choices!r:.80}")
        result._content(at_s)
        delta = choice.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if piece and isinstance(piece, str):
            result.text += piece
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]
    usage = message.get("usage")
    if usage:
        if not isinstance(usage, dict):
            raise StreamError(f"a message's usage is not an object: {usage!r:.80}")
        _usage(result, usage)


def _usage(result: StreamResult, usage: dict) -> None:
    result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    result.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    if cached is not None:
        result.cached_tokens = int(cached)


class NdjsonScanner:
    """The legacy ``/generate`` body: one JSON object per line (older servers end each with
    NUL instead), every one a content chunk, stamped as it arrives."""

    __slots__ = ("datas", "stamps", "_pending")

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self.stamps: list[float] = []
        self._pending = b""

    def feed(self, data: bytes, at_s: float) -> None:
        """Take the next bytes of the body, which arrived at ``at_s``."""
        parts = (self._pending + data).replace(b"\0", b"\n").split(b"\n")
        self._pending = parts.pop()
        for part in parts:
            part = part.strip()
            if part:
                self.datas.append(part)
                self.stamps.append(at_s)

    def close(self, at_s: float) -> None:
        """The body ended: a last object without a separator still counts."""
        self.feed(b"\n", at_s)

    def result(self, into: StreamResult | None = None, prompt: str = "") -> StreamResult:
        """Decode the lines read so far: ``text`` is cumulative in the legacy API, and it
        repeats the prompt at the front, which is stripped. No usage is sent: the caller
        counts tokens with the tokenizer."""
        result = into if into is not None else StreamResult()
        for message, at_s in zip(_decode(self.datas, "a /generate line"), self.stamps, strict=True):
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


def read_sse(
    lines: Iterable[bytes],
    now: Callable[[], float] = time.perf_counter,
    into: StreamResult | None = None,
) -> StreamResult:
    """Read an OpenAI-style SSE stream (completions or chat), given line by line, and time it."""
    scanner = SseScanner()
    for line in lines:
        scanner.feed(bytes(line) + b"\n", now())
    scanner.close(now())
    return scanner.result(into)


def read_ndjson(
    lines: Iterable[bytes],
    now: Callable[[], float] = time.perf_counter,
    prompt: str = "",
    into: StreamResult | None = None,
) -> StreamResult:
    """Read the legacy ``/generate`` stream, given line by line, and time it."""
    scanner = NdjsonScanner()
    for line in lines:
        scanner.feed(bytes(line) + b"\n", now())
    scanner.close(now())
    return scanner.result(into, prompt=prompt)
