"""Hostile runs against the real vLLM CPU server (``--url``): a workload that cannot fit the
server's max-model-len — which vLLM reports at ``/v1/models`` — is refused before the first
request, and a run whose every request vLLM rejects fails with vLLM's own error and backs off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vprof.records import RunDir
from vprof.records.store import read_records_file
from vprof.server.metrics import scrape

pytestmark = pytest.mark.e2e

SUCCEEDED = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"


def vprof(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def workload(tmp_path: Path, prompt_tokens: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(f"endpoint: completions\nprompt_tokens: {prompt_tokens}\noutput_tokens: 8\n")
    return str(path)


def test_a_workload_longer_than_the_servers_max_model_len_sends_nothing(tmp_path, vllm_server):
    before = scrape(vllm_server.url)
    out = tmp_path / "out"
    proc = vprof(
        "bench",
        "tiny",
        "--url",
        vllm_server.url,
        "--workload",
        workload(tmp_path, "5000"),
        "--traffic",
        "smoke",
        "--out",
        str(out),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        f"--workload: every request of workload w asks for at least 5,008 tokens (prompt + "
        f"output), but the server at {vllm_server.url} has max-model-len "
        f"{vllm_server.max_model_len:,}: it would reject them all" in proc.stderr
    )
    after = scrape(vllm_server.url)
    for counter in (SUCCEEDED, PROMPT_TOKENS):  # not one request, not even the warm-up
        assert after.get(counter) == before.get(counter), counter
    assert not out.exists()


def test_a_run_that_vllm_rejects_entirely_fails_with_its_error(tmp_path, vllm_server):
    shape = tmp_path / "t.yaml"
    shape.write_text("kind: steady\nusers: 2\nduration_s: 4\n")
    out = tmp_path / "out"
    # The lower bound of an unclipped lognormal is 1 token (so only a warning), but every
    # prompt is about 6,000 tokens: vLLM answers each with HTTP 400.
    proc = vprof(
        "bench",
        "tiny",
        "--url",
        vllm_server.url,
        "--workload",
        workload(tmp_path, "{kind: lognormal, median: 6000, sigma: 0.02}"),
        "--traffic",
        str(shape),
        "--out",
        str(out),
        "--format",
        "json",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the server at {vllm_server.url} has max-model-len 4,096" in proc.stderr
    (run,) = [p.parent for p in out.glob("*/run.json")]
    status = RunDir(run).status()
    assert status["state"] == "failed"
    assert status["reason"].startswith("every request failed (")
    assert "the first error: HTTP 400:" in status["reason"]
    assert "maximum context length" in status["reason"] or "max_model_len" in status["reason"]
    table = read_records_file(RunDir(run).records).table
    sent = table.num_rows
    print(f"2 users sent {sent} requests in 4 s to a server that rejects each")
    assert sent <= 40  # backed off: without it, thousands
    assert "backing off" in RunDir(run).locust_log.read_text()
    rows = json.loads(proc.stdout)
    assert rows[0]["state"] == "failed"
