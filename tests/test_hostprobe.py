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
