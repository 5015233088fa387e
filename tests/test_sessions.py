"""Sessions: conversations and agent chains sent open loop, with think times and fan-out.

The pure parts (think-time draws, history growth, the queue's intended times) are tested
directly; the scheduling as a whole runs through real Locust against ``vprof emulate``.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from locust_run import import_locust_unpatched, run_headless

from vprof.analysis.summary import IN_FLIGHT_SHARE_LIMIT, summarize
from vprof.common.errors import WorkloadError
from vprof.emulator import Emulator, EmulatorConfig
from vprof.records import read_records
from vprof.workloads import RequestSynthesizer, load_tokenizer
from vprof.workloads.loading import load_workload_file, workload_from_dict
from vprof.workloads.sessions import start_session
from vprof.workloads.spec import ThinkTime

CHAT = {"name": "s", "endpoint": "chat", "prompt_tokens": 16, "output_tokens": 8}


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):
    return load_tokenizer(tiny_model)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("conversation:\n  turns: 3\n  think_time_s: -1\n", ":7: conversation.think_time_s: must"),
        ("conversation:\n  turns: 3\n  think_time_s: .inf\n", "conversation.think_time_s: must"),
        (
            "conversation:\n  turns: 3\n  think_time_s: {kind: exponential, mean: -2}\n",
            "conversation.think_time_s.mean: must be between 0",
        ),
        (
            "conversation:\n  turns: 3\n  think_time_s: {kind: poisson, mean: 2}\n",
            "conversation.think_time_s.kind: unknown think-time kind 'poisson'",
        ),
        (
            "conversation:\n  turns: 3\n  think_time_s: {kind: uniform, min: 3, max: 1}\n",
            "conversation.think_time_s.min: min (3) is larger than max (1)",
        ),
        ("conversation:\n  turns: 3\n  think_time_s: {kind: exponential}\n", "needs mean"),
        ("conversation:\n  turns: 3\n  think_time_s: {mean: 2}\n", "needs a kind"),
        ("conversation:\n  turns: 3\n  think_time_s: soon\n", "must be seconds or a distribution"),
        ("agent:\n  tool_tokens: 10\n", "agent.steps: missing"),
        ("agent:\n  steps: 3\n  tool_tokens: 10\n  fanout: 2\n", "agent.fanout: unknown key"),
        ("agent:\n  steps: 3\n  tool_tokens: 10\n  fan_out: 5000\n", "agent.fan_out: at most"),
        ("agent:\n  steps: 3\n  tool_tokens: -4\n", "agent.tool_tokens: a token count"),
        ("agent:\n  steps: 3\n  tool_tokens: 9\nconversation:\n  turns: 2\n", "not both"),
    ],
)
def test_bad_session_specs_fail_with_file_line_and_key(tmp_path, section, message):
    text = "name: s\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n" + section
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(_write(tmp_path, text))
    assert message in caught.value.format()
    assert str(tmp_path / "w.yaml") in caught.value.format()


@pytest.mark.parametrize(("value", "hinted"), [("nan", False), ("inf", False), ("2e1", True)])
def test_a_think_time_written_as_text_is_hinted_only_when_yaml_misread_a_number(
    tmp_path, value, hinted
):
    text = "name: s\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n"
    text += f"conversation:\n  turns: 3\n  think_time_s: {value}\n"
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(_write(tmp_path, text))
    shown = caught.value.format()
    assert "conversation.think_time_s: must be" in shown
    assert ("write exponents" in shown) is hinted, shown


def test_agent_sessions_need_the_chat_endpoint():
    with pytest.raises(WorkloadError, match="agent sessions need endpoint: chat"):
        workload_from_dict(
            {**CHAT, "endpoint": "completions", "agent": {"steps": 2, "tool_tokens": 5}}
        )


@pytest.mark.parametrize(
    ("spec", "mean"),
    [
        ({"kind": "fixed", "value": 1.5}, 1.5),
        ({"kind": "uniform", "min": 1, "max": 3}, 2.0),
        ({"kind": "exponential", "mean": 2}, 2.0),
        ({"kind": "lognormal", "median": 1, "sigma": 0.5}, math.exp(0.125)),
    ],
)
def test_think_times_are_seconds_with_the_mean_asked_for(spec, mean):
    import random

    think = ThinkTime(spec.pop("kind"), spec)
    rng = random.Random(1)
    draws = np.array([think.sample(rng) for _ in range(20_000)])
    assert (draws >= 0).all() and np.isfinite(draws).all()
    assert draws.mean() == pytest.approx(mean, rel=0.05) and think.mean() == pytest.approx(mean)


# --- sessions as pure plans -------------------------------------------------------------------


def test_a_conversation_session_grows_its_history_and_draws_think_times_from_the_seed(tokenizer):
    workload = workload_from_dict(
        {**CHAT, "conversation": {"turns": 3, "think_time_s": {"kind": "exponential", "mean": 2}}}
    )
    synth = RequestSynthesizer(workload, tokenizer, salt="x")
    session = start_session(synth, 7)
    first = session.next_step(None)
    assert [p.turn for p in first] == [0] and first[0].expected_prompt_tokens == 16
    reply = " yes" * 5
    second = session.next_step([reply])
    think_1 = session.think_s()
    assert second[0].messages[:2] == [first[0].messages[0], {"role": "assistant", "content": reply}]
    assert second[0].expected_prompt_tokens == 16 + len(tokenizer.encode(reply)) + 16
    assert session.next_step([reply])[0].turn == 2 and session.next_step([reply]) == []
    again = start_session(RequestSynthesizer(workload, tokenizer, salt="other"), 7)
    again.next_step(None)
    again.next_step([reply])
    assert again.think_s() == think_1 > 0  # lengths and times follow the seed, not the salt


def test_an_agent_step_fans_out_and_the_next_step_sees_every_branch(tokenizer):
    workload = workload_from_dict(
        {
            **CHAT,
            "prefix": {"groups": 1, "length_tokens": 32},
            "agent": {"steps": 3, "tool_tokens": 10, "fan_out": 3},
        }
    )
    session = start_session(RequestSynthesizer(workload, tokenizer), 0)
    (task,) = session.next_step(None)
    assert task.expected_prompt_tokens == 32 + 16 and task.branch == -1
    answer = " ok" * 4
    step1 = session.next_step([answer])
    assert [p.branch for p in step1] == [0, 1, 2] and {p.turn for p in step1} == {1}
    context = 48 + len(tokenizer.encode(answer))
    assert all(p.expected_prompt_tokens == context + 10 for p in step1)
    assert len({p.messages[-1]["content"] for p in step1}) == 3  # each its own tool result
    step2 = session.next_step([answer] * 3)
    # the shared context gained every branch's tool result and answer
    grown = context + 3 * (10 + len(tokenizer.encode(answer)))
    assert all(p.expected_prompt_tokens == grown + 10 for p in step2)
    assert len(step2[0].messages) == len(step1[0].messages) + 6
    assert session.next_step([answer] * 3) == []


def test_the_queue_schedules_a_later_step_think_time_after_its_last_answer(tokenizer):
    import_locust_unpatched()  # the queues run on gevent; no sockets here
    from vprof.locustfiles.sessionqueue import SessionCall, SessionQueue
    from vprof.locustfiles.testplan import OpenLoopQueue

    workload = workload_from_dict(
        {**CHAT, "agent": {"steps": 2, "tool_tokens": 5, "fan_out": 2, "think_time_s": 0.25}}
    )
    synth = RequestSynthesizer(workload, tokenizer)
    arrivals = OpenLoopQueue(epoch=1000.0, offsets=[0.0, 5.0], indices=range(2))
    queue = SessionQueue(arrivals, lambda i: start_session(synth, i))
    never = lambda: False  # noqa: E731
    first = queue.take(never)
    assert (first.request_id, first.scheduled_at) == ("c0-t0", 1000.0)

    def answer(call, finished_at, status="ok"):
        record = SimpleNamespace(status=status, finished_at=finished_at, session_last=False)
        queue.finished(call, record, " fine")
        return record

    answer(first, 1001.0)
    a, b = queue.take(never), queue.take(never)  # both branches, due 0.25 s after the answer
    assert {a.request_id, b.request_id} == {"c0-t1-b0", "c0-t1-b1"}
    assert a.scheduled_at == b.scheduled_at == 1001.25
    # the arrival at 1005 is next in the queue: nothing more is due until the step ends
    assert answer(a, 1002.0).session_last is False
    assert answer(b, 1001.5).session_last is True  # the last answer of the last step
    c = queue.take(never)
    assert c.request_id == "c1-t0"
    answer(c, 1006.0, status="error")  # a failed call ends its session
    assert queue.take(never) is None  # nothing left: every session is over
    # a call given back (its user stopped) is swept at the end with its intended time
    queue.give_back(SessionCall(2, c.plan, 1007.0))
    assert queue.untaken() == [("c2-t0", 2, 0, 1007.0)]


def test_a_step_that_cannot_be_planned_ends_its_session_and_keeps_the_answer(tokenizer, caplog):
    import_locust_unpatched()
    from vprof.locustfiles.sessionqueue import SessionQueue
    from vprof.locustfiles.testplan import OpenLoopQueue

    workload = workload_from_dict({**CHAT, "agent": {"steps": 3, "tool_tokens": 5}})
    synth = RequestSynthesizer(workload, tokenizer)

    def broken(i):
        session = start_session(synth, i)
        first = session.next_step(None)

        def next_step(answers):
            if answers is None:
                return first
            raise ValueError("no tokenizer today")

        session.next_step = next_step
        return session

    queue = SessionQueue(OpenLoopQueue(epoch=0.0, offsets=[0.0], indices=range(1)), broken)
    call = queue.take(lambda: False)
    record = SimpleNamespace(status="ok", finished_at=1.0, session_last=False)
    queue.finished(call, record, " fine")  # the record's caller goes on to emit it
    assert record.session_last is False
    assert "could not be planned" in caplog.text
    assert queue.take(lambda: False) is None and queue.untaken() == []


# --- real Locust against the emulator ---------------------------------------------------------


@pytest.fixture
def emulator(request):
    config = EmulatorConfig(port=request.param, ttft_ms=20, itl_ms=5, model="emulated")
    emu = Emulator(config).start()
    try:
        yield emu
    finally:
        emu.stop()


def _run(emulator, tmp_path: Path, workload: str, *args: str):
    run_dir = tmp_path / "run"
    run_headless(
        emulator.url,
        run_dir,
        "--workload",
        str(_write(tmp_path, workload)),
        "--model",
        "emulated",
        *args,
        timeout_s=120,
    )
    df = read_records(run_dir)
    assert df.request_id.is_unique
    return df


@pytest.mark.parametrize("emulator", [18161], indirect=True)
def test_open_loop_conversations_send_later_turns_after_the_answer_plus_think_time(
    emulator, tmp_path
):
    workload = (
        "name: s\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n"
        "conversation:\n  turns: 3\n  think_time_s: 0.3\n"
    )
    df = _run(emulator, tmp_path, workload, "--rate-rps", "4", "-t", "4s", "--max-in-flight", "8")
    sent = df[df.sent_at.notna()]
    counts = sent.groupby("turn").size()
    assert counts.get(0, 0) >= 10 and counts.get(1, 0) > 0 and counts.get(2, 0) > 0, counts
    assert df.open_loop.all() and (df.conversation_id >= 0).all()
    # each later turn was due 0.3 s after the previous turn's answer ended, and sent then
    ok = df[df.status == "ok"].set_index(["conversation_id", "turn"])
    later = sent[sent.turn > 0]
    checked = 0
    for row in later.itertuples():
        before = ok.loc[(row.conversation_id, row.turn - 1)]
        assert row.scheduled_at == pytest.approx(before.finished_at + 0.3, abs=1e-6)
        # the history grew by the answer (8 tokens, as its text re-encodes) and a new message
        assert row.expected_prompt_tokens > before.expected_prompt_tokens + 16
        checked += 1
    assert checked == len(later) > 0
    # free users: later turns go out as promptly as the schedule's first turns (a busy machine
    # delays both alike; a user held back by the cap would lag by whole answers)
    first = sent[sent.turn == 0]
    assert later.schedule_lag_ms.median() < first.schedule_lag_ms.median() + 20
    summary = summarize(df)
    assert summary["turns_sent"]["1"] == counts[1] and summary["turns_sent"]["2"] == counts[2]
    turn1 = summary["per_turn"]["1"]
    assert math.isfinite(turn1["median_ttft_from_schedule_ms"])
    assert math.isfinite(turn1["p99_schedule_lag_ms"])
    assert summary["median_later_ttft_from_schedule_ms"] > 0
    assert summary["p99_later_schedule_lag_ms"] == pytest.approx(
        np.percentile(later.schedule_lag_ms, 99)
    )
    assert summary["sessions_completed"] > 0
    # a completed session spans three answers and two think times
    assert summary["median_session_e2el_ms"] > 2 * 300


@pytest.mark.parametrize("emulator", [18162], indirect=True)
def test_later_turns_held_back_by_the_in_flight_cap_show_schedule_lag(emulator, tmp_path):
    # One user for a schedule that needs more: later turns wait behind new sessions' first
    # turns, and their lag from the intended time shows it; nothing is lost in the count.
    workload = (
        "name: s\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 32\nconversation:\n  turns: 2\n"
    )
    df = _run(emulator, tmp_path, workload, "--rate-rps", "8", "-t", "3s", "--max-in-flight", "1")
    later = df[(df.turn == 1) & df.sent_at.notna()]
    assert len(later) > 0 and later.schedule_lag_ms.max() > 50
    summary = summarize(df, in_flight_cap=1)
    assert summary["per_turn"]["1"]["held_back"] > 0
    assert summary["max_in_flight"] == 1
    by_status = df.status.value_counts().to_dict()
    assert summary["completed"] == by_status.get("ok", 0)
    assert summary["cancelled"] == by_status.get("cancelled", 0)
    assert summary["requests"] == len(df)


@pytest.mark.parametrize("emulator", [18163], indirect=True)
def test_agent_sessions_fan_out_and_join_before_the_next_step(emulator, tmp_path):
    workload = (
        "name: a\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n"
        "agent:\n  steps: 3\n  tool_tokens: 12\n  fan_out: 2\n  think_time_s: 0.1\n"
    )
    df = _run(emulator, tmp_path, workload, "--rate-rps", "3", "-t", "4s", "--max-in-flight", "8")
    ok = df[df.status == "ok"]
    steps = ok.groupby("turn").size()
    assert steps.get(1, 0) >= 2 and steps.get(2, 0) >= 2, steps
    for (session, step), calls in ok[ok.turn > 0].groupby(["conversation_id", "turn"]):
        assert sorted(calls.request_id) == [f"c{session}-t{step}-b0", f"c{session}-t{step}-b1"]
        before = df[(df.conversation_id == session) & (df.turn == step - 1)]
        assert (before.status == "ok").all()
        # the step was due 0.1 s after the last of the previous step's answers
        assert calls.scheduled_at.nunique() == 1
        assert calls.scheduled_at.iloc[0] == pytest.approx(before.finished_at.max() + 0.1, abs=1e-6)
        assert (calls.sent_at >= before.finished_at.max()).all()
    summary = summarize(df)
    assert summary["sessions_completed"] > 0
    assert summary["p99_session_e2el_ms"] >= summary["median_session_e2el_ms"] > 200


def test_the_summary_counts_sessions_that_completed_after_the_warm_up_only():
    import pandas as pd

    def call(session, turn, sent, status="ok", last=False):
        return {
            "request_id": f"c{session}-t{turn}",
            "conversation_id": session,
            "turn": turn,
            "open_loop": True,
            "scheduled_at": sent,
            "sent_at": sent,
            "first_token_at": sent + 0.1,
            "last_token_at": sent + 0.5,
            "finished_at": sent + 0.5,
            "ttft_ms": 100.0,
            "e2e_ms": 500.0,
            "status": status,
            "session_last": last,
            "itl_ms": [],
        }

    rows = [
        call(0, 0, 100.0),
        call(0, 1, 101.0, last=True),  # in the warm-up, then after it
        call(1, 0, 110.0),
        call(1, 1, 112.0, last=True),  # complete: 110 → 112.5
        call(2, 0, 111.0),
        call(2, 1, 113.0, status="error"),  # a failed turn ends it
        call(3, 0, 120.0),  # cut off by the end of the test
    ]
    summary = summarize(pd.DataFrame(rows), warmup_until=100.5)
    assert summary["sessions"] == 3 and summary["sessions_completed"] == 1
    assert summary["median_session_e2el_ms"] == pytest.approx(2500.0)
    assert summary["turns_sent"] == {"0": 3, "1": 3}
    assert summary["per_turn"]["1"]["completed"] == 2


@pytest.mark.parametrize("emulator", [18164], indirect=True)
def test_closed_loop_users_send_an_agent_chain_one_call_after_another(emulator, tmp_path):
    workload = (
        "name: a\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n"
        "agent:\n  steps: 3\n  tool_tokens: 12\n  fan_out: 2\n"
    )
    df = _run(emulator, tmp_path, workload, "-u", "2", "-r", "2", "-t", "3s")
    ok = df[df.status == "ok"].sort_values("sent_at")
    assert not df.open_loop.any() and {0, 1, 2} <= set(ok.turn)
    for _, calls in ok.groupby("conversation_id"):
        # one user's session: the task, then each step's two calls in turn
        names = [r.split("-", 1)[1] for r in calls.request_id]
        assert names == ["t0", "t1-b0", "t1-b1", "t2-b0", "t2-b1"][: len(names)]
        assert (calls.sent_at.to_numpy()[1:] >= calls.finished_at.to_numpy()[:-1]).all()
        if len(calls) == 5:  # the last step's context holds both branches of the one before
            step1 = calls[calls.turn == 1].expected_prompt_tokens
            assert (calls[calls.turn == 2].expected_prompt_tokens > step1.max() + 12).all()


@pytest.mark.parametrize("emulator", [18165], indirect=True)
def test_closed_loop_users_think_between_turns_and_the_load_is_still_what_was_asked(
    emulator, tmp_path
):
    """Closed loop, a user sends a session's next turn its think time after the answer (the
    intended send time is its scheduled_at); thinking is not idleness, so two users thinking
    0.3 s between turns still count as the load asked for."""
    workload = (
        "name: s\nendpoint: chat\nprompt_tokens: 16\noutput_tokens: 8\n"
        "conversation:\n  turns: 3\n  think_time_s: 0.3\n"
    )
    df = _run(emulator, tmp_path, workload, "-u", "2", "-r", "2", "-t", "4s")
    ok = df[df.status == "ok"].sort_values("sent_at")
    assert not df.open_loop.any() and {0, 1, 2} <= set(ok.turn)
    first, later = ok[ok.turn == 0], ok[ok.turn > 0]
    assert (first.think_ms == 0).all() and (later.think_ms == 300).all()
    by_turn = ok.set_index(["conversation_id", "turn"])
    for row in later.itertuples():
        before = by_turn.loc[(row.conversation_id, row.turn - 1)]
        assert row.scheduled_at == pytest.approx(before.finished_at + 0.3, abs=1e-6)
        assert row.sent_at >= row.scheduled_at
    assert later.idle_before_ms.min() >= 300 - 1e-6 and later.schedule_lag_ms.median() < 20
    # a new session starts at once after the last one's final answer
    assert first.idle_before_ms.dropna().median() < 20
    summary = summarize(df, users=2)
    assert summary["mean_thinking"] > 0.3, summary["mean_thinking"]
    # requests in flight alone hold ~1.45 of the 2 users here: thinking counted is what reaches
    # the load asked; the margin is the second user's start and a busy core's send lag (a
    # suite run on a loaded machine gave 1.91)
    kept = summary["mean_in_flight"] + summary["mean_thinking"]
    assert kept >= 0.9 * 2
    assert summary["mean_in_flight"] < 0.85 * 2
    # the verdict follows in flight and thinking together, never in flight alone (which would
    # always call this run short); a busy core's send lag may still leave the two short of the
    # users (a CI run's unit-test part: 1.91 of 2), and then the verdict counts the thinking
    short = [r for r in summary["client_limited_by"] if "requests in flight" in r]
    assert bool(short) == (kept < IN_FLIGHT_SHARE_LIMIT * 2), (kept, short)
    assert all("sessions thinking" in r for r in short)
