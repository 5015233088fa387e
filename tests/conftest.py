"""Shared fixtures: the embedded tiny model, ONE real vLLM CPU server per test session, and
one real two-profile alternating bench (it launches its own two servers side by side) that
several tests read.

Fixture names are a contract other test files rely on: ``tiny_model``, ``vllm_server`` and
``ab_bench``.
Set ``VPROF_TEST_VLLM_URL`` to reuse a tiny-model server that is already running (served as
``tiny``) instead of starting one; set ``VPROF_TEST_PORTS=LO-HI`` to choose its port from a range.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import worker_port

from vprof.server.process import ServerProcess, free_port
from vprof.server.start import CPU_SERVER_NICENESS
from vprof.tinymodel.build import TINY_MODEL_DTYPE, TINY_MODEL_NAME, ensure_tiny_model

# Python caches compiled modules (and pytest each test module's assertion-rewritten code) in
# __pycache__ unless bytecode writing is off, as PYTHONDONTWRITEBYTECODE turns it off on some
# machines: there every xdist worker rewrote all ~90 test modules at every run (3.3 CPU-s each,
# half the fast tier's collection). The suite writes its cache as Python does by default.
sys.dont_write_bytecode = False

# Generous: start-up is ~36 s on an idle 2-core machine, much longer when other work shares it.
_HEALTH_TIMEOUT_S = float(os.environ.get("VPROF_TEST_HEALTH_TIMEOUT_S", "420"))
VLLM_TEST_MAX_MODEL_LEN = 4096


@dataclass(frozen=True)
class VllmServer:
    """A running vLLM server on the tiny model."""

    url: str  # e.g. "http://127.0.0.1:18000"
    model: str  # the served model name to put in requests ("tiny")
    model_dir: Path  # the tiny model folder, with tokenizer.json
    log_path: Path | None  # None when reusing an external server
    max_model_len: int = VLLM_TEST_MAX_MODEL_LEN


def _test_port() -> int:
    spec = os.environ.get("VPROF_TEST_PORTS")
    if spec:
        lo, _, hi = spec.partition("-")
        return free_port(lo=int(lo), hi=int(hi or lo))
    return free_port()


def vllm_test_argv(model_dir: Path, port: int) -> list[str]:
    """The command the shared test server runs (the module form: the CPU build needs it)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        TINY_MODEL_NAME,
        "--load-format",
        "dummy",
        "--dtype",
        TINY_MODEL_DTYPE,  # bfloat16 can die with SIGILL in the AMX attention kernel here
        "--enforce-eager",
        "--max-model-len",
        str(VLLM_TEST_MAX_MODEL_LEN),
        # usage.prompt_tokens_details.cached_tokens, for prefix-cache measurements
        "--enable-prompt-tokens-details",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


