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
def running_emulator(port: int, options: list[str]) -> Iterator[subprocess.Popen]:
    """``vprof emulate --port PORT OPTIONS`` in its own process group, stopped afterwards."""
    argv = [sys.executable, "-m", "vprof.cli.main", "emulate", "--port", str(port), *options]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL, start_new_session=True)
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


def percentile(values, q: float) -> float:
    """numpy's linear percentile; NaN for no values."""
    return float(np.percentile(values, q)) if len(values) else math.nan
