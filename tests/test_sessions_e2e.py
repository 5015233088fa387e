"""Closed-loop conversations by real Locust (the shipped locustfile and users) against the real
vLLM CPU server: each user sends its session's next turn a think time after the answer, and
the thinking users count as busy. Open-loop conversations, counted rather than timed, are
test_locust_counts_e2e's."""

from __future__ import annotations

import pytest
from locust_run import run_headless

from vprof.analysis.summary import IN_FLIGHT_SHARE_LIMIT, summarize
from vprof.records import read_records

pytestmark = pytest.mark.e2e

MASTER_PORT = 18172  # inside this suite's port range (18100-18199)
TURNS = 3


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
    run_headless(
        vllm_server.url,
        run_dir,
        "--workload",
        str(workload),
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        "10s",
        "--model",
        vllm_server.model,
        "--tokenizer",
        str(vllm_server.model_dir),
        "--master-bind-port",
        str(MASTER_PORT),
        timeout_s=90,
    )
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
    in_flight, thinking = summary["mean_in_flight"], summary["mean_thinking"]
    # the client's own idle: from an answer to the next send, beyond the think time asked for
    # (a new conversation's first turn thinks none); on a busy machine it is what is missing
    beyond = (df.idle_before_ms - df.think_ms.fillna(0)).clip(lower=0).sum() / 1000
    client_idle = beyond / (df.sent_at.max() - df.sent_at.min())
    print(
        f"\nclosed-loop conversations: {len(ok)} answers, in flight {in_flight:.2f} + thinking "
        f"{thinking:.2f} + the client's own idle {client_idle:.2f} of {users}, later turns' "
        f"schedule lag p50 {later.schedule_lag_ms.median():.2f} ms"
    )
    assert thinking > 0.5
    # the think time counts beside the requests in flight: together with the client's own
    # idle they account for every user asked for
    assert in_flight + thinking + client_idle >= 0.97 * users
    # the verdict calls the run short exactly by its rule, and says the sessions thought
    short = [r for r in summary["client_limited_by"] if "requests in flight" in r]
    assert bool(short) == (in_flight + thinking < IN_FLIGHT_SHARE_LIMIT * users), short
    assert all("sessions thinking" in r for r in short)
