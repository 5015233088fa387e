"""The host probe writes its pace into the run folder, where the run's reader checks it."""

from __future__ import annotations

import json
import time

import pytest

from vprof.common.errors import RunError
from vprof.records import RunDir
from vprof.runs.hostprobe import HostProbe


def test_the_probe_records_its_work_time_and_lateness(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    probe = HostProbe(run.host_jsonl, interval_s=0.05).start()
    time.sleep(0.6)
    probe.stop()
    rows = run.host_samples()
    assert len(rows) >= 5
    assert all(0 < r["work_ms"] < 1000 and r["late_ms"] >= 0 for r in rows)


def test_a_damaged_host_line_is_an_error_naming_the_key(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.host_jsonl.write_text(json.dumps({"t": 1.8e9, "work_ms": -1, "late_ms": 0}) + "\n")
    with pytest.raises(RunError, match="work_ms"):
        run.host_samples()


def test_the_probe_keeps_the_kernels_stall_totals_and_the_summary_their_shares(tmp_path):
    from vprof.analysis.compare import HOST_IO_STALL_LIMIT_PCT
    from vprof.analysis.samples import host_stats
    from vprof.runs.hostprobe import PRESSURE

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    probe = HostProbe(run.host_jsonl, interval_s=0.05).start()
    time.sleep(0.3)
    probe.stop()
    rows = run.host_samples()
    if (PRESSURE / "io").exists():  # Linux with pressure stall information
        assert all(isinstance(r["io_full_us"], int) for r in rows)
    # 0.2 s of I/O stall over 10 s, 2 s of waiting for a core: 2 % and 20 %
    lines = [
        {"t": 100.0 + t, "work_ms": 1.0, "late_ms": 0.0, "cpu_some_us": c, "io_full_us": io}
        for t, c, io in ((0, 0, 0), (5, 1_000_000, 100_000), (10, 2_000_000, 200_000))
    ]
    many = [{**line, "t": line["t"] + k * 0.001} for k in range(4) for line in lines]
    stats = host_stats(sorted(many, key=lambda line: line["t"]))
    assert stats["host_io_stall_pct"] == pytest.approx(2.0, rel=0.01)
    assert stats["host_cpu_wait_pct"] == pytest.approx(20.0, rel=0.01)
    assert stats["host_io_stall_pct"] > HOST_IO_STALL_LIMIT_PCT
    without = host_stats([{k: v for k, v in line.items() if k != "io_full_us"} for line in many])
    assert without["host_io_stall_pct"] is None  # a host that does not report it
