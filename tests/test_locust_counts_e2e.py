"""Real Locust (``locust -f locustfiles/locustfile.py``) against the real vLLM CPU server: what
is counted, not timed (records against what the server itself counted in ``/metrics``), so it
runs beside the unit tests; the timed ones are test_locust_e2e's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from locust_run import run_headless
from test_locust_e2e import (
    HALF_SHARED,
    HALF_SHARED_SEED,
    counters,
    delta,
    run_locust,
    workload_file,
)

from vprof.analysis.summary import summarize
from vprof.records import read_records

pytestmark = pytest.mark.e2e
MASTER_PORT = 18173  # inside this suite's port range (18100-18199), not test_locust_e2e's
SESSIONS_MASTER_PORT = 18174
TURNS = 3
THINK_S = 0.3


def test_shared_prefix_requests_are_all_recorded_with_their_cache_hits(vllm_server, tmp_path: Path):
    # Half the requests share a 1024-token prefix, half carry unique text in its place: the
    # prefix cache should serve most of each shared prompt and none of the others. Counted
    # only: whether sharing answers sooner is test_locust_e2e's, timed in the quiet part.
    workload = workload_file(tmp_path, "half-shared", HALF_SHARED, HALF_SHARED_SEED)
    run_dir = tmp_path / "run"
    before = counters(vllm_server)
    run_locust(
        vllm_server,
        run_dir,
        "--workload",
        str(workload),
        "-u",
        "1",
        "-t",
        "16s",  # beside the unit tests runs got 5-13 answers in 16 s
        master_port=MASTER_PORT,
    )
    server_delta = delta(before, counters(vllm_server))
    df = read_records(run_dir)
    # A record for every request the server completed, and nothing failed.
    assert (df.status == "ok").all(), df[df.status != "ok"][["status", "error"]]
    assert len(df) == server_delta["vllm:request_success_total"] >= 3  # 2 shared, 1 plain
    # Token counts: ours come from the server's usage, and match the workload and /metrics.
    assert (df.prompt_tokens == df.expected_prompt_tokens).all()
    assert (df.completion_tokens == 8).all()
    assert df.prompt_tokens.sum() == server_delta["vllm:prompt_tokens_total"]
    assert df.completion_tokens.sum() == server_delta["vllm:generation_tokens_total"]
    info = json.loads((run_dir / "locust.json").read_text())
    assert info["records"] == len(df) and info["salt"] and not info["open_loop"]
    assert set(df.prefix_group) == {0, -1}
    shared, plain = df[df.prefix_group == 0], df[df.prefix_group == -1]
    assert len(shared) >= 2  # the first puts the prefix in the cache, the next is served from it
    hits = server_delta["vllm:prefix_cache_hits_total"]
    assert hits >= 1024 * (len(shared) - 1) * 0.9
    assert shared.cached_tokens.iloc[1:].median() >= 1008  # whole 16-token blocks
    assert plain.cached_tokens.max() < 1008  # unique text in the prefix's place


def test_processes_2_write_one_records_file_with_both_workers(vllm_server, tmp_path: Path):
    run_dir = tmp_path / "run"
    before = counters(vllm_server)
    run_locust(
        vllm_server,
        run_dir,
        "--workload",
        "tiny-smoke",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "8s",
        "--processes",
        "2",
        master_port=MASTER_PORT,
    )
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
    # the multi-turn preset's shape with short answers: its 32-128-token answers took up to
    # 6 s each beside the unit tests on a slow host, and 10 s held 3 first turns, no second
    workload = tmp_path / "chat.yaml"
    workload.write_text(
        "description: short multi-turn chat\nendpoint: chat\nseed: 0\n"
        "prefix: {groups: 1, length_tokens: 64, share: 1.0}\nprompt_tokens: 24\n"
        "output_tokens: 8\nfixed_output: true\nconversation: {turns: 3}\n"
    )
    run_dir = tmp_path / "run"
    run_locust(
        vllm_server,
        run_dir,
        "--workload",
        str(workload),
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "8s",
        master_port=MASTER_PORT,
    )
    df = read_records(run_dir)
    assert (df.status == "ok").all(), df[["status", "error"]]
    assert (df.turn > 0).any(), df[["conversation_id", "turn"]]  # a history was resent
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


def test_open_loop_conversations_send_every_turn_and_report_latency_from_schedule(
    vllm_server, tmp_path
):
    # Beside the unit tests and other servers' start-ups, a turn took seconds once (CI: 12 s
    # held 19 first turns, 8 second ones, no third): short answers and a 16-s window let the
    # early conversations finish even then.
    workload = tmp_path / "sessions.yaml"
    workload.write_text(
        "name: sessions-e2e\nendpoint: chat\nseed: 3\n"
        "prefix: {groups: 1, length_tokens: 64}\n"
        "prompt_tokens: {kind: uniform, min: 24, max: 48}\noutput_tokens: 8\n"
        f"conversation:\n  turns: {TURNS}\n  think_time_s: {{kind: exponential, mean: {THINK_S}}}\n"
    )
    run_dir = tmp_path / "run"
    run_headless(
        vllm_server.url,
        run_dir,
        "--workload",
        str(workload),
        "--rate-rps",
        "2",
        "-t",
        "16s",
        "--max-in-flight",
        "32",
        "--model",
        vllm_server.model,
        "--tokenizer",
        str(vllm_server.model_dir),
        "--master-bind-port",
        str(SESSIONS_MASTER_PORT),
        timeout_s=90,
    )
    df = read_records(run_dir)
    info = json.loads((run_dir / "locust.json").read_text())
    assert info["open_loop"] and df.open_loop.all() and df.request_id.is_unique
    sent = df[df.sent_at.notna()]
    per_turn = sent.groupby("turn").size()
    print(f"\nopen-loop conversations: requests sent per turn {per_turn.to_dict()}")
    assert all(per_turn.get(t, 0) > 0 for t in range(TURNS)), per_turn
    ok = df[df.status == "ok"]
    assert len(ok) >= 0.8 * len(sent), df.status.value_counts()
    # The server counted the growing history: each later turn's prompt holds the one before,
    # its answer and a new message (the chat template adds the same tokens per message).
    by_turn = ok.set_index(["conversation_id", "turn"])
    for row in ok[ok.turn > 0].itertuples():
        before = by_turn.loc[(row.conversation_id, row.turn - 1)]
        assert row.prompt_tokens > before.prompt_tokens + before.completion_tokens
        assert row.scheduled_at >= before.finished_at  # due after the answer, plus think time
    # Beyond the contents the plan counts, the server counts only the chat template's tokens:
    # the same number for every first turn (the same messages). Later turns hold generated
    # replies, whose tokens could merge with the template's; here all of them matched too.
    gap = ok.prompt_tokens - ok.expected_prompt_tokens
    assert gap[ok.turn == 0].nunique() == 1 and gap[ok.turn == 0].iloc[0] > 0
    same = {int(t): float((g == g.mode().iloc[0]).mean()) for t, g in gap.groupby(ok.turn)}
    print(f"template-only prompt-token excess, share per turn: {same}")
    assert min(same.values()) >= 0.9
    summary = summarize(df)
    for t in range(1, TURNS):
        turn = summary["per_turn"][str(t)]
        print(f"turn {t}: {turn}")
        assert turn["sent"] == per_turn[t]
        assert math.isfinite(turn["median_ttft_from_schedule_ms"])
        assert turn["p99_ttft_from_schedule_ms"] >= turn["median_ttft_from_schedule_ms"] > 0
    print(
        f"sessions {summary['sessions']}, completed {summary['sessions_completed']}, "
        f"session e2e p50 {summary['median_session_e2el_ms']:.0f} ms"
    )
    assert summary["sessions_completed"] > 0
    assert summary["median_session_e2el_ms"] > 0
