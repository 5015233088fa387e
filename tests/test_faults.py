"""Faults as a user's machine produces them, with the real Locust client against the emulator:
a full disk, a killed vprof, a lost Locust worker, the same command twice. Each loses nothing
silently: the run stops with the reason, keeps every complete record, and says what it was.

The tests that run ``vprof bench`` as a process tree and stop, kill or starve it are marked e2e
(5-15 s and a Locust process tree each: out of the fast tier); the writer's and the lock's own
rules are unit tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest

from vprof.emulator.config import EmulatorConfig
from vprof.emulator.counters import Counters
from vprof.emulator.server import Emulator
from vprof.records import RequestRecord, RunDir
from vprof.records.store import RecordWriter, read_records_file

# A short answer (16 tokens, 1 ms apart) keeps thousands of records a second coming.
FAST = EmulatorConfig(ttft_ms=2, itl_ms=1, model="tiny")


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    with Emulator(FAST) as emu:
        yield emu


def shape(tmp_path: Path, users: int, duration_s: float, kind: str = "steady") -> str:
    path = tmp_path / f"{kind}-{users}-{duration_s:g}.yaml"
    path.write_text(f"kind: {kind}\nusers: {users}\nduration_s: {duration_s}\n")
    return str(path)


def bench_argv(url: str, out: Path, traffic: str, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "bench",
        "emu",
        "--url",
        url,
        "--workload",
        "tiny-smoke",
        "--traffic",
        traffic,
        "--out",
        str(out),
        "--metrics-interval",
        "0.5",
        *more,
    ]


def only_run(out: Path) -> RunDir:
    (run,) = [p.parent for p in out.glob("*/run.json") if ".attempt-" not in p.parent.name]
    return RunDir(run)


# -- a full disk ----------------------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[tuple[Path, dict]]:
    """A tmpfs of ``size`` at ``where`` (root only), or else a limit on the size of any file
    the command writes (RLIMIT_FSIZE: writes past it fail with EFBIG, which Python turns
    into an OSError instead of a signal). Yields the folder and Popen's extra arguments."""
    where.mkdir()
    mounted = os.geteuid() == 0 and (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    limit = 160 * 1024

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    try:
        yield where, ({} if mounted else {"preexec_fn": cap})
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.e2e
def test_a_full_disk_stops_the_run_at_once_with_the_reason_and_keeps_every_record(
    tmp_path, emulator
):
    traffic = shape(tmp_path, users=16, duration_s=60)
    with small_filesystem(tmp_path / "small", "256k") as (small, extra):
        out = small / "out"
        started = time.monotonic()
        proc = subprocess.run(
            bench_argv(emulator.url, out, traffic),
            capture_output=True,
            text=True,
            timeout=120,
            **extra,
        )
        took = time.monotonic() - started
        run = only_run(out)
        status = run.status(strict=True)
        read = read_records_file(run.records)
    print(f"stopped after {took:.1f} s: {status['reason']}\n{proc.stderr}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    # stopped at once (the 60 s shape would have gone on): soon after the last record it kept
    last_kept = max(read.table.column("finished_at").to_pylist())
    assert status["finished_at"] - last_kept < 8
    assert status["state"] == "failed"
    reason = status["reason"]
    assert reason.startswith("could not write ") and f" in {run.path}: " in reason
    assert "No space left on device" in reason or "File too large" in reason
    assert "free on its filesystem" in reason
    assert f"the run was stopped at once; {read.table.num_rows:,} complete records kept" in reason
    assert read.table.num_rows > 100
    assert f"failed: {run.path} — could not write" in proc.stderr


# -- a damaged records file ------------------------------------------------------------------


def _records(n: int, start: int = 0) -> list[dict]:
    now = time.time()
    return [
        RequestRecord(
            request_id=str(start + i),
            sent_at=now,
            first_token_at=now + 0.01,
            ttft_ms=10.0,
            e2e_ms=20.0,
            itl_ms=[1.0, 1.0],
        ).to_dict()
        for i in range(n)
    ]


def test_a_writer_whose_write_failed_writes_nothing_more(tmp_path, monkeypatch):
    path = tmp_path / "records.arrow"
    writer = RecordWriter(path, batch_size=10)
    writer.extend(_records(20))
    calls = []

    def full(batch):
        calls.append(batch)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer._writer, "write_batch", full)
    with pytest.raises(OSError):
        writer.extend(_records(10, 20))
    size = path.stat().st_size
    for later in (lambda: writer.extend(_records(10, 30)), writer.flush):
        with pytest.raises(OSError):
            later()
    writer.close()  # a broken writer closes without writing
    assert len(calls) == 1 and path.stat().st_size == size
    assert writer.written == 20
    read = read_records_file(path)
    assert read.table.num_rows == 20 and not read.torn


def test_nonsense_after_a_torn_batch_leaves_the_records_before_it_readable(tmp_path):
    """What a writer that carried on after a failed write leaves: a torn batch, then whole
    ones that a reader takes for the rest of the torn one (seen on a full disk that got space
    back: the reader met a token count of 68,719,476,736). The good batches before it are
    read, with a warning, not refused whole."""
    path = tmp_path / "records.arrow"
    with RecordWriter(path, batch_size=50) as writer:
        writer.extend(_records(150))
    source = pa.memory_map(str(path))
    reader = pa.ipc.open_stream(source)
    ends = [source.tell()]
    for _ in range(3):
        reader.read_next_batch()
        ends.append(source.tell())
    data = path.read_bytes()
    found = []
    for cut in range(ends[1] + 16, ends[2], 97):  # batch 2 torn here, then batches 2 and 3
        path.write_bytes(data[:cut] + data[ends[1] : ends[3]])
        read = read_records_file(path)
        found.append(read.table.num_rows)
        assert read.table.num_rows >= 50 and read.torn, cut
        assert read.describe(150).startswith(f"{read.table.num_rows} of 150 records readable")
    print(sorted(set(found)))


def test_a_status_is_recorded_on_a_disk_too_full_for_a_temporary_file(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.create({"name": "r"})
    import vprof.records.rundir as rundir

    def full(path, write):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rundir, "replace_atomically", full)
    run.set_status("failed", "could not write records.arrow: No space left on device")
    assert json.loads(run.status_json.read_text())["state"] == "failed"


@pytest.mark.e2e
def test_a_load_generator_that_never_ends_is_stopped_at_its_deadline(
    tmp_path, emulator, monkeypatch
):
    """Every wait has a deadline: a load generator still running past the shape, the stop
    timeout and the grace is stopped (a stand-in that ignores SIGTERM plays the hung one)."""
    import vprof.runs.loadgen as loadgen
    import vprof.runs.measure as measure
    from vprof.runs.bench import resolve_profiles, run_bench
    from vprof.runs.spec import BenchSpec

    hung = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    monkeypatch.setattr(loadgen.LoadSpec, "argv", lambda self: [sys.executable, "-c", hung])
    for module in (measure, loadgen):
        monkeypatch.setattr(module, "STOP_TIMEOUT_S", 1)
        monkeypatch.setattr(module, "FINISH_GRACE_S", 2.0)
    spec = BenchSpec(
        traffic=(shape(tmp_path, 1, 1),),
        workload="tiny-smoke",
        out_dir=tmp_path / "out",
        url=emulator.url,
        metrics=False,
    )
    started = time.monotonic()
    (outcome,) = run_bench(resolve_profiles(["emu"], url=spec.url, say=print), spec, print)
    took = time.monotonic() - started
    assert outcome.state == "failed"
    assert outcome.reason.startswith("the load generator was still running ")
    assert "the traffic shape lasts 1 s, answers in flight get 1 s and 2 s more" in outcome.reason
    assert took < 1 + 1 + 2 + 3 + 2 + 5  # the deadline, the stop's grace, start-up


# -- a running vprof and its Locust processes --------------------------------------------------


class Bench:
    """``vprof bench`` against the emulator in the background, with its processes at hand."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, text=True)
        self.seen: dict[int, psutil.Process] = {}

    def locust(self) -> list[psutil.Process]:
        """The Locust processes under vprof (the master, and its forked workers)."""
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            found = []
        self.seen.update((p.pid, p) for p in found)
        return found

    def workers(self) -> list[psutil.Process]:
        return [p for p in self.locust() if _ppid(p) != self.proc.pid]

    def wait_for(self, what: str, ready, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.proc.poll() is None, f"vprof ended before {what}: {self.output()}"
            assert time.monotonic() < deadline, f"no {what} after {timeout_s} s: {self.output()}"
            time.sleep(0.1)

    def finish(self, timeout_s: float = 120) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self._log.close()
        return rc

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def alive(self) -> list[int]:
        """Processes ever seen under vprof that still run."""
        return [pid for pid, p in self.seen.items() if _running(p)]


def _ppid(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.NoSuchProcess:
        return None


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# A slower answer (16 tokens 5 ms apart, ~85 ms a request): 8 users keep ~90 records a second
# coming, a rate a loaded test machine keeps up with.
PACED = EmulatorConfig(ttft_ms=5, itl_ms=5, model="tiny")
WARMUP_REQUESTS = 4  # vprof.runs.warmup.warm_up, before the load starts


@pytest.fixture
def counted() -> Iterator[tuple[Emulator, Counters]]:
    """The emulator and its own counters: what the server answered, to count records against."""
    counters = Counters()
    with Emulator(PACED, counters=counters) as emu:
        yield emu, counters


def _answered(counters: Counters) -> int:
    """Requests the emulator answered in full during the run (its warm-up left out)."""
    return counters.totals()["finished_length"] - WARMUP_REQUESTS


def _kill_a_worker_once_records_flow(bench: Bench, counters: Counters) -> int:
    bench.wait_for("two Locust workers", lambda: len(bench.workers()) == 2)
    bench.wait_for("answers", lambda: _answered(counters) > 100)
    victim = bench.workers()[0]
    victim.send_signal(signal.SIGKILL)
    return victim.pid


@pytest.mark.e2e
@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_worker_killed_mid_run_is_reported_and_costs_at_most_a_second_of_its_records(
    tmp_path, counted, policy
):
    """--processes 2, one worker killed with SIGKILL: said when it happens, recorded with when
    and how many records it had sent, the run degraded; stopped at once by default, run to its
    end with ``continue``. What the server answered and no record holds is at most about a
    second of the dead worker's records (plus its users' answers in flight)."""
    emu, counters = counted
    traffic = shape(tmp_path, users=8, duration_s=6 if policy == "continue" else 60)
    out = tmp_path / "out"
    argv = bench_argv(emu.url, out, traffic, "--processes", "2", "--on-worker-loss", policy)
    bench = Bench(argv, tmp_path / "bench.log")
    victim = _kill_a_worker_once_records_flow(bench, counters)
    killed_at = time.time()
    rc = bench.finish()
    took = time.time() - killed_at
    log = bench.output()
    run = only_run(out)
    status = run.status(strict=True)
    summary = json.loads(run.summary_json.read_text())
    (lost,) = summary["workers_lost"]
    records = read_records_file(run.records).table
    answered = _answered(counters)
    ok = records.filter(pa.compute.equal(records.column("status"), "ok")).num_rows
    theirs = records.filter(pa.compute.equal(records.column("worker"), lost["worker"]))
    span_s = max(theirs.column("finished_at").to_pylist()) - min(
        theirs.column("sent_at").to_pylist()
    )
    rate = theirs.num_rows / span_s  # the dead worker's records per second while it ran
    missing = answered - ok
    print(f"{policy}: lost {missing} answers = {missing / rate:.2f} s of the worker's records")
    assert rc == 1, log
    assert f"! lost Locust worker {socket.gethostname()}:{victim}:" in log
    assert "its process was killed by SIGKILL" in log and "Traceback" not in log
    assert status["state"] == summary["state"] == "degraded"
    assert (
        status["reason"].startswith("lost 1 Locust worker")
        and f"--on-worker-loss {policy}" in (status["reason"])
    )
    assert f":{victim}:" in lost["worker"]
    assert lost["records"] > 0 and abs(lost["lost_at"] - killed_at) < 2
    assert 0 <= missing <= rate * 1.0 + 4, (missing, rate)
    for name in ("locust.log", "locust.out"):
        text = (run.path / name).read_text()
        assert "Traceback" not in text and "unexpected state" not in text, name
    if policy == "stop":
        assert took < 10  # not the 60 s shape
    else:  # ran to the shape's end, the survivor sending on
        test = run.locust_info()
        assert test["stopped_at"] - test["started_at"] >= 6
        later = records.filter(pa.compute.greater(records.column("sent_at"), lost["lost_at"]))
        assert later.num_rows > 0 and lost["worker"] not in later.column("worker").to_pylist()


@pytest.mark.e2e
def test_a_vprof_killed_with_sigkill_leaves_no_load_and_its_run_reads_as_abandoned(
    tmp_path, counted
):
    """Locust dies with its parent: no Locust process (master or worker) is left 5 s after
    vprof is killed, the server sees no more load, and the next command that reads the run
    marks it abandoned, says so, and keeps its records."""
    emu, counters = counted
    out = tmp_path / "out"
    argv = bench_argv(emu.url, out, shape(tmp_path, 8, 60), "--processes", "2")
    bench = Bench(argv, tmp_path / "bench.log")
    bench.wait_for("two Locust workers", lambda: len(bench.workers()) == 2)
    bench.wait_for("answers", lambda: _answered(counters) > 100)
    bench.locust()
    bench.proc.kill()
    killed = time.monotonic()
    bench.finish()
    while bench.alive() and time.monotonic() - killed < 5:
        time.sleep(0.05)
    gone_after = time.monotonic() - killed
    time.sleep(0.5)
    quiet = counters.totals()
    time.sleep(1.0)
    print(f"Locust gone {gone_after:.2f} s after vprof")
    assert len(bench.seen) == 3 and bench.alive() == []
    assert counters.totals()["connections_opened"] == quiet["connections_opened"]
    run = only_run(out)
    assert run.state == "running"  # nothing has looked yet
    kept = read_records_file(run.records).table.num_rows
    proc = subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", "summarize", str(run.path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (summary,) = json.loads(proc.stdout)
    assert summary["state"] == "abandoned" == run.state
    assert f"(pid {bench.proc.pid} on {socket.gethostname()}) is gone" in summary["reason"]
    assert "abandoned: the vprof that ran it" in proc.stderr
    assert summary["requests"] == kept > 0


# -- one writer per folder -----------------------------------------------------------------


@pytest.mark.e2e
def test_the_same_command_twice_at_once_is_refused_and_the_first_completes_intact(
    tmp_path, counted
):
    """The second command exits 2 naming the folder and the PID that holds it, before any
    request; the first completes as if alone. A later bench into the same folder (another
    seed) leaves a report.html that covers both benches' runs."""
    emu, counters = counted
    out = tmp_path / "out"
    argv = bench_argv(emu.url, out, shape(tmp_path, 4, 3))
    first = Bench(argv, tmp_path / "first.log")
    first.wait_for("answers", lambda: _answered(counters) > 20)
    sent = counters.totals()["connections_opened"]
    second = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second.stderr
    (line,) = [x for x in second.stderr.splitlines() if x.startswith("Error: ")]
    assert f"{out.resolve()}: another vprof command is writing this folder: " in line
    assert f"pid {first.proc.pid} on {socket.gethostname()}" in line and "Traceback" not in line
    assert first.finish() == 0, first.output()
    run = only_run(out)
    assert run.status(strict=True)["state"] == "completed"
    read = read_records_file(run.records)
    assert not read.describe(run.locust_info()["records"])  # every record readable
    assert counters.totals()["connections_opened"] - sent < 20  # the second sent nothing
    assert not list(out.glob("*.attempt-*"))
    later = subprocess.run([*argv, "--seed", "1"], capture_output=True, text=True, timeout=120)
    assert later.returncode == 0, later.stderr
    runs = [p for p in out.iterdir() if (p / "run.json").exists()]
    report = (out / "report.html").read_text()
    assert len(runs) == 2 and all(p.name in report for p in runs)


