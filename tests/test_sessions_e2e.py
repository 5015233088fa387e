"""Open-loop conversations by real Locust (the shipped locustfile and users) against the real
vLLM CPU server: sessions arrive at the traffic's rate, later turns are sent a think time after
the previous answer, and their latency from the schedule is reported per turn."""

from __future__ import annotations

import json
import math

import pytest
from locust_run import run_headless

from vprof.analysis.summary import summarize
from vprof.records import read_records

pytestmark = pytest.mark.e2e

MASTER_PORT = 18172  # inside this suite's port range (18100-18199)
TURNS = 3
THINK_S = 0.5


def test_open_loop_conversations_send_every_turn_and_report_latency_from_schedule(
    vllm_server, tmp_path
):
    workload = tmp_path / "sessions.yaml"
    workload.write_text(
        "name: sessions-e2e\nendpoint: chat\nseed: 3\n"
        "prefix: {groups: 1, length_tokens: 64}\n"
        "prompt_tokens: {kind: uniform, min: 24, max: 48}\noutput_tokens: 16\n"
        f"conversation:\n  turns: {TURNS}\n  think_time_s: {{kind: exponential, mean: {THINK_S}}}\n"
    )
    run_dir = tmp_path / "run"
    run_headless(vllm_server.url, run_dir, "--workload", str(workload), "--rate-rps", "2",
                 "-t", "12s", "--max-in-flight", "16", "--model", vllm_server.model,
                 "--tokenizer", str(vllm_server.model_dir), "--master-bind-port",
                 str(MASTER_PORT), timeout_s=90)  # fmt: skip
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
    print(f"sessions {summary['sessions']}, completed {summary['sessions_completed']}, "
          f"session e2e p50 {summary['median_session_e2el_ms']:.0f} ms")  # fmt: skip
    assert summary["sessions_completed"] > 0
    assert summary["median_session_e2el_ms"] > 0


def test_closed_loop_conversations_think_between_turns_and_keep_the_load_asked(
    vllm_server, tmp_path
):
    """Closed loop, each user sends its session's next turn the think time after the answer;
    the load check counts the thinking users as busy, so the run is not called client-limited
    for the idle time it asked for."""
    users, think_s = 4, 0.4
    workload = tmp_path / "closed.yaml"
    workload.write_text(
        "name: closed-sessions-e2e\nendpoint: chat\nseed: 5\nprompt_tokens: 32\n"
        f"output_tokens: 16\nconversation:\n  turns: {TURNS}\n  think_time_s: {think_s}\n"
    )
    run_dir = tmp_path / "run"
    run_headless(vllm_server.url, run_dir, "--workload", str(workload), "-u", str(users),
                 "-r", str(users), "-t", "10s", "--model", vllm_server.model,
                 "--tokenizer", str(vllm_server.model_dir), "--master-bind-port",
                 str(MASTER_PORT + 1), timeout_s=90)  # fmt: skip
    df = read_records(run_dir)
    assert not df.open_loop.any() and df.request_id.is_unique
    ok = df[df.status == "ok"]
    later = ok[ok.turn > 0]
    assert len(later) > 0 and (later.think_ms == think_s * 1000).all()
    by_turn = ok.set_index(["conversation_id", "turn"])
    for row in later.itertuples():
        before = by_turn.loc[(row.conversation_id, row.turn - 1)]
        assert row.scheduled_at == pytest.approx(before.finished_at + think_s, abs=1e-6)
        assert row.sent_at >= row.scheduled_at
    summary = summarize(df, users=users)
    print(f"\nclosed-loop conversations: {len(ok)} answers, in flight "
          f"{summary['mean_in_flight']:.2f} + thinking {summary['mean_thinking']:.2f} of {users}, "
          f"later turns' schedule lag p50 {later.schedule_lag_ms.median():.2f} ms")  # fmt: skip
    assert summary["mean_thinking"] > 0.5
    assert summary["mean_in_flight"] + summary["mean_thinking"] >= 0.97 * users
    assert not any("requests in flight" in r for r in summary["client_limited_by"])
