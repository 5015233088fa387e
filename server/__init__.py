"""Server lifecycle: adapt a profile to this host, run vLLM as a child, read its log and metrics.

Modules: ``start`` (profile → healthy server, the one sequence every command uses), ``host``
(which vLLM is installed, adapting profiles to it), ``process``
(``ServerProcess``), ``logparse`` (effective settings and errors from the log, pure) and
``metrics`` (Prometheus ``/metrics`` scraping). None of them imports vLLM.
"""

from vprof.server.host import HostEngine, adapt_for_host, detect_engine
from vprof.server.logparse import EffectiveSettings, find_error, parse_log
from vprof.server.metrics import metric_labels, parse_metrics, scrape
from vprof.server.process import ServerProcess, free_port, port_in_use
from vprof.server.start import (
    ServerPlan,
    StartedServer,
    await_server,
    plan_server,
    spawn_server,
    start_server,
    stop_quietly,
)

__all__ = [
    "EffectiveSettings",
    "HostEngine",
    "ServerPlan",
    "ServerProcess",
    "StartedServer",
    "adapt_for_host",
    "detect_engine",
    "find_error",
    "free_port",
    "metric_labels",
    "parse_log",
    "parse_metrics",
    "plan_server",
    "port_in_use",
    "scrape",
    "start_server",
    "spawn_server",
    "await_server",
    "stop_quietly",
]