# -- one worker for what measures time -------------------------------------------------------
#
# `pytest` runs on four workers (pytest-xdist, ``-n 4`` in pyproject's addopts) on two cores.
# The modules that measure latency, rates or lag (``QUIET``: real vLLM or not) form one unit of
# work that one worker runs in this order, alone: its first measuring test (marked e2e or
# browser; unit tests in those modules need no quiet cores) waits until every other worker
# has run its last test (a marker file each worker leaves). The same worker starts the shared
# vLLM server with its first test and, before it waits, runs the tests that use that server
# but measure nothing a busy core can upset (``SHARED_SERVER``: refusals, counts), so one
# server start serves both. The modules that start vLLM servers of their own (``OWN_SERVERS``)
# are a unit each, handed out right after the quiet group, so their server starts (a minute
# each beside the unit tests) run from the start side by side instead of one after another at
# the end (the second module once ran alone for the last 47 s of the first part). Everything
# else runs on the other workers, a module at a time (so module fixtures are built once).
# Three workers keep two cores busy while the unit tests' Locust runs wait on their traffic.
# (xdist's own ``xdist_group`` marks are not honoured under pytest 9: its loadgroup mode
# renames node ids through an attribute pytest no longer reads.)
QUIET = (
    "test_alternate_e2e",
    "test_report_real_e2e",
    "test_verdicts_e2e",
    "test_locust_e2e",
    "test_sessions_e2e",
    "test_trace_e2e",
    "test_tune_e2e",
    "test_replicas",
    "test_alternate_emulated",
    "test_emulator_locust",
    "test_loadgen_health",
    "test_calibrate_timing",
    "test_webui_browser",  # the live header's rate against the records' (two workers)
)
# Start vLLM servers of their own and measure nothing a busy core can upset (a killed server,
# Ctrl-C, a sweep's rungs): a unit each, beside the unit tests.
OWN_SERVERS = ("test_bench_e2e", "test_sweep_e2e")
# Use the shared server and measure nothing a busy core can upset: the quiet group's worker
# runs them first, beside the others, before it waits for them.
SHARED_SERVER = (
    "test_bench_url_e2e",
    "test_replicas_e2e",
    "test_locust_counts_e2e",
    "test_server_e2e",
    "test_hostile_runs_e2e",
    "test_workloads_e2e",
)
BUSY_OK = (*OWN_SERVERS, *SHARED_SERVER, "test_report_browser", "test_webui_local_browser")
# Slow (marked e2e) but starting neither vLLM nor Chromium and measuring nothing.
BESIDE_UNITS = ("test_dependencies", "test_distributed", "test_faults")
# The unit modules that take longest (15-60 s each in a suite run), handed out first so that
# short ones fill the workers' ends (in collection order the fast tier idled its last 25 s on
# one long module).
SLOW_UNITS = (
    "test_locust_emulated",
    "test_sessions",
    "test_stale_results",
    "test_json_outputs",
    "test_tune_cli",
    "test_locust_outputs",
    "test_report",
    "test_runs_unit",
)
# The unit modules that import vLLM's own code in the test process (its parsers, its protocol
# classes: ~10 CPU-s an import, compiling nothing twice): one unit, so one worker imports it once.
VLLM_CODE = ("test_emulator", "test_flag_table", "test_registry_validate", "test_render_safety")
QUIET_GROUP, OWN_GROUP, VLLM_GROUP = "quiet", "own-servers", "vllm-code"
# Outside the quiet group, vLLM servers run beside other servers and tests on two cores, and
# OpenMP's threads spin at every barrier for a thread that is not running (two servers of two
# threads each slowed each other ×20, see README's placement): there the servers' OpenMP
# threads sleep while they wait (``OMP_WAIT_POLICY=PASSIVE``, inherited by every process a
# test starts). The quiet group measures the servers vprof starts as it starts them, unchanged;
# the shared server always sleeps while it waits (it serves both parts).
_OMP_WAIT = "OMP_WAIT_POLICY"
_OMP_WAIT_GIVEN = os.environ.get(_OMP_WAIT)
_QUIET_WAIT_S = 1800.0


def _module(nodeid: str) -> str:
    return Path(nodeid.split("::", 1)[0]).stem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The quiet worker's shared-server modules, then the quiet modules (in :data:`QUIET`'s
    order), then the ones that start vLLM or Chromium beside the unit tests, then the unit
    tests, the slowest first (stable within a module); a test that starts vLLM or Chromium
    outside those lists is a mistake of the suite's, said at once."""
    placed = (*SHARED_SERVER, *QUIET, *BUSY_OK, *BESIDE_UNITS)
    ordered = (*placed, *VLLM_CODE, *SLOW_UNITS)
    for item in items:
        real = item.get_closest_marker("e2e") or item.get_closest_marker("browser")
        if real and _module(item.nodeid) not in placed:
            raise pytest.UsageError(
                f"{item.nodeid} starts vLLM or Chromium: add its module to QUIET or BUSY_OK in "
                "tests/conftest.py"
            )

    def rank(item: pytest.Item) -> int:
        module = _module(item.nodeid)
        return ordered.index(module) if module in ordered else len(ordered)

    items.sort(key=rank)


def _done_marker(worker: str) -> Path:
    """The file a worker leaves when it has run its last test (one folder per test run)."""
    import tempfile

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    return Path(tempfile.gettempdir()) / f"vprof-tests-{run}" / f"{worker}.done"


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        marker = _done_marker(worker)
        marker.parent.mkdir(exist_ok=True)
        marker.touch()
    _shared_stack.close()


