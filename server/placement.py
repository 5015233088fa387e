"""Several servers side by side on one host (``bench --alternate``): who gets which devices.

Pure given the host's facts, so every rule is unit-tested without a GPU:

- **CPU build, no GPU**: every server gets an equal share of the KV cache
  (``VLLM_CPU_KVCACHE_SPACE``, whole GiB as the CPU build reads it, at least one) and, with
  unbound worker threads, an equal share of the cores as OpenMP threads (``OMP_NUM_THREADS``):
  the old side's last answers overlap the new side's first requests, and two servers of two
  threads each on two cores slowed each other ×20 (OpenMP's barriers spin for threads that are
  not running; measured on real vLLM: median TPOT 5 → 100 ms in every slice after a switch).
  A profile that binds threads gets its cores split instead.
- **Enough GPUs for every server**: each server its own devices (``CUDA_VISIBLE_DEVICES``,
  tensor × pipeline × data parallel respected), counted within the devices this process sees.
- **One GPU (or too few) for single-GPU servers**: they share device(s) with
  ``gpu-memory-utilization`` divided between them — a smaller KV cache changes results near
  memory limits, so it is said — and start one after the other, so that each one's memory
  profiling sees the others already loaded.

``shared_gpu`` tells the caller to start the servers one at a time; otherwise they load at
the same time (``runs.alternate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vprof.common.cpus import usable_cpus
from vprof.common.errors import LaunchError

if TYPE_CHECKING:
    from vprof.registry import Profile
    from vprof.server.host import HostEngine

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's own default
DEFAULT_CPU_KVCACHE_GIB = 1.0
_KV = "VLLM_CPU_KVCACHE_SPACE"
_BIND = "VLLM_CPU_OMP_THREADS_BIND"
_DEVICES = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Slot:
    """What one server changes to run beside the others."""

    env: dict[str, str] = field(default_factory=dict)
    set_args: dict[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """One slot per server, in the servers' order, and lines for the user."""

    slots: tuple[Slot, ...]
    summary: tuple[str, ...]
    shared_gpu: bool = False


def _cores(spec: str) -> list[int]:
    """``0-3,6`` → [0, 1, 2, 3, 6] (a vLLM CPU thread-binding list)."""
    cores: list[int] = []
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        cores += list(range(int(low), int(high or low) + 1))
    return cores


def _core_list(cores: Sequence[int]) -> str:
    return ",".join(str(c) for c in cores)


def place(
    profiles: Sequence[tuple[Mapping[str, object], Mapping[str, str]]],
    *,
    cpu_only: bool,
    gpus: int,
    environ: Mapping[str, str],
    cores: int = 1,
) -> Placement:
    """Slots for servers of these (engine args, env) pairs on one host.

    ``cpu_only``: the CPU build without a GPU; ``gpus``: how many GPUs the host has (the
    devices of ``CUDA_VISIBLE_DEVICES`` when it is set count instead); ``cores``: the CPU
    cores this process may run on.
    """
    if len(profiles) < 2:
        raise ValueError("side by side needs two or more servers")
    if cpu_only:
        return _place_cpu(profiles, environ, cores)
    return _place_gpu(profiles, gpus, environ)


_THREADS = "OMP_NUM_THREADS"


