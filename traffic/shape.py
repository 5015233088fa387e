"""Traffic shapes as pure maths: how many users at time t, and when open-loop requests arrive.

Closed-loop kinds (``steady``, ``ramp``, ``step``, ``spike``) answer ``users_at(t_s)``; the
Locust adapter in ``vprof.locustfiles.shapes`` calls it once a second. The ``open-loop`` kind
fixes a request *rate* instead: ``arrival_offsets`` is one schedule, identical in every process
that computes it from the same seed, which the Locust workers split between them.

Time ``t_s`` counts from the start of the test and includes the warm-up: a shape runs for
``warmup_s + duration_s`` seconds, and during the warm-up it holds its starting level.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.common.numbers import check_number

KINDS = ("steady", "ramp", "step", "spike", "open-loop")
PROCESSES = ("constant", "poisson", "gamma", "trace")
TRACE_TAIL_S = 5.0  # a trace shape runs this long past its last arrival, for late sends

_DAY_S = 86_400.0
# Every numeric field's range, (minimum, maximum, whole number): wide enough for any real test,
# narrow enough that a typo (1e20 users, a 10**9 s run) fails here and not in Locust.
LIMITS: dict[str, tuple[float, float, bool]] = {
    "duration_s": (0.0, 30 * _DAY_S, False),
    "warmup_s": (0.0, _DAY_S, False),
    "users": (0, 1_000_000, True),
    "spawn_rate": (0.0, 100_000.0, False),
    "start_users": (0, 1_000_000, True),
    "ramp_s": (0.0, 30 * _DAY_S, False),
    "step_users": (0, 1_000_000, True),
    "step_s": (0.0, 30 * _DAY_S, False),
    "spike_users": (0, 1_000_000, True),
    "spike_at_s": (0.0, 30 * _DAY_S, False),
    "spike_s": (0.0, 30 * _DAY_S, False),
    "rate_rps": (0.0, 1_000_000.0, False),
    "burstiness": (0.0, 1_000.0, False),
    "max_in_flight": (0, 1_000_000, True),
}
# An open-loop schedule is a list of send times held in memory by every Locust process.
MAX_SCHEDULED_REQUESTS = 10_000_000


def check_field(name: str, value: Any, **where: Any) -> Any:
    """``value`` for the numeric field ``name`` if finite and in range (an ``int`` for counts);
    otherwise ``WorkloadError`` with ``where`` (path, line, key)."""
    low, high, whole = LIMITS[name]
    where.setdefault("key", name)
    return check_number(
        value, minimum=low, maximum=high, integer=whole, error=WorkloadError, **where
    )


@dataclass(frozen=True)
class TrafficShape:
    """A named traffic shape. Fields that a kind does not use keep their defaults.

    - ``steady``: ``users`` for the whole run.
    - ``ramp``: from ``start_users`` up to ``users`` over ``ramp_s`` (default: the whole
      duration), then hold.
    - ``step``: start at ``start_users`` and add ``step_users`` every ``step_s`` until ``users``.
    - ``spike``: ``users``, jumping to ``spike_users`` from ``spike_at_s`` for ``spike_s``.
    - ``open-loop``: requests arrive at ``rate_rps`` (``process`` constant, poisson or gamma with
      ``burstiness``), whoever is free sends them; at most ``max_in_flight`` at once. With
      ``process: trace`` they arrive at the times of the trace workload named by ``trace``
      (``rate_rps`` is then the trace's mean rate, for display).
    """

    name: str
    kind: str
    duration_s: float
    warmup_s: float = 0.0
    description: str = ""
    users: int = 1
    spawn_rate: float = 0.0  # users per second; 0 = all at once (capped at 100 per second)
    start_users: int = 1
    ramp_s: float = 0.0
    step_users: int = 1
    step_s: float = 10.0
    spike_users: int = 0
    spike_at_s: float = 0.0
    spike_s: float = 0.0
    rate_rps: float = 0.0
    process: str = "poisson"
    burstiness: float = 1.0
    max_in_flight: int = 32
    trace: str = ""  # process trace: the trace workload (name or YAML path) whose times to use
    source: str = ""  # the YAML file it came from, for messages

    def __post_init__(self) -> None:
        # shapes also come from Locust's command line and from run configs, not only YAML
        for name in LIMITS:
            object.__setattr__(self, name, check_field(name, getattr(self, name)))
        if self.open_loop and self.rate_rps * self.total_s > MAX_SCHEDULED_REQUESTS:
            raise WorkloadError(
                f"rate_rps × (warmup_s + duration_s) schedules "
                f"{self.rate_rps * self.total_s:,.0f} requests; at most "
                f"{MAX_SCHEDULED_REQUESTS:,} fit in one run",
                key="rate_rps",
                hint="lower the rate or the duration",
            )

    @property
    def open_loop(self) -> bool:
        return self.kind == "open-loop"

    @property
    def total_s(self) -> float:
        """Warm-up plus measured duration: how long the test runs."""
        return self.warmup_s + self.duration_s

    def _spawn(self, users: int) -> float:
        # Locust warns above 100 users/s; "all at once" means as fast as it is comfortable.
        return self.spawn_rate if self.spawn_rate > 0 else float(min(max(users, 1), 100))

    def users_at(self, t_s: float) -> tuple[int, float] | None:
        """``(users, spawn_rate)`` at ``t_s`` seconds into the test, or ``None`` when it is over."""
        if t_s >= self.total_s:
            return None
        t = max(0.0, t_s - self.warmup_s)  # the pattern starts after the warm-up
        if self.kind in ("steady", "open-loop"):
            users = self.max_in_flight if self.open_loop else self.users
        elif self.kind == "ramp":
            ramp_s = self.ramp_s or self.duration_s
            frac = min(1.0, t / ramp_s) if ramp_s > 0 else 1.0
            users = round(self.start_users + (self.users - self.start_users) * frac)
        elif self.kind == "step":
            steps = int(t // self.step_s) if self.step_s > 0 else 0
            users = min(self.users, self.start_users + steps * self.step_users)
        elif self.kind == "spike":
            in_spike = self.spike_at_s <= t < self.spike_at_s + self.spike_s
            users = self.spike_users if in_spike else self.users
        else:  # validated on load; a hand-built shape with a typo ends at once
            return None
        return users, self._spawn(users)

    def peak_users(self) -> int:
        """The most users the shape ever asks for."""
        if self.open_loop:
            return self.max_in_flight
        return max(self.users, self.start_users, self.spike_users)

    def expected_requests(self) -> int:
        """Open-loop: how many requests the schedule holds (rate × total time)."""
        if not self.open_loop:
            return 0
        if self.process == "trace":
            return len(trace_offsets(self.trace))
        return max(1, round(self.rate_rps * self.total_s))

    def to_dict(self) -> dict[str, Any]:
        """A JSON- and msgpack-safe dict of every field."""
        return asdict(self)


def arrival_offsets(shape: TrafficShape, seed: int) -> list[float]:
    """Intended send times (seconds from the schedule's epoch) for an open-loop shape.

    Follows ``vllm bench serve``: gaps ~ Gamma(shape=burstiness, scale=1/(rate·burstiness)),
    so burstiness 1 is Poisson, below 1 burstier, above 1 more regular; ``constant`` spaces
    them evenly. The cumulative times are rescaled so the last arrival is exactly at N/rate,
    which removes seed-to-seed drift in the achieved rate. Pure: same inputs, same list, in
    every process.
    """
    if not shape.open_loop:
        raise ValueError(f"shape {shape.name!r} is {shape.kind}, not open-loop")
    if shape.process == "trace":
        return trace_offsets(shape.trace)
    n = shape.expected_requests()
    rate = shape.rate_rps
    if shape.process == "constant":
        return [i / rate for i in range(n)]
    burstiness = 1.0 if shape.process == "poisson" else shape.burstiness
    rng = random.Random(seed)
    scale = 1.0 / (rate * burstiness)
    total = 0.0
    times = []
    for _ in range(n):
        total += rng.gammavariate(burstiness, scale)
        times.append(total)
    factor = (n / rate) / times[-1]
    # Start the schedule at the epoch: the first arrival is at 0, the last at (N/rate) - gap0.
    first = times[0] * factor
    return [t * factor - first for t in times]


def trace_offsets(workload: str) -> list[float]:
    """The arrival offsets of a ``kind: trace`` workload (a name or a YAML path): its requests'
    own times, scaled and windowed as the workload says. Every process reads the same file, so
    every process gets the same schedule."""
    return trace_schedule(workload)[1]


def trace_schedule(workload: str) -> tuple[str, list[float]]:
    """(the trace workload's YAML file, or ``workload`` when it has none; its offsets)."""
    # Imported here: only trace shapes need workloads (which read the file once per process).
    from pathlib import Path

    from vprof.workloads.loading import get_workload
    from vprof.workloads.trace import load_trace

    found = get_workload(workload)
    if found.trace is None:
        raise WorkloadError(
            f"workload {found.name!r} is {found.kind}, not a trace",
            key="trace",
            hint="a shape with process: trace names a workload of kind: trace",
        )
    source = Path(found.source) if found.source else None
    where = str(source.resolve()) if source is not None and source.is_file() else workload
    return where, load_trace(found.trace).offsets_s()


def check_pairing(shape: TrafficShape, workload: Any) -> None:
    """A trace replay sends request *i* at the *i*-th time of the trace workload it names: the
    run's ``workload`` must replay that same trace window, or the times belong to other
    requests. Raises :class:`WorkloadError` naming both."""
    if shape.process != "trace":
        return
    from vprof.workloads.loading import get_workload

    replayed = get_workload(shape.trace)

    def window(w: Any) -> tuple[Any, ...] | None:
        t = w.trace
        if t is None:
            return None
        return (t.file, t.format, t.time_scale, t.start_s, t.duration_s, t.max_requests)

    if window(workload) is not None and window(workload) == window(replayed):
        return
    what = "is not a trace" if workload.trace is None else "replays another trace or window"
    raise WorkloadError(
        f"traffic {shape.name!r} sends requests at the times of trace workload "
        f"{replayed.name!r}, but workload {workload.name!r} {what}: each time would belong to "
        "another request",
        key="--traffic",
        hint=f"give --workload {replayed.name} with it (by its path if it is a file), or a "
        "traffic shape that is not a trace replay",
    )


def partition(n: int, worker_index: int, workers: int) -> range:
    """The schedule indices one of ``workers`` processes sends: i with i % workers == index."""
    return range(worker_index, n, workers)


def level_name(name: str, field: str, value: float) -> str:
    """The name of a load ladder's level made from shape ``name``: ``poisson@rate_rps=5``."""
    return f"{name}@{field}={value:g}"


_LEVEL = re.compile(r"@(?:rate_rps|users)=[0-9.eE+-]+$")


def ladder_name(name: str) -> str:
    """The shape a load ladder's level was made from (``poisson@rate_rps=5`` → ``poisson``;
    any other name as it is)."""
    return _LEVEL.sub("", name)
