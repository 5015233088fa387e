"""Ports for the servers tests start: each xdist worker looks only in its own share of a range.

Two workers that look at once would both find the range's first port free, and vLLM binds its
port with SO_REUSEADDR long before it listens, so both servers start on it (a CI run's sweep
measured another test's server, which that test then killed; vprof now refuses that, see
``ServerProcess._other_listener``, but the test would still fail).
"""

from __future__ import annotations

import os

from vprof.server.process import free_port


def worker_port(lo: int, hi: int) -> int:
    """A free port in this worker's share of ``[lo, hi]`` (all of it outside xdist)."""
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % count
    share = (hi - lo + 1) // count
    if share < 1:
        raise ValueError(f"ports {lo}-{hi} cannot be shared by {count} workers")
    first = lo + index * share
    return free_port(lo=first, hi=first + share - 1)