def _place_cpu(
    profiles: Sequence[tuple[Mapping[str, object], Mapping[str, str]]],
    environ: Mapping[str, str],
    host_cores: int,
) -> Placement:
    n = len(profiles)
    slots, lines = [], []
    for i, (_, env) in enumerate(profiles):
        given = env.get(_KV) or environ.get(_KV)
        try:
            total = float(given) if given else DEFAULT_CPU_KVCACHE_GIB
        except ValueError:
            raise LaunchError(f"{given!r} is not a size in GiB", key=_KV) from None
        # the CPU build reads whole GiB: a share below one keeps one (the host has the memory
        # or the profile would not fit alone either)
        share = str(max(1, int(total // n)))
        slot_env = {_KV: share}
        notes = [f"{_KV}={share} (its {total:g} GiB of KV cache split {n} ways, whole GiB)"]
        bind = env.get(_BIND) or environ.get(_BIND)
        if bind and bind not in ("nobind", "auto"):
            cores = _cores(bind.split("|")[0])
            if len(cores) < n:
                raise LaunchError(
                    f"{n} servers cannot split the {len(cores)} core(s) {bind!r} binds",
                    key=_BIND,
                    hint="bind to more cores, or leave threads unbound (nobind)",
                )
            mine = cores[i * len(cores) // n : (i + 1) * len(cores) // n]
            slot_env[_BIND] = _core_list(mine)
            notes.append(f"{_BIND}={slot_env[_BIND]} (a share of {bind})")
        elif bind != "auto" and not (env.get(_THREADS) or environ.get(_THREADS)):
            slot_env[_THREADS] = str(max(1, host_cores // n))
            notes.append(
                f"{_THREADS}={slot_env[_THREADS]} ({host_cores} core(s) shared by {n} unbound "
                "servers: one side's last answers overlap the next side's load, and more "
                "threads than cores make OpenMP's barriers spin)"
            )
        slots.append(Slot(env=slot_env, notes=tuple(notes)))
    counts = {slot.env[_THREADS] for slot in slots if _THREADS in slot.env}
    shared = f" and {_THREADS}={counts.pop()} of {host_cores} cores" if len(counts) == 1 else ""
    lines.append(
        f"{n} servers side by side on the CPU build: each a 1/{n} share of the KV cache{shared}; "
        "only the side whose slice it is gets load"
    )
    return Placement(tuple(slots), tuple(lines))


def _visible(gpus: int, environ: Mapping[str, str]) -> list[str]:
    given = environ.get(_DEVICES)
    if given is not None:
        return [d.strip() for d in given.split(",") if d.strip()]
    return [str(i) for i in range(gpus)]


def _place_gpu(
    profiles: Sequence[tuple[Mapping[str, object], Mapping[str, str]]],
    gpus: int,
    environ: Mapping[str, str],
) -> Placement:
    from vprof.registry.profile import gpus_per_server

    devices = _visible(gpus, environ)
    needs = [gpus_per_server(args)[0] for args, _ in profiles]
    n = len(profiles)
    if not devices:
        raise LaunchError("no GPU is visible to start the servers on", key=_DEVICES)
    if sum(needs) <= len(devices):
        slots, start = [], 0
        for need in needs:
            mine = devices[start : start + need]
            start += need
            slots.append(
                Slot(env={_DEVICES: ",".join(mine)}, notes=(f"{_DEVICES}={','.join(mine)}",))
            )
        line = f"{n} servers side by side, each on its own GPU(s) ({sum(needs)} of {len(devices)})"
        return Placement(tuple(slots), (line,))
    if any(need > len(devices) for need in needs):
        worst = max(needs)
        raise LaunchError(
            f"a profile needs {worst} GPUs per server and {len(devices)} are visible",
            hint="lower its tensor/pipeline/data parallel size, or use a host with more GPUs",
        )
    if any(need != needs[0] for need in needs):
        raise LaunchError(
            f"the servers need {', '.join(map(str, needs))} GPUs and only {len(devices)} are "
            "visible: side by side they would have to share devices unevenly",
            hint="compare profiles of one parallel size, or use a host with more GPUs",
        )
    # Share the devices: every server on the same ones, memory divided.
    shared = ",".join(devices[: needs[0]])
    shared_slots = []
    for args, _ in profiles:
        asked = args.get("gpu-memory-utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
        try:
            util = float(asked)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise LaunchError(
                f"{asked!r} is not a fraction", key="gpu-memory-utilization"
            ) from None
        share = int(util / n * 100) / 100  # rounded down: the shares must fit together
        shared_slots.append(
            Slot(
                env={_DEVICES: shared},
                set_args={"gpu-memory-utilization": share},
                notes=(
                    f"gpu-memory-utilization {util:g} → {share:g} ({n} servers share GPU {shared})",
                ),
            )
        )
    line = (
        f"{n} servers share GPU {shared}: each gets 1/{n} of its gpu-memory-utilization, so a "
        "smaller KV cache than alone (results near memory limits change); they start one "
        "after the other so each one's memory profiling sees the others loaded"
    )
    return Placement(tuple(shared_slots), (line,), shared_gpu=True)


def kv_cache_warning(sizes: Mapping[str, float | None], tolerance: float = 0.10) -> str:
    """A warning when the servers' KV caches (tokens, by name) differ by more than
    ``tolerance``; ``""`` when they agree or a size is unknown."""
    known = {name: size for name, size in sizes.items() if size}
    if len(known) < 2:
        return ""
    low, high = min(known.values()), max(known.values())
    if high <= low * (1 + tolerance):
        return ""
    listed = ", ".join(f"{name} {size:,.0f}" for name, size in known.items())
    return (
        f"the servers' KV caches differ by {high / low - 1:.0%} ({listed} tokens): a "
        "difference near memory limits may be the cache's, not the profile's"
    )


def side_by_side(
    profiles: Sequence[Profile],
    *,
    environ: Mapping[str, str] | None = None,
    engine: HostEngine | None = None,
    gpus: int | None = None,
) -> tuple[list[Profile], Placement]:
    """The profiles changed to run beside each other on this host, each on a free port of its
    own, and the placement that says how."""
    import os

    from vprof.server.host import detect_engine, gpu_count
    from vprof.server.process import free_port

    environ = dict(os.environ) if environ is None else environ
    engine = engine if engine is not None else detect_engine()
    gpus = gpu_count() if gpus is None and engine.gpu else (gpus or 0)
    placement = place(
        [(p.engine_args, p.env) for p in profiles],
        cpu_only=engine.cpu_build and not engine.gpu,
        gpus=gpus,
        environ=environ,
        cores=usable_cpus(),
    )
    placed = []
    for profile, slot in zip(profiles, placement.slots, strict=True):
        env = {k: v for k, v in slot.env.items() if k != _BIND or v}
        placed.append(
            profile.with_overrides(
                env=env or None, set_args=slot.set_args or None, port=free_port(profile.host)
            )
        )
    return placed, placement
