"""Load from several hosts through Locust's own distributed mode: ``vprof bench
--workers-expected N --master-bind HOST:PORT`` and ``vprof worker --master HOST:PORT``.

The end-to-end tests (marked e2e: five processes and ~20 CPU-s each, out of the fast tier) start
the master and two workers as separate commands, as on two load hosts (over loopback), against
the emulator; the rest pin the pure parts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import psutil
import pytest
from test_faults import bench_argv

from vprof.common.errors import VprofError
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.counters import Counters
from vprof.emulator.server import Emulator
from vprof.records import RunDir, read_records
from vprof.runs.distributed import join_hint, master_argv, parse_address, worker_argv
from vprof.server.process import free_port
from vprof.workloads import load_workloads
from vprof.workloads.portable import from_portable, to_portable

# -- the pure parts ---------------------------------------------------------------------------


def test_every_shipped_synthetic_workload_survives_the_trip_to_a_worker_exactly():
    for name, workload in load_workloads().items():
        if workload.trace is not None:
            continue
        wire = msgpack.unpackb(msgpack.packb(to_portable(workload)))  # as Locust sends it
        assert from_portable(wire) == workload, name


def test_a_trace_workload_is_refused_for_remote_workers_with_the_way_out():
    trace = load_workloads()["sample-trace"]
    with pytest.raises(VprofError, match="cannot be sent to Locust workers") as caught:
        to_portable(trace)
    assert "--processes" in caught.value.format()


def test_a_portable_workload_builds_only_workload_classes():
    data = to_portable(load_workloads()["chat"])
    data["prompt_tokens"]["~"] = "Popen"
    with pytest.raises(VprofError, match="holds a 'Popen'"):
        from_portable(data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.0.0.0:5557", ("0.0.0.0", 5557)), ("[::1]:6000", ("::1", 6000)), ("h:1", ("h", 1))],
)
def test_addresses_parse_as_host_and_port(text, expected):
    assert parse_address(text, "--master") == expected


@pytest.mark.parametrize("text", ["5557", "host:", ":5557", "host:0", "host:70000", "a b:1"])
def test_a_bad_address_names_its_flag_and_an_example(text):
    with pytest.raises(VprofError) as caught:
        parse_address(text, "--master-bind")
    message = caught.value.format()
    assert "--master-bind" in message


def test_the_master_waits_for_its_workers_at_its_address_and_the_worker_dials_it():
    argv = master_argv("0.0.0.0:6001", 3)
    assert argv[:5] == ["--master", "--master-bind-host", "0.0.0.0", "--master-bind-port", "6001"]
    assert argv[argv.index("--expect-workers") + 1] == "3"
    assert "--expect-workers-max-wait" in argv
    worker = worker_argv("10.0.0.5:6001", processes=4)
    assert worker[worker.index("--master-host") + 1] == "10.0.0.5"
    assert worker[worker.index("--master-port") + 1] == "6001"
    assert "--worker" in worker and worker[-2:] == ["--processes", "4"]
    assert join_hint("127.0.0.1:6001") == "vprof worker --master 127.0.0.1:6001"


def test_bench_refuses_half_a_distributed_setup_and_local_processes_beside_it(tmp_path):
    from vprof.runs import BenchSpec

    with pytest.raises(VprofError, match="needs --master-bind"):
        BenchSpec(traffic=("smoke",), workers_expected=2)
    with pytest.raises(VprofError, match="needs --workers-expected"):
        BenchSpec(traffic=("smoke",), master_bind="0.0.0.0:5557")
    with pytest.raises(VprofError) as caught:
        BenchSpec(traffic=("smoke",), workers_expected=2, master_bind="0.0.0.0:5557", processes=2)
    assert "vprof worker --processes" in caught.value.format()


def test_the_load_generator_runs_as_a_master_instead_of_forking(tmp_path):
    from vprof.runs.loadgen import LoadSpec

    spec = LoadSpec(
        url="http://127.0.0.1:1",
        run_dir=RunDir(tmp_path),
        workload="chat",
        traffic="{}",
        seed=0,
        salt="s",
        workers_expected=2,
        master_bind="127.0.0.1:6002",
    )
    argv = spec.argv()
    assert "--master" in argv and "--processes" not in argv
    assert argv[argv.index("--expect-workers") + 1] == "2"


# -- a master and two workers, started separately ------------------------------------------

# Short answers (16 tokens 4 ms apart): arrivals at RATE_RPS keep a few requests in flight.
EMULATED = EmulatorConfig(ttft_ms=5, itl_ms=4, model="tiny")
RATE_RPS = 30


@pytest.fixture
def emulator() -> Iterator[tuple[Emulator, Counters]]:
    counters = Counters()
    with Emulator(EMULATED, counters=counters) as emu:
        yield emu, counters


class Hosts:
    """``vprof bench`` as the master and ``vprof worker`` processes, each a command of its own."""

    def __init__(self, tmp_path: Path, url: str, durations_s: list[float], *more: str) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        shapes: list[str] = []
        for duration_s in durations_s:  # a shape each: a run (a Locust master) each
            traffic = tmp_path / f"open-{duration_s:g}s.yaml"
            traffic.write_text(
                "kind: open-loop\nprocess: constant\n"
                f"rate_rps: {RATE_RPS}\nduration_s: {duration_s}\nwarmup_s: 0\n"
            )
            shapes += ["--traffic", str(traffic)]
        self.scheduled = {
            Path(s).stem: round(RATE_RPS * d)
            for s, d in zip(shapes[1::2], durations_s, strict=True)
        }
        self.out = tmp_path / "out"
        self.bind = f"127.0.0.1:{self.port}"
        more = ("--workers-expected", "2", "--master-bind", self.bind, *shapes[2:], *more)
        argv = bench_argv(url, self.out, shapes[1], *more)
        self.log_path = tmp_path / "bench.log"
        self._log = self.log_path.open("w")
        self.master = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, text=True)
        self.workers: list[subprocess.Popen] = []

    def join(self, count: int) -> None:
        for _ in range(count):
            log = (self.tmp_path / f"worker{len(self.workers)}.log").open("w")
            argv = [sys.executable, "-m", "vprof.cli.main", "worker", "--master", self.bind]
            self.workers.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output():
            assert self.master.poll() is None, f"the master ended before {text!r}: {self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} in {timeout_s} s: {self.output()}"
            time.sleep(0.1)

    def finish(self, timeout_s: float = 120) -> int:
        """The master's exit code, once it ended; then every ``vprof worker`` is stopped as a
        person stops it (SIGTERM), and neither it nor its Locust worker is left."""
        try:
            rc = self.master.wait(timeout=timeout_s)
        finally:
            if self.master.poll() is None:
                self.master.kill()
            children = [c for w in self.workers for c in _children(w.pid)]
            for worker in self.workers:
                if worker.poll() is None:
                    worker.terminate()
            for worker in self.workers:
                worker.wait(timeout=30)
            psutil.wait_procs(children, timeout=30)
            self._log.close()
        assert not [c for c in children if c.is_running() and c.status() != "zombie"]
        return rc

    def runs(self) -> dict[str, RunDir]:
        """Each run folder by its traffic shape's name."""
        found = [RunDir(p.parent) for p in self.out.glob("*/run.json")]
        return {json.loads(r.run_json.read_text())["traffic"]["name"]: r for r in found}

    def locust_worker(self, k: int) -> psutil.Process:
        """The Locust worker that ``vprof worker`` number ``k`` runs now."""
        (child,) = psutil.Process(self.workers[k].pid).children()
        return child


