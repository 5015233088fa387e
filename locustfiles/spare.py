"""A Locust process started before its test is known: the next level of a ladder gets one
whose imports (gevent, Locust, the locustfile's modules: a second or two) are already done.

It waits for one line on stdin — the argv Locust is to run with, as JSON — then runs Locust
exactly as ``python -m locust ARGV`` would; an empty stdin (its parent gone, or the spare
not needed) ends it. Started and handed its argv by :mod:`vprof.runs.loadgen`.
"""

from __future__ import annotations

import json
import os
import sys

from vprof.common.clock import reanchor  # stdlib only: nothing for gevent to patch first


def main() -> int:
    import locust.main  # first: gevent's patching, then Locust itself

    # What the locustfile imports (not the locustfile: Locust loads it from its path).
    from vprof.locustfiles import (  # noqa: F401
        balance,
        collect,
        health,
        lifeline,
        options,
        shapes,
        testplan,
        users,
        workerloss,
    )

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    argv = json.loads(line)
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return 2
    devnull = os.open(os.devnull, os.O_RDONLY)  # as a cold start has it: stdin is not a pipe
    os.dup2(devnull, 0)
    reanchor()  # the clock of the test, not of the wait
    sys.argv = ["locust", *argv]
    locust.main.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
