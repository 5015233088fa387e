"""One bench spread over two real vLLM CPU servers (the session's and a second one started
here), with real Locust: both replicas answer, each replica's own `/metrics` is sampled, and
their counters account for exactly the requests the records say each one answered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import running_vllm_server

from vprof.records import read_records
from vprof.records.rundir import RunDir

pytestmark = pytest.mark.e2e

SUCCESS = "vllm:request_success_total"


@pytest.fixture(scope="module")
def second_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    with running_vllm_server(tiny_model, tmp_path_factory.mktemp("vllm-b")) as server:
        yield server


def test_a_bench_over_two_vllm_servers_samples_each_ones_metrics(
    vllm_server, second_server, tmp_path
):
    urls = [vllm_server.url, second_server.url]
    (tmp_path / "t.yaml").write_text("kind: steady\nusers: 4\nduration_s: 8\nwarmup_s: 1\n")
    out = tmp_path / "out"
    # fmt: off
    proc = subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", "bench", "two-replicas",
         *(arg for url in urls for arg in ("--url", url)), "--balance", "round-robin",
         "--traffic", str(tmp_path / "t.yaml"), "--workload", "tiny-smoke",
         "--metrics-interval", "2", "--out", str(out), "--format", "json"],
        capture_output=True, text=True, timeout=600,
    )
    # fmt: on
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (summary,) = json.loads(proc.stdout)["summaries"]
    run = RunDir(Path(summary["path"]))
    records = read_records(run.path)
    assert set(records.replica) == set(urls) and summary["replicas"] == 2
    lines = run.metric_samples()
    for url in urls:
        mine = sorted((m for m in lines if m["replica"] == url), key=lambda m: m["t"])
        # at the start and at the end at least (a slow scrape stretches the interval)
        assert len(mine) >= 2, (url, len(mine))
        # real vLLM's own count of what this replica finished during the run: every answer
        # the records hold for it (the warm-up came before the first scrape)
        answered = mine[-1]["values"][SUCCESS] - mine[0]["values"][SUCCESS]
        ok = int(((records.replica == url) & (records.status == "ok")).sum())
        # a request cut off by the end of the run may still have finished on the server
        cut = int(((records.replica == url) & (records.status == "cancelled")).sum())
        assert ok <= answered <= ok + cut and ok > 0, (url, answered, ok, cut)
        row = summary["per_replica"][url]
        assert row["num_preemptions"] == 0 and row["max_kv_cache_usage_perc"] is not None
    assert summary["num_preemptions"] == 0 and "metrics_from" not in summary
    print(f"\ntwo vLLM replicas: {len(records)} records, {len(lines)} /metrics lines")
