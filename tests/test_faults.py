"""Faults as a user's machine produces them, with the real Locust client against the emulator:
a full disk, a killed vprof, a lost Locust worker, the same command twice. Each loses nothing
silently: the run stops with the reason, keeps every complete record, and says what it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from vprof.emulator.config import EmulatorConfig
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
