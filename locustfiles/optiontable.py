"""The load generator's options, declared once and free of Locust.

Both sides of the process boundary are made from this table: the Locust side registers each
option on Locust's parser (``vprof.locustfiles.options``), and the parent builds the argv it
runs Locust with (``vprof.runs.loadgen``), so a flag, its type and its default cannot drift
apart. Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_WORKLOAD = "chat"
DEFAULT_REQUEST_TIMEOUT_S = 300.0
# How long a test's end waits for streams in flight (Locust's --stop-timeout, whose own default
# of 0 would cut every answer off mid-stream).
STOP_TIMEOUT_S = 60
ENDPOINT_CHOICES = ("", "completions", "chat", "generate")
ARRIVAL_CHOICES = ("", "constant", "poisson", "gamma")
# A level of a ladder (sweep load, tune) or an alternating run ends without waiting for every
# answer: what is still in flight this long after the shape's end is cut off (recorded as
# cancelled), so the next level starts on a server with nothing running.
CUT_IN_FLIGHT_S = 0.25
# Open loop: the schedule's epoch is this far after the test's start, so every worker has the
# schedule in time (a level that cuts its end takes it out of its warm-up: runs.measure). One
# process alone has its schedule at once and needs only its first users up (100 a second).
OPEN_LOOP_LEAD_S = 2.0
LOCAL_OPEN_LOOP_LEAD_S = 0.5


def open_loop_lead_s(distributed: bool) -> float:
    """The lead of an open-loop test run by a master and its workers, or by one process."""
    return OPEN_LOOP_LEAD_S if distributed else LOCAL_OPEN_LOOP_LEAD_S


# How much longer than its traffic shape (and the stop timeout) a load generator may take
# before its parent stops it as hung.
FINISH_GRACE_S = 30.0
# What the load generator tells its parent besides its exit code. A line of its output that
# starts with FAULT_MARK says why it stopped the test at once (it then exits with
# FAULT_EXIT_CODE); one that starts with EVENT_MARK is news for the person watching (a worker
# lost). PARENT_PID_ENV names the process whose death stops the load (vprof's own pid).
FAULT_MARK = "vprof-fault: "
EVENT_MARK = "vprof-event: "
FAULT_EXIT_CODE = 3
PARENT_PID_ENV = "VPROF_PARENT_PID"
# How requests are spread over several servers (``--hosts``): see ``vprof.locustfiles.balance``.
BALANCE_CHOICES = ("least-outstanding", "round-robin")
DEFAULT_BALANCE = "least-outstanding"
# What the master does when a worker is lost mid-test (``vprof.locustfiles.workerloss``): end
# the test (a measurement with part of its users is not the one asked for), or go on with the
# workers left, the lost one's users spread over them.
WORKER_LOSS_CHOICES = ("stop", "continue")
DEFAULT_ON_WORKER_LOSS = "stop"
# Alternating servers (--sides): how long each side gets the load, and its unmeasured start.
DEFAULT_SLICE_S = 20.0
DEFAULT_SLICE_WARMUP_S = 5.0


@dataclass(frozen=True)
class LoadOption:
    """One ``--flag`` of vprof's locustfile; ``dest`` is the flag without dashes, underscored."""

    flag: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env_var(self) -> str:
        return "VPROF_" + self.dest.upper()


OPTIONS: tuple[LoadOption, ...] = (
    LoadOption(
        "--workload",
        str,
        DEFAULT_WORKLOAD,
        "Workload preset name or YAML path (see `vprof workloads`).",
    ),
    LoadOption(
        "--traffic",
        str,
        "",
        "Traffic shape preset, YAML path or JSON object (see `vprof traffic`); "
        "empty: -u/-r/-t decide.",
    ),
    LoadOption(
        "--run-dir",
        str,
        "",
        "Folder for records.arrow, locust.json, loadgen.jsonl (default ./vprof-runs/<time>).",
    ),
    LoadOption(
        "--tokenizer", str, "", "Model folder or tokenizer.json (default: vprof's tiny model)."
    ),
    LoadOption("--model", str, "", "Served model name (default: the first one /v1/models lists)."),
    LoadOption(
        "--endpoint",
        str,
        "",
        "Override the workload's endpoint (generate: legacy /generate).",
        ENDPOINT_CHOICES,
    ),
    LoadOption("--seed", int, -1, "Seed for prompts and arrivals (-1: the workload's own seed)."),
    LoadOption(
        "--salt",
        str,
        "",
        "Changes all prompt text so an earlier run's prefix cache cannot help "
        "(default: random per run, recorded in locust.json).",
    ),
    LoadOption(
        "--request-id-prefix",
        str,
        "",
        "Send each request's id (its record's request_id) in an X-Request-Id header, after "
        "this prefix, so a server's own log can be matched to the records (empty: no header).",
    ),
    LoadOption(
        "--request-timeout-s",
        float,
        DEFAULT_REQUEST_TIMEOUT_S,
        "Give up on one request after this many seconds (status timeout).",
    ),
    LoadOption(
        "--rate-rps", float, 0.0, "Open loop: requests per second (overrides the shape; 0: keep)."
    ),
    LoadOption(
        "--arrival", str, "", "Open loop: arrival process (empty: the shape's).", ARRIVAL_CHOICES
    ),
    LoadOption(
        "--burstiness", float, 0.0, "Open loop, gamma: 1 = Poisson, <1 burstier, >1 more regular."
    ),
    LoadOption(
        "--max-in-flight", int, 0, "Open loop: at most this many requests at once (0: the shape's)."
    ),
    LoadOption(
        "--hosts",
        str,
        "",
        "Several servers (replicas) to spread requests over, comma-separated base URLs "
        "(replaces -H for requests; empty: -H alone).",
    ),
    LoadOption(
        "--balance",
        str,
        DEFAULT_BALANCE,
        "With --hosts: the next request goes to the replica with the fewest in flight from "
        "this process (least-outstanding) or to each in turn (round-robin).",
        BALANCE_CHOICES,
    ),
    LoadOption(
        "--sides",
        str,
        "",
        "Alternate the load between groups of --hosts: the side of each host, comma-separated "
        "(e.g. 0,1); empty: no alternation.",
    ),
    LoadOption(
        "--slice-s",
        float,
        DEFAULT_SLICE_S,
        "With --sides: seconds each side gets the load in turn.",
    ),
    LoadOption(
        "--slice-warmup-s",
        float,
        DEFAULT_SLICE_WARMUP_S,
        "With --sides: the first seconds of each slice are not measured (the last side drains).",
    ),
    LoadOption(
        "--cut-in-flight-s",
        float,
        -1.0,
        "At the test's end, cut off answers still in flight after this many seconds (recorded "
        "as cancelled) instead of waiting up to the stop timeout for them; -1: wait.",
    ),
    LoadOption(
        "--on-worker-loss",
        str,
        DEFAULT_ON_WORKER_LOSS,
        "When a worker is lost mid-test: stop the test, or continue with the workers left "
        "(its users are spread over them). Either way the loss is recorded in locust.json.",
        WORKER_LOSS_CHOICES,
    ),
)
BY_DEST: dict[str, LoadOption] = {option.dest: option for option in OPTIONS}


def option_argv(values: Mapping[str, Any]) -> list[str]:
    """``--flag value`` for each option in ``values`` (by ``dest``) that differs from its default.

    An unknown name is a bug in the caller, not a user error: it raises ``KeyError``.
    """
    argv: list[str] = []
    for dest, value in values.items():
        option = BY_DEST[dest]
        if value is None or value == option.default:
            continue
        argv += [option.flag, str(option.type(value))]
    return argv