_quiet = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On the quiet group's worker, start the shared vLLM server with its first test (a start
    is not a measurement: it then costs the quiet part nothing); before the first quiet test,
    wait until the other workers have run their last test: their work would otherwise share
    the two cores with a vLLM server and its load generator (a CI run's prefix-caching A/B
    came out +131 % [-46 %, +897 %] with the unit tests beside it)."""
    global _quiet
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    module = _module(item.nodeid)
    if worker and _OMP_WAIT_GIVEN is None:
        os.environ.pop(_OMP_WAIT, None)  # vprof's servers start as vprof starts them
    if (
        worker
        and not _shared
        and module in (*SHARED_SERVER, *QUIET)
        and _server_wanted(item.session)
    ):
        _shared_server(ensure_tiny_model(), healthy=False)
    if worker and _OMP_WAIT_GIVEN is None and module not in QUIET:
        os.environ[_OMP_WAIT] = "PASSIVE"
    measures = item.get_closest_marker("e2e") or item.get_closest_marker("browser")
    if _quiet or not worker or module not in QUIET or not measures:
        return  # a quiet module's unit tests need no quiet cores: the fast tier never waits
    import time

    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    others = [f"gw{i}" for i in range(count) if f"gw{i}" != worker]
    deadline = time.monotonic() + _QUIET_WAIT_S
    while time.monotonic() < deadline and not all(_done_marker(w).exists() for w in others):
        time.sleep(1.0)
    _quiet = True


def _server_wanted(session: pytest.Session) -> bool:
    """Whether a selected test of the quiet group uses the shared server it would start."""
    return not os.environ.get("VPROF_TEST_VLLM_URL") and any(
        _module(i.nodeid) in (*SHARED_SERVER, *QUIET)
        and "vllm_server" in getattr(i, "fixturenames", ())
        for i in session.items
    )


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work units: the quiet group, each own-servers module, the vLLM-code group, then one per
    module, in collection order (the quiet group first, so one worker holds it from the start).
    xdist hands a worker its next unit when two of its tests are left; a worker still holding
    the quiet group or an own-servers module then takes the queue's last unit (the slowest come
    first): a slow one queued behind the own servers' last two tests (minutes) held the quiet
    part back 24 s."""
    from xdist.scheduler import LoadScopeScheduling

    class QuietGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            if module in QUIET or module in SHARED_SERVER:
                return QUIET_GROUP
            if module in VLLM_CODE:
                return VLLM_GROUP
            return f"{OWN_GROUP}:{module}" if module in OWN_SERVERS else nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node: Any) -> None:
            work = self.assigned_work.get(node, {})
            long = (g for g in work if g == QUIET_GROUP or g.startswith(OWN_GROUP))
            if self.workqueue and any(self._pending_of({g: work[g]}) for g in long):
                self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False
    return QuietGroupScheduling(config, log)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The embedded tiny model folder (config, tokenizer.json, chat template; no weights)."""
    return ensure_tiny_model()


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path) -> VllmServer:
    """One real vLLM CPU server on the tiny model, shared by the whole session (the worker's:
    started with the quiet group's first test, or here; stopped when the worker's session
    ends)."""
    external = os.environ.get("VPROF_TEST_VLLM_URL")
    if external:
        return VllmServer(
            url=external.rstrip("/"), model=TINY_MODEL_NAME, model_dir=tiny_model, log_path=None
        )
    return _shared_server(tiny_model)


_shared_stack = ExitStack()
_shared: list[tuple[ServerProcess, VllmServer]] = []
_shared_healthy: list[bool] = []


def _shared_server(tiny_model: Path, *, healthy: bool = True) -> VllmServer:
    """This worker's shared server, started on first use (stopped when the worker's session
    ends); with ``healthy``, once it answers."""
    import tempfile

    if not _shared:
        log_dir = Path(tempfile.mkdtemp(prefix="vprof-vllm-"))
        server, info = _vllm_server_process(tiny_model, log_dir)
        _shared.append((_shared_stack.enter_context(server), info))
    server, info = _shared[0]
    if healthy and not _shared_healthy:
        server.wait_healthy(timeout_s=_HEALTH_TIMEOUT_S)
        _shared_healthy.append(True)
    return info


@contextmanager
def running_vllm_server(tiny_model: Path, log_dir: Path) -> Iterator[VllmServer]:
    """Start a real vLLM CPU server on the tiny model, wait until it is healthy, stop it after."""
    server, info = _vllm_server_process(tiny_model, log_dir)
    with server:
        server.wait_healthy(timeout_s=_HEALTH_TIMEOUT_S)
        yield info


def _vllm_server_process(tiny_model: Path, log_dir: Path) -> tuple[ServerProcess, VllmServer]:
    """A real vLLM CPU server on the tiny model (not started yet) and what tests know of it."""
    port = _test_port()
    log_path = log_dir / "vllm-server.log"
    server = ServerProcess(
        vllm_test_argv(tiny_model, port),
        log_path=log_path,
        host="127.0.0.1",
        port=port,
        # Unbound worker threads, as vprof starts the CPU build (see server.host._CPU_BIND).
        # Its OpenMP threads sleep while they wait, always: the quiet worker's server serves
        # the shared-server tests beside other servers first (spinning there, it once left a
        # multi-turn chat test 2 answers in 10 s), then the quiet tests.
        env={
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
            _OMP_WAIT: _OMP_WAIT_GIVEN or "PASSIVE",
        },
        niceness=CPU_SERVER_NICENESS,  # as vprof starts the CPU build: the client goes first
    )
    return server, VllmServer(
        url=server.url, model=TINY_MODEL_NAME, model_dir=tiny_model, log_path=log_path
    )


@dataclass(frozen=True)
class Bench:
    """A finished `vprof bench` and what it printed."""

    out: Path
    stdout: str
    stderr: str


# the SLO a report of the load sweep below is read against
LOAD_SWEEP_SLO = "ttft_p95=800ms"


@pytest.fixture(scope="session")
def load_sweep(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`vprof sweep load` of the shared server: two open-loop rates, short. Made by the quiet
    worker before it waits (test_bench_url_e2e's check of it times nothing), read again in the
    quiet part by test_report_real_e2e's report."""
    import subprocess

    root = tmp_path_factory.mktemp("sweep")
    shape = root / "poisson.yaml"
    shape.write_text(
        "kind: open-loop\nrate_rps: 2\nwarmup_s: 1\nduration_s: 5\nmax_in_flight: 16\n"
    )
    out = root / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "sweep",
            "load",
            "tiny",
            "--url",
            vllm_server.url,
            "--traffic",
            str(shape),
            "--workload",
            "tiny-smoke",
            "--levels",
            "2,4",
            "--slo",
            LOAD_SWEEP_SLO,
            "--rps",
            "20",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def ab_bench(tmp_path_factory: pytest.TempPathFactory) -> Bench:
    """`vprof bench prefix-cached no-prefix-cache --alternate` on the CPU build: a real
    difference (prefix caching on against off, every prompt a 1536-token shared prefix and a
    32-token question, so caching skips 98 % of each prefill), both servers launched side by
    side (the CPU split: a share of the KV cache and one OpenMP thread each) and the load
    switched between them in 6-s slices, three ABBA blocks (with four blocks of 8-s slices a
    suite run found median TTFT +653 % [+365 %, +1120 %]; three of 6-s slices here, +794 %
    [+555 %, +1120 %]). Each slice's first 3 s are not measured: they hold the other side's
    last answers, which slow down once both servers take the cores (128-token answers sent
    just before a switch took 4.1 s instead of 1, their users were missing from the next
    slice's measured part, and the run was judged client-limited: "kept 3.75 requests in
    flight of 4"); 64-token answers keep that tail short. The servers
    do not swap halfway (the difference is far larger than an instance's offset, and a swap
    costs two more starts; the swap's restart is tested without vLLM in
    test_alternate_emulated)."""
    import subprocess

    root = tmp_path_factory.mktemp("ab-bench")
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "no-prefix-cache.yaml").write_text(
        "description: prefix caching off\nextends: prefix-cached\n"
        "engine_args:\n  enable-prefix-caching: false\n"
    )
    workload = root / "shared-prefix.yaml"
    workload.write_text(
        "description: one 1536-token shared prefix, a 32-token question, 64 out\n"
        "endpoint: completions\nseed: 0\nprefix: {groups: 1, length_tokens: 1536, share: 1.0}\n"
        "prompt_tokens: 32\noutput_tokens: 64\nfixed_output: true\n"
    )
    shape = root / "steady-4.yaml"
    # answers of about half a second: the client's own gap between an answer and the next
    # request (about a millisecond here) stays a small share of each user's time
    shape.write_text("kind: steady\nusers: 4\nduration_s: 36\n")
    out = root / "ab"
    port = worker_port(18900, 18999)
    argv = [
        *(sys.executable, "-m", "vprof.cli.main", "bench", "prefix-cached", "no-prefix-cache"),
        *("--profiles-dir", str(profiles), "--alternate", "--no-swap"),
        *("--slice", "6s", "--slice-warmup", "3s", "--workload", str(workload)),
        *("--traffic", str(shape), "--set", "enforce-eager=true"),
        *("--set", "max-model-len=2048", "--port", str(port), "--out", str(out)),
        *("--format", "json"),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    return Bench(out, proc.stdout, proc.stderr)
