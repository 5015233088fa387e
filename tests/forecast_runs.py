"""Synthetic "measured" runs for the forecast tests: a known server (rules and step costs)
replayed with vprof's own workloads and traffic shapes, written as run folders that look as a
bench writes them (profile identity, hardware, the server's KV cache), so a fit can be checked
against the truth it should recover."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from vprof.forecast.model import ConfigModel
from vprof.forecast.predict import predict, write_prediction
from vprof.forecast.rules import ConfigKey, SchedulerRules
from vprof.forecast.scenario import Scenario
from vprof.forecast.stepcost import StepCost
from vprof.records.hardware import hardware_summary
from vprof.records.rundir import RunDir, read_json, write_json_atomic
from vprof.traffic import TrafficShape
from vprof.workloads import get_workload

CPU = {"machine": "x86_64", "processor": "x86_64", "cpu_count": 2, "memory_gib": 23.5, "gpus": []}
GPU = {
    "machine": "x86_64",
    "processor": "x86_64",
    "cpu_count": 32,
    "memory_gib": 256,
    "gpus": ["NVIDIA H200, 143771 MiB"],
}


@dataclasses.dataclass(frozen=True)
class Truth:
    """A server that does not exist: what a fit should find."""

    profile: str
    engine_args: dict[str, Any]
    hardware: dict[str, Any]
    rules: SchedulerRules
    cost: StepCost

    @property
    def config(self) -> ConfigModel:
        shown, digest = hardware_summary(self.hardware)
        key = ConfigKey(self.profile, f"{self.profile}-0123456789ab", shown, digest, "0.32.0")
        return ConfigModel(key, self.rules, self.cost, engine_args=self.engine_args)


def cpu_truth(profile: str = "tiny-chunked") -> Truth:
    """Like the CPU build's tiny model: a few ms per step, chunked prefill at 512 tokens."""
    return Truth(
        profile,
        {"enable-chunked-prefill": True, "max-num-batched-tokens": 512, "max-model-len": 4096},
        CPU,
        SchedulerRules(512, 128, True, True, 524_288, 128, 4096),
        StepCost(3.0, 0.02, 0.1, frontend_ms=2.0, jitter=0.1),
    )


def gpu_truth() -> Truth:
    """Like an 8B model on one H200: a larger per-step constant, cheap tokens, attention that
    shows with context, a KV cache of 60k tokens in blocks of 16."""
    return Truth(
        "llama-8b",
        {"max-num-batched-tokens": 2048, "max-num-seqs": 64, "max-model-len": 4096},
        GPU,
        SchedulerRules(2048, 64, True, True, 60_000, 16, 4096),
        StepCost(8.0, 0.012, 0.05, 0.04, 0.5, frontend_ms=3.0, jitter=0.05),
    )


def shape(rate: float, duration_s: float = 20.0, warmup_s: float = 2.0, **kw: Any) -> TrafficShape:
    return TrafficShape(
        name="poisson",
        kind="open-loop",
        duration_s=duration_s,
        warmup_s=warmup_s,
        rate_rps=rate,
        max_in_flight=kw.pop("max_in_flight", 64),
        **kw,
    )


def measured_run(
    folder: Path,
    truth: Truth,
    workload: str,
    traffic: TrafficShape,
    config: ConfigModel | None = None,
) -> Path:
    """A run folder as a bench would have written it for ``truth`` (no ``forecast`` mark);
    replayed on ``config`` when given (``truth``'s with stalls, say)."""
    s = Scenario(get_workload(workload), traffic, 0)
    path = write_prediction(predict(config or truth.config, s), Path(folder))
    run = RunDir(path)
    meta = read_json(run.run_json)
    meta.pop("forecast")
    meta["name"] = path.name.replace("--predicted", "")
    meta["hardware"] = truth.hardware
    meta["profile"] = {
        "name": truth.profile,
        "identity": truth.config.key.identity,
        "engine_args": truth.engine_args,
    }
    meta["server"] = {
        "kv_cache_tokens": truth.rules.kv_cache_tokens,
        "max_num_batched_tokens": truth.rules.max_num_batched_tokens,
        "chunked_prefill": truth.rules.chunked_prefill,
        "prefix_caching": truth.rules.prefix_caching,
        "max_model_len": truth.rules.max_model_len,
        "cache_config": {"block_size": str(truth.rules.block_size)},
    }
    write_json_atomic(run.run_json, meta)
    run.summary_json.unlink()
    return path
