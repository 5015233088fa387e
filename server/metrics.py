"""vLLM's Prometheus ``/metrics``: fetch it, and read the text format without a dependency."""

from __future__ import annotations

import math
from collections.abc import Iterator

# Per-series timestamps prometheus_client adds to counters and histograms; a sum of them is noise.
_SKIP_SUFFIXES = ("_bucket", "_created")


def scrape(url: str, timeout_s: float = 2.0) -> dict[str, float]:
    """Fetch ``URL/metrics`` and return each metric over its label sets (:func:`parse_metrics`)."""
    import requests

    target = url.rstrip("/")
    if not target.endswith("/metrics"):
        target += "/metrics"
    response = requests.get(target, timeout=timeout_s)
    response.raise_for_status()
    return parse_metrics(response.text)


# Families whose series are fractions (0..1) or per-series facts, not parts of a total: summed
# over data-parallel engines (``engine="0"``, ``engine="1"``) a KV-cache use of 0.7 and 0.9 would
# read 1.6. vLLM names its fractions ``*_perc`` (``vllm:kv_cache_usage_perc`` is 0..1) and, in
# older releases, ``*_hit_rate``; Prometheus' own conventions say ``*_ratio``.
_RATIO_SUFFIXES = ("_perc", "_percent", "_ratio", "_fraction", "_rate", "_info")
# Sample-name suffixes that belong to a family declared under a shorter name.
_FAMILY_SUFFIXES = ("_total", "_sum", "_count", "_bucket", "_created", "_gsum", "_gcount")

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
    """One value per sample name, combined over its label sets as its ``# TYPE`` says.

    Counters, histogram and summary ``_sum``/``_count``, and gauges that count something
    (requests running or waiting) add up over label sets — over a server's data-parallel
    engines that is the server's total. Gauges that are fractions or info (names ending
    ``_perc``, ``_ratio``, ``_rate``, ``_info`` …) take the largest series instead: the busiest
    engine's KV-cache use, the same rule as over replicas (``analysis.samples``), so a fraction
    stays a fraction. A name without a ``# TYPE`` line adds up. Histogram buckets and
    ``_created`` timestamps are skipped; NaN samples are ignored.
    """
    types: dict[str, str] = {}
    combined: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            declared = line[1:].split()
            if len(declared) >= 3 and declared[0] == "TYPE":
                types[declared[1]] = declared[2].lower()
            continue
        parsed = _parse_line(line) if line else None
        if parsed is None:
            continue
        name, _labels, value = parsed
        if name.endswith(_SKIP_SUFFIXES) or math.isnan(value):
            continue
        known = combined.get(name)
        if known is None:
            combined[name] = value
        elif _is_fraction(name, types):
            combined[name] = max(known, value)
        else:
            combined[name] = known + value
    return combined


def metric_type(name: str, types: dict[str, str]) -> str:
    """The ``# TYPE`` of the family a sample ``name`` belongs to (``"untyped"`` if none)."""
    if name in types:
        return types[name]
    for suffix in _FAMILY_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return types[name[: -len(suffix)]]
    return "untyped"


def _is_fraction(name: str, types: dict[str, str]) -> bool:
    return metric_type(name, types) == "gauge" and name.endswith(_RATIO_SUFFIXES)


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
