"""The test plan: one Locust test's shared settings, decided once and sent to every process.

When a test starts, the master (or the local runner) decides the seed, the salt, the list of
workers and — for open-loop traffic — an epoch: a wall-clock moment just ahead. It sends them
to every worker in one custom message (a local runner loops the message back to itself), so
every process builds the same request synthesizer and the same arrival schedule, and takes
only its own share: index i belongs to worker k of n iff i % n == k.
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
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import gevent.lock

from vprof.common.clock import wall_now
from vprof.common.errors import VprofError
from vprof.locustfiles.collect import fault, finished_workers, ship_to_master
from vprof.locustfiles.options import effective_shape, opt
from vprof.locustfiles.sessionqueue import SessionQueue
from vprof.traffic.shape import TrafficShape, arrival_offsets, partition

RUN_MESSAGE = "vprof_run"
DRAIN_MESSAGE = "vprof_drain"
OPEN_LOOP_LEAD_S = 2.0  # the epoch is this far ahead so every worker has the schedule in time
CONFIG_WAIT_S = 30.0

log = logging.getLogger("vprof")


@dataclass
class OpenLoopQueue:
    """This process's share of the open-loop schedule, handed out in order."""

    epoch: float
    offsets: list[float]
    indices: range
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
        self._counter = 0
        self._synth: Any = None
        self._workload: Any = None
        self._workload_name: str | None = None
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
        self._synth = None
        self._model = None
        self.queue = None
        self.sessions = None
        if config.shape and config.shape.get("kind") == "open-loop":
            shape = TrafficShape(**config.shape)
            offsets = arrival_offsets(shape, config.seed)
            self.queue = OpenLoopQueue(
                config.epoch, offsets, partition(len(offsets), self.worker_index, self.workers)
            )
            if self.workload().sessions:
                self.sessions = SessionQueue(self.queue, self._start_session)
        self.config = config
        gevent.spawn(self._get_ready)

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
        """Closed loop: the next request index of this process (disjoint across processes)."""
        index = self.worker_index + self.workers * self._counter
        self._counter += 1
        return index

    # -- what requests need ----------------------------------------------------------------
    def workload(self) -> Any:
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
                tokenizer = load_tokenizer(tokenizer_path(self.environment))
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
    now = wall_now()
    epoch = now + OPEN_LOOP_LEAD_S if shape is not None and shape.open_loop else now
    return TestPlan(
        seed=seed,
        salt=salt,
        workers=workers,
        shape=shape.to_dict() if shape else None,
        epoch=epoch,
        started_at=now,
    )


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
