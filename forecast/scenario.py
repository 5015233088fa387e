"""What a run would send: a workload and a traffic shape turned into the request stream and
the client a replay needs — the same lengths, prefix groups and arrival times a bench with the
same seed sends (``RequestSynthesizer.planned_lengths``, ``arrival_offsets``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import ForecastError
from vprof.forecast.simulate import Client, ClosedLoop, OpenLoop, Requests

# Closed-loop users send their next request this soon after an answer (vprof's users: the
# measured idle_before_ms is about a millisecond) unless a model says otherwise.
DEFAULT_GAP_MS = 1.0


@dataclass(frozen=True)
class Scenario:
    """A workload under a traffic shape, with the seed that fixes lengths and arrivals."""

    workload: Any  # vprof.workloads.Workload
    shape: Any  # vprof.traffic.TrafficShape
    seed: int | None = None

    @property
    def label(self) -> str:
        rate = f" at {self.shape.rate_rps:g} req/s" if self.shape.open_loop else ""
        return f"{self.workload.name} × {self.shape.name}{rate}"

    def at_rate(self, rate_rps: float) -> Scenario:
        """The same scenario at another open-loop rate."""
        if not self.shape.open_loop:
            raise ForecastError(
                f"traffic shape {self.shape.name} is closed loop ({self.shape.kind}): it has "
                "no rate to set",
                key="--rate",
                hint="give an open-loop shape such as poisson, or leave --rate out",
            )
        return dataclasses.replace(self, shape=dataclasses.replace(self.shape, rate_rps=rate_rps))

    def at_users(self, users: int) -> Scenario:
        """The same closed-loop scenario with another user count."""
        return dataclasses.replace(self, shape=dataclasses.replace(self.shape, users=users))


@dataclass(frozen=True)
class Stream:
    """A scenario's requests and client, ready to replay; ``scheduled_s`` for open loop."""

    requests: Requests
    client: Client
    warmup_s: float
    open_loop: bool
    endpoint: str
    prefix_group: Any
    expected_prompt_tokens: Any
    scheduled_s: Any = None


def scenario(workload: str, traffic: str, seed: int | None = None) -> Scenario:
    """A scenario from a workload and a traffic shape (names or YAML paths)."""
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    return Scenario(get_workload(workload), get_shape(traffic), seed)


def scenario_of_run(
    meta: Mapping[str, Any], where: str, locust: Mapping[str, Any] | None = None
) -> Scenario:
    """The scenario a measured run ran (its workload, shape and seed from ``run.json``).

    The workload is read again from its file (or by name) and must be what the run recorded:
    otherwise the run's lengths cannot be planned again, and the check would compare other
    requests. With the run's ``locust.json`` (``locust``), an open loop's warm-up is the one
    its load generator ran (from its schedule's epoch to the warm-up's end): a sweep's level
    takes the schedule's lead out of it (``runs.measure.level_shape``), and the schedule's
    length, so its arrivals, follow from it."""
    from vprof.traffic import TrafficShape
    from vprof.workloads import get_workload, load_workload_file

    recorded = meta.get("workload")
    if not isinstance(recorded, Mapping):
        raise ForecastError("the run does not record its workload", path=where, key="workload")
    source = recorded.get("source")
    try:
        if source and Path(str(source)).is_file():
            workload = load_workload_file(str(source))
        else:
            workload = get_workload(str(recorded.get("name")))
    except Exception as exc:  # a WorkloadError or a missing preset
        raise ForecastError(
            f"its workload {recorded.get('name')!r} cannot be read again: {exc}",
            path=where,
            key="workload",
        ) from None
    if as_plain(workload) != as_plain(recorded):
        raise ForecastError(
            f"workload {workload.name!r} is no longer what the run sent (its file changed)",
            path=where,
            key="workload",
            hint="check runs against the workload they ran",
        )
    traffic = meta.get("traffic")
    if not isinstance(traffic, Mapping):
        raise ForecastError("the run does not record its traffic shape", path=where, key="traffic")
    names = {f.name for f in dataclasses.fields(TrafficShape)}
    try:
        shape = TrafficShape(**{k: v for k, v in traffic.items() if k in names})
    except Exception as exc:
        raise ForecastError(f"its traffic shape: {exc}", path=where, key="traffic") from None
    if shape.open_loop and locust:
        epoch, until = locust.get("epoch"), locust.get("warmup_until")
        if isinstance(epoch, (int, float)) and isinstance(until, (int, float)):
            ran = round(float(until) - float(epoch), 3)
            if math.isfinite(ran) and 0.0 <= ran and abs(ran - shape.warmup_s) > 1e-3:
                shape = dataclasses.replace(shape, warmup_s=ran)
    seed = meta.get("seed")
    return Scenario(workload, shape, int(seed) if isinstance(seed, int) else None)


