"""`vprof bench` of a server it did not launch (the session's shared vLLM server, CPU build),
with two Locust processes: both workers' records reach the master, one record per request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vprof.records import read_records

pytestmark = pytest.mark.e2e


def test_bench_measures_a_server_it_did_not_launch_with_two_locust_processes(tmp_path, vllm_server):
    out = tmp_path / "runs"
    argv = [
        "bench",
        "my-deployment",
        "--url",
        vllm_server.url,
        "--traffic",
        "smoke",
        "--workload",
        "tiny-smoke",
        "--processes",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", *argv], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = sorted(p.parent for p in out.glob("*/run.json"))
    meta = json.loads((run / "run.json").read_text())
    assert meta["url"] == vllm_server.url and meta["profile"]["name"] == "my-deployment"
    summary = json.loads((run / "summary.json").read_text())
    records = read_records(run)
    assert summary["completed"] == len(records) > 0
    assert records.worker.nunique() == 2  # both Locust workers' records reached the master
    assert records.request_id.is_unique
    assert "my-deployment" in proc.stdout


def test_a_load_sweep_of_a_server_it_did_not_launch_writes_its_ladder_and_report(load_sweep):
    manifest = json.loads((load_sweep / "sweep.json").read_text())
    assert manifest["kind"] == "load" and manifest["profile"] == "tiny"
    rows = manifest["rows"]
    assert len(rows) == 2 and all(row["state"] == "completed" for row in rows), rows
    for row in rows:  # each row names its run folder, whose summary is the row's
        summary = json.loads((load_sweep / Path(row["run"]).name / "summary.json").read_text())
        assert summary["completed"] > 0 and summary["open_loop"]
        assert summary["offered_load"] in (2, 4)
    assert (load_sweep / "report.html").is_file()
