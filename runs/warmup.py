"""Warm a fresh server up before anything is measured.

A just-started vLLM server serves its first requests slowly (kernels load, caches fill); those
requests would otherwise land in the first run's percentiles.
"""

from __future__ import annotations

import time
from typing import Any

from vprof.common.errors import LaunchError


def served_model(url: str, timeout_s: float = 10.0) -> str:
    """The first model id the server lists at ``/v1/models``."""
    import requests

    try:
        response = requests.get(url.rstrip("/") + "/v1/models", timeout=timeout_s)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (requests.RequestException, KeyError, IndexError, ValueError) as exc:
        raise LaunchError(f"cannot list the models served at {url}: {exc}") from None


def warm_up(url: str, *, requests_n: int = 4, timeout_s: float = 300.0) -> float:
    """Send a few short completions one after another; return the seconds it took."""
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
            requests.post(url.rstrip("/") + "/v1/completions", json=body, timeout=timeout_s)
        except requests.RequestException as exc:
            raise LaunchError(f"the server at {url} failed its warm-up request: {exc}") from None
    return time.monotonic() - started
