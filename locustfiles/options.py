"""vprof's Locust options, registered once, and the traffic shape they select.

Registered directly on Locust's parser (not in a group) with ``include_in_web_ui=True`` so they
show in the web UI's start form, and with ``VPROF_*`` environment variables. Read them only
through ``environment.parsed_options``; workers receive them when a test starts.
"""

import locust  # noqa: F401  (first: gevent must patch before anything touches ssl)
from locust import events

import dataclasses
from typing import Any

from vprof.common.errors import WorkloadError
from vprof.locustfiles.optiontable import OPTIONS
from vprof.traffic.load import get_shape
from vprof.traffic.shape import TrafficShape


def add_arguments(parser: Any) -> None:
    """Add vprof's options (``vprof.locustfiles.optiontable``) to a Locust argument parser."""
    for option in OPTIONS:
        extra = {"choices": list(option.choices)} if option.choices else {}
        parser.add_argument(
            option.flag,
            type=option.type,
            default=option.default,
            env_var=option.env_var,
            include_in_web_ui=True,
            help=option.help,
            **extra,
        )


@events.init_command_line_parser.add_listener
def _on_parser(parser: Any) -> None:
    add_arguments(parser)


def opt(environment: Any, name: str, default: Any = None) -> Any:
    """One parsed option, or ``default`` in library mode (no parsed options)."""
    options = getattr(environment, "parsed_options", None)
    if options is None:
        return default
    value = getattr(options, name, default)
    return default if value is None else value


def effective_shape(environment: Any) -> TrafficShape | None:
    """The traffic shape the options ask for, or ``None`` when -u/-r/-t drive the test.

    ``--rate-rps`` and friends override an open-loop shape's fields; ``--rate-rps`` without
    ``--traffic`` makes an open-loop shape that lasts ``-t`` (default 60 s).
    """
    name = str(opt(environment, "traffic", "") or "")
    rate = float(opt(environment, "rate_rps", 0.0) or 0.0)
    shape: TrafficShape | None = get_shape(name) if name else None
    if shape is None and rate <= 0:
        return None
    if shape is None:
        run_time = opt(environment, "run_time", None) or 60
        shape = TrafficShape(
            name=f"open-loop-{rate:g}rps",
            kind="open-loop",
            duration_s=float(run_time),
            rate_rps=rate,
        )
    changes: dict[str, Any] = {}
    if rate > 0:
        changes.update(kind="open-loop", rate_rps=rate)
    if opt(environment, "arrival", ""):
        changes["process"] = opt(environment, "arrival")
    if float(opt(environment, "burstiness", 0.0) or 0.0) > 0:
        changes["burstiness"] = float(opt(environment, "burstiness"))
        changes.setdefault("process", "gamma")
    if int(opt(environment, "max_in_flight", 0) or 0) > 0:
        changes["max_in_flight"] = int(opt(environment, "max_in_flight"))
    if changes:
        if shape.kind != "open-loop" and "kind" not in changes:
            raise WorkloadError(
                "--arrival/--burstiness/--max-in-flight only apply to open-loop traffic",
                key="traffic",
                hint=f"{shape.name!r} is {shape.kind}; add --rate-rps",
            )
        shape = dataclasses.replace(shape, **changes)
    return shape
