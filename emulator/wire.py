"""vLLM's wire format, byte for byte: SSE chunks, final usage chunk, legacy NDJSON.

The JSON mirrors what vLLM 0.32's pydantic models serialise (``model_dump_json`` with
``exclude_unset``/``exclude_none`` exactly as its serving code calls it), so a client that
parses the emulator parses vLLM. Each request builds its constant prefix once and only
splices the token text into it: the emulator spends its CPU on timing, not on JSON.
"""

from __future__ import annotations

import json
import uuid

DONE = b"data: [DONE]\n\n"

# A small vocabulary of whole words; each emulated token is one of them.
VOCABULARY: tuple[str, ...] = (
    " the",
    " model",
    " serves",
    " tokens",
    " quickly",
    " and",
    " a",
    " server",
    " measures",
    " latency",
    " of",
    " each",
    " request",
    " with",
    " care",
    " to",
)


def dumps(value: object) -> str:
    """Compact JSON the way pydantic writes it: no spaces, UTF-8 kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse(payload: str) -> bytes:
    """One server-sent event as vLLM frames it."""
    return b"data: " + payload.encode() + b"\n\n"


def token_text(index: int, vocabulary: tuple[str, ...] = VOCABULARY) -> str:
    """The text of output token ``index`` (deterministic, so tests can predict it)."""
    return vocabulary[index % len(vocabulary)]


def new_request_id(kind: str, given: str | None = None) -> str:
    """``cmpl-<hex>`` or ``chatcmpl-<hex>``; a client's ``X-Request-Id`` is kept, as vLLM does."""
    return f"{kind}-{given or uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """vLLM's ``UsageInfo`` field order: prompt, total, completion."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class _Chunks:
    """What the two OpenAI streams share: a JSON head, a token event, the usage event.

    Subclasses set ``_head`` (the chunk's fields before ``choices``), ``_open`` (everything up
    to the token's text) and ``_tail`` / ``_last_tail`` (everything after it).
    """

    _head: str
    _open: str
    _tail: str
    _last_tail: str

    def token(self, text: str, last: bool) -> bytes:
        """One token's event; the last one carries ``finish_reason: "length"``."""
        return sse(self._open + dumps(text) + (self._last_tail if last else self._tail))

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The usage-only event that ``stream_options.include_usage`` adds at the end."""
        return sse(
            self._head
            + ',"choices":[],"usage":'
            + dumps(usage(prompt_tokens, completion_tokens))
            + "}"
        )


class CompletionChunks(_Chunks):
    """SSE events of one streamed ``/v1/completions`` request."""

    def __init__(self, request_id: str, created: int, model: str) -> None:
        head = dumps(
            {"id": request_id, "object": "text_completion", "created": created, "model": model}
        )[:-1]
        self._head = head
        self._open = head + ',"choices":[{"index":0,"text":'
        self._tail = (
            ',"logprobs":null,"finish_reason":null,"stop_reason":null,'
            '"prompt_token_ids":null,"token_ids":null}]}'
        )
        self._last_tail = (
            ',"logprobs":null,"finish_reason":"length","stop_reason":null,'
            '"prompt_token_ids":null,"token_ids":null}]}'
        )

    def first(self, text: str, last: bool) -> bytes:
        """The first content event (completions send nothing before it)."""
        return self.token(text, last)


class ChatChunks(_Chunks):
    """SSE events of one streamed ``/v1/chat/completions`` request."""

    def __init__(self, request_id: str, created: int, model: str) -> None:
        head = dumps(
            {
                "id": request_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )[:-1]
        self._head = head
        self._open = head + ',"choices":[{"index":0,"delta":{"content":'
        self._tail = '},"logprobs":null,"finish_reason":null,"token_ids":null}]}'
        self._last_tail = (
            '},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}'
        )
        self._role = sse(
            head + ',"choices":[{"index":0,"delta":{"role":"assistant",'
            '"content":""},"logprobs":null,"finish_reason":null}],'
            '"prompt_token_ids":null,"prompt_text":null}'
        )

    def first(self, text: str, last: bool) -> bytes:
        """The role-only event and the first token's event: vLLM sends both in one step."""
        return self._role + self.token(text, last)


def generate_line(prompt: str, text_so_far: str) -> bytes:
    """One NDJSON line of the legacy ``/generate`` stream: prompt plus cumulative text."""
    return (json.dumps({"text": [prompt + text_so_far]}) + "\n").encode()


def completion_response(
    request_id: str, created: int, model: str, text: str, prompt_tokens: int, completion_tokens: int
) -> dict:
    """A non-streamed ``/v1/completions`` body."""
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
        "kv_transfer_params": None,
    }


def chat_response(
    request_id: str, created: int, model: str, text: str, prompt_tokens: int, completion_tokens: int
) -> dict:
    """A non-streamed ``/v1/chat/completions`` body."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None},
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "kv_transfer_params": None,
    }


def error_body(
    message: str, status: int, kind: str = "BadRequestError", param: str | None = None
) -> dict:
    """vLLM's ``ErrorResponse`` shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}