def as_plain(obj: Any) -> Any:
    """A dataclass as run.json records it (nested dicts and lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: as_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): as_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_plain(v) for v in obj]
    return obj


def build_stream(
    s: Scenario, *, n: int | None = None, chat_template_tokens: int = 0, gap_ms: float = 1.0
) -> Stream:
    """The requests ``s`` sends (``n`` of them for a closed loop) and its client."""
    import numpy as np

    from vprof.tinymodel import ensure_tiny_model
    from vprof.traffic import arrival_offsets
    from vprof.workloads import RequestSynthesizer, load_tokenizer

    workload, shape = s.workload, s.shape
    if workload.sessions:
        raise ForecastError(
            f"workload {workload.name!r} sends sessions (conversations or agent chains), whose "
            "later requests depend on earlier answers; forecasts replay single requests only",
            key="--workload",
        )
    # Lengths and prefix groups come from the seed alone, whatever the tokenizer.
    synth = RequestSynthesizer(workload, load_tokenizer(ensure_tiny_model()), seed=s.seed)
    scheduled = None
    if shape.open_loop:
        scheduled = np.asarray(arrival_offsets(shape, synth.seed), dtype=np.float64)
        n = scheduled.size
    elif n is None:
        n = 1024
    groups = np.empty(n, dtype=np.int64)
    prompts = np.empty(n, dtype=np.int64)
    outputs = np.empty(n, dtype=np.int64)
    for i in range(n):
        groups[i], prompts[i], outputs[i] = synth.planned_lengths(i)
    expected = prompts.copy()
    chat = workload.endpoint == "chat"
    if chat:
        prompts = prompts + chat_template_tokens  # the chat template's own tokens
    key, shared = _prefixes(workload, synth, groups, prompts, chat_template_tokens if chat else 0)
    requests = Requests(prompts, outputs, key, shared)
    client: Client
    if shape.open_loop:
        client = OpenLoop(scheduled, int(shape.max_in_flight), float(shape.total_s))
    else:
        client = ClosedLoop(_user_changes(shape), float(shape.total_s), gap_ms * 1e-3)
    return Stream(
        requests=requests,
        client=client,
        warmup_s=float(shape.warmup_s),
        open_loop=bool(shape.open_loop),
        endpoint=workload.endpoint,
        prefix_group=groups,
        expected_prompt_tokens=expected,
        scheduled_s=scheduled,
    )


def _prefixes(
    workload: Any, synth: Any, groups: Any, prompts: Any, template: int
) -> tuple[Any, Any]:
    """Each request's prefix key and the tokens it shares under it."""
    import numpy as np

    if workload.trace is not None:
        return _trace_prefixes(workload, prompts)
    if workload.prefix is None:
        return None, None
    specials = int(getattr(synth.tokenizer, "num_special_tokens", 0))
    lead = workload.prefix.length_tokens + (specials if workload.endpoint == "completions" else 0)
    shared = np.where(groups >= 0, np.minimum(lead + template, prompts), 0)
    return groups.copy(), shared


def _trace_prefixes(workload: Any, prompts: Any) -> tuple[Any, Any]:
    """A trace's shared blocks: a request's key is its first block, and it shares as many
    leading blocks as an earlier request already sent."""
    import numpy as np

    from vprof.workloads.trace import load_trace

    trace = load_trace(workload.trace)
    size = trace.spec.block_size
    n = prompts.size
    keys = np.full(n, -1, dtype=np.int64)
    shared = np.zeros(n, dtype=np.int64)
    seen: set[tuple[int, ...]] = set()
    m = len(trace.requests)
    for i in range(n):
        blocks = tuple(trace.requests[i % m].prefix_blocks or ())
        if not blocks:
            continue
        depth = 0
        while depth < len(blocks) and blocks[: depth + 1] in seen:
            depth += 1
        for d in range(depth, len(blocks)):
            seen.add(blocks[: d + 1])
        keys[i] = blocks[0]
        shared[i] = min(depth * size, int(prompts[i]))
    return keys, shared


def _user_changes(shape: Any) -> tuple[tuple[float, int], ...]:
    """A closed-loop shape's user count from each second on (as Locust polls it)."""
    changes: list[tuple[float, int]] = []
    last = -1
    t = 0.0
    while True:
        now = shape.users_at(t)
        if now is None:
            break
        users = int(now[0])
        if users != last:
            changes.append((t, users))
            last = users
        t += 1.0
    return tuple(changes) or ((0.0, 0),)
