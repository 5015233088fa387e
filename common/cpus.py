"""How many CPUs this process may run on (its affinity, where the OS says)."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity on Linux, else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
