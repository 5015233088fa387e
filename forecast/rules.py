"""The scheduler rules a server ran with, and the configuration a model belongs to (pure).

vLLM v1 schedules one step at a time under a token budget (``max-num-batched-tokens``) and a
cap on running requests (``max-num-seqs``); with chunked prefill a prompt may be split over
steps, without it a prompt must fit one step's budget; prefix caching skips the prompt's
blocks another request already computed; the KV cache holds ``kv_cache_tokens`` tokens in
blocks of ``block_size``. Each value is read from what the server itself said where it said
it (the start-up log vprof keeps in ``run.json``'s ``server``, or ``/metrics``' cache
config), else from the profile's engine arguments, else vLLM's own default for the hardware;
``sources`` says which, for every rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from vprof.records.hardware import hardware_summary

CHUNKED = "enable-chunked-prefill"
BATCHED = "max-num-batched-tokens"
SEQS = "max-num-seqs"
PREFIX = "enable-prefix-caching"
MODEL_LEN = "max-model-len"
BLOCK = "block-size"
LONG_PREFILL = "long-prefill-token-threshold"

# vLLM's defaults for the OpenAI server (its EngineArgs.get_batch_defaults): the CPU build
# 2048 tokens and 128 sequences per tensor × pipeline rank; GPUs with 70 GiB or more (A100s
# excepted) 8192 and 1024; other GPUs 2048 and 256. Block size: 128 on CPU, 16 on GPUs.
_CPU_DEFAULTS = (2048, 128, 128)
_BIG_GPU_DEFAULTS = (8192, 1024, 16)
_GPU_DEFAULTS = (2048, 256, 16)


@dataclass(frozen=True)
class SchedulerRules:
    """What one step may hold and how much KV cache the server has."""

    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    prefix_caching: bool
    kv_cache_tokens: int
    block_size: int
    max_model_len: int
    long_prefill_token_threshold: int = 0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["sources"] = dict(self.sources)
        return data

    def with_engine_args(self, engine_args: Mapping[str, Any]) -> SchedulerRules:
        """These rules with a candidate's engine arguments applied (what ``vprof tune`` would
        change); the KV cache stays this server's."""
        changes: dict[str, Any] = {}
        sources = dict(self.sources)
        for key, name, kind in _ARGS:
            if key in engine_args and engine_args[key] is not None:
                changes[name] = kind(engine_args[key])
                sources[name] = "candidate"
        if "max_num_batched_tokens" not in changes and changes.get("chunked_prefill") is False:
            # without chunking a prompt must fit a step: vLLM then defaults to max-model-len
            limit = changes.get("max_model_len", self.max_model_len)
            changes["max_num_batched_tokens"] = max(self.max_num_batched_tokens, limit)
        return replace(self, **changes, sources=sources)


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


_ARGS: tuple[tuple[str, str, Any], ...] = (
    (BATCHED, "max_num_batched_tokens", int),
    (SEQS, "max_num_seqs", int),
    (CHUNKED, "chunked_prefill", _flag),
    (PREFIX, "prefix_caching", _flag),
    (MODEL_LEN, "max_model_len", int),
    (BLOCK, "block_size", int),
    (LONG_PREFILL, "long_prefill_token_threshold", int),
)


def hardware_defaults(hardware: Mapping[str, Any], engine_args: Mapping[str, Any]) -> tuple:
    """vLLM's (batched tokens, max sequences, block size) when a profile leaves them unset."""
    gpus = hardware.get("gpus") or []
    world = int(engine_args.get("tensor-parallel-size") or 1) * int(
        engine_args.get("pipeline-parallel-size") or 1
    )
    if not gpus:
        tokens, seqs, block = _CPU_DEFAULTS
        return tokens * world, seqs * world, block
    memory = _gpu_memory_gib(str(gpus[0]))
    big = memory >= 70 and "a100" not in str(gpus[0]).lower()
    return _BIG_GPU_DEFAULTS if big else _GPU_DEFAULTS


def _gpu_memory_gib(line: str) -> float:
    """``NVIDIA H200, 143771 MiB`` (nvidia-smi's name and total memory) → 140.4."""
    for part in line.split(","):
        words = part.split()
        if len(words) == 2 and words[1] in ("MiB", "GiB"):
            try:
                value = float(words[0])
            except ValueError:
                continue
            return value / 1024 if words[1] == "MiB" else value
    return 0.0


