"""The hardware a run folder records (``run.json``'s ``hardware``, written by
``vprof.runs.environment.hardware``): how it reads, and when two records are the same hardware."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

# The widest vector unit a CPU names, as a hardware description shows it.
_CPU_TIERS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2", "sve2", "sve", "asimd")


def hardware_summary(hardware: Mapping[str, Any]) -> tuple[str, str]:
    """(a description, a stable id) of a run's hardware as ``hardware()`` recorded it: the
    machine, its CPU (model and kernel-deciding features, where recorded), CPUs and memory,
    and its GPUs. Python and kernel versions are left out (they do not set the speed); a
    record from before the CPU was recorded keeps its old id."""
    gpus = [str(g) for g in _listed(hardware.get("gpus"))]
    basis: dict[str, Any] = {
        "machine": hardware.get("machine"),
        "processor": hardware.get("processor"),
        "cpu_count": hardware.get("cpu_count"),
        "memory_gib": _whole(hardware.get("memory_gib")),
        "gpus": gpus,
    }
    for key in ("cpu_model", "cpu_features"):
        if key in hardware:
            basis[key] = hardware[key]
    digest = hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:12]
    if not hardware:  # a server vprof did not start, on another host
        return "hardware not known", digest
    if gpus:
        names = sorted(set(gpus))
        return _one_line(", ".join(f"{gpus.count(n)}× {n}" for n in names)), digest
    features = {str(f) for f in _listed(hardware.get("cpu_features"))}
    cpu = ", ".join(
        str(part)
        for part in (
            hardware.get("cpu_model") or hardware.get("machine") or "?",
            next((f for f in _CPU_TIERS if f in features), None),
        )
        if part
    )
    return _one_line(f"{cpu}, {hardware.get('cpu_count') or '?'} CPUs, no GPU"), digest


def _listed(value: Any) -> list[Any]:
    """A recorded list (GPUs, CPU features); anything else, as a damaged record holds, none."""
    return value if isinstance(value, list) else []


def _whole(gib: Any) -> int | None:
    """Memory in whole GiB; None for a value a damaged record holds (text, nan, inf)."""
    try:
        value = float(gib or 0)
    except (TypeError, ValueError):
        return None
    return round(value) if math.isfinite(value) else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
