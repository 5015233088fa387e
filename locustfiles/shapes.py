"""The LoadTestShape that follows ``--traffic``; a thin adapter over ``vprof.traffic``.

Without ``--traffic`` (and without ``--rate-rps``) it honours Locust's own ``-u``, ``-r`` and
``-t`` (``use_common_options``), so ``locust -f locustfile.py -u 4 -t 30s`` behaves as usual.
Options are read in ``tick()``, never at import: shapes are instantiated before Locust parses
the command line.
"""

import locust  # noqa: F401  (first: gevent patching)
from locust import LoadTestShape
from locust.runners import STATE_CLEANUP, STATE_STOPPED, STATE_STOPPING, MasterRunner

from typing import Any

import gevent

from vprof.locustfiles.collect import fault
from vprof.locustfiles.options import effective_shape, opt
from vprof.locustfiles.optiontable import open_loop_lead_s
from vprof.locustfiles.testplan import drain_workers
from vprof.traffic.shape import TrafficShape

# Locust asks a shape for its users once a second (and its clock restarts a little after the
# first ask, so a whole-second end is seen a second late): a shape whose end falls before the
# next ask waits for it itself.
TICK_S = 1.0
_LAST_MOMENT_S = 1e-6


class TrafficShapeBase(LoadTestShape):
    """Follows ``--traffic``; else ``-u/-r/-t``. Subclass it in a locustfile to use it."""

    abstract = True
    use_common_options = True

    def __init__(self) -> None:
        super().__init__()
        self._shape: TrafficShape | None = None
        self._resolved = False

    def reset_time(self) -> None:
        super().reset_time()
        self._resolved = False  # a new test: the options may have changed in the web UI

    def traffic(self) -> TrafficShape | None:
        """The shape for this test (read from the options once per test)."""
        if not self._resolved:
            assert self.runner is not None, "Locust attaches the runner before the first tick"
            self._shape = effective_shape(self.runner.environment)
            self._resolved = True
        return self._shape

    def tick(self) -> tuple[int, float] | None:
        assert self.runner is not None, "Locust attaches the runner before the first tick"
        if fault(self.runner.environment):
            return None  # stopped at once (a full disk, vprof gone): no load starts again
        shape = self.traffic()
        t_s = self.get_run_time()
        if shape is None:
            result = self._common_options(t_s)
        else:
            if shape.open_loop:
                # The schedule's epoch is the lead after the start; users come up early.
                t_s -= open_loop_lead_s(isinstance(self.runner, MasterRunner))
            result = shape.users_at(max(t_s, 0.0))
            left_s = shape.total_s - t_s
            if result is not None and left_s < TICK_S:
                if shape.users_at(max(t_s, shape.total_s - _LAST_MOMENT_S)) == result:
                    # The end falls before the next tick: end there, not up to a second late.
                    gevent.sleep(left_s)
                    result = None
        if result is None:
            drain(self.runner)
        return result

    def _common_options(self, t_s: float) -> tuple[int, float] | None:
        assert self.runner is not None
        env: Any = self.runner.environment
        run_time = opt(env, "run_time", None)
        if run_time and t_s >= float(run_time):
            return None
        users = int(opt(env, "num_users", 1) or 1)
        return users, float(opt(env, "spawn_rate", 1) or 1)


def drain(runner: Any) -> None:
    """Master: let workers finish their streams and ship their records before a quit."""
    if isinstance(runner, MasterRunner) and runner.state not in (
        STATE_STOPPED,
        STATE_STOPPING,
        STATE_CLEANUP,
    ):
        drain_workers(runner.environment)


def end_test(runner: Any) -> None:
    """End a headless test now as its shape's end would: workers drain, then the shape stops
    and Locust quits the test once (a quit of our own beside Locust's would stop every user
    twice, and each second stop raises)."""
    drain(runner)
    shape = runner.shape_greenlet
    if shape is not None:
        shape.kill(block=False)
    else:
        runner.quit()
