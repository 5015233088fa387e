"""Read what vLLM decided at start-up from its log, its error when it died, and whether that was
its memory or the machine it ran on. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

# Log lines look like "(EngineCore_DP0 pid=123) INFO 11-29 17:58:01 [file.py:12] message".
_KV_TOKENS = re.compile(r"(?:GPU|CPU)?\s*KV cache size:\s*([\d,]+)\s*tokens", re.IGNORECASE)
_KV_GIB = (
    re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB", re.IGNORECASE),  # GPU
    re.compile(r"set \(([\d.]+)/[\d.]+\) GiB for KV cache", re.IGNORECASE),  # CPU
)
_CONCURRENCY = re.compile(
    r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x", re.IGNORECASE
)
_VERSION = (
    re.compile(r"vLLM (?:API server )?version\s+v?([0-9][\w.+-]*)", re.IGNORECASE),
    re.compile(r"\bversion\s+v?([0-9]+\.[0-9][\w.+-]*)"),  # the start-up banner
    re.compile(r"LLM engine \(v([0-9][\w.+-]*)\)"),
)
_CHUNKED_ON = re.compile(
    r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", re.IGNORECASE
)
_BATCHED = re.compile(r"max_num_batched_tokens['\"]?\s*[=:]\s*(\d+)")
_CHUNKED_FLAG = re.compile(r"enable_chunked_prefill['\"]?\s*[=:]\s*(True|False)")
_PREFIX_FLAG = re.compile(r"enable_prefix_caching['\"]?\s*[=:]\s*(True|False)")
_MAX_MODEL_LEN = (
    re.compile(r"max_model_len['\"]?\s*[=:]\s*(\d+)"),
    re.compile(r"max_seq_len=(\d+)"),
    re.compile(r"Using max model len (\d+)"),
)
# Shutdown chatter that buries the lines that matter (nanobind leak reports, resource tracker).
_NOISE = re.compile(
    r"^\s*- leaked |^\s*- \.\.\. skipped|^nanobind:|^See https://nanobind|resource_tracker|"
    r"^\s*warnings\.warn\("
)
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception))\b:?\s*(.*)$")


@dataclass(frozen=True)
class EffectiveSettings:
    """Settings vLLM derived or confirmed at start-up; ``None`` where the log did not say."""

    vllm_version: str | None = None
    kv_cache_tokens: int | None = None
    kv_cache_gib: float | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens_per_request: int | None = None
    chunked_prefill: bool | None = None
    prefix_caching: bool | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None

    # keys() and __getitem__ make ``dict(settings)`` work, e.g. to write it into run metadata.
    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __getitem__(self, key: str) -> object:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def lines(self) -> list[str]:
        """Human lines for the settings that are known."""
        out = []
        if self.vllm_version:
            out.append(f"vLLM version: {self.vllm_version}")
        if self.kv_cache_tokens is not None:
            gib = f" ({self.kv_cache_gib:g} GiB)" if self.kv_cache_gib is not None else ""
            out.append(f"KV cache: {self.kv_cache_tokens:,} tokens{gib}")
        if self.max_concurrency is not None:
            out.append(
                f"maximum concurrency for {self.max_concurrency_tokens_per_request:,} "
                f"tokens per request: {self.max_concurrency:g}x"
            )
        if self.max_model_len is not None:
            out.append(f"max-model-len: {self.max_model_len}")
        if self.max_num_batched_tokens is not None:
            out.append(f"max-num-batched-tokens: {self.max_num_batched_tokens}")
        if self.chunked_prefill is not None:
            out.append(f"chunked prefill: {'on' if self.chunked_prefill else 'off'}")
        if self.prefix_caching is not None:
            out.append(f"prefix caching: {'on' if self.prefix_caching else 'off'}")
        return out


def _last(
    patterns: re.Pattern[str] | tuple[re.Pattern[str], ...], text: str
) -> re.Match[str] | None:
    """The match that occurs last in ``text`` over all the patterns."""
    if isinstance(patterns, re.Pattern):
        patterns = (patterns,)
    best: re.Match[str] | None = None
    for pattern in patterns:
        for match in pattern.finditer(text):
            if best is None or match.start() > best.start():
                best = match
    return best


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def parse_log(text: str) -> EffectiveSettings:
    """Extract the effective settings from a vLLM server log (the last mention wins)."""
    kv = _last(_KV_TOKENS, text)
    gib = _last(_KV_GIB, text)
    conc = _last(_CONCURRENCY, text)
    version = _last(_VERSION, text)
    chunked_on = _last(_CHUNKED_ON, text)
    batched = _last(_BATCHED, text)
    chunked_flag = _last(_CHUNKED_FLAG, text)
    prefix_flag = _last(_PREFIX_FLAG, text)
    max_len = _last(_MAX_MODEL_LEN, text)
    chunked: bool | None = None
    if chunked_flag:
        chunked = chunked_flag.group(1) == "True"
    if chunked_on:
        chunked = True
    batched_tokens = None
    if chunked_on:
        batched_tokens = int(chunked_on.group(1))
    elif batched:
        batched_tokens = int(batched.group(1))
    return EffectiveSettings(
        vllm_version=version.group(1) if version else None,
        kv_cache_tokens=_int(kv.group(1)) if kv else None,
        kv_cache_gib=float(gib.group(1)) if gib else None,
        max_concurrency=float(conc.group(2)) if conc else None,
        max_concurrency_tokens_per_request=_int(conc.group(1)) if conc else None,
        chunked_prefill=chunked,
        prefix_caching=(prefix_flag.group(1) == "True") if prefix_flag else None,
        max_num_batched_tokens=batched_tokens,
        max_model_len=int(max_len.group(1)) if max_len else None,
    )


def _strip_prefix(line: str) -> str:
    # Drop "(EngineCore_DP0 pid=1)" and "ERROR 11-29 17:58:01 [x.py:1]" so the message remains.
    line = re.sub(r"^\(\w+ pid=\d+\)\s*", "", line)
    line = re.sub(r"^(?:ERROR|WARNING|INFO|DEBUG)\s+\d\d-\d\d \S+ \[[^\]]*\]\s*", "", line)
    return line.rstrip()


def find_error(text: str) -> str | None:
    """vLLM's own reason for dying: the last exception line, with its indented details."""
    lines = [_strip_prefix(line) for line in text.splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        match = _ERROR_LINE.match(lines[i])
        if not match or match.group(1) in ("Traceback",):
            continue
        # "pydantic_core._pydantic_core.ValidationError: …" → "ValidationError: …"
        details = [f"{match.group(1)}: {match.group(2)}" if match.group(2) else match.group(1)]
        for follow in lines[i + 1 : i + 8]:
            if follow.startswith((" ", "\t")) and follow.strip():
                if "For further information visit" in follow:
                    break
                details.append(follow.strip())
            elif follow.strip():
                break
        # pydantic appends the whole input ("[type=value_error, input_value=…]"): noise here
        return re.sub(r"\s*\[type=[^\]]*\]?.*$", "", " ".join(details))
    return None


def tail_lines(text: str, n: int = 15) -> list[str]:
    """The last ``n`` log lines worth showing a person (shutdown chatter left out)."""
    return [line for line in text.splitlines() if not _NOISE.search(line)][-n:]


# What keeps any server from starting on this machine, whatever its settings: a fault of the
# environment, not of the profile (whose refusals and out-of-memory deaths say something about
# the settings). Phrases from vprof's own start-up checks, vLLM, PyTorch and the Hugging Face
# hub, lower-cased; the first group that matches names the cause.
_ENVIRONMENT = (
    ("port in use", ("already in use",)),
    ("out of disk", ("no space left on device", "disk quota exceeded")),
    (
        "no GPU",
        (
            "no cuda gpus are available",
            "no cuda-capable device",
            "found no nvidia driver",
            "failed to infer device type",
            "no gpu is visible",
            "nvidia-smi has failed",
        ),
    ),
    (
        "model missing",
        (
            "is not a local folder and is not a valid model identifier",
            "repository not found",
            "does not appear to have a file named config.json",
            "can't load the configuration of",
            "gated repo",
            "we couldn't connect to 'https://huggingface.co'",
        ),
    ),
    ("vLLM missing", ("vllm is not installed", "no module named 'vllm'", "cannot start ")),
)
_OOM = (
    "out of memory",
    "outofmemory",
    "cannot allocate memory",
    "no available memory for the cache",
    "can be stored in kv cache",  # max-model-len larger than the KV cache holds
)


def mentions_oom(text: str) -> bool:
    """True when a server's error or log says it ran out of memory (at start-up or later)."""
    lowered = text.lower()
    return any(marker in lowered for marker in _OOM)


def environment_cause(text: str) -> str | None:
    """Why no server could start here whatever its settings (``"port in use"``,
    ``"out of disk"``, ``"no GPU"``, ``"model missing"``, ``"vLLM missing"``), from a start-up
    error or log; None when the reason lies with the settings (refused, out of memory) or is
    not known."""
    if mentions_oom(text):  # memory is the settings' own, whatever else the log says
        return None
    lowered = text.lower()
    for cause, markers in _ENVIRONMENT:
        if any(marker in lowered for marker in markers):
            return cause
    return None
