"""Check planned prompt lengths against the server's own tokenizer (``POST /tokenize``).

The server's count is the truth; the client tokenizer only shapes prompts. For completions the
two should agree exactly. For chat the server renders the chat template, whose role tags and
BOS/EOS tokens the plan does not count, so the difference is the template overhead and is
reported as such rather than as an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vprof.common.errors import RunError
from vprof.workloads.requestplan import RequestPlan


@dataclass(frozen=True)
class TokenCheck:
    """How planned prompt lengths compare with the server's counts.

    ``diffs`` are server count minus planned count, one per plan. For chat plans
    ``mean_template_tokens`` is the mean difference: the tokens the chat template adds.
    """

    requests: int
    completions_requests: int
    chat_requests: int
    mismatches: int  # completions plans whose count differs from the server's
    mismatch_rate: float  # mismatches / completions_requests (0 when there are none)
    mean_abs_diff: float  # over completions plans
    max_abs_diff: int
    mean_template_tokens: float  # over chat plans; nan when there are none
    diffs: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completions_requests": self.completions_requests,
            "chat_requests": self.chat_requests,
            "mismatches": self.mismatches,
            "mismatch_rate": self.mismatch_rate,
            "mean_abs_diff": self.mean_abs_diff,
            "max_abs_diff": self.max_abs_diff,
            "mean_template_tokens": self.mean_template_tokens,
        }


def check_against_server(
    plans: Iterable[RequestPlan], base_url: str, model: str, *, session: Any = None
) -> TokenCheck:
    """Ask the server's ``/tokenize`` how long each planned prompt is and compare.

    ``session`` is a ``requests.Session`` to reuse (one is made when omitted).
    """
    import requests

    own = session is None
    http = requests.Session() if own else session
    url = base_url.rstrip("/") + "/tokenize"
    completion_diffs: list[int] = []
    chat_diffs: list[int] = []
    diffs: list[int] = []
    try:
        for plan in plans:
            if plan.prompt is not None:
                body: dict[str, Any] = {"model": model, "prompt": plan.prompt}
            else:
                body = {"model": model, "messages": plan.messages, "add_generation_prompt": True}
            try:
                response = http.post(url, json=body, timeout=30)
            except requests.RequestException as exc:
                raise RunError(
                    f"cannot reach {url}: {exc}", hint="is the vLLM server running?"
                ) from None
            if response.status_code != 200:
                raise RunError(
                    f"{url} answered {response.status_code}: {response.text[:200]}",
                    hint="check the model name and that the server exposes /tokenize",
                )
            diff = int(response.json()["count"]) - plan.expected_prompt_tokens
            diffs.append(diff)
            (completion_diffs if plan.prompt is not None else chat_diffs).append(diff)
    finally:
        if own:
            http.close()
    mismatches = sum(1 for d in completion_diffs if d != 0)
    n = len(completion_diffs)
    return TokenCheck(
        requests=len(diffs),
        completions_requests=n,
        chat_requests=len(chat_diffs),
        mismatches=mismatches,
        mismatch_rate=mismatches / n if n else 0.0,
        mean_abs_diff=sum(abs(d) for d in completion_diffs) / n if n else 0.0,
        max_abs_diff=max((abs(d) for d in completion_diffs), default=0),
        mean_template_tokens=sum(chat_diffs) / len(chat_diffs) if chat_diffs else float("nan"),
        diffs=tuple(diffs),
    )
