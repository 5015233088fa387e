"""The load generator measures itself: event-loop lag and CPU, sampled in every Locust process.

A client that falls behind stamps its chunks late, so its latencies include its own queueing.
Per-process CPU is the wrong signal for that (a gevent loop can be late at 40 % CPU when it
is handed many wake-ups at once, and a process's threads can add up past 100 %). What shows
it directly is *event-loop lag*: a greenlet asks to wake every ``PROBE_INTERVAL_S`` and
records how late it woke. Every ``SAMPLE_INTERVAL_S`` a sample is made of the lag seen since
the last one (quantiles and a histogram, so a run's percentiles can be pooled exactly to the
bucket), the CPU of the process's main thread (the gevent loop: never above 100 % of one
core), the share of time that thread was ready to run but waited for a core (Linux's
schedstat), and the machine's CPU per core, with steal where the kernel reports it.

Lag alone does not say *whose* fault it is: a loop that wakes late because it has too much
to do is a client at its limit; a loop that wakes late because another process held the cores
(a vLLM server on the same two cores) is a client whose clock is disturbed but which asks for
little. CPU plus wait — the thread's *demand* for a core — tells them apart.

What holds the loop in one piece is named too (:class:`Pauses`): each sample says the time
spent, and the longest single stretch, in the work known to pause it — garbage collection
and shipping records to the master — beside the longest late wake-up (``loop_lag_max_ms``).
"""

import locust  # noqa: F401  (first: gevent patching)

import bisect
import gc
import os
import time
from collections.abc import Callable
from typing import Any

import gevent

from vprof.common.clock import wall_now
from vprof.records.schema import LOOP_LAG_BUCKETS_MS

PROBE_INTERVAL_S = 0.005
SAMPLE_INTERVAL_S = 2.0


def _quantile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class LagProbe:
    """A greenlet that wakes every ``PROBE_INTERVAL_S`` and keeps how late each wake-up was."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.lags_ms: list[float] = []
        self._greenlet: Any = None

    def start(self) -> "LagProbe":
        self._greenlet = gevent.spawn(self._run)
        return self

    def _run(self) -> None:
        while True:
            asked = self.clock()
            gevent.sleep(PROBE_INTERVAL_S)
            self.lags_ms.append(max(0.0, (self.clock() - asked - PROBE_INTERVAL_S) * 1000.0))

    def take(self) -> dict[str, Any]:
        """The lag since the last call: quantiles, maximum, probe count and a histogram."""
        lags, self.lags_ms = sorted(self.lags_ms), []
        histogram = [0] * (len(LOOP_LAG_BUCKETS_MS) + 1)
        for lag in lags:
            histogram[bisect.bisect_left(LOOP_LAG_BUCKETS_MS, lag)] += 1
        return {
            "loop_lag_p50_ms": _quantile(lags, 0.50),
            "loop_lag_p99_ms": _quantile(lags, 0.99),
            "loop_lag_max_ms": lags[-1] if lags else 0.0,
            "loop_probes": len(lags),
            "loop_lag_histogram": histogram,
        }


class CpuMeter:
    """CPU of this process's main thread (% of one core) and of the machine (per core)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._proc = psutil.Process()
        self._last_wall = time.monotonic()
        self._last_main = self._main_thread_s()
        self._last_wait = _main_thread_wait_s()
        psutil.cpu_percent(percpu=True)  # the first reading starts the interval
        psutil.cpu_times_percent()

    def _main_thread_s(self) -> float:
        # On Linux the main thread's id is the process id; elsewhere, fall back to the process.
        try:
            for thread in self._proc.threads():
                if thread.id == os.getpid():
                    return float(thread.user_time + thread.system_time)
        except (self._psutil.Error, OSError):
            pass
        times = self._proc.cpu_times()
        return float(times.user + times.system)

    def take(self) -> dict[str, Any]:
        now, main = time.monotonic(), self._main_thread_s()
        wall = max(now - self._last_wall, 1e-9)
        share = min(100.0, max(0.0, (main - self._last_main) / wall * 100.0))
        wait = _main_thread_wait_s()
        waited = (
            None
            if wait is None or self._last_wait is None
            else min(100.0, max(0.0, (wait - self._last_wait) / wall * 100.0))
        )
        self._last_wall, self._last_main, self._last_wait = now, main, wait
        per_core = [float(v) for v in self._psutil.cpu_percent(percpu=True)]
        times = self._psutil.cpu_times_percent()
        return {
            "cpu_percent": share,
            "wait_percent": waited,
            "machine_cpu_percent": sum(per_core) / len(per_core) if per_core else None,
            "per_core_cpu_percent": per_core,
            "steal_percent": float(getattr(times, "steal", 0.0) or 0.0),
        }


def _main_thread_wait_s() -> float | None:
    """Seconds the main thread has spent runnable but waiting for a core (Linux only)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Pauses:
    """Time the event loop spent, in all and at most at once, in known pauses since the last
    sample: ``gc`` (the garbage collector, timed by ``gc.callbacks``) and what others
    :meth:`add` (``ship``: records handed on, packed and sent to the master by a worker or
    written to the records file by a local runner)."""

    KINDS = ("gc", "ship")

    def __init__(self) -> None:
        self._total = dict.fromkeys(self.KINDS, 0.0)
        self._max = dict.fromkeys(self.KINDS, 0.0)
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self.add("gc", (time.perf_counter() - self._gc_started) * 1000.0)

    def add(self, kind: str, ms: float) -> None:
        self._total[kind] += ms
        self._max[kind] = max(self._max[kind], ms)

    def take(self) -> dict[str, float]:
        out = {}
        for kind in self.KINDS:
            out[f"{kind}_ms"], out[f"{kind}_max_ms"] = self._total[kind], self._max[kind]
            self._total[kind] = self._max[kind] = 0.0
        return out


PAUSES = Pauses()  # this process's


def install(environment: Any) -> None:
    """At each test's start, before its users spawn: collect, then freeze what the process
    holds (modules, the workload's tables, the tokenizer), so the garbage collector's full
    passes during the test walk only what the test made, and pause the loop less."""

    @environment.events.test_start.add_listener
    def _freeze(**_: Any) -> None:
        gc.collect()
        gc.freeze()


def run_sampler(name: Callable[[], str], emit: Callable[[dict[str, Any]], None]) -> None:
    """Forever: every ``SAMPLE_INTERVAL_S`` emit one health sample (run it in a greenlet)."""
    probe, cpu = LagProbe().start(), CpuMeter()
    while True:
        gevent.sleep(SAMPLE_INTERVAL_S)
        # The name is read each time: a worker learns its index only after it connects.
        sample = {"t": wall_now(), "worker": name(), **cpu.take(), **probe.take()}
        emit(sample | PAUSES.take())