@pytest.mark.e2e
def test_two_workers_on_other_hosts_send_every_scheduled_request_exactly_once(tmp_path, emulator):
    """The master waits for both workers, sends them the workload, shape, seed and epoch, and
    each sends its share of one open-loop schedule: every index once, records of both in the
    master's run folder. The bench's second run is a second master: the same workers join it."""
    emu, counters = emulator
    hosts = Hosts(tmp_path, emu.url, [2, 1])
    hosts.wait_for("waiting for 2 Locust worker(s)")
    hosts.join(2)
    rc = hosts.finish()
    log = hosts.output()
    assert rc == 0, log
    assert log.count("joined (2 of 2)") == 2  # both runs
    runs = hosts.runs()
    assert sorted(runs) == sorted(hosts.scheduled)
    for name, run in runs.items():
        frame = read_records(run.path)
        indices = sorted(int(i) for i in frame.request_id)
        assert indices == list(range(hosts.scheduled[name]))  # each scheduled request once
        assert set(frame.status) == {"ok"}
        by_worker = {w: sorted(int(i) for i in g.request_id) for w, g in frame.groupby("worker")}
        assert len(by_worker) == 2  # both hosts' records, in the one run folder
        for share in by_worker.values():
            assert len({i % 2 for i in share}) == 1  # worker k of 2 sends i % 2 == k
        assert run.locust_info()["workers"] == 2
        assert json.loads(run.run_json.read_text())["workers_expected"] == 2
    # the emulator answered each request once (besides the bench's warm-ups)
    assert counters.totals()["finished_length"] >= sum(hosts.scheduled.values())