HOLD = """
import sys, time
from pathlib import Path
from vprof.records.folderlock import lock_folder
lock_folder(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold(folder: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_folder_lock_refuses_a_second_writer_and_is_taken_over_from_a_dead_one(tmp_path):
    from vprof.common.errors import RunError
    from vprof.records.folderlock import holding, lock_folder

    folder = tmp_path / "bench"
    holder = _hold(folder, 60)
    try:
        with pytest.raises(RunError) as refused:
            lock_folder(folder)
        assert refused.value.path == str(folder.resolve())
        assert f"writing this folder: pid {holder.pid} on {socket.gethostname()}" in str(
            refused.value
        )
    finally:
        holder.kill()
        holder.wait()
    notes: list[str] = []
    with holding(folder, notes.append), holding(folder, notes.append):  # re-entrant
        pass
    (note,) = notes
    assert note.startswith(
        f"note: {folder.resolve()}: taking over the lock left by pid {holder.pid}"
    )
    assert note.endswith("which is gone")
    notes.clear()
    with holding(folder, notes.append):  # released cleanly: nothing to take over
        pass
    assert notes == []


def test_a_lock_on_a_folder_it_made_leaves_nothing_when_nothing_was_written(tmp_path):
    from vprof.records.folderlock import holding

    with holding(tmp_path / "a" / "b"):
        assert (tmp_path / "a" / "b").is_dir()
    assert not (tmp_path / "a").exists()


# -- stopped by a signal, then run again ----------------------------------------------------


@pytest.mark.e2e
def test_sigterm_and_sigint_are_named_and_a_rerun_keeps_the_partial_attempt_reachable(
    tmp_path, counted
):
    """SIGTERM: exit 143, "interrupted by SIGTERM" in the status and in the summary written
    after it, no Locust traceback. The same command again says it redoes an interrupted run
    and where the partial one is kept; the new run's summary lists it. SIGINT: exit 130."""
    emu, counters = counted
    out = tmp_path / "out"
    argv = bench_argv(emu.url, out, shape(tmp_path, 4, 60))
    ends = []
    for sig, attempt in ((signal.SIGTERM, 1), (signal.SIGINT, 2)):
        bench = Bench(argv, tmp_path / f"bench{attempt}.log")
        before = _answered(counters)
        bench.wait_for("answers", lambda before=before: _answered(counters) > before + 20)
        bench.proc.send_signal(sig)
        ends.append((bench.finish(timeout_s=60), bench.output()))
    (rc_term, first), (rc_int, second) = ends
    assert rc_term == 143 and "Interrupted by SIGTERM: finished runs and the partial" in first
    assert rc_int == 130 and "Interrupted by SIGINT" in second
    run = only_run(out)
    (partial,) = run.earlier_attempts()
    assert partial.name == f"{run.name}.attempt-1"
    assert (
        f"{run.name}: an earlier attempt was interrupted (interrupted by SIGTERM); it is kept "
        f"as {partial}, and the run starts again"
    ) in second
    kept = RunDir(partial)
    for folder, reason in (
        (kept, "interrupted by SIGTERM"),
        (run, "interrupted by SIGINT (Ctrl-C)"),
    ):
        status = folder.status(strict=True)
        summary = json.loads(folder.summary_json.read_text())
        assert status["state"] == summary["state"] == "interrupted"
        assert status["reason"] == summary["reason"] == reason
        assert read_records_file(folder.records).table.num_rows > 0
        assert "Traceback" not in folder.locust_out.read_text()
    assert json.loads(run.summary_json.read_text())["earlier_attempts"] == [str(partial)]
