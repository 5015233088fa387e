"""Load from several hosts through Locust's own distributed mode: ``vprof bench
--workers-expected N --master-bind HOST:PORT`` and ``vprof worker --master HOST:PORT``.

The end-to-end tests start the master and two workers as separate commands, as on two load
hosts (over loopback), against the emulator; the rest pin the pure parts.
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

    def __init__(self, tmp_path: Path, url: str, duration_s: float, *more: str) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        traffic = tmp_path / "open.yaml"
        traffic.write_text(
            "kind: open-loop\nprocess: constant\n"
            f"rate_rps: {RATE_RPS}\nduration_s: {duration_s}\nwarmup_s: 0\n"
        )
        self.scheduled = round(RATE_RPS * duration_s)
        self.out = tmp_path / "out"
        self.bind = f"127.0.0.1:{self.port}"
        more = ("--workers-expected", "2", "--master-bind", self.bind, *more)
        argv = bench_argv(url, self.out, str(traffic), *more)
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
        try:
            rc = self.master.wait(timeout=timeout_s)
        finally:
            for worker in [self.master, *self.workers]:
                if worker.poll() is None:
                    worker.kill()
                worker.wait(timeout=30)
            self._log.close()
        return rc

    def run(self) -> RunDir:
        (run,) = [p.parent for p in self.out.glob("*/run.json")]
        return RunDir(run)


def test_two_workers_on_other_hosts_send_every_scheduled_request_exactly_once(tmp_path, emulator):
    """The master waits for both workers, sends them the workload, shape, seed and epoch, and
    each sends its share of one open-loop schedule: every index once, records of both in the
    master's run folder."""
    emu, counters = emulator
    hosts = Hosts(tmp_path, emu.url, duration_s=3)
    hosts.wait_for("waiting for 2 Locust worker(s)")
    hosts.join(2)
    rc = hosts.finish()
    log = hosts.output()
    assert rc == 0, log
    assert "joined (1 of 2)" in log and "joined (2 of 2)" in log
    frame = read_records(hosts.run().path)
    indices = sorted(int(i) for i in frame.request_id)
    assert indices == list(range(hosts.scheduled))  # every scheduled request, exactly once
    assert set(frame.status) == {"ok"}
    by_worker = {w: sorted(int(i) for i in g.request_id) for w, g in frame.groupby("worker")}
    assert len(by_worker) == 2  # both hosts' records, in the one run folder
    for share in by_worker.values():
        assert len({i % 2 for i in share}) == 1  # worker k of 2 sends i % 2 == k
    info = hosts.run().locust_info()
    assert info["workers"] == 2
    run_json = json.loads(hosts.run().run_json.read_text())
    assert run_json["workers_expected"] == 2
    # the emulator answered each request once (besides the bench's warm-up)
    assert counters.totals()["finished_length"] >= hosts.scheduled


def test_a_worker_killed_mid_run_is_reported_with_every_record_it_had_sent(tmp_path, emulator):
    """SIGKILL one of the two workers a second into the schedule: the master reports it lost
    (it stopped answering heartbeats) with how many records it had sent; all of those are in
    the run folder, its share before its last shipment complete; the survivor sends its whole
    share (--on-worker-loss continue), nothing twice."""
    emu, _ = emulator
    hosts = Hosts(tmp_path, emu.url, 8, "--on-worker-loss", "continue")
    hosts.wait_for("waiting for 2 Locust worker(s)")
    hosts.join(2)
    hosts.wait_for("joined (2 of 2)")
    victim = hosts.workers[1]
    time.sleep(4.0)  # the epoch is 2 s ahead of the test's start: about 2 s of its share sent
    victim.send_signal(signal.SIGKILL)
    killed_at = time.time()
    rc = hosts.finish()
    log = hosts.output()
    run = hosts.run()
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
    share = [i for i in range(hosts.scheduled) if i % 2 == mine[0] % 2]
    before = [
        i
        for i, at in zip(share, _scheduled_at(frame, share), strict=True)
        if at is not None and at < lost["last_records_at"] - 1.0
    ]
    assert set(before) <= set(mine)  # its share up to a second before its last shipment
    survivor = frame[frame.worker != lost["worker"]]
    others = sorted(int(i) for i in survivor.request_id)
    assert others == [i for i in range(hosts.scheduled) if i % 2 != mine[0] % 2]
    assert set(survivor.status) == {"ok"}


def _scheduled_at(frame, share: list[int]) -> list[float | None]:
    """Each index's intended send time, from the records' own (a constant rate: the schedule
    is the epoch plus index / rate)."""
    known = {int(i): at for i, at in zip(frame.request_id, frame.scheduled_at, strict=True)}
    epoch = min(at - int(i) / RATE_RPS for i, at in known.items())
    return [epoch + i / RATE_RPS for i in share]
