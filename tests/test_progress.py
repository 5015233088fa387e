"""Long commands' progress: a live display on a terminal, plain lines in a log."""

from __future__ import annotations

import io

import pytest

from vprof.cli.progress import ProgressView, remaining_s
from vprof.runs.spec import Tick


def _ticks(run: str, place: tuple[int, int], seconds: int) -> list[Tick]:
    return [
        Tick(
            run, float(t), 10.0, done=3 * t, failed=t // 5, detail="server: running 2", place=place
        )
        for t in range(1, seconds + 1)
    ]


def test_on_a_terminal_each_run_gets_a_bar_and_the_command_its_time_to_go(capsys):
    from rich.console import Console

    screen = io.StringIO()
    view = ProgressView(live=True, console=Console(file=screen, force_terminal=True, width=120))
    view.say("baseline × steady: running")
    for tick in _ticks("baseline--chat--steady", (1, 2), 10):
        view.say(tick)
    view.say("\n  ! the load generator is falling behind")
    for tick in _ticks("chunked-256--chat--steady", (2, 2), 4):
        view.say(tick)
    view.close()
    text = screen.getvalue()
    assert "\x1b[" in text  # drawn with terminal controls, not printed line by line
    assert "[1/2]" in text and "[2/2]" in text
    assert "baseline--chat--steady" in text and "chunked-256--chat--steady" in text
    assert "4/10 s  answered 12  failed 0" in text
    assert "the command: run 2 of 2" in text and "to go" in text
    assert "! the load generator is falling behind" in text  # lines print above the bars
    assert capsys.readouterr().err == "baseline × steady: running\n"  # before the bars


def test_in_a_log_ticks_are_plain_lines_at_most_every_10_s(capsys):
    view = ProgressView(live=False)
    view.say("baseline × steady: running")
    for tick in _ticks("baseline--chat--steady", (1, 2), 5):
        view.say(tick)  # within 10 s: only the first prints
    view.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "baseline × steady: running"
    assert lines[1:] == [str(_ticks("baseline--chat--steady", (1, 2), 1)[0])]
    assert "\x1b" not in "".join(lines) and "\r" not in "".join(lines)
    assert lines[1].split() == [
        "[1/2]",
        "baseline--chat--steady",
        "1/10",
        "s",
        "answered",
        "3",
        "failed",
        "0",
        "server:",
        "running",
        "2",
    ]


def test_a_runs_final_tick_fills_its_bar_on_a_terminal_and_prints_nothing_in_a_log(capsys):
    from rich.console import Console

    ticks = _ticks("baseline--chat--steady", (1, 1), 7)  # its last tick came at 7 of 10 s
    final = Tick("baseline--chat--steady", 10.0, 10.0, done=31, failed=1, final=True)
    screen = io.StringIO()
    live = ProgressView(live=True, console=Console(file=screen, force_terminal=True, width=120))
    for tick in [*ticks, final]:
        live.say(tick)
    live.close()
    assert "10/10 s  answered 31  failed 1" in screen.getvalue()
    plain = ProgressView(live=False)
    plain.say(final)  # the first tick a log would print, were it not the last
    assert capsys.readouterr().err == ""


def test_the_time_to_go_counts_what_is_left_and_each_run_to_come_with_its_set_up():
    # run 2 of 4 at 30 of 60 s; 200 s of wall time so far, run 1 measured 60 s: the 110 s
    # beyond measuring went to two runs' set-up (55 s each)
    left = remaining_s(200.0, 60.0, 30.0, 60.0, number=2, of=4)
    assert left == pytest.approx(30.0 + 2 * (60.0 + 55.0))
    assert remaining_s(10.0, 0.0, 10.0, 10.0, number=1, of=1) == 0.0


def test_a_ladders_rungs_count_together_and_a_tunes_benches_claim_no_place():
    from vprof.runs.spec import nested, unplaced

    said: list = []
    tick = Tick("rung", 1.0, 10.0, place=(2, 3))  # its bench's run 2 of 3
    nested(said.append, 1, 4)(tick)  # the second of four rungs
    nested(said.append, 1, 4)("a line")
    unplaced(said.append)(tick)
    assert said[0].place == (5, 12) and said[1] == "a line" and said[2].place is None


def test_the_answered_and_failed_counts_add_each_locust_processs_latest(tmp_path):
    import json

    from vprof.records.rundir import LOADGEN_ANSWERED, LOADGEN_FAILED, RunDir
    from vprof.runs.clientwatch import ClientWatch

    run = RunDir(tmp_path)
    watch = ClientWatch(run)
    assert watch.check() is None and watch.counts() is None  # nothing written yet

    def sample(t: float, worker: str, answered: int, failed: int) -> str:
        return (
            json.dumps(
                {
                    "t": t,
                    "worker": worker,
                    "loop_lag_p99_ms": 1.0,
                    LOADGEN_ANSWERED: answered,
                    LOADGEN_FAILED: failed,
                }
            )
            + "\n"
        )

    run.loadgen_jsonl.write_text(sample(1, "w0", 5, 0) + sample(1, "w1", 7, 1))
    watch.check()  # before the test's warm-up is known: the counts are read all the same
    assert watch.counts() == (12, 1)
    with run.loadgen_jsonl.open("a") as f:
        f.write(sample(3, "w0", 11, 2))
    watch.check()
    assert watch.counts() == (18, 3)  # w0's latest and w1's
