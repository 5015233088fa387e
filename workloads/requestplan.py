"""A planned request: what a synthesizer, a session or a trace hands the sender to send.

The floor under ``synthesis``, ``sessions`` and ``traceplan``, which all build these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestPlan:
    """One request to send. Completions use ``prompt``; chat uses ``messages``.

    ``expected_prompt_tokens`` is what the server should count: for completions the whole
    prompt including the BOS token the tokenizer adds; for chat the message contents only.
    ``index`` is the request index (for a conversation turn: the conversation id).
    """

    index: int
    prompt: str | None
    messages: list[dict[str, str]] | None
    expected_prompt_tokens: int
    max_tokens: int
    min_tokens: int | None
    ignore_eos: bool
    prefix_group: int = -1
    conversation_id: int = -1
    turn: int = 0
    branch: int = -1  # an agent step's parallel call (-1: the step's only call)

    def request_body(self, model: str) -> dict[str, Any]:
        """The JSON body for ``/v1/completions`` or ``/v1/chat/completions`` (not streaming)."""
        body: dict[str, Any] = {"model": model, "max_tokens": self.max_tokens}
        if self.prompt is not None:
            body["prompt"] = self.prompt
        else:
            body["messages"] = self.messages
        if self.min_tokens is not None:
            body["min_tokens"] = self.min_tokens
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body
