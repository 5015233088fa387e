"""Sample the server's /metrics every few seconds into ``metrics.jsonl``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from vprof.records.rundir import append_jsonl


class MetricsSampler:
    """A background thread appending one JSON line per successful scrape.

    ``consecutive_failures`` lets the orchestrator notice a server that stopped answering.
    """

    def __init__(self, url: str, path: Path, interval_s: float = 2.0) -> None:
        self.url = url
        self.path = Path(path)
        self.interval_s = interval_s
        self.consecutive_failures = 0
        self.last_values: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vprof-metrics", daemon=True)

    def start(self) -> MetricsSampler:
        self._thread.start()
        return self

    def sample_once(self) -> bool:
        from vprof.server.metrics import scrape

        try:
            values = scrape(self.url)
        except Exception:  # a dead or busy server: counted, never fatal here
            self.consecutive_failures += 1
            return False
        self.consecutive_failures = 0
        self.last_values = values
        self.samples += 1
        append_jsonl(self.path, [{"t": time.time(), "values": values}])
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def stop(self, final_sample: bool = True) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + 5)
        if final_sample:
            self.sample_once()

    def __enter__(self) -> MetricsSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
