"""What a bench is asked to run (``BenchSpec``) and what became of each of its cells."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vprof.common.errors import RunError, WorkloadError
from vprof.locustfiles.optiontable import (
    CUT_IN_FLIGHT_S,
    DEFAULT_BALANCE,
    DEFAULT_ON_WORKER_LOSS,
    DEFAULT_WORKLOAD,
)
from vprof.records.rundir import RunDir, RunState
from vprof.runs.sampler import DEFAULT_INTERVAL_S

if TYPE_CHECKING:
    from vprof.traffic import TrafficShape


@dataclass(frozen=True)
class Tick:
    """Where a measuring run is, said about once a second: a live display draws it, a log
    prints ``str(tick)`` now and then. ``place`` is the run's (number, of) in the command's
    matrix when the command knows it; ``done`` and ``failed`` count the load generator's
    answered and failed requests so far (None: not known yet). A ``final`` tick says where the
    run ended when its load did: a display fills its bar, a log prints nothing more (the
    run's closing line says it)."""

    run: str
    elapsed_s: float
    total_s: float = 0.0  # 0: the run ends when its work does (a trace, a ladder)
    done: int | None = None
    failed: int | None = None
    detail: str = ""  # the server's side, or an alternating run's block
    place: tuple[int, int] | None = None
    final: bool = False

    @property
    def where(self) -> str:
        """Its place, ``[k/n]``, or nothing."""
        return f"[{self.place[0]}/{self.place[1]}]" if self.place else ""

    @property
    def of(self) -> str:
        """``/length`` when the run has one."""
        return f"/{self.total_s:.0f}" if self.total_s else ""

    @property
    def counts(self) -> str:
        """The requests answered and failed so far, when known."""
        return "" if self.done is None else f"  answered {self.done}  failed {self.failed or 0}"

    def __str__(self) -> str:
        where = f"{self.where} " if self.place else ""
        return (
            f"  {where}{self.run[:48]:48} {self.elapsed_s:5.0f}{self.of} s{self.counts}  "
            f"{self.detail}"
        )


# What a run says as it goes: a line (str) or, while it measures, a Tick.
Progress = Callable[[str | Tick], None]


def placing(
    say: Progress, place: Callable[[tuple[int, int] | None], tuple[int, int] | None]
) -> Progress:
    """``say``, with each Tick's place replaced by ``place(its place)``; lines pass as they are."""

    def placed(message: str | Tick) -> None:
        say(replace(message, place=place(message.place)) if isinstance(message, Tick) else message)

    return placed


def nested(say: Progress, index: int, count: int) -> Progress:
    """``say`` for the ``index``-th (from 0) of ``count`` like benches run one after another
    (a ladder's rungs): a Tick's place (k of n) in its bench becomes its place in all of
    them, ``index`` × n + k of ``count`` × n."""
    return placing(say, lambda p: (index * p[1] + p[0], count * p[1]) if p else p)


def unplaced(say: Progress) -> Progress:
    """``say`` for benches whose number is not known beforehand (a tune's trials): Ticks
    without a place, so nothing claims a count or a time to go."""
    return placing(say, lambda _: None)


# Outcomes of a bench cell beyond a run's own states: completed earlier, or never started.
SKIPPED = "skipped"
NOT_STARTED = "not-started"
FINISHED = (RunState.COMPLETED.value, SKIPPED)  # cells whose run folder holds a good run
# cells whose run measured something to show: good runs, and runs that lost a Locust worker
# (--on-worker-loss continue is asked for to see them; their summaries say so on top)
MEASURED = (*FINISHED, RunState.DEGRADED.value)


@dataclass(frozen=True)
class BenchSpec:
    """What to run; the CLI builds one from its options.

    ``traffic`` holds shape preset names, YAML paths, or :class:`TrafficShape` objects (a
    sweep's load levels). ``urls`` are servers already running (``--url``, repeatable): with
    more than one, every run spreads its requests over them as ``balance`` says. ``url`` is
    the first of them (``None``: vprof launches each profile); give either.
    """

    traffic: tuple[str | TrafficShape, ...]
    workload: str = DEFAULT_WORKLOAD
    out_dir: Path = Path("vprof-runs")
    url: str | None = None  # measure a server that is already running (the first of urls)
    urls: tuple[str, ...] = ()  # several servers (replicas) of one deployment
    balance: str = DEFAULT_BALANCE  # how requests are spread over urls: locustfiles.balance
    model_overridden: bool = False
    seed: int = 0
    reuse_prefix_cache: bool = False  # False: a fresh salt per run keeps warm caches out
    on_failure: str = "continue"  # "continue" | "stop"
    processes: int = 1
    on_worker_loss: str = DEFAULT_ON_WORKER_LOSS  # a Locust worker lost: stop | continue
    # Locust workers on other hosts (vprof worker --master ADDR) that each run waits for,
    # and the HOST:PORT its master binds for them (runs.distributed); instead of processes
    workers_expected: int = 0
    master_bind: str = ""
    # certify the client first (vprof calibrate) at each traffic shape's planned load, and
    # keep the certificate in each of its run folders
    calibrate: bool = False
    health_timeout_s: float = 900.0
    metrics_interval_s: float = DEFAULT_INTERVAL_S  # /metrics gauges; backs off when slow
    metrics: bool = True  # False: no /metrics scrape at all
    tokenizer: str | None = None
    fetch_tokenizer: bool = False  # download the model's tokenizer when no local copy has it
    slo: str | None = None
    repeat: int = 1  # runs per profile × shape
    order: str = "interleaved"  # of the (profile, repeat) blocks: see runs.order
    fresh_server: bool = False  # restart the server between repeats of one profile
    # a ladder's levels: answers in flight this long after a run's end are cut off (cancelled)
    # and the server is let go idle before the next run; None: every answer is waited for
    cut_in_flight_s: float | None = None
    extra_meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # What can be checked without a server is checked here, before anything runs: a bad
        # SLO must not cost a whole run, and an empty --url must not become a local launch.
        from vprof.analysis.slo import parse_slo
        from vprof.locustfiles.balance import check_policy, check_replicas

        urls = tuple(self.urls) or ((self.url,) if self.url is not None else ())
        if self.urls and self.url is not None and self.url != self.urls[0]:
            raise ValueError("BenchSpec: give url or urls, not both")  # a caller's bug
        object.__setattr__(self, "urls", check_replicas(urls))
        object.__setattr__(self, "url", self.urls[0] if self.urls else None)
        check_policy(self.balance)
        if self.fresh_server and self.urls:
            raise RunError(
                "--fresh-server restarts the server between repeats, but vprof did not start "
                f"the server at --url {self.urls[0]} and cannot restart it",
                key="--fresh-server",
                hint="leave out --fresh-server with --url (restart the server yourself "
                "between runs), or leave out --url to let vprof launch the profile",
            )
        if self.slo is not None:
            parse_slo(self.slo)
        self._check_distributed()
        if self.tokenizer is not None and not Path(self.tokenizer).expanduser().exists():
            raise WorkloadError(
                f"no such file or folder: {self.tokenizer}",
                key="--tokenizer",
                hint="give a model folder that holds tokenizer.json, or the file itself",
            )

    def _check_distributed(self) -> None:
        from vprof.runs.distributed import parse_address

        if bool(self.workers_expected) != bool(self.master_bind):
            given, missing = (
                ("--workers-expected", "--master-bind")
                if self.workers_expected
                else ("--master-bind", "--workers-expected")
            )
            raise RunError(
                f"{given} needs {missing}: the master waits for workers at an address",
                key=missing,
                hint="e.g. --workers-expected 2 --master-bind 0.0.0.0:5557",
            )
        if self.workers_expected and self.calibrate:
            raise RunError(
                "--calibrate certifies this host's client; with --workers-expected the load "
                "comes from other hosts",
                key="--calibrate",
                hint="run `vprof calibrate` on each load host instead",
            )
        if self.workers_expected:
            parse_address(self.master_bind, "--master-bind")
            if self.processes > 1:
                raise RunError(
                    "--processes forks workers on this host; with --workers-expected the "
                    "workers are `vprof worker` processes that join the master",
                    key="--processes",
                    hint="give each load host's processes to its `vprof worker --processes N`",
                )


@dataclass(frozen=True)
class RunOutcome:
    run: RunDir
    profile: str
    traffic: str
    state: str  # a RunState value, or skipped | not-started
    reason: str = ""
    repeat: int = 1

    @property
    def finished(self) -> bool:
        """True when the cell's run folder holds a completed run (now or from before)."""
        return self.state in FINISHED

    @property
    def measured(self) -> bool:
        """True when the cell's run folder holds a run worth summarising (see ``MEASURED``)."""
        return self.state in MEASURED


def level_cut_s(slo: str | None) -> float:
    """How long a level of a ladder (sweep load, tune) waits for answers in flight after its
    end: ``CUT_IN_FLIGHT_S``, or the SLO's longest TTFT or E2E threshold when that is longer.
    A request cut off sooner, its first token not yet in, is neither met nor missed and its
    percentile check leaves it out: those are the slowest of an overloaded level, and a level
    judged without them passes where it failed (a tune's claim came out 10 % high). Waited
    for this long, every answer not begun is older than the threshold: certainly a miss."""
    if not slo:
        return CUT_IN_FLIGHT_S
    from vprof.analysis.slo import parse_slo

    thresholds = [t.threshold_ms for t in parse_slo(slo).targets if t.metric in ("ttft", "e2el")]
    return max([CUT_IN_FLIGHT_S, *(ms / 1000.0 for ms in thresholds)])
