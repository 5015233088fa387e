"""Sample the server's /metrics into ``metrics.jsonl`` without disturbing what is measured.

A scrape of vLLM's ``/metrics`` renders every histogram in the API server's own event loop,
which stalls the requests it serves meanwhile (seen: up to 1.15 s per scrape on two cores). So
the sampler scrapes once when the run starts and once when it ends (the counters' totals —
tokens, prefix-cache hits, preemptions — need only those two), and in between samples the
gauges (requests running and waiting, KV-cache use) every ``interval_s``, backing off so that
scraping never takes more than ``MAX_SHARE`` of the wall time. Each line records how long its
scrape took, so the summary can say whether sampling could have disturbed the run. With
several replicas every pass scrapes each of them, one line per replica (its ``replica``: the
base URL, as records name it; its ``pass``: the pass's number), so the summary's counters are
the deployment's.

Alternating slices (``bench --alternate``) give the sampler their schedule: it then scrapes
every server once a slice, early in the slice's warm-up, which is not measured — a stall
there costs no measured request, and each slice's counters are bracketed by two passes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vprof.common.errors import os_reason
from vprof.records.rundir import append_jsonl

if TYPE_CHECKING:
    from vprof.traffic.slices import SliceSchedule

DEFAULT_INTERVAL_S = 5.0
MAX_SHARE = 0.02  # at most this share of the time is spent scraping
WARMUP_SHARE = 0.1  # with slices: a pass starts this far into a slice's warm-up
SCHEDULE_POLL_S = 0.2  # with slices: how often to look for the schedule before it exists


class MetricsSampler:
    """A background thread appending one JSON line per successful scrape of each server.

    ``urls``: one server's base URL, or several replicas'. ``consecutive_failures`` lets the
    orchestrator notice a server that stopped answering (passes in a row in which one did
    not); ``last_values`` are the last pass's values for the deployment (``deployment_samples``:
    summed over the replicas, KV-cache use the busiest one's); ``enabled=False`` scrapes nothing
    at all (``--no-metrics``).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        path: Path,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        enabled: bool = True,
        slices: Callable[[], SliceSchedule | None] | None = None,
    ) -> None:
        self.urls = (urls,) if isinstance(urls, str) else tuple(urls)
        self.slices = slices
        self.path = Path(path)
        self.interval_s = interval_s
        self.enabled = enabled
        self.consecutive_failures = 0
        self.write_error = ""  # why metrics.jsonl could not be written (sampling stopped)
        self.last_values: dict[str, float] = {}
        self.last_scrape_s = 0.0
        self.samples = 0  # passes every server answered
        self.passes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vprof-metrics", daemon=True)

    def start(self) -> MetricsSampler:
        if self.enabled:
            self._thread.start()
        return self

    def sample_once(self) -> bool:
        """One pass over the servers; True when every one answered."""
        from vprof.analysis.samples import deployment_samples
        from vprof.server.metrics import scrape

        lines: list[dict] = []
        slowest = 0.0
        for url in self.urls:
            started = time.monotonic()
            try:
                values = scrape(url)
            except Exception:  # a dead or busy server: counted, never fatal here
                continue
            took = time.monotonic() - started
            slowest = max(slowest, took)
            line = {"t": time.time(), "scrape_s": round(took, 6), "values": values}
            if len(self.urls) > 1:
                line["replica"], line["pass"] = url, self.passes
            lines.append(line)
        if self.write_error:
            return False
        try:
            append_jsonl(self.path, lines)
        except OSError as exc:
            where = f"{self.path.name} in {self.path.parent}"
            self.write_error = f"could not write {where}: {os_reason(exc)}"
            self._stop.set()
            return False
        self.passes += 1
        if len(lines) < len(self.urls):
            self.consecutive_failures += 1
            return False
        self.last_scrape_s = slowest
        self.consecutive_failures = 0
        (merged,) = deployment_samples(lines)  # the deployment's, as the report shows it
        self.last_values = merged["values"]
        self.samples += 1
        return True

    def next_wait_s(self) -> float:
        """The pause before the next scrape: the interval, or longer after a slow scrape."""
        return max(self.interval_s, self.last_scrape_s / MAX_SHARE)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            if self.slices is not None:
                self._wait_for_next_slice()
            else:
                self._stop.wait(max(0.0, self.next_wait_s() - (time.monotonic() - started)))

    def _wait_for_next_slice(self) -> None:
        """Wait until early in the warm-up of the next slice whose pass is still ahead."""
        assert self.slices is not None
        schedule = None
        while not self._stop.is_set() and (schedule := self.slices()) is None:
            self._stop.wait(SCHEDULE_POLL_S)
        if schedule is None:
            return
        now = time.time()
        k = max(0, schedule.slice_at(now))
        due = schedule.start(k) + WARMUP_SHARE * schedule.warmup_s
        if due <= now:
            due += schedule.slice_s
        self._stop.wait(due - now)

    def stop(self, final_sample: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if final_sample and self.enabled:
            self.sample_once()

    def __enter__(self) -> MetricsSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
