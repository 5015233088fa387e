"""Terminal tables fit their width: sentences go below them, other columns continue below."""

from __future__ import annotations

from vprof.cli.output import render_rows

SENTENCE = "the load generator kept up: event-loop lag p99 2 ms, main loop at most 8 % of a core"


def test_a_table_that_fits_is_printed_as_it_is():
    rows = [{"run": "a", "note": SENTENCE}]
    text = render_rows(rows, width=200)
    assert text.splitlines()[2] == f"a    {SENTENCE}"


def test_one_column_of_sentences_leaves_the_table_for_a_list_keyed_by_row():
    rows = [{"run": f"run-{i}", "rps": 1.5 * i, "verdict": SENTENCE} for i in range(3)]
    text = render_rows(rows, width=60)
    table, notes = text.split("\n\n")
    assert table.splitlines()[0].split() == ["run", "rps"]
    assert notes.splitlines()[0] == "verdict:"
    assert notes.splitlines()[1].startswith("run-0: the load generator kept up")
    assert max(map(len, text.splitlines())) <= 60


def test_sentences_of_several_columns_become_markers_one_per_distinct_text():
    rows = [
        {"run": f"run-{i}", "verdict": SENTENCE, "warning": f"{SENTENCE} ({i})"} for i in range(2)
    ]
    text = render_rows(rows, width=60)
    lines = text.splitlines()
    assert lines[2].split() == ["run-0", "[1]", "[2]"] and lines[3].split() == [
        "run-1",
        "[1]",
        "[3]",
    ]
    assert "[1] run-0, verdict; run-1, verdict: the load generator kept up" in text.replace(
        "\n    ", " "
    )
    assert max(map(len, lines)) <= 60


def test_columns_that_do_not_fit_continue_in_blocks_led_by_the_first():
    rows = [{"metric": "p95_ttft_ms", **{f"run-{k}-with-a-long-name": 100.0 + k for k in range(6)}}]
    text = render_rows(rows, width=80)
    blocks = text.split("\n\n")
    assert len(blocks) >= 2 and all(b.startswith("metric") for b in blocks)
    assert all(len(line) <= 80 for line in text.splitlines())
    shown = [name for b in blocks for name in b.splitlines()[0].split()[1:]]
    assert shown == [f"run-{k}-with-a-long-name" for k in range(6)]  # each once, in order


def test_a_wrapped_sentence_keeps_each_number_with_its_unit():
    from vprof.cli.output import wrap

    text = "could not have seen a change under ±1.3 % in 2 ms at 3.5 req/s"
    for width in range(20, len(text)):
        lines = wrap(text, width).splitlines()
        assert all(not line.strip().startswith(("%", "ms", "req/s")) for line in lines[1:])
        assert " ".join(line.strip() for line in lines) == text


def test_a_note_wraps_on_a_terminal_and_stays_one_line_in_a_pipe(monkeypatch, capsys):
    import sys

    from vprof.cli.output import echo_note

    note = f"note: {SENTENCE}; {SENTENCE}"
    echo_note(note)  # captured: not a terminal
    assert capsys.readouterr().err == note + "\n"
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    echo_note(note)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= 60
    assert all(line.startswith("  ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == note
