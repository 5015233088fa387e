"""The test plan: one Locust test's shared settings, decided once and sent to every process.

When a test starts, the master (or the local runner) decides the seed, the salt, the list of
workers and — for open-loop traffic — an epoch: a wall-clock moment just ahead. It sends them
to every worker in one custom message (a local runner loops the message back to itself), so
every process builds the same request synthesizer and the same arrival schedule, and takes
only its own share: index i belongs to worker k of n iff i % n == k.

A master whose workers may run on other hosts (Locust's ``--master``, not ``--processes``)
also sends what those hosts may lack or hold differently: the workload as plain data
(``vprof.workloads.portable``) and the tokenizer's ``tokenizer.json``. Workers then build
requests from those alone, whatever their own files and options say.
"""

import locust  # noqa: F401  (first: gevent patching)
from locust.runners import (
    STATE_CLEANUP,
    STATE_STOPPED,
    STATE_STOPPING,
    MasterRunner,
    WorkerRunner,
)

import gc
import logging
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import gevent.lock

from vprof.common.clock import wall_now
from vprof.common.errors import VprofError
from vprof.locustfiles.collect import fault, finished_workers, ship_to_master
from vprof.locustfiles.options import effective_shape, opt
from vprof.locustfiles.optiontable import open_loop_lead_s
from vprof.locustfiles.sessionqueue import SessionQueue
from vprof.traffic.shape import TrafficShape, arrival_offsets, partition
from vprof.traffic.slices import STRIDE, SliceSchedule, alternating_arrivals, parse_sides

RUN_MESSAGE = "vprof_run"
DRAIN_MESSAGE = "vprof_drain"
CONFIG_WAIT_S = 30.0

log = logging.getLogger("vprof")


@dataclass
class OpenLoopQueue:
    """This process's share of the open-loop schedule, handed out in order: ``indices`` in
    time order, ``offsets[index]`` each one's intended time from ``epoch``."""

    epoch: float
    offsets: Sequence[float] | Mapping[int, float]
    indices: Sequence[int]
    position: int = 0
    returned: list[int] = field(default_factory=list)

    def take(self) -> tuple[int, float] | None:
        """The next (index, intended wall-clock send time), or ``None`` when all are taken."""
        if self.returned:
            index = self.returned.pop()
        elif self.position < len(self.indices):
            index = self.indices[self.position]
            self.position += 1
        else:
            return None
        return index, self.epoch + self.offsets[index]

    def peek(self) -> tuple[int, float] | None:
        """What ``take`` would return next, without taking it."""
        if self.returned:
            index = self.returned[-1]
        elif self.position < len(self.indices):
            index = self.indices[self.position]
        else:
            return None
        return index, self.epoch + self.offsets[index]

    def give_back(self, index: int) -> None:
        self.returned.append(index)

    def untaken(self) -> list[tuple[int, float]]:
        """Jobs never handed out (with their intended times), in index order."""
        rest = list(self.returned) + list(self.indices[self.position :])
        self.returned, self.position = [], len(self.indices)
        return [(i, self.epoch + self.offsets[i]) for i in sorted(rest)]


