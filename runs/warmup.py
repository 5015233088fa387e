"""Warm a fresh server up before anything is measured.

A just-started vLLM server serves its first requests slowly (kernels load, caches fill); those
requests would otherwise land in the first run's percentiles.
"""

from __future__ import annotations

import time
from typing import Any

from vprof.common.errors import LaunchError


def served_models(url: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The entries of ``/v1/models`` (vLLM's carry ``max_model_len``); at least one."""
    import requests

    try:
        response = requests.get(url.rstrip("/") + "/v1/models", timeout=timeout_s)
        response.raise_for_status()
        models = response.json()["data"]
    except (requests.RequestException, KeyError, TypeError, ValueError) as exc:
        raise LaunchError(f"cannot list the models served at {url}: {exc}") from None
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise LaunchError(f"the server at {url} lists no model at /v1/models")
    return models


def served_model(url: str, timeout_s: float = 10.0) -> str:
    """The first model id the server lists at ``/v1/models``."""
    return str(served_models(url, timeout_s)[0].get("id"))


def warm_up(url: str, *, requests_n: int = 4, timeout_s: float = 300.0) -> float:
    """Send a few short completions one after another; return the seconds it took.

    Every one must succeed: a server that answers with an error is not warmed up, and will
    not serve the run either (raises :class:`LaunchError` with its answer).
    """
    import requests

    model = served_model(url)
    started = time.monotonic()
    body: dict[str, Any] = {
        "model": model,
        "prompt": "Warm up the server. " * 16,
        "max_tokens": 16,
        "min_tokens": 16,
        "ignore_eos": True,
        "stream": False,
    }
    for _ in range(requests_n):
        try:
            response = requests.post(
                url.rstrip("/") + "/v1/completions", json=body, timeout=timeout_s
            )
        except requests.RequestException as exc:
            raise LaunchError(f"the server at {url} failed its warm-up request: {exc}") from None
        if response.status_code != 200:
            raise LaunchError(
                f"the server at {url} answered its warm-up request with HTTP "
                f"{response.status_code}: {response.text[:300].strip()}",
                hint="is it an OpenAI-compatible vLLM server serving completions?",
            )
    return time.monotonic() - started
