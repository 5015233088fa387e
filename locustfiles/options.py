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
from vprof.traffic.load import get_shape
from vprof.traffic.shape import TrafficShape

DEFAULT_WORKLOAD = "chat"
DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_STOP_TIMEOUT_S = 60.0  # let in-flight streams finish when a test ends


def add_arguments(parser: Any) -> None:
    """Add vprof's options to a Locust argument parser."""
    parser.add_argument(
        "--workload",
        type=str,
        default=DEFAULT_WORKLOAD,
        env_var="VPROF_WORKLOAD",
        include_in_web_ui=True,
        help="Workload preset name or YAML path (see `vprof workloads`).",
    )
    parser.add_argument(
        "--traffic",
        type=str,
        default="",
        env_var="VPROF_TRAFFIC",
        include_in_web_ui=True,
        help="Traffic shape preset or YAML path (see `vprof traffic`); empty: -u/-r/-t decide.",
    )
    parser.add_argument(
        "--run-dir",
        type=str,
        default="",
        env_var="VPROF_RUN_DIR",
        include_in_web_ui=True,
        help="Folder for records.arrow, locust.json, loadgen.jsonl (default ./vprof-runs/<time>).",
    )
    parser.add_argument(
        "--tokenizer",
        type=str,
        default="",
        env_var="VPROF_TOKENIZER",
        include_in_web_ui=True,
        help="Model folder or tokenizer.json (default: vprof's tiny model).",
    )
    parser.add_argument(
        "--model",
        type=str,
        default="",
        env_var="VPROF_MODEL",
        include_in_web_ui=True,
        help="Served model name (default: the first one /v1/models lists).",
    )
    parser.add_argument(
        "--endpoint",
        type=str,
        default="",
        env_var="VPROF_ENDPOINT",
        include_in_web_ui=True,
        choices=["", "completions", "chat", "generate"],
        help="Override the workload's endpoint (generate: legacy /generate).",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=-1,
        env_var="VPROF_SEED",
        include_in_web_ui=True,
        help="Seed for prompts and arrivals (-1: the workload's own seed).",
    )
    parser.add_argument(
        "--salt",
        type=str,
        default="",
        env_var="VPROF_SALT",
        include_in_web_ui=True,
        help="Changes all prompt text so an earlier run's prefix cache cannot "
        "help (default: random per run, recorded in locust.json).",
    )
    parser.add_argument(
        "--request-timeout-s",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        env_var="VPROF_REQUEST_TIMEOUT_S",
        include_in_web_ui=True,
        help="Give up on one request after this many seconds (status timeout).",
    )
    parser.add_argument(
        "--rate-rps",
        type=float,
        default=0.0,
        env_var="VPROF_RATE_RPS",
        include_in_web_ui=True,
        help="Open loop: requests per second (overrides the shape; 0: keep).",
    )
    parser.add_argument(
        "--arrival",
        type=str,
        default="",
        env_var="VPROF_ARRIVAL",
        include_in_web_ui=True,
        choices=["", "constant", "poisson", "gamma"],
        help="Open loop: arrival process (empty: the shape's).",
    )
    parser.add_argument(
        "--burstiness",
        type=float,
        default=0.0,
        env_var="VPROF_BURSTINESS",
        include_in_web_ui=True,
        help="Open loop, gamma: 1 = Poisson, <1 burstier, >1 more regular.",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=0,
        env_var="VPROF_MAX_IN_FLIGHT",
        include_in_web_ui=True,
        help="Open loop: at most this many requests at once (0: the shape's).",
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