def rules_from_run(meta: Mapping[str, Any]) -> tuple[SchedulerRules | None, str]:
    """The rules of the server a run went to, from its ``run.json``; ``(None, why)`` when the
    KV cache it had is unknown (no start-up log, no cache config from ``/metrics``)."""
    profile = meta.get("profile") if isinstance(meta.get("profile"), Mapping) else {}
    args: Mapping[str, Any] = profile.get("engine_args") or {}  # type: ignore[union-attr]
    server: Mapping[str, Any] = meta.get("server") or {}
    cache: Mapping[str, Any] = server.get("cache_config") or {}
    hardware: Mapping[str, Any] = meta.get("hardware") or {}
    tokens, seqs, block = hardware_defaults(hardware, args)
    sources: dict[str, str] = {}

    def pick(name: str, *candidates: tuple[str, Any]) -> Any:
        for source, value in candidates:
            if value is not None:
                sources[name] = source
                return value
        return None

    kv = pick(
        "kv_cache_tokens",
        ("server log", server.get("kv_cache_tokens")),
        ("/metrics cache config", cache.get("kv_cache_size_tokens")),
    )
    if kv is None:
        return None, (
            "the KV cache the server had is unknown: run.json's server section has no "
            "kv_cache_tokens (vLLM's start-up log) and no cache config from /metrics"
        )
    chunked = pick(
        "chunked_prefill",
        ("server log", server.get("chunked_prefill")),
        ("profile", None if args.get(CHUNKED) is None else _flag(args.get(CHUNKED))),
        ("vLLM default", True),
    )
    model_len = pick(
        "max_model_len",
        ("server log", server.get("max_model_len")),
        ("server", server.get("served_max_model_len")),
        ("profile", args.get(MODEL_LEN)),
        ("vLLM default", 2048),
    )
    default_tokens = tokens if chunked else max(tokens, int(model_len))
    rules = SchedulerRules(
        max_num_batched_tokens=int(
            pick(
                "max_num_batched_tokens",
                ("server log", server.get("max_num_batched_tokens")),
                ("profile", args.get(BATCHED)),
                ("vLLM default", default_tokens),
            )
        ),
        max_num_seqs=int(pick("max_num_seqs", ("profile", args.get(SEQS)), ("vLLM default", seqs))),
        chunked_prefill=bool(chunked),
        prefix_caching=bool(
            pick(
                "prefix_caching",
                ("server log", server.get("prefix_caching")),
                ("/metrics cache config", _maybe_flag(cache.get("enable_prefix_caching"))),
                ("profile", None if args.get(PREFIX) is None else _flag(args.get(PREFIX))),
                ("vLLM default", True),
            )
        ),
        kv_cache_tokens=int(kv),
        block_size=int(
            pick(
                "block_size",
                ("/metrics cache config", cache.get("block_size")),
                ("profile", args.get(BLOCK)),
                ("vLLM default", block),
            )
        ),
        max_model_len=int(model_len),
        long_prefill_token_threshold=int(
            pick(
                "long_prefill_token_threshold",
                ("profile", args.get(LONG_PREFILL)),
                ("vLLM default", 0),
            )
        ),
        sources=sources,
    )
    return rules, ""


def _maybe_flag(value: Any) -> bool | None:
    return None if value is None else _flag(value)


# -- which configuration a run belongs to ------------------------------------------------------


@dataclass(frozen=True)
class ConfigKey:
    """A server configuration: the profile as rendered (its identity) on one kind of hardware
    with one vLLM version. A model is fitted, and valid, for one of these."""

    profile: str
    identity: str
    hardware: str  # a short description; what it was made from is hashed into ``hardware_id``
    hardware_id: str
    vllm_version: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def config_key(meta: Mapping[str, Any]) -> ConfigKey:
    """The configuration of the server a run went to (from its ``run.json``)."""
    profile = meta.get("profile") if isinstance(meta.get("profile"), Mapping) else {}
    hardware = meta.get("hardware") if isinstance(meta.get("hardware"), Mapping) else {}
    shown, digest = hardware_summary(hardware or {})
    server = meta.get("server") if isinstance(meta.get("server"), Mapping) else {}
    version = meta.get("vllm_version") or (server or {}).get("vllm_version") or "unknown"
    return ConfigKey(
        profile=str((profile or {}).get("name") or meta.get("name") or "?"),
        identity=str((profile or {}).get("identity") or "unknown"),
        hardware=shown,
        hardware_id=digest,
        vllm_version=str(version),
    )