@pytest.mark.e2e
def test_a_worker_killed_mid_run_is_reported_with_every_record_it_had_sent(tmp_path, emulator):
    """SIGKILL one of the two workers a second into the schedule: the master reports it lost
    (it stopped answering heartbeats) with how many records it had sent; all of those are in
    the run folder, its share before its last shipment complete; the survivor sends its whole
    share (--on-worker-loss continue), nothing twice."""
    emu, _ = emulator
    hosts = Hosts(tmp_path, emu.url, [8], "--on-worker-loss", "continue")
    hosts.wait_for("waiting for 2 Locust worker(s)")
    hosts.join(2)
    hosts.wait_for("joined (2 of 2)")
    victim = hosts.locust_worker(1)
    time.sleep(4.0)  # the epoch is 2 s ahead of the test's start: about 2 s of its share sent
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    assert hosts.workers[1].wait(timeout=30) == 128 + signal.SIGKILL  # and it says why
    assert "killed by SIGKILL; not joining again" in (tmp_path / "worker1.log").read_text()
    rc = hosts.finish()
    log = hosts.output()
    (run,) = hosts.runs().values()
    (scheduled,) = hosts.scheduled.values()
    (lost,) = run.locust_info()["workers_lost"]
    frame = read_records(run.path)
    assert rc == 1, log  # degraded
    assert "! lost Locust worker" in log and "stopped answering Locust's heartbeats" in log
    assert f":{victim.pid}:" in lost["worker"] and lost["lost_at"] >= killed_at
    indices = [int(i) for i in frame.request_id]
    assert len(indices) == len(set(indices))  # nothing sent twice
    theirs = frame[frame.worker == lost["worker"]]
    assert len(theirs) == lost["records"] > 0  # every record it had sent is in the folder
    mine = sorted(int(i) for i in theirs.request_id)
    share = [i for i in range(scheduled) if i % 2 == mine[0] % 2]
    before = [
        i
        for i, at in zip(share, _scheduled_at(frame, share), strict=True)
        if at is not None and at < lost["last_records_at"] - 1.0
    ]
    assert set(before) <= set(mine)  # its share up to a second before its last shipment
    survivor = frame[frame.worker != lost["worker"]]
    others = sorted(int(i) for i in survivor.request_id)
    assert others == [i for i in range(scheduled) if i % 2 != mine[0] % 2]
    assert set(survivor.status) == {"ok"}


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _scheduled_at(frame, share: list[int]) -> list[float | None]:
    """Each index's intended send time, from the records' own (a constant rate: the schedule
    is the epoch plus index / rate)."""
    known = {int(i): at for i, at in zip(frame.request_id, frame.scheduled_at, strict=True)}
    epoch = min(at - int(i) / RATE_RPS for i, at in known.items())
    return [epoch + i / RATE_RPS for i in share]


# -- on Kubernetes --------------------------------------------------------------------------


def test_k8s_load_generator_measures_the_profiles_service_with_workers_that_reach_its_master():
    import yaml
    from click.testing import CliRunner

    from vprof.cli.main import cli

    load = ["--load-workers", "3", "--traffic", "poisson", "--workload", "my$(HOME)"]
    result = CliRunner().invoke(cli, ["render", "chunked-256", "--format", "k8s", *load])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Deployment", "Service", "Service", "Job", "Deployment"]
    server, _, master_service, job, workers = docs
    bench = job["spec"]["template"]["spec"]["containers"][0]["command"]
    port = server["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert bench[:3] == ["vprof", "bench", "chunked-256"]
    assert bench[bench.index("--url") + 1] == f"http://{server['metadata']['name']}:{port}"
    assert bench[bench.index("--workers-expected") + 1] == "3"
    assert bench[bench.index("--workload") + 1] == "my$$(HOME)"  # no kubelet expansion
    assert workers["spec"]["replicas"] == 3
    dial = workers["spec"]["template"]["spec"]["containers"][0]["command"]
    name, _, master_port = dial[dial.index("--master") + 1].partition(":")
    assert name == master_service["metadata"]["name"]
    assert int(master_port) == master_service["spec"]["ports"][0]["port"]
    assert master_service["spec"]["selector"] == job["spec"]["template"]["metadata"]["labels"]
    assert bench[bench.index("--master-bind") + 1] == f"0.0.0.0:{master_port}"


def test_load_generator_options_need_kubernetes_and_each_other():
    from click.testing import CliRunner

    from vprof.cli.main import cli

    runner = CliRunner()
    result = runner.invoke(cli, ["render", "chunked-256", "--load-workers", "2"])
    assert result.exit_code == 2 and "--format k8s" in result.output
    result = runner.invoke(cli, ["render", "chunked-256", "--format", "k8s", "--traffic", "x"])
    assert result.exit_code == 2 and "need --load-workers" in result.output


def test_a_shipped_tokenizer_is_kept_once_per_content_on_a_host():
    from vprof.locustfiles.testplan import _keep_tokenizer

    first = _keep_tokenizer(b'{"version": "1.0", "test": 1}')
    other = _keep_tokenizer(b'{"version": "1.0", "test": 2}')
    try:
        assert _keep_tokenizer(b'{"version": "1.0", "test": 1}') == first != other
        assert first.read_bytes() == b'{"version": "1.0", "test": 1}'
    finally:
        first.unlink()
        other.unlink()
