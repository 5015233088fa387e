"""A host-steadiness probe beside every run: how fast this machine is while it measures.

The CPU pace of a shared host changes by itself (a virtual machine's neighbours take cycles
the guest never sees as steal), and a server measured on a slow minute looks slower. Once a
second a thread in vprof's own process — never in the load generator — runs a fixed piece of
pure-Python work and notes the CPU time its thread spent on it (``work_ms``: waiting for a
core does not count, a slower core does) and how late its sleep woke (``late_ms``). About a
millisecond a second. Where Linux reports pressure stalls (``/proc/pressure``), each line also
keeps the kernel's running totals of time in which some task waited for a core
(``cpu_some_us``) and in which every task was stalled on I/O (``io_full_us``): a host that
stalls, for whatever reason, says so even when the probe itself was not the one held up. The
summary turns the lines into the run's pace spread and stall shares
(``vprof.analysis.samples.host_stats``); compare and tune flag unsteady runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from vprof.records.rundir import append_jsonl

INTERVAL_S = 1.0
_WORK = 20_000  # loop steps: about a millisecond of one core


PRESSURE = Path("/proc/pressure")
STALLS = (("cpu_some_us", "cpu", "some"), ("io_full_us", "io", "full"))  # line key, file, kind


def _stall_total_us(resource: str, kind: str) -> int | None:
    """The kernel's running total (µs) of ``kind`` (``some``/``full``) stall on ``resource``
    (``cpu``, ``io``), or ``None`` where pressure stall information is not available."""
    try:
        text = (PRESSURE / resource).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(kind + " "):
            for field in line.split():
                if field.startswith("total="):
                    return int(field[6:])
    return None


def _work() -> float:
    """The fixed piece of work; the thread CPU time it took, in ms."""
    started = time.thread_time()
    total = 0
    for i in range(_WORK):
        total += i * i % 7
    return (time.thread_time() - started) * 1000.0


class HostProbe:
    """A daemon thread appending one ``host.jsonl`` line per second until stopped."""

    def __init__(self, path: Path, interval_s: float = INTERVAL_S, *, enabled: bool = True) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vprof-host-probe", daemon=True)

    def start(self) -> HostProbe:
        if self.enabled:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        rows = []
        last_write = time.monotonic()
        while True:
            asked = time.monotonic() + self.interval_s
            if self._stop.wait(self.interval_s):
                break
            late_ms = max(0.0, (time.monotonic() - asked) * 1000.0)
            row: dict[str, float | int] = {
                "t": time.time(),
                "work_ms": round(_work(), 4),
                "late_ms": round(late_ms, 3),
            }
            for key, resource, kind in STALLS:
                total = _stall_total_us(resource, kind)
                if total is not None:
                    row[key] = total
            rows.append(row)
            if time.monotonic() - last_write >= 5.0:
                self._flush(rows)
                last_write = time.monotonic()
        self._flush(rows)

    def _flush(self, rows: list[dict]) -> None:
        try:
            append_jsonl(self.path, rows)
        except OSError:
            return  # the run folder's own writers report a full disk
        rows.clear()
