"""Hostile input, big or odd: bounded, not crashed on (issue 26 item 7).

A trace's CSV cell as long as a real trace needs is read; a time that jumps by decades (epoch
nanoseconds after a 0 row) is refused at its line; a table of one row per interval (a trace's
rate over time, a run's timeline) is checked against one row limit before it is built; names
that become file names (a ``--url`` label, a profile name) never end in "File name too long".
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_hostile_input import assert_refused, write

from vprof.cli.main import cli
from vprof.common.errors import RunError, WorkloadError
from vprof.common.numbers import MAX_INTERVAL_ROWS, check_interval_rows
from vprof.records.rundir import MAX_NAME_BYTES, name_of
from vprof.workloads import trace as trace_module
from vprof.workloads.trace import TraceSpec, load_trace
from vprof.workloads.tracestats import nice_bucket_s, rate_over_time


def _cli(*args: str):
    return CliRunner().invoke(cli, list(args))


# ---------------------------------------------------------------------------- traces


def test_a_csv_trace_with_a_1m_token_prompts_block_ids_is_read(tmp_path):
    """A 1M-token prompt at block size 16: 62,500 ids, a 400 kB cell (csv's limit: 128 KiB)."""
    ids = " ".join(str(i) for i in range(62_500))
    path = write(
        tmp_path / "big.csv",
        f't_s,prompt_tokens,output_tokens,prefix_blocks\n0,1000000,8,"{ids}"\n1,20,8,0\n',
    )
    trace = load_trace(TraceSpec(str(path), block_size=16))
    assert len(trace.requests[0].prefix_blocks) == 62_500
    result = _cli("trace", "stats", str(path), "--block-size", "16", "--format", "json")
    assert result.exit_code == 0, result.output
    assert '"blocks": 62501' in result.output


def test_a_csv_cell_beyond_the_limit_is_a_located_error(tmp_path, monkeypatch):
    previous = csv.field_size_limit()
    monkeypatch.setattr(trace_module, "_MAX_CSV_FIELD", 100)
    csv.field_size_limit(100)
    try:
        path = write(tmp_path / "t.csv", f"t_s,prompt_tokens,output_tokens\n0,{'1' * 200},1\n")
        with pytest.raises(WorkloadError, match="not CSV: field larger than field limit") as err:
            load_trace(TraceSpec(str(path)))
        assert err.value.line == 2
    finally:
        csv.field_size_limit(previous)


@pytest.mark.parametrize(
    "name, text, where",
    [
        (
            "ns.jsonl",  # epoch nanoseconds after a 0 row, read as Mooncake's milliseconds
            '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
            '{"timestamp": 1700000000000000000, "input_length": 10, "output_length": 5}\n',
            "ns.jsonl:2: timestamp: is 1.7e+15 s after the first request",
        ),
        (
            "ns.csv",
            "t_s,prompt_tokens,output_tokens\n0,10,5\n1700000000000000000,10,5\n",
            "ns.csv:3: t_s: is 1.7e+18 s after the first request",
        ),
    ],
)
def test_a_time_decades_after_the_first_is_refused_at_its_line(tmp_path, name, text, where):
    path = write(tmp_path / name, text)
    result = _cli("trace", "stats", str(path))
    assert_refused(result, where, "a time in another unit?")


def test_a_rate_bucket_that_makes_too_many_rows_is_refused_before_it_is_built():
    result = _cli("trace", "stats", "sample-trace", "--bucket-s", "1e-9")
    assert_refused(result, "--bucket-s: 1e-09 s intervals over this replay make ", "rows (at most")
    assert "use an interval of at least" in result.output
    with pytest.raises(WorkloadError, match="at most 100,000"):
        rate_over_time([0.0, 1e9], [1, 1], 1e-300)  # the ratio overflows to inf
    assert len(rate_over_time([0.0, 99_999.0], [1, 1], 1.0)) == MAX_INTERVAL_ROWS  # the edge


def test_the_automatic_rate_bucket_stays_a_short_table_for_any_span():
    for span_s in (0.0, 1.0, 3600.0 * 15, 3600.0 * 16, 1e9):
        bucket = nice_bucket_s(span_s)
        assert span_s / bucket <= 16, (span_s, bucket)
    assert nice_bucket_s(1e9) % 3600 == 0


def test_one_row_limit_for_every_table_of_intervals():
    check_interval_rows(99_999.0, 1.0, over="x", error=RunError)
    with pytest.raises(
        RunError, match=r"^--interval: 1 s intervals over x make 100,001 rows"
    ) as err:
        check_interval_rows(100_000.0, 1.0, over="x", error=RunError, key="--interval")
    assert err.value.key == "--interval" and "at least 1 s" in (err.value.hint or "")


# ---------------------------------------------------------------------------- names of files


def test_names_of_files_stay_short_and_distinct_in_bytes():
    assert name_of("chunked-512", "chat", "steady", "1a2b3c4d") == (
        "chunked-512--chat--steady--1a2b3c4d"  # what run folders were always called
    )
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    for parts in [(long_a, "chat", "steady", "1a2b3c4d"), ("模型" * 2500,), ("é" * 5000, "w")]:
        name = name_of(*parts)
        assert len(name.encode()) <= MAX_NAME_BYTES, name
    a, b = name_of(long_a, "chat", "steady", "d"), name_of(long_b, "chat", "steady", "d")
    assert a != b and a.endswith("--chat--steady--d") and b.endswith("--chat--steady--d")
    assert name_of(".hidden") == "hidden" and name_of("--help", "x") == "help--x"


def test_a_long_url_label_names_a_run_folder_not_file_name_too_long(tmp_path, monkeypatch):
    """A 300-character, non-ASCII label of a ``--url`` server names its run folder, cut with a
    hash (before: ``OSError: File name too long``). The load generator is a stand-in that
    fails: the folder, made before it, is what is tested."""
    import vprof.runs.measure
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator

    def stand_in(*args, **kwargs):
        raise RunError("the load generator is a test's stand-in")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(vprof.runs.measure, "LoadProcess", stand_in)
    config = EmulatorConfig(ttft_ms=1, itl_ms=1, model="tiny", max_model_len=2048)
    with Emulator(config) as emulator:
        label = "模型-" + "x" * 300  # 306 characters, 310 bytes
        args = ["--url", emulator.url, "--workload", "tiny-smoke", "--no-metrics"]
        result = _cli("bench", label, *args, "--out", "o", "--format", "json")
    assert "the load generator is a test's stand-in" in result.output, result.output
    assert "File name too long" not in result.output + repr(result.exception)
    (name,) = [p.name for p in Path("o").iterdir() if p.is_dir()]
    assert name.startswith("xxx") and len(name.encode()) <= MAX_NAME_BYTES


def test_a_profile_name_too_long_for_a_file_is_refused_by_validate(tmp_path):
    name = "p" * 5000
    path = write(tmp_path / "p.yaml", f"name: {name}\nmodel: m\n")
    assert_refused(_cli("validate", str(path)), "p.yaml:1: name: profile name 'pppp", "5,000")
    assert os.path.exists(path)
    fits = write(tmp_path / "q.yaml", f"name: {'q' * 128}\nmodel: m\n")
    assert _cli("validate", str(fits)).exit_code == 0


def test_a_trace_with_a_long_file_name_is_replayed_from_short_files(tmp_path, monkeypatch):
    from vprof.traffic.replay import write_trace_replay

    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "cache"))
    path = write(tmp_path / ("é" * 120 + ".csv"), "t_s,prompt_tokens,output_tokens\n0,10,5\n")
    replay = write_trace_replay(str(path))  # 244 bytes: + ".traffic.yaml" was too long
    assert replay.traffic.exists() and len(replay.traffic.name.encode()) <= 120
