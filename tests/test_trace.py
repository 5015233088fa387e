"""Request traces: the three formats, every bad-file case (file:line), selection, the trace
workload and traffic shape, the shared schedule, and ``vprof trace stats``. Pure and fast."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from vprof.cli.main import cli
from vprof.common.errors import WorkloadError
from vprof.traffic.load import get_shape, shape_to_json
from vprof.traffic.shape import TRACE_TAIL_S, arrival_offsets, partition
from vprof.workloads import trace as trace_module
from vprof.workloads.loading import get_workload, load_workload_file
from vprof.workloads.trace import TraceSpec, load_trace
from vprof.workloads.tracesample import SAMPLE_PATH, write_sample_trace
from vprof.workloads.tracestats import (
    implied_cached_tokens,
    percentile,
    prefix_sharing,
    trace_stats,
)

MOONCAKE = (
    '{"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]}\n'
    '{"timestamp": 10535, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]}\n'
    '{"timestamp": 27482, "input_length": 1100, "output_length": 5, "hash_ids": [46, 48, 49]}\n'
)
AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:16:06.0000000,879,1\n"
)


def _write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def _read(tmp_path: Path, name: str, text: str | bytes, **settings):
    return load_trace(TraceSpec(_write(tmp_path, name, text), **settings))


# --- the formats ------------------------------------------------------------------------------


def test_mooncake_jsonl_reads_millisecond_times_lengths_and_block_ids(tmp_path):
    trace = _read(tmp_path, "m.jsonl", MOONCAKE)
    assert trace.format == "mooncake"
    assert [r.t_s for r in trace.requests] == [0.0, 10.535, 27.482]
    assert [(r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (655, 52),
        (672, 26),
        (1100, 5),
    ]
    assert trace.requests[2].prefix_blocks == (46, 48, 49)
    assert [r.line for r in trace.requests] == [1, 2, 3]


def test_azure_csv_reads_date_times_relative_to_the_first_request(tmp_path):
    trace = _read(tmp_path, "a.csv", AZURE)
    assert trace.format == "azure"
    assert [round(r.t_s, 6) for r in trace.requests] == [0.0, 4.314579, 19.31941]
    assert [r.prompt_tokens for r in trace.requests] == [374, 396, 879]
    assert all(r.prefix_blocks == () for r in trace.requests)
    # Azure's 2024 traces carry a UTC offset: the same instants read the same.
    aware = AZURE.replace(".6805900,", ".680590+00:00,").replace(".9951690,", ".995169+00:00,")
    aware = aware.replace(".0000000,", ".000000+00:00,")
    assert _read(tmp_path, "b.csv", aware).offsets_s() == trace.offsets_s()


def test_vprof_schema_reads_the_same_from_jsonl_and_csv(tmp_path):
    jsonl = (
        '{"t_s": 0.5, "prompt_tokens": 600, "output_tokens": 8, "prefix_blocks": [1, 2],'
        ' "session_id": "s1"}\n'
        '{"t_s": 1.25, "prompt_tokens": 30, "output_tokens": 4}\n'
        '{"t_s": 3, "prompt_tokens": 700, "output_tokens": 9, "prefix_blocks": [1, 3],'
        ' "session_id": 7}\n'
    )
    csv_text = (
        "t_s,prompt_tokens,output_tokens,prefix_blocks,session_id\n"
        "0.5,600,8,1 2,s1\n"
        "1.25,30,4,,\n"
        "3,700,9,1 3,7\n"
    )
    a = _read(tmp_path, "v.jsonl", jsonl)
    b = _read(tmp_path, "v.csv", csv_text)
    assert a.format == b.format == "vprof"
    assert a.requests[2].session_id == "7"
    assert [
        (r.t_s, r.prompt_tokens, r.output_tokens, r.prefix_blocks, r.session_id) for r in a.requests
    ] == [
        (r.t_s, r.prompt_tokens, r.output_tokens, r.prefix_blocks, r.session_id) for r in b.requests
    ]
    assert a.offsets_s() == [0.0, 0.75, 2.5]


def test_the_format_can_be_named_and_must_match_the_file(tmp_path):
    assert _read(tmp_path, "m.jsonl", MOONCAKE, format="mooncake").format == "mooncake"
    with pytest.raises(
        WorkloadError, match="the azure format is CSV, but this file reads as JSON lines"
    ) as caught:
        _read(tmp_path, "m2.jsonl", MOONCAKE, format="azure")
    assert caught.value.line == 1
    # Named explicitly, a missing field is that field's error on its line.
    with pytest.raises(WorkloadError) as caught:
        _read(tmp_path, "v.jsonl", '{"t_s": 0, "prompt_tokens": 5}\n', format="vprof")
    assert (caught.value.line, caught.value.key) == (1, "output_tokens")


def test_blank_lines_a_bom_and_extra_fields_are_fine(tmp_path):
    text = "\ufeff\n" + MOONCAKE.replace("}\n", ', "note": "x"}\n\n', 1)
    trace = _read(tmp_path, "m.jsonl", text)
    assert len(trace) == 3
    assert [r.line for r in trace.requests] == [2, 4, 5]


# --- bad files fail with file:line -------------------------------------------------------------

_GOOD = '{"timestamp": 0, "input_length": 10, "output_length": 2}\n'


@pytest.mark.parametrize(
    ("name", "text", "settings", "line", "key", "message"),
    [
        (
            "a.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,10\n",
            {},
            1,
            None,
            "cannot tell the trace format",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,10\n",
            {"format": "azure"},
            1,
            None,
            "missing column GeneratedTokens",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "output_length": 2}\n',
            {},
            2,
            "input_length",
            "missing",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 9, "input_length": 10, "output_length": 2}\n'
            '{"timestamp": 8, "input_length": 10, "output_length": 2}\n',
            {},
            3,
            "timestamp",
            "the time goes backwards (-0.001 s after line 2)",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": -3, "output_length": 2}\n',
            {},
            2,
            "input_length",
            "must be between 1 and 10,000,000, got -3",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": 10, "output_length": 0}\n',
            {},
            2,
            "output_length",
            "must be between 1 and 10,000,000, got 0",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": 10.5, "output_length": 2}\n',
            {},
            2,
            "input_length",
            "must be a whole number, got 10.5",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": "ten", "output_length": 2}\n',
            {},
            2,
            "input_length",
            "'ten' is not a whole number",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": NaN, "input_length": 10, "output_length": 2}\n',
            {},
            2,
            None,
            "NaN is not a finite number",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": 1e30, "output_length": 2}\n',
            {},
            2,
            "input_length",
            "must be between 1 and 10,000,000, got 1e+30",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,inf,3\n",
            {},
            2,
            "ContextTokens",
            "must be a finite number, got inf",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,nan,3\n",
            {},
            2,
            "ContextTokens",
            "must be a finite number, got nan",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,3\n",
            {},
            2,
            "TIMESTAMP",
            "not a date-time: 'yesterday'",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10\n",
            {},
            2,
            None,
            "expected 3 fields like the header, got 2",
        ),
        (
            "m.jsonl",
            _GOOD + '{"timestamp": 5, "input_length": 3000, "output_length": 200}\n',
            {"max_model_len": 2048},
            2,
            "input_length",
            "prompt 3000 + output 200 = 3200 tokens exceeds max_model_len 2048",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}\n',
            {},
            1,
            "hash_ids",
            "3 blocks of 512 tokens, but the prompt of 600 tokens fills only 2",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, -2]}\n',
            {},
            1,
            "hash_ids",
            "must be between 0 and",
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": ["a"]}\n',
            {},
            1,
            "hash_ids",
            "'a' is not a whole number",
        ),
        ("m.jsonl", _GOOD + "{not json\n", {}, 2, None, "not JSON"),
        ("m.jsonl", _GOOD + "[1, 2]\n", {}, 2, None, "must be a JSON object, got list"),
        ("m.jsonl", "", {}, None, None, "no requests in the file (it is empty)"),
        ("m.jsonl", "\n \n", {}, None, None, "no requests in the file (it is empty)"),
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", {}, 1, None, "only a header"),
        ("a.jsonl", "timestamp: 0\n{}\n", {}, 1, None, "not a trace: its first line is neither"),
        ("a.csv", "when,in,out\n0,1,1\n", {}, 1, None, "not a trace: its first line is neither"),
    ],
)
def test_bad_trace_files_fail_with_file_line_and_key(
    tmp_path, name, text, settings, line, key, message
):
    with pytest.raises(WorkloadError) as caught:
        _read(tmp_path, name, text, **settings)
    error = caught.value
    assert message in error.message
    assert (error.line, error.key) == (line, key)
    assert error.path == str(tmp_path / name)
    if line is not None:  # one line of text a person can act on
        assert error.format().startswith(f"{tmp_path / name}:{line}: ")


def test_text_that_is_not_utf8_names_its_line(tmp_path):
    data = (_GOOD * 2).encode() + b'{"timestamp": 9, "input_length": 1\xff0}\n'
    with pytest.raises(WorkloadError, match="not UTF-8 text") as caught:
        _read(tmp_path, "m.jsonl", data)
    assert caught.value.line == 3


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read the trace"):
        load_trace(TraceSpec(str(tmp_path / "absent.jsonl")))


def test_more_requests_than_the_cap_fail_with_a_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_module, "MAX_REQUESTS", 5)
    rows = "".join(
        f'{{"timestamp": {i}, "input_length": 10, "output_length": 2}}\n' for i in range(8)
    )
    with pytest.raises(WorkloadError, match="more than 5 requests selected") as caught:
        _read(tmp_path, "m.jsonl", rows)
    assert "max_requests" in (caught.value.hint or "")
    assert len(_read(tmp_path, "m2.jsonl", rows, max_requests=5)) == 5


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"time_scale": 0}, "time_scale"),
        ({"time_scale": float("inf")}, "time_scale"),
        ({"time_scale": float("nan")}, "time_scale"),
        ({"start_s": -1.0}, "start_s"),
        ({"duration_s": 0}, "duration_s"),
        ({"max_requests": 0}, "max_requests"),
        ({"max_requests": 2.5}, "max_requests"),
        ({"block_size": 0}, "block_size"),
        ({"max_model_len": 1}, "max_model_len"),
        ({"format": "parquet"}, "format"),
    ],
)
def test_settings_out_of_range_name_their_key(settings, key):
    with pytest.raises(WorkloadError) as caught:
        TraceSpec("x.jsonl", **settings)
    assert caught.value.key == key


# --- selection -------------------------------------------------------------------------------


def _uniform_rows(n: int, gap_ms: int = 1000) -> str:
    return "".join(
        f'{{"timestamp": {i * gap_ms}, "input_length": {10 + i}, "output_length": 2}}\n'
        for i in range(n)
    )


def test_time_scale_compresses_the_schedule(tmp_path):
    path = _write(tmp_path, "m.jsonl", _uniform_rows(5))
    assert load_trace(TraceSpec(path)).offsets_s() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert load_trace(TraceSpec(path, time_scale=2)).offsets_s() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert load_trace(TraceSpec(path, time_scale=0.5)).offsets_s()[-1] == 8.0


def test_a_window_and_a_cap_select_requests_in_trace_seconds(tmp_path):
    path = _write(tmp_path, "m.jsonl", _uniform_rows(10))
    window = load_trace(TraceSpec(path, start_s=2.5, duration_s=4, time_scale=2))
    assert [r.prompt_tokens for r in window.requests] == [13, 14, 15, 16]  # t = 3, 4, 5, 6 s
    assert window.offsets_s() == [0.0, 0.5, 1.0, 1.5]  # from the first selected request
    capped = load_trace(TraceSpec(path, start_s=2.5, max_requests=2))
    assert [r.prompt_tokens for r in capped.requests] == [13, 14]
    with pytest.raises(WorkloadError, match="selects no request; the trace's 10 requests span 9 s"):
        load_trace(TraceSpec(path, start_s=60))


def test_rows_after_the_selection_are_not_read(tmp_path):
    text = _uniform_rows(4) + '{"timestamp": 9000, "input_length": -1, "output_length": 2}\n'
    path = _write(tmp_path, "m.jsonl", text)
    assert len(load_trace(TraceSpec(path, duration_s=3.5))) == 4
    assert load_trace(TraceSpec(path, max_requests=2)).rows_read == 2
    with pytest.raises(WorkloadError) as caught:
        load_trace(TraceSpec(path))
    assert caught.value.line == 5


def test_a_changed_file_is_read_again(tmp_path):
    path = _write(tmp_path, "m.jsonl", _uniform_rows(3))
    assert len(load_trace(TraceSpec(path))) == 3
    Path(path).write_text(_uniform_rows(4))
    assert len(load_trace(TraceSpec(path))) == 4


# --- implied prefix-cache hits and stats --------------------------------------------------------


def _requests(*rows: tuple[int, tuple[int, ...]]):
    return [trace_module.TraceRequest(float(i), p, 1, blocks) for i, (p, blocks) in enumerate(rows)]


def test_implied_hits_count_blocks_whose_whole_prefix_was_seen():
    sharing = prefix_sharing(
        _requests((1536, (1, 2, 3)), (1536, (1, 2, 4)), (1024, (5, 2)), (1536, (1, 2, 3))), 512
    )
    # the 2nd hits 1 and 2; the 3rd's block 2 follows another block, so it misses; the 4th hits 3
    assert (sharing.blocks, sharing.block_hits, sharing.distinct_blocks) == (11, 5, 6)
    assert sharing.block_hit_rate == 5 / 11
    assert sharing.cached_tokens == 5 * 512
    assert sharing.token_hit_rate == 5 * 512 / (1536 * 3 + 1024)
    assert sharing.requests_with_hits == 2


def test_a_partial_last_block_hits_only_the_tokens_sent_before():
    # 600 tokens: block 2 holds 88; then 700 tokens with the same ids: 512 + 88 are cached.
    requests = _requests((600, (1, 2)), (700, (1, 2)), (650, (1, 2)))
    sharing = prefix_sharing(requests, 512)
    assert sharing.cached_tokens == (512 + 88) + (512 + 138)
    assert implied_cached_tokens(requests, 512) == [0, 600, 650]
    assert sharing.block_hits == 4
    assert prefix_sharing(_requests((900, ())), 512).block_hit_rate != 0.0  # nan: no blocks


def test_percentiles_interpolate_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert [percentile(values, q) for q in (0, 50, 90, 99, 100)] == pytest.approx(
        [1.0, 3.0, 7.6, 9.76, 10.0]
    )


def test_stats_report_rate_over_time_lengths_and_sharing(tmp_path):
    trace = _read(tmp_path, "m.jsonl", MOONCAKE, time_scale=10)
    stats = trace_stats(trace, bucket_s=1.0)
    s = stats["summary"]
    assert s["requests"] == 3 and s["replay_duration_s"] == pytest.approx(2.7482)
    assert s["trace_span_s"] == pytest.approx(27.482)
    assert [row["requests"] for row in stats["rate"]] == [1, 1, 1]
    assert s["blocks"] == 7 and s["implied_block_hit_rate"] == pytest.approx(3 / 7)
    lengths = {row["quantity"]: row for row in stats["lengths"]}
    assert lengths["prompt_tokens"]["p50"] == 672 and lengths["output_tokens"]["max"] == 52


# --- the sample trace ------------------------------------------------------------------------


def test_the_shipped_sample_is_exactly_the_generator_output():
    out = io.StringIO()
    write_sample_trace(out)
    assert SAMPLE_PATH.read_text() == out.getvalue()


def test_the_sample_has_shared_prefixes_and_fits_every_shipped_profile():
    workload = get_workload("sample-trace")
    trace = load_trace(workload.trace)
    stats = trace_stats(trace)["summary"]
    assert 250 <= stats["requests"] <= 400 and 60 <= stats["trace_span_s"] <= 120
    assert 0.3 <= stats["implied_token_hit_rate"] <= 0.9
    assert stats["peak_rate_rps"] >= 1.5 * stats["mean_rate_rps"]  # it has a burst
    assert workload.max_request_tokens() <= 2048


# --- the trace workload ----------------------------------------------------------------------


def test_a_trace_workload_reads_its_file_relative_to_itself(tmp_path):
    _write(tmp_path, "m.jsonl", MOONCAKE)
    yaml_path = tmp_path / "replay.yaml"
    yaml_path.write_text("kind: trace\nfile: m.jsonl\ntime_scale: 2\nmax_model_len: 4096\n")
    workload = load_workload_file(yaml_path)
    assert workload.kind == "trace" and workload.name == "replay"
    assert workload.trace == TraceSpec(str(tmp_path / "m.jsonl"), time_scale=2, max_model_len=4096)
    assert workload.prompt_tokens.values == (655, 672, 1100)
    assert workload.max_request_tokens() == 1105 and workload.endpoint == "completions"
    assert workload.to_dict()["time_scale"] == 2
    assert hash(workload) == hash(load_workload_file(yaml_path))


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        ("kind: trace\n", 1, "file", "missing: the trace file"),
        ("kind: trace\nfile: m.jsonl\ntime_scale: -2\n", 3, "time_scale", "must be more than 0"),
        ("kind: trace\nfile: m.jsonl\nprompt_tokens: 10\n", 3, "prompt_tokens", "unknown key"),
        ("prompt_tokens: 10\noutput_tokens: 2\ntime_scale: 2\n", 3, "time_scale", "unknown key"),
        ("kind: replay\nfile: m.jsonl\n", 1, "kind", "unknown workload kind 'replay'"),
        ("kind: trace\nfile: absent.jsonl\n", 2, "file", "no such file"),
    ],
)
def test_trace_workload_errors_name_file_line_and_key(tmp_path, text, line, key, message):
    _write(tmp_path, "m.jsonl", MOONCAKE)
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path)
    assert message in caught.value.message
    assert (caught.value.path, caught.value.line, caught.value.key) == (str(path), line, key)


def test_a_trace_setting_without_kind_trace_says_what_is_missing(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("prompt_tokens: 10\noutput_tokens: 2\nfile: m.jsonl\n")
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path)
    assert caught.value.hint == "trace settings need kind: trace"


def test_a_bad_trace_fails_when_its_workload_loads(tmp_path):
    _write(
        tmp_path, "m.jsonl", _GOOD + '{"timestamp": 5, "input_length": 10, "output_length": -2}\n'
    )
    path = tmp_path / "w.yaml"
    path.write_text("kind: trace\nfile: m.jsonl\n")
    with pytest.raises(WorkloadError) as caught:
        load_workload_file(path)
    assert caught.value.format().startswith(f"{tmp_path / 'm.jsonl'}:2: output_length:")


# --- the trace traffic shape and its schedule ------------------------------------------------


def _replay_files(tmp_path: Path, rows: str, shape_text: str) -> Path:
    _write(tmp_path, "m.jsonl", rows)
    (tmp_path / "replay.yaml").write_text("kind: trace\nfile: m.jsonl\ntime_scale: 4\n")
    shape = tmp_path / "shape.yaml"
    shape.write_text(shape_text)
    return shape


def test_a_trace_shape_replays_the_workload_times(tmp_path):
    shape_path = _replay_files(
        tmp_path, _uniform_rows(9), "kind: open-loop\nprocess: trace\ntrace: replay.yaml\n"
    )
    shape = get_shape(shape_path)
    assert shape.open_loop and shape.trace == str(tmp_path / "replay.yaml")
    assert arrival_offsets(shape, seed=0) == [i / 4 for i in range(9)]
    assert arrival_offsets(shape, seed=99) == arrival_offsets(shape, seed=0)  # no randomness
    assert shape.expected_requests() == 9
    assert shape.duration_s == 2.0 + TRACE_TAIL_S
    assert shape.rate_rps == 4.0  # the trace's mean rate, for display and offered load
    explicit = shape_path.with_name("short.yaml")
    explicit.write_text("kind: open-loop\nprocess: trace\ntrace: replay.yaml\nduration_s: 1\n")
    assert get_shape(explicit).duration_s == 1.0


def test_the_shipped_trace_shape_names_the_shipped_trace():
    shape = get_shape("sample-trace")
    workload = get_workload("sample-trace")
    assert shape.trace == str(Path(workload.source).resolve())  # no name looked up twice
    offsets = arrival_offsets(shape, 0)
    assert offsets == load_trace(workload.trace).offsets_s()
    assert len(offsets) == len(workload.prompt_tokens.values)
    assert shape.total_s == pytest.approx(offsets[-1] + TRACE_TAIL_S)


def test_a_trace_shape_reads_back_exactly_as_the_bench_hands_it_over():
    shape = get_shape("sample-trace")
    again = get_shape(shape_to_json(shape))
    assert again.to_dict() == {**shape.to_dict(), "source": "--traffic"}


def test_editing_the_trace_changes_the_workload(tmp_path):
    _write(tmp_path, "m.jsonl", MOONCAKE)
    yaml_path = tmp_path / "replay.yaml"
    yaml_path.write_text("kind: trace\nfile: m.jsonl\n")
    before = load_workload_file(yaml_path).to_dict()
    edited = _write(
        tmp_path, "m.jsonl", MOONCAKE.replace('"output_length": 5', '"output_length": 6')
    )
    stat = os.stat(edited)  # same size; file times can be coarser than two quick writes
    os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = load_workload_file(yaml_path).to_dict()
    assert before["content_sha256"] != after["content_sha256"]
    assert {k: v for k, v in before.items() if k != "content_sha256"} == {
        k: v for k, v in after.items() if k != "content_sha256"
    }


@pytest.mark.parametrize(
    ("shape_text", "line", "key", "message"),
    [
        ("kind: open-loop\nprocess: trace\n", 2, "process", "needs trace:"),
        (
            "kind: open-loop\nprocess: trace\ntrace: nosuch\n",
            3,
            "trace",
            "no workload named 'nosuch'",
        ),
        ("kind: open-loop\nprocess: trace\ntrace: chat\n", 3, "trace", "is synthetic, not a trace"),
        (
            "kind: open-loop\nprocess: trace\ntrace: replay.yaml\nrate_rps: 3\n",
            4,
            "rate_rps",
            "replays the trace's own times",
        ),
        (
            "kind: steady\nprocess: trace\ntrace: replay.yaml\nduration_s: 5\n",
            2,
            "process",
            "needs kind: open-loop",
        ),
        (
            "kind: open-loop\nrate_rps: 3\nduration_s: 5\ntrace: replay.yaml\n",
            4,
            "trace",
            "only a shape with process: trace",
        ),
    ],
)
def test_trace_shape_errors_name_file_line_and_key(tmp_path, shape_text, line, key, message):
    shape_path = _replay_files(tmp_path, _uniform_rows(3), shape_text)
    with pytest.raises(WorkloadError) as caught:
        get_shape(shape_path)
    assert message in caught.value.message
    assert (caught.value.path, caught.value.line, caught.value.key) == (str(shape_path), line, key)


def test_the_schedule_is_the_same_in_every_process_and_split_without_overlap(tmp_path):
    shape_path = _replay_files(
        tmp_path, MOONCAKE * 1, "kind: open-loop\nprocess: trace\ntrace: replay.yaml\n"
    )
    code = (
        "import json, sys\n"
        "from vprof.traffic.load import get_shape\n"
        "from vprof.traffic.shape import TrafficShape, arrival_offsets\n"
        # the users rebuild the shape from its dict, as the run message carries it
        "shape = TrafficShape(**get_shape(sys.argv[1]).to_dict())\n"
        "print(json.dumps(arrival_offsets(shape, 5)))\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, str(shape_path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
        for _ in range(2)
    ]
    here = arrival_offsets(get_shape(shape_path), 0)
    assert json.loads(runs[0]) == json.loads(runs[1]) == here
    assert here == [0.0, 10.535 / 4, 27.482 / 4]
    shares = [list(partition(len(here), k, 2)) for k in range(2)]
    assert sorted(shares[0] + shares[1]) == list(range(len(here)))


# --- vprof trace stats ----------------------------------------------------------------------


def test_trace_stats_json_holds_the_figures(tmp_path):
    path = _write(tmp_path, "m.jsonl", MOONCAKE)
    result = CliRunner().invoke(
        cli, ["trace", "stats", path, "--format", "json", "--bucket-s", "5"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["summary"][0]["requests"] == 3
    assert data["summary"][0]["implied_block_hit_rate"] == pytest.approx(3 / 7)
    assert [row["requests"] for row in data["rate"]] == [1, 0, 1, 0, 0, 1]


def test_trace_stats_json_is_strict_for_a_trace_without_block_ids(tmp_path):
    path = _write(tmp_path, "a.csv", AZURE)
    result = CliRunner().invoke(cli, ["trace", "stats", path, "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output, parse_constant=lambda c: pytest.fail(c))["summary"][0]
    assert summary["format"] == "azure" and summary["implied_block_hit_rate"] is None
    assert summary["blocks"] == 0


def test_trace_stats_table_shows_every_section_and_flags_select(tmp_path):
    path = _write(tmp_path, "m.jsonl", MOONCAKE)
    result = CliRunner().invoke(cli, ["trace", "stats", path, "--start", "5", "--time-scale", "2"])
    assert result.exit_code == 0, result.output
    for text in ("implied_token_hit_rate", "inter_arrival_ms", "rate_rps", "p99"):
        assert text in result.output
    assert "requests                2" in result.output


def test_trace_stats_reads_a_trace_workload_by_name():
    result = CliRunner().invoke(cli, ["trace", "stats", "sample-trace", "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)["summary"][0]
    assert summary["file"] == str(SAMPLE_PATH.resolve()) and summary["format"] == "mooncake"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time-scale", "0"], "Error: --time-scale: must be more than 0"),
        (["--max-model-len", "1000"], ":3: input_length: prompt 1100 + output 5"),
        (["--bucket-s", "nan"], "--bucket-s': must be a finite number"),
    ],
)
def test_trace_stats_errors_exit_2_with_one_error_line(tmp_path, args, message):
    path = _write(tmp_path, "m.jsonl", MOONCAKE)
    result = CliRunner().invoke(cli, ["trace", "stats", path, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: ")  # after click's usage