@dataclass
class TestPlan:
    """What the master decided for this test (msgpack-safe as a dict)."""

    seed: int
    salt: str
    workers: list[str]
    shape: dict[str, Any] | None
    epoch: float
    started_at: float
    slices: dict[str, Any] | None = None  # alternating servers: a SliceSchedule as a dict
    # a master of workers on other hosts (see ``ships``): the workload as plain data and
    # the bytes of tokenizer.json, which each worker builds its requests from
    workload: dict[str, Any] | None = None
    tokenizer: bytes | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ProcessState:
    """Per-process state of the current test: the config and what it takes to send requests."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.config: TestPlan | None = None
        self.worker_index = 0
        self.workers = 1
        self.queue: OpenLoopQueue | None = None
        # open loop with a conversation or agent workload: sessions over the arrivals in queue
        self.sessions: SessionQueue | None = None
        # alternating servers: which slice loads which side, and each block's synthesizer
        self.slices: SliceSchedule | None = None
        self._block_synths: dict[int, Any] = {}
        self._slice = -1  # closed loop: the slice next_index counts in
        self._counter = 0
        self._synth: Any = None
        self._workload: Any = None
        self._workload_name: str | None = None
        self._shipped_workload: Any = None  # sent by the master (a Workload)
        self._shipped_tokenizer: Path | None = None  # a file holding the master's tokenizer
        self._model: str | None = None
        self._build_lock = gevent.lock.Semaphore()
        self._model_lock = gevent.lock.Semaphore()

    # -- the config ----------------------------------------------------------------------
    def apply(self, data: dict[str, Any]) -> None:
        config = TestPlan(**data)
        runner = self.environment.runner
        me = getattr(runner, "client_id", "local")
        self.workers = max(1, len(config.workers))
        self.worker_index = config.workers.index(me) if me in config.workers else 0
        self._counter = 0
        self._slice = -1
        self._synth = None
        self._block_synths = {}
        self._model = None
        self.queue = None
        self.sessions = None
        self.slices = SliceSchedule.from_dict(config.slices) if config.slices else None
        self._take_shipped(config)
        if config.shape and config.shape.get("kind") == "open-loop":
            shape = TrafficShape(**config.shape)
            if self.slices is not None:
                self.queue = self._alternating_queue(shape, config)
            else:
                offsets = arrival_offsets(shape, config.seed)
                self.queue = OpenLoopQueue(
                    config.epoch, offsets, partition(len(offsets), self.worker_index, self.workers)
                )
            if self.workload().sessions:
                self.sessions = SessionQueue(self.queue, self._start_session)
        self.config = config
        gevent.spawn(self._get_ready)

    def _take_shipped(self, config: TestPlan) -> None:
        """Use the workload and tokenizer the master sent, if it sent them."""
        if config.workload is not None:
            from vprof.workloads.portable import from_portable

            try:
                self._shipped_workload = from_portable(config.workload)
            except VprofError as exc:
                self._shipped_workload = exc  # raised by workload(): every request says so
        if config.tokenizer is not None:
            self._shipped_tokenizer = _keep_tokenizer(config.tokenizer)

    def _alternating_queue(self, shape: TrafficShape, config: TestPlan) -> OpenLoopQueue:
        """Open loop over alternating slices: each block's arrivals, repeated in each of its
        slices; this process takes every ``workers``-th arrival."""
        assert self.slices is not None
        slices = max(1, round(shape.duration_s / self.slices.slice_s))
        arrivals = alternating_arrivals(shape, config.seed, self.slices, slices)
        mine = arrivals[self.worker_index :: self.workers]
        return OpenLoopQueue(self.slices.epoch, dict(mine), [i for i, _ in mine])

    def _get_ready(self) -> None:
        """Build what requests need (tokenizer, synthesizer, the served model's name) as soon
        as the settings arrive, so the first users do not pay for it when their requests are
        due. A failure is left for the requests to report, one error record each."""
        try:
            self.synthesizer()
            endpoint = str(opt(self.environment, "endpoint", "") or "") or self.workload().endpoint
            if endpoint != "generate" and self.environment.host:
                self.model(str(self.environment.host))
        except Exception as exc:  # noqa: BLE001
            log.debug("vprof: preparing requests failed (each request will say so): %s", exc)
        # What start-up built (modules, tokenizer, prefixes) lives on: moved out of the
        # collector's sight, a full collection no longer stalls every stream.
        gc.freeze()

    def wait_config(self, stopping: Any = lambda: False) -> TestPlan | None:
        """The current test's settings; ``None`` if ``stopping()`` turns true first."""
        deadline = wall_now() + CONFIG_WAIT_S
        while self.config is None:
            if stopping():
                return None
            if wall_now() > deadline:
                raise VprofError(
                    "no run settings arrived from the Locust master",
                    hint="is the master running vprof's locustfile too?",
                )
            gevent.sleep(0.01)
        return self.config

    def _start_session(self, session_id: int) -> Any:
        from vprof.workloads.sessions import start_session

        return start_session(self.synthesizer(), session_id)

    @property
    def open_loop(self) -> bool:
        return self.queue is not None

    def next_index(self) -> int:
        """Closed loop: the next request index of this process (disjoint across processes).
        With alternating slices the count starts again in every slice, from the slice's own
        indices, so every slice of a block sends the same requests in the same order."""
        base = 0
        if self.slices is not None:
            k = max(0, self.slices.slice_at(wall_now()))
            if k != self._slice:
                self._slice, self._counter = k, 0
            base = k * STRIDE
        index = base + self.worker_index + self.workers * self._counter
        self._counter += 1
        return index

    def slice_of(self, index: int) -> int:
        """The slice request ``index`` belongs to (-1 without alternating slices)."""
        return index // STRIDE if self.slices is not None else -1

    def plan(self, index: int) -> Any:
        """The plan of single request ``index``: with alternating slices, its block's request
        (the same in every slice of the block) in its block's salt."""
        if self.slices is None:
            return self.synthesizer().plan(index)
        block = self.slices.block_of(index // STRIDE)
        synth = self._block_synths.get(block)
        if synth is None:
            base = self.synthesizer()
            synth = base.resalted(self.slices.salt(base.salt, index // STRIDE))
            self._block_synths = {block: synth}  # earlier blocks are over
        return synth.plan(self.slices.plan_index(index))

    # -- what requests need ----------------------------------------------------------------
    def workload(self) -> Any:
        shipped = self._shipped_workload
        if isinstance(shipped, VprofError):
            raise shipped
        if shipped is not None:
            return shipped
        if self._workload is None or self._workload_name != opt(self.environment, "workload"):
            from vprof.workloads import get_workload

            self._workload_name = opt(self.environment, "workload")
            self._workload = get_workload(self._workload_name)
        return self._workload

    def synthesizer(self) -> Any:
        """The request synthesizer for this test (built once per process, on first use)."""
        with self._build_lock:
            if self._synth is None:
                from vprof.workloads import RequestSynthesizer, load_tokenizer

                config = self.wait_config()
                assert config is not None
                path = self._shipped_tokenizer or tokenizer_path(self.environment)
                tokenizer = load_tokenizer(path)
                self._synth = RequestSynthesizer(
                    self.workload(), tokenizer, seed=config.seed, salt=config.salt
                )
            return self._synth

    def model(self, host: str) -> str:
        """The served model name: ``--model``, or the first one ``/v1/models`` lists."""
        with self._model_lock:  # one lookup, however many users want it at once
            if self._model is None:
                self._model = str(opt(self.environment, "model", "") or "") or _ask_model(host)
            return self._model


def tokenizer_path(environment: Any) -> Path:
    given = str(opt(environment, "tokenizer", "") or "")
    if given:
        return Path(given)
    from vprof.tinymodel import ensure_tiny_model

    return ensure_tiny_model()


def _tokenizer_json(environment: Any) -> bytes:
    """The bytes of the tokenizer this process builds prompts with (its tokenizer.json)."""
    path = tokenizer_path(environment)
    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        return file.read_bytes()
    except OSError as exc:
        raise VprofError(f"cannot read the tokenizer {file}: {exc.strerror}") from None


def _keep_tokenizer(data: bytes) -> Path:
    """Worker: the master's tokenizer.json as a file of this host, named by its content, so
    every worker and test of a host shares one copy (one that is killed leaves nothing new)."""
    import hashlib

    path = (
        Path(tempfile.gettempdir())
        / f"vprof-tokenizer-{hashlib.sha256(data).hexdigest()[:16]}.json"
    )
    if not path.is_file() or path.stat().st_size != len(data):
        fd, name = tempfile.mkstemp(prefix=".vprof-tokenizer-", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(name, path)  # whole or not at all, whoever writes it at the same moment
    return path


def ships(environment: Any) -> bool:
    """True on a master whose workers may be on other hosts (``--master``): it sends them the
    workload and tokenizer. ``--processes`` forks workers that share this host's files."""
    return isinstance(environment.runner, MasterRunner) and not opt(environment, "processes", 0)


def check_shipping(environment: Any) -> None:
    """Master of remote workers: refuse, before the test, a workload that cannot be sent."""
    if ships(environment):
        from vprof.workloads.portable import to_portable

        to_portable(state(environment).workload())


def _ask_model(host: str) -> str:
    import requests

    url = host.rstrip("/") + "/v1/models"
    try:
        response = requests.get(url, timeout=10)
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (requests.RequestException, KeyError, IndexError, ValueError) as exc:
        raise VprofError(
            f"could not ask {url} for the served model: {exc}", hint="pass --model NAME"
        ) from None


def state(environment: Any) -> ProcessState:
    """This process's :class:`ProcessState` (created on first use)."""
    st = getattr(environment, "_vprof_state", None)
    if st is None:
        st = ProcessState(environment)
        environment._vprof_state = st
    return st


def decide(environment: Any) -> TestPlan:
    """Master/local: pick the seed, salt, workers and epoch for a test that is starting."""
    runner = environment.runner
    shape = effective_shape(environment)
    seed = int(opt(environment, "seed", -1))
    if seed < 0:
        seed = int(state(environment).workload().seed)
    salt = str(opt(environment, "salt", "") or "") or secrets.token_hex(4)
    if isinstance(runner, MasterRunner):
        clients = runner.clients.ready + runner.clients.spawning + runner.clients.running
        workers = sorted(c.id for c in clients)
    else:
        workers = ["local"]
    shipped: dict[str, Any] = {}
    if ships(environment):
        from vprof.workloads.portable import to_portable

        shipped = {
            "workload": to_portable(state(environment).workload()),
            "tokenizer": _tokenizer_json(environment),
        }
    now = wall_now()
    lead_s = open_loop_lead_s(isinstance(runner, MasterRunner))
    epoch = now + lead_s if shape is not None and shape.open_loop else now
    return TestPlan(
        seed=seed,
        salt=salt,
        workers=workers,
        shape=shape.to_dict() if shape else None,
        epoch=epoch,
        started_at=now,
        slices=_slices(environment, epoch),
        **shipped,
    )


def check_slices(environment: Any) -> None:
    """Refuse alternating options that cannot make a schedule, before the test starts; and
    workloads and shapes alternation does not handle (sessions span sides, a trace has its own
    clock)."""
    if _slices(environment, 0.0) is None:
        return
    shape = effective_shape(environment)
    if shape is not None and shape.open_loop and shape.process == "trace":
        raise VprofError("a trace's own times cannot alternate between servers", key="--sides")
    if state(environment).workload().sessions:
        raise VprofError(
            "conversations and agent sessions cannot alternate between servers (a session's "
            "later turns belong to the server that holds its context)",
            key="--sides",
        )


def _slices(environment: Any, epoch: float) -> dict[str, Any] | None:
    """Alternating servers (``--sides``): the slice schedule, from the test's epoch."""
    hosts = str(opt(environment, "hosts", "") or "")
    sides = parse_sides(str(opt(environment, "sides", "") or ""), len(hosts.split(",")))
    if not sides:
        return None
    try:
        schedule = SliceSchedule(
            epoch=epoch,
            slice_s=float(opt(environment, "slice_s", 0.0)),
            warmup_s=float(opt(environment, "slice_warmup_s", 0.0)),
            sides=max(sides) + 1,
        )
    except ValueError as exc:
        hint = "e.g. --slice-s 20 --slice-warmup-s 5"
        raise VprofError(str(exc), key="--slice-s", hint=hint) from None
    return schedule.to_dict()


def install(environment: Any) -> None:
    """Register vprof's messages on this runner (call from ``init``)."""
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        return  # the master sends the run settings; it runs no users

    def _on_run(environment: Any, msg: Any, **_: Any) -> None:
        state(environment).apply(msg.data)

    runner.register_message(RUN_MESSAGE, _on_run)
    if isinstance(runner, WorkerRunner):
        runner.register_message(DRAIN_MESSAGE, _on_drain, concurrent=True)


def _on_drain(environment: Any, msg: Any, **_: Any) -> None:
    """Worker: stop gracefully; users finish their request (up to the stop timeout) and
    ``test_stop`` ships the final records."""
    runner = environment.runner
    if runner.state in (STATE_STOPPING, STATE_CLEANUP):
        return  # already stopping: its test_stop will ship the final records
    if runner.state == STATE_STOPPED:
        ship_to_master(environment)  # nothing in flight; say so
        return
    runner.stop()


def drain_workers(environment: Any) -> None:
    """Master: have every worker finish its in-flight requests and ship its records; wait.

    Headless Locust ends with ``quit()``, which gives workers half a second: streams still in
    flight, and their records, would be lost. (A plain ``stop()`` would work but makes each
    worker sleep for the whole stop timeout afterwards.)
    """
    runner = environment.runner
    if not isinstance(runner, MasterRunner) or fault(environment):
        return  # a test stopped for a fault waits for nothing
    workers = {c.id for c in runner.clients.all}
    if not workers:
        return
    done = finished_workers(environment)
    runner.send_message(DRAIN_MESSAGE, None)
    deadline = wall_now() + float(environment.stop_timeout or 0) + 30.0
    while not workers <= done and wall_now() < deadline:
        # A worker that quit has shipped its final records first; one that died never will.
        workers &= {c.id for c in runner.clients.all} | done
        gevent.sleep(0.1)
    if not workers <= done:
        log.warning("vprof: %d worker(s) did not finish in time", len(workers - done))


def broadcast(environment: Any, config: TestPlan) -> None:
    """Send the run settings to every worker (or loop them back on a local runner)."""
    environment.runner.send_message(RUN_MESSAGE, config.to_dict())


def is_worker(environment: Any) -> bool:
    return isinstance(environment.runner, WorkerRunner)
