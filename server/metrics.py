"""vLLM's Prometheus ``/metrics``: fetch it, and read the text format without a dependency."""

from __future__ import annotations

import math
from collections.abc import Iterator

# Per-series timestamps prometheus_client adds to counters and histograms; a sum of them is noise.
_SKIP_SUFFIXES = ("_bucket", "_created")


def scrape(url: str, timeout_s: float = 2.0) -> dict[str, float]:
    """Fetch ``URL/metrics`` and return each metric summed over its label sets."""
    import requests

    target = url.rstrip("/")
    if not target.endswith("/metrics"):
        target += "/metrics"
    response = requests.get(target, timeout=timeout_s)
    response.raise_for_status()
    return parse_metrics(response.text)


CACHE_CONFIG = "vllm:cache_config_info"


def cache_config(url: str, timeout_s: float = 5.0) -> dict[str, str]:
    """The labels of vLLM's ``vllm:cache_config_info`` gauge (block size, number of blocks, KV
    cache size in tokens, prefix caching …); ``{}`` when the server does not say or cannot
    be reached."""
    import requests

    target = url.rstrip("/") + "/metrics"
    try:
        response = requests.get(target, timeout=timeout_s)
        response.raise_for_status()
    except requests.RequestException:
        return {}
    found = metric_labels(response.text, CACHE_CONFIG)
    return dict(found[0]) if found else {}


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each sample name over its label sets; keep histogram ``_sum``/``_count``, skip buckets.

    ``vllm:num_requests_running{engine="0",model_name="tiny"} 3.0`` and the same name with
    other labels add up to one ``"vllm:num_requests_running"`` entry. NaN samples are ignored.
    """
    totals: dict[str, float] = {}
    for name, _labels, value in iter_samples(text):
        if name.endswith(_SKIP_SUFFIXES) or math.isnan(value):
            continue
        totals[name] = totals.get(name, 0.0) + value
    return totals


def metric_labels(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of every sample called ``name`` (e.g. ``vllm:cache_config_info``)."""
    return [labels for sample, labels, _ in iter_samples(text) if sample == name]


def iter_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """Yield ``(name, labels, value)`` for every sample line of Prometheus text format 0.0.4."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _parse_line(line)
        if parsed is not None:
            yield parsed


def _parse_line(line: str) -> tuple[str, dict[str, str], float] | None:
    brace = line.find("{")
    space = line.find(" ")
    labels: dict[str, str] = {}
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        end = _parse_labels(line, brace + 1, labels)
        if end is None:
            return None
        rest = line[end:].split()
    else:
        name, _, tail = line.partition(" ")
        rest = tail.split()
    if not rest or not name:
        return None
    try:
        value = float(rest[0])  # float() accepts NaN, +Inf and -Inf as Prometheus writes them
    except ValueError:
        return None
    return name, labels, value


def _parse_labels(line: str, i: int, labels: dict[str, str]) -> int | None:
    """Parse ``k="v",…}`` from ``line[i:]`` into ``labels``; return the index after ``}``."""
    n = len(line)
    while i < n:
        while i < n and line[i] in " ,":
            i += 1
        if i < n and line[i] == "}":
            return i + 1
        eq = line.find("=", i)
        if eq == -1 or eq + 1 >= n or line[eq + 1] != '"':
            return None
        key = line[i:eq].strip()
        i = eq + 2
        value = []
        while i < n and line[i] != '"':
            if line[i] == "\\" and i + 1 < n:
                nxt = line[i + 1]
                value.append("\n" if nxt == "n" else nxt)
                i += 2
            else:
                value.append(line[i])
                i += 1
        if i >= n:
            return None
        labels[key] = "".join(value)
        i += 1  # past the closing quote
    return None
