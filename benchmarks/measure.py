"""What the benchmarks share: CPU of a process tree over a window, and a running emulator.

Imported by the scripts beside it (``python benchmarks/x.py`` puts this folder on the path).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from vprof.analysis.clienterror import percentile  # noqa: F401  (the benchmarks' one)


class TreeCpu:
    """CPU seconds (user + system) of a process and all its descendants, sampled over time.

    A descendant that ends keeps its last reading, so the sum never drops; read the CPU
    used between two wall-clock times with :meth:`seconds` (interpolated between samples).
    """

    def __init__(self, pid: int) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid)
        self._known: dict[int, object] = {}
        self._last: dict[int, float] = {}
        self.samples: list[tuple[float, float]] = []

    def sample(self) -> None:
        psutil = self._psutil
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for proc in tree:
            self._known.setdefault(proc.pid, proc)
        for pid, proc in self._known.items():
            try:
                times = proc.cpu_times()  # type: ignore[attr-defined]
            except psutil.Error:
                continue  # ended: keep its last reading
            self._last[pid] = times.user + times.system
        self.samples.append((time.time(), sum(self._last.values())))

    def seconds(self, start: float, end: float) -> float:
        """CPU seconds used between two wall-clock times."""
        if len(self.samples) < 2 or end <= start:
            return math.nan
        wall, cpu = np.array(self.samples).T
        return float(np.interp(end, wall, cpu) - np.interp(start, wall, cpu))


class Lateness:
    """The emulator's chunk-lateness histogram, scraped from ``/metrics`` now and then."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, dict[str, float]]] = []

    def sample(self) -> None:
        import requests

        text = requests.get(self.url + "/metrics", timeout=10).text
        buckets = {}  # bucket bound (seconds, as written) -> chunks at most that late
        for line in text.splitlines():
            if line.startswith("vprof_emulator_chunk_lateness_seconds_bucket"):
                bound = line.split('le="')[1].split('"')[0]
                buckets[bound] = float(line.rsplit(" ", 1)[1])
        self.samples.append((time.time(), buckets))

    def p99_ms(self, start: float, end: float) -> float:
        """Upper bound of the bucket holding the p99 of chunks sent between two scrapes that
        enclose ``[start, end]`` (the window, give or take one scrape interval)."""
        before = [b for t, b in self.samples if t <= start] or [self.samples[0][1]]
        after = [b for t, b in self.samples if t >= end] or [self.samples[-1][1]]
        deltas = [(float(k), after[0][k] - before[-1].get(k, 0.0)) for k in after[0]]
        total = deltas[-1][1] if deltas else 0.0
        if total <= 0:
            return math.nan
        return next(bound * 1e3 for bound, n in deltas if n >= 0.99 * total)


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Poll ``url/health`` until it answers 200, the process dies, or the deadline passes."""
    import requests

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if requests.get(url + "/health", timeout=1).ok:
                return
        except requests.ConnectionError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the emulator exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the emulator did not answer on {url} in {timeout_s:.0f} s")
        time.sleep(0.1)


@contextmanager
def running_emulator(port: int, options: list[str], nice: int = 0) -> Iterator[subprocess.Popen]:
    """``vprof emulate --port PORT OPTIONS`` in its own process group, stopped afterwards.

    ``nice`` < 0 raises its scheduling priority where permitted (root): on a shared machine its
    chunks then leave on time even while the client under test keeps the cores busy.
    """
    argv = [sys.executable, "-m", "vprof.cli.main", "emulate", "--port", str(port), *options]

    def renice() -> None:  # in the child before it starts: its workers inherit it
        try:
            os.nice(nice)
        except OSError:
            pass  # not permitted: the table's header says which priority it ran at

    proc = subprocess.Popen(
        argv, stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=renice
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield proc
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM a child's process group, wait, then SIGKILL whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def child_run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MB (``getrusage`` of the child) of one run of
    ``command`` in a fresh process, its output discarded; start-up included."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code:
        assert proc.stderr is not None
        raise RuntimeError(f"{command} exited with {code}: {proc.stderr.read()!r}")
    return wall, usage.ru_maxrss / 1024.0  # Linux reports KiB


# A fixed amount of numpy work (sorts, a cumulative sum, a percentile: what summaries do)
# in a fresh interpreter: the machine's pace at this moment, measured beside each figure.
_REFERENCE = (
    "import numpy as np\n"
    "x = np.random.default_rng(0).lognormal(3.0, 0.4, 4_000_000)\n"
    "for _ in range(3):\n"
    "    np.sort(x); np.cumsum(x); np.percentile(x, [50, 99])\n"
)


def reference_s() -> tuple[float, float]:
    """Wall seconds of ``python -c pass`` and of the numpy reference workload (each in a
    fresh interpreter, the second's start-up included)."""
    bare, _ = child_run([sys.executable, "-c", "pass"])
    work, _ = child_run([sys.executable, "-c", _REFERENCE])
    return bare, work


def timed_runs(command: list[str], repeat: int, label: str, target_s: float) -> list[tuple]:
    """Run ``command`` ``repeat`` times, each beside the reference workload; print and return
    (wall s, peak MB, reference s, wall / reference) per run."""
    rows = []
    for i in range(repeat):
        bare, work = reference_s()
        wall, peak_mb = child_run(command)
        rows.append((wall, peak_mb, work, wall / work))
        print(
            f"run {i + 1}: {label} {wall:.2f} s wall, start-up included (target < {target_s:g} s),"
            f" peak memory {peak_mb:,.0f} MB; reference {work:.2f} s "
            f"(python -c pass {bare * 1000:.0f} ms): ratio {wall / work:.2f}",
            flush=True,
        )
    return rows
