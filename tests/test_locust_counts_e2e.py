"""Real Locust (``locust -f locustfiles/locustfile.py``) against the real vLLM CPU server: what
is counted, not timed (records against what the server itself counted in ``/metrics``), so it
runs beside the unit tests; the timed ones are test_locust_e2e's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_locust_e2e import counters, delta, run_locust

from vprof.records import read_records

pytestmark = pytest.mark.e2e
MASTER_PORT = 18173  # inside this suite's port range (18100-18199), not test_locust_e2e's


def test_processes_2_write_one_records_file_with_both_workers(vllm_server, tmp_path: Path):
    run_dir = tmp_path / "run"
    before = counters(vllm_server)
    run_locust(vllm_server, run_dir, "--workload", "tiny-smoke", "-u", "4", "-r", "4",
               "-t", "8s", "--processes", "2", master_port=MASTER_PORT)  # fmt: skip
    server_delta = delta(before, counters(vllm_server))
    df = read_records(run_dir)
    assert sorted(df.worker.str.rsplit(":", n=1).str[-1].unique()) == ["worker0", "worker1"]
    assert len(df) == server_delta["vllm:request_success_total"] > 0
    assert (df.status == "ok").all()
    assert not df.request_id.duplicated().any()  # indices are disjoint across workers
    info = json.loads((run_dir / "locust.json").read_text())
    assert info["workers"] == 2 and info["records"] == len(df)
    cpu = [json.loads(line) for line in (run_dir / "loadgen.jsonl").read_text().splitlines()]
    assert {s["worker"].rsplit(":", 1)[-1] for s in cpu} >= {"master", "worker0", "worker1"}


def test_multi_turn_chat_grows_history_and_reports_template_overhead(vllm_server, tmp_path):
    run_dir = tmp_path / "run"
    run_locust(vllm_server, run_dir, "--workload", "multi-turn", "-u", "2", "-r", "2",
               "-t", "10s", master_port=MASTER_PORT)  # fmt: skip
    df = read_records(run_dir)
    assert len(df) >= 4 and (df.status == "ok").all(), df[["status", "error"]]
    assert (df.endpoint == "chat").all() and (df.conversation_id >= 0).all()
    # Each conversation resends its history: the server counts more prompt tokens every turn.
    for _, conv in df.sort_values("turn").groupby("conversation_id"):
        assert conv.turn.tolist() == list(range(len(conv)))
        assert conv.prompt_tokens.is_monotonic_increasing
    assert (df.completion_tokens == df.expected_output_tokens).all()
    # Chat adds the template's tokens on top of the message contents the workload counts.
    overhead = df.prompt_tokens - df.expected_prompt_tokens
    print(
        f"\nchat: {len(df)} turns in {df.conversation_id.nunique()} conversations; template "
        f"adds {overhead.min()}-{overhead.max()} prompt tokens per request"
    )
    assert (overhead >= 0).all()
