"""Corrupt and foreign run files: every reader (summarize, compare, plan, report) refuses them
with one line naming the file, line and key (exit 2, no traceback), a torn records file says
how much of it was readable, and a worse read never replaces a good ``summary.json``.

Part of the hostile-input suite (``test_hostile_input.py`` holds the other classes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from test_analysis_data import T0, synth_records, write_run
from test_hostile_input import assert_refused, run  # noqa: F401  (run is a fixture)

from vprof.records import RecordWriter, RunDir
from vprof.records.store import read_records_file

N = 70  # records in the good run, written in batches of BATCH
BATCH = 10

METRICS = [
    {"t": T0 + i, "values": {"vllm:num_requests_running": 1.0, "vllm:kv_cache_usage_perc": 0.1}}
    for i in range(0, 30, 5)
]
LOADGEN = [
    {
        "t": T0 + i,
        "worker": "local",
        "cpu_percent": 10.0,
        "loop_probes": 5,
        "loop_lag_p99_ms": 1.0,
        "loop_lag_max_ms": 2.0,
        "loop_lag_histogram": [1] * 20,
    }
    for i in range(0, 30, 5)
]


def good_run(path: Path) -> Path:
    """A finished run of N records (batches of BATCH) whose locust.json counted them all."""
    write_run(path, [], metrics=METRICS, loadgen=LOADGEN)
    with RecordWriter(path / "records.arrow", batch_size=BATCH) as writer:
        writer.extend(synth_records(N, start=T0, fail_every=7))
    info = json.loads((path / "locust.json").read_text())
    (path / "locust.json").write_text(json.dumps({**info, "records": N}))
    return path


@pytest.fixture
def saved(tmp_path, run):  # noqa: F811
    """A good run with its summary saved; returns (run folder, summary.json bytes)."""
    folder = good_run(tmp_path / "runs" / "a")
    result = run("summarize", str(folder), "--save")
    assert result.exit_code == 0, result.output
    return folder, (folder / "summary.json").read_bytes()


def records_table(folder: Path) -> pa.Table:
    """The records in memory (a memory-mapped table would die with the file it maps)."""
    return pa.ipc.open_stream(RunDir(folder).records.read_bytes()).read_all()


def conformed(folder: Path) -> pa.Table:
    """The records as vprof reads them."""
    return read_records_file(RunDir(folder).records).table


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal schemas and values (NaN equal to NaN, which ``Table.equals`` does not allow)."""
    return a.schema.equals(b.schema) and json.dumps(a.to_pylist()) == json.dumps(b.to_pylist())


def write_stream(path: Path, table: pa.Table) -> None:
    tmp = path.with_name("replacement.arrow")
    with pa.ipc.new_stream(str(tmp), table.schema) as writer:
        writer.write_table(table)
    tmp.replace(path)


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


def _with(name: str, value, type_=None) -> callable:
    return lambda t: set_column(t, name, pa.array([value] * t.num_rows, type_))


# ---------------------------------------------------------------------------- records.arrow

# (what replaces records.arrow, fragments of the message)
RECORDS_REFUSED = [
    (lambda p, t: p.write_bytes(os.urandom(5000)), ["records.arrow: not a records file"]),
    (lambda p, t: p.write_bytes(b"\x00" * 64), ["records.arrow: not a records file"]),
    (lambda p, t: p.write_text("request_id,status\nr0,ok\n"), ["not a records file"]),
    (lambda p, t: (p.unlink(), p.mkdir()), ["records.arrow: a folder, not a records file"]),
    (
        lambda p, t: write_stream(p, pa.table({"a": [1, 2, 3]})),
        ["records.arrow: not vprof's records: no request_id, status, sent_at", "(it has: a)"],
    ),
    (
        lambda p, t: write_stream(p, t.drop_columns(["ttft_ms"])),
        ["records.arrow: not vprof's records: no ttft_ms column"],
    ),
    (
        lambda p, t: write_stream(p, _with("sent_at", "yesterday")(t)),
        ["records.arrow: sent_at: the column holds string values; vprof's records hold double"],
    ),
    (
        lambda p, t: write_stream(p, _with("itl_ms", "1,2")(t)),
        ["records.arrow: itl_ms: the column holds string values"],
    ),
    (
        lambda p, t: write_stream(p, _with("status", None, pa.string())(t)),
        ["records.arrow: status: row 1 (request 'r0') holds no value"],
    ),
    (
        lambda p, t: write_stream(p, _with("ttft_ms", float("inf"))(t)),
        ["records.arrow: ttft_ms: row 1 (request 'r0') holds inf, not a duration in ms"],
    ),
    (
        lambda p, t: write_stream(p, _with("e2e_ms", -5.0)(t)),
        ["records.arrow: e2e_ms: row 1", "holds -5, not a duration"],
    ),
    (
        lambda p, t: write_stream(p, _with("sent_at", 1e300)(t)),
        ["records.arrow: sent_at: row 1", "holds 1e+300, not a time"],
    ),
    (
        lambda p, t: write_stream(p, _with("finished_at", T0 + 40 * 86_400)(t)),
        ["records.arrow: its times span 40 days (a run lasts at most 30)"],
    ),
    (
        lambda p, t: write_stream(p, _with("itl_ms", [1.0, -2.0])(t)),
        ["records.arrow: itl_ms: row 1 (request 'r0') holds a gap of -2 ms"],
    ),
    (
        lambda p, t: write_stream(p, _with("itl_ms", [1.0, float("nan")])(t)),
        ["records.arrow: itl_ms: row 1", "a gap of nan ms"],
    ),
    (
        lambda p, t: write_stream(p, _with("completion_tokens", 2**62)(t)),
        ["records.arrow: completion_tokens: row 1", "outside -1…1,000,000,000"],
    ),
    (
        lambda p, t: write_stream(p, _with("http_status", 70_000)(t)),
        ["records.arrow: http_status: row 1", "70,000, outside 0…999"],
    ),
    (
        lambda p, t: write_stream(p, _with("http_status", 2**64 - 1, pa.uint64())(t)),
        ["records.arrow: its columns do not convert to vprof's records"],
    ),
]


@pytest.mark.parametrize("command", ["summarize", "summarize --save", "compare", "plan", "report"])
@pytest.mark.parametrize("damage, fragments", RECORDS_REFUSED)
def test_foreign_or_corrupt_records_are_refused_and_keep_the_summary(
    run,  # noqa: F811
    saved,
    tmp_path,
    command,
    damage,
    fragments,
):
    folder, summary = saved
    records = RunDir(folder).records
    damage(records, records_table(folder))
    other = good_run(tmp_path / "runs" / "b")
    args = {
        "summarize": ["summarize", str(folder)],
        "summarize --save": ["summarize", str(folder), "--save"],
        "compare": ["compare", str(other), str(folder)],
        "plan": ["plan", str(folder), "--slo", "ttft_p95=1s", "--rps", "4"],
        "report": ["report", str(folder), "-o", str(tmp_path / "r.html")],
    }[command]
    assert_refused(run(*args), *fragments)
    assert (folder / "summary.json").read_bytes() == summary  # the good summary is kept


def test_a_bad_column_is_named_before_a_bad_gap_checked_beside_it(tmp_path):
    """The gaps are checked in a thread while the other columns are joined; a file bad in both
    still names the other column first, as the checks' order says."""
    from vprof.common.errors import RunError

    folder = good_run(tmp_path / "a")
    good = records_table(folder)
    bad_gaps = _with("itl_ms", [1.0, -2.0])
    write_stream(RunDir(folder).records, bad_gaps(_with("ttft_ms", float("inf"))(good)))
    with pytest.raises(RunError, match="ttft_ms"):
        read_records_file(RunDir(folder).records)
    write_stream(RunDir(folder).records, bad_gaps(good))
    with pytest.raises(RunError, match="a gap of -2 ms"):
        read_records_file(RunDir(folder).records)


def test_a_reader_in_another_thread_checks_the_gaps_itself(tmp_path, monkeypatch):
    """A report reads two runs at a time, each in a worker thread: such a reader checks the
    gaps in its own thread (a check thread beside each would be three threads on two cores),
    with the same verdicts in the same order."""
    import concurrent.futures
    import threading

    from vprof.common.errors import RunError
    from vprof.records import store

    folder = good_run(tmp_path / "a")
    bad = _with("itl_ms", [1.0, -2.0])(_with("ttft_ms", float("inf"))(records_table(folder)))
    write_stream(RunDir(folder).records, bad)
    started: list[str] = []

    class Spy(concurrent.futures.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            started.append(kwargs["thread_name_prefix"])
            super().__init__(*args, **kwargs)

    def verdict() -> str:
        try:
            read_records_file(RunDir(folder).records)
        except RunError as exc:
            return str(exc)
        return "read"

    monkeypatch.setattr(store, "usable_cpus", lambda: 2)
    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Spy)
    assert "ttft_ms" in verdict() and started == ["vprof-check"]  # the main thread: beside
    verdicts: list[str] = []
    reader = threading.Thread(target=lambda: verdicts.append(verdict()))
    reader.start()
    reader.join()
    assert "ttft_ms" in verdicts[0] and started == ["vprof-check"]  # no other check thread


def test_an_arrow_file_format_copy_reads_exactly_what_it_holds(run, tmp_path):  # noqa: F811
    folder = good_run(tmp_path / "a")
    table = records_table(folder)
    with pa.ipc.new_file(str(RunDir(folder).records), table.schema) as writer:
        writer.write_table(table)
    read = read_records_file(RunDir(folder).records)
    assert same(read.table, table) and not read.torn and read.describe(N) == ""
    result = run("summarize", str(folder), "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["requests"] == N


def test_an_old_file_without_optional_columns_reads_with_their_defaults(run, tmp_path):  # noqa: F811
    full = good_run(tmp_path / "full")
    old = good_run(tmp_path / "old")
    write_stream(
        RunDir(old).records,
        records_table(old).drop_columns(["cached_tokens", "worker", "expected_output_tokens"]),
    )
    table = conformed(old)
    assert table.schema.equals(conformed(full).schema)
    assert set(table.column("cached_tokens").to_pylist()) == {-1}
    assert set(table.column("worker").to_pylist()) == {""}
    summaries = [
        json.loads(run("summarize", str(p), "--format", "json").stdout)[0] for p in (full, old)
    ]
    for key in ("requests", "completed", "failed", "median_ttft_ms", "p99_itl_ms"):
        assert summaries[0][key] == summaries[1][key], key


def test_compatible_column_types_are_read_as_vprofs(tmp_path):
    folder = good_run(tmp_path / "a")
    table = records_table(folder)
    narrow = set_column(table, "prompt_tokens", table.column("prompt_tokens").cast("int32"))
    narrow = set_column(narrow, "ttft_ms", table.column("ttft_ms").cast("float32"))
    write_stream(RunDir(folder).records, narrow)
    read = conformed(folder)
    assert read.schema.equals(table.schema)
    assert read.column("prompt_tokens").to_pylist() == table.column("prompt_tokens").to_pylist()
    assert read.column("ttft_ms").to_pylist() == pytest.approx(
        table.column("ttft_ms").to_pylist(), rel=1e-6, nan_ok=True
    )


# ---------------------------------------------------------------------------- torn files


def cut(folder: Path, keep_bytes: int) -> None:
    path = RunDir(folder).records
    path.write_bytes(path.read_bytes()[:keep_bytes])


def batch_ends(folder: Path) -> list[int]:
    """Byte offsets where each complete batch of the records file ends."""
    source = pa.memory_map(str(RunDir(folder).records))
    reader = pa.ipc.open_stream(source)
    ends = []
    while True:
        try:
            reader.read_next_batch()
        except StopIteration:
            return ends
        ends.append(source.tell())


def test_a_file_torn_mid_batch_says_how_much_was_readable(run, saved):  # noqa: F811
    folder, summary = saved
    ends = batch_ends(folder)
    cut(folder, (ends[2] + ends[3]) // 2)  # three whole batches and half of the fourth
    read = read_records_file(RunDir(folder).records)
    assert (read.table.num_rows, read.batches, read.torn) == (30, 3, True)
    note = read.describe(N)
    assert note.startswith(
        "30 of 70 records readable (3 complete batches); the file ends mid-batch"
    )

    shown = run("summarize", str(folder), "--format", "json")  # reading: a warning, exit 0
    assert shown.exit_code == 0, shown.output
    assert f"warning: baseline: {note}" in shown.output
    assert json.loads(shown.stdout)[0]["records_note"] == note

    refused = run("summarize", str(folder), "--save")  # a worse read never replaces a good one
    assert_refused(
        refused,
        "summary.json: kept as it is: it counted 70 requests, this read of "
        "the records only 30: 30 of 70 records readable",
        "pass --force",
    )
    assert (folder / "summary.json").read_bytes() == summary

    forced = run("summarize", str(folder), "--save", "--force")
    assert forced.exit_code == 0, forced.output
    replaced = json.loads((folder / "summary.json").read_text())
    assert (replaced["requests"], replaced["records_note"]) == (30, note)


def test_a_file_cut_at_a_batch_boundary_is_compared_with_the_load_generators_count(tmp_path):
    folder = good_run(tmp_path / "a")
    cut(folder, batch_ends(folder)[4])
    read = read_records_file(RunDir(folder).records)
    assert (read.table.num_rows, read.torn) == (50, False)
    assert read.describe(N) == (
        "50 of 70 records readable (5 complete batches); the load generator counted more: "
        "the file was cut short"
    )
    assert read.describe(None) == ""  # nothing to compare with: a run killed early


def test_a_file_cut_inside_its_header_reads_as_no_records_and_says_so(run, tmp_path):  # noqa: F811
    folder = good_run(tmp_path / "a")
    cut(folder, 100)
    read = read_records_file(RunDir(folder).records)
    assert (read.table.num_rows, read.batches, read.torn_bytes) == (0, 0, 100)
    result = run("summarize", str(folder), "--save")
    assert result.exit_code == 0, result.output
    assert "0 of 70 records readable (0 complete batches); the file ends mid-batch" in result.output


def test_a_writer_killed_between_batches_loses_nothing(tmp_path):
    path = tmp_path / "records.arrow"
    writer = RecordWriter(path, batch_size=BATCH)
    writer.extend(synth_records(35, start=T0))
    writer.flush()  # never closed: no end-of-stream marker, as when Locust is killed
    read = read_records_file(path)
    assert (read.table.num_rows, read.batches, read.torn, read.describe(35)) == (35, 4, False, "")
    writer.close()
    assert not read_records_file(path).torn  # and with the marker


def test_garbage_after_the_end_marker_is_reported_not_read(tmp_path):
    path = tmp_path / "records.arrow"
    with RecordWriter(path, batch_size=BATCH) as writer:
        writer.extend(synth_records(20, start=T0))
    path.write_bytes(path.read_bytes() + os.urandom(300))
    read = read_records_file(path)
    assert (read.table.num_rows, read.torn) == (20, True)


def test_an_empty_records_file_is_a_run_that_wrote_nothing(run, tmp_path):  # noqa: F811
    folder = good_run(tmp_path / "a")
    RunDir(folder).records.write_bytes(b"")
    result = run("summarize", str(folder), "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)[0]
    assert summary["requests"] == 0
    assert summary["records_note"] == "0 of 70 records readable (0 complete batches); " + (
        "the load generator counted more: the file was cut short"
    )


def test_a_summary_from_as_many_records_is_replaced(run, saved):  # noqa: F811
    folder, _ = saved
    result = run("summarize", str(folder), "--save", "--slo", "ttft_p95=1s")
    assert result.exit_code == 0, result.output
    assert json.loads((folder / "summary.json").read_text())["slo"]


def test_a_damaged_summary_is_not_a_good_one_and_is_replaced(run, saved):  # noqa: F811
    folder, _ = saved
    (folder / "summary.json").write_text("{half")
    result = run("summarize", str(folder), "--save")
    assert result.exit_code == 0, result.output
    assert json.loads((folder / "summary.json").read_text())["requests"] == N


# ---------------------------------------------------------------------------- the JSON files


def _json(folder: Path, name: str, change) -> None:
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _line(folder: Path, name: str, number: int, change) -> None:
    path = folder / name
    lines = path.read_text().splitlines()
    row = json.loads(lines[number - 1])
    change(row)
    lines[number - 1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")


def _put(key: str, value):
    def change(data: dict) -> None:
        *parents, leaf = key.split(".")
        for part in parents:
            data = data.setdefault(part, {})
        data[leaf] = value

    return change


# (file, how it is damaged, fragments of the message)
JSON_REFUSED = [
    (
        "run.json",
        lambda f: (f / "run.json").write_text('{"name": "a",\n  "seed": }'),
        ["run.json:2: not valid JSON (line 2"],
    ),
    (
        "run.json",
        lambda f: (f / "run.json").write_bytes(b'{"name": "caf\xe9"}'),
        ["run.json: cannot read it: 'utf-8' codec can't decode byte 0xe9"],
    ),
    (
        "run.json",
        lambda f: (f / "run.json").write_text("[1, 2]"),
        ["run.json: expected a JSON object, found list"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("traffic", {"kind": "open-loop", "rate_rps": "fast"})),
        ["run.json:", "traffic.rate_rps: must be a number, got 'fast'"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("traffic", {"kind": "steady", "users": []})),
        ["run.json:", "traffic.users: must be a number, got []"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("traffic", 5)),
        ["run.json:", ": traffic: expected an object, found the number 5"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("profile.argv", "vllm serve")),
        ["run.json:", "profile.argv: expected a list, found text 'vllm serve'"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("profile.env", {"X": 1})),
        ["run.json:", "profile.env.X: expected text, found the number 1"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("open_loop", "yes")),
        ["run.json:", "open_loop: expected true or false, found text 'yes'"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("created_at", -5)),
        ["run.json:", "created_at: must be between 0 and"],
    ),
    (
        "run.json",
        lambda f: _json(f, "run.json", _put("profile.gpus_per_server", 0)),
        ["run.json:", "profile.gpus_per_server: must be between 1 and 4,096, got 0"],
    ),
    (
        "locust.json",
        lambda f: (f / "locust.json").write_text("{bad"),
        ["locust.json:1: not valid JSON"],
    ),
    (
        "locust.json",
        lambda f: (f / "locust.json").write_text("[]"),
        ["locust.json: expected a JSON object, found list"],
    ),
    (
        "locust.json",
        lambda f: _json(f, "locust.json", _put("warmup_until", "soon")),
        ["locust.json:", "warmup_until: must be a number, got 'soon'"],
    ),
    (
        "locust.json",
        lambda f: (f / "locust.json").write_text('{"warmup_until": NaN}'),
        ["locust.json:1: warmup_until: must be a finite number, got nan"],
    ),
    (
        "locust.json",
        lambda f: (f / "locust.json").write_text('{"warmup_until": 1e999}'),
        ["locust.json:1: warmup_until: must be a finite number, got inf"],
    ),
    (
        "locust.json",
        lambda f: _json(f, "locust.json", _put("records", 2.5)),
        ["locust.json:", "records: must be a whole number, got 2.5"],
    ),
    (
        "status.json",
        lambda f: (f / "status.json").write_bytes(b"\xff"),
        ["status.json: cannot read it"],
    ),
    (
        "status.json",
        lambda f: _json(f, "status.json", _put("state", 5)),
        ["status.json:2: state: expected text, found the number 5"],
    ),
    (
        "metrics.jsonl",
        lambda f: _line(f, "metrics.jsonl", 3, _put("t", None)),
        ["metrics.jsonl:3: t: must be a number, got None"],
    ),
    (
        "metrics.jsonl",
        lambda f: _line(f, "metrics.jsonl", 2, _put("t", "now")),
        ["metrics.jsonl:2: t: must be a number, got 'now'"],
    ),
    (
        "metrics.jsonl",
        lambda f: _line(f, "metrics.jsonl", 2, _put("values", "x")),
        ["metrics.jsonl:2: values: expected an object, found text 'x'"],
    ),
    (
        "metrics.jsonl",
        lambda f: _line(f, "metrics.jsonl", 4, _put("values.vllm:x", "1")),
        ["metrics.jsonl:4: values.vllm:x: must be a number, got '1'"],
    ),
    (
        "metrics.jsonl",
        lambda f: (f / "metrics.jsonl").write_text('{"t": 1}\n{bad\n{"t": 2}\n'),
        ["metrics.jsonl:2: not a JSON line"],
    ),
    (
        "metrics.jsonl",
        lambda f: (f / "metrics.jsonl").write_text("[1]\n"),
        ["metrics.jsonl:1: expected a JSON object per line"],
    ),
    (
        "metrics.jsonl",
        lambda f: (f / "metrics.jsonl").write_bytes(b'{"t": 1}\n\xff\n'),
        ["metrics.jsonl: cannot read it"],
    ),
    (
        "loadgen.jsonl",
        lambda f: _line(f, "loadgen.jsonl", 2, _put("cpu_percent", "busy")),
        ["loadgen.jsonl:2: cpu_percent: must be a number, got 'busy'"],
    ),
    (
        "loadgen.jsonl",
        lambda f: _line(f, "loadgen.jsonl", 5, _put("loop_lag_p99_ms", None)),
        ["loadgen.jsonl:5: loop_lag_p99_ms: must be a number, got None"],
    ),
    (
        "loadgen.jsonl",
        lambda f: _line(f, "loadgen.jsonl", 2, _put("loop_lag_histogram", ["a"])),
        ["loadgen.jsonl:2: loop_lag_histogram[0]: must be a whole number, got 'a'"],
    ),
    (
        "loadgen.jsonl",
        lambda f: _line(f, "loadgen.jsonl", 2, _put("loop_lag_histogram", 3)),
        ["loadgen.jsonl:2: loop_lag_histogram: expected a list, found the number 3"],
    ),
    (
        "loadgen.jsonl",
        lambda f: _line(f, "loadgen.jsonl", 3, _put("worker", ["w"])),
        ["loadgen.jsonl:3: worker: expected text, found a list"],
    ),
]


@pytest.mark.parametrize("command", ["summarize --save", "compare", "plan", "report"])
@pytest.mark.parametrize(
    "name, damage, fragments", JSON_REFUSED, ids=[f"{c[0]}-{i}" for i, c in enumerate(JSON_REFUSED)]
)
def test_corrupt_run_files_are_refused_naming_file_line_and_key(
    run,  # noqa: F811
    saved,
    tmp_path,
    command,
    name,
    damage,
    fragments,
):
    folder, summary = saved
    damage(folder)
    other = good_run(tmp_path / "runs" / "b")
    args = {
        "summarize --save": ["summarize", str(folder), "--save"],
        "compare": ["compare", str(other), str(folder)],
        "plan": ["plan", str(folder), "--slo", "ttft_p95=1s", "--rps", "4"],
        "report": ["report", str(folder), "-o", str(tmp_path / "r.html")],
    }[command]
    assert_refused(run(*args), f"{folder}/{fragments[0]}", *fragments[1:])
    assert (folder / "summary.json").read_bytes() == summary


def test_a_key_is_located_on_its_line_in_an_indented_run_json(run, saved):  # noqa: F811
    folder, _ = saved
    _json(folder, "run.json", _put("traffic", {"kind": "open-loop", "rate_rps": "fast"}))
    line = next(
        i
        for i, text in enumerate((folder / "run.json").read_text().splitlines(), 1)
        if '"rate_rps"' in text
    )
    assert_refused(run("summarize", str(folder)), f"run.json:{line}: traffic.rate_rps:")


def test_a_torn_last_metrics_line_is_a_sampler_killed_mid_write(run, saved):  # noqa: F811
    folder, _ = saved
    with (folder / "metrics.jsonl").open("a") as out:
        out.write('{"t": 18000')
    result = run("summarize", str(folder), "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["metrics_samples"] >= 1


# ----------------------------------------------- outputs: never over what vprof did not write


@pytest.fixture
def a_run(tmp_path):
    return good_run(tmp_path / "runs" / "a")


@pytest.mark.parametrize(
    "name, body",
    [
        ("notes.txt", b"my notes\n"),
        ("my-profile.yaml", b"model: m\nengine_args: {max-num-seqs: 8}\n"),
        ("page.html", b"<!doctype html><html><body>someone else's page</body></html>\n"),
        ("empty.html", b""),
    ],
)
def test_report_over_a_file_it_did_not_write_leaves_it_byte_identical(
    run,  # noqa: F811
    tmp_path,
    a_run,
    name,
    body,
):
    target = tmp_path / name
    target.write_bytes(body)
    assert_refused(
        run("report", str(a_run), "-o", str(target)), name, "is not a vprof report", "--force"
    )
    assert target.read_bytes() == body
    forced = run("report", str(a_run), "-o", str(target), "--force")
    assert forced.exit_code == 0, forced.output
    assert target.read_bytes().startswith(b"<!doctype html>")


@pytest.mark.parametrize("force", [(), ("--force",)])
@pytest.mark.parametrize("name", ["records.arrow", "run.json", "summary.json", "new.html"])
def test_report_never_writes_inside_a_run_it_reads(run, tmp_path, a_run, name, force):  # noqa: F811
    target = a_run / name
    before = target.read_bytes() if target.exists() else None
    assert_refused(
        run("report", str(tmp_path / "runs"), "-o", str(target), *force),
        "is inside a run folder being read",
    )
    assert (target.read_bytes() if target.exists() else None) == before
    assert run("summarize", str(a_run)).exit_code == 0  # the run still reads


def test_report_replaces_its_own_earlier_report_and_force_does_too(run, tmp_path, a_run):  # noqa: F811
    target = tmp_path / "out" / "r.html"
    for args in ((), (), ("--force",)):
        result = run("report", str(a_run), "-o", str(target), *args)
        assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(b"<!doctype html>")
    assert [p.name for p in target.parent.iterdir()] == ["r.html"]  # no temporary file left


@pytest.mark.parametrize(
    "out, fragments",
    [
        ("/proc/nope/r.html", ["/proc/nope/r.html: cannot be written"]),
        ("{tmp}/a-file/r.html", ["a-file/r.html: cannot be written", "is a file, not a folder"]),
    ],
)
def test_an_unwritable_report_path_is_one_line(run, tmp_path, a_run, out, fragments):  # noqa: F811
    (tmp_path / "a-file").write_text("x")
    result = run("report", str(a_run), "-o", out.format(tmp=tmp_path))
    assert_refused(result, *fragments)
    assert len(result.output.strip().splitlines()) == 1


def test_a_disk_that_refuses_the_write_is_one_line(tmp_path, monkeypatch):
    from vprof.common.errors import OutputError
    from vprof.records.outputs import write_output

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match="r.html: cannot be written: No space left on device"):
        write_output(tmp_path / "r.html", "<!doctype html>")
    assert list(tmp_path.iterdir()) == []  # the temporary file went too


@pytest.mark.parametrize(
    "args, file",
    [
        (["bench", "base"], "report.html"),
        (["sweep", "chunked", "base", "--sizes", "128"], "report.html"),
        (["sweep", "chunked", "base", "--sizes", "128"], "sweep.json"),
        (["sweep", "load", "base", "--levels", "2"], "sweep.json"),
    ],
)
def test_bench_and_sweeps_refuse_a_foreign_output_before_anything_runs(
    run,  # noqa: F811
    tmp_path,
    args,
    file,
):
    out = tmp_path / "out"
    out.mkdir()
    (out / file).write_text("not vprof's\n")
    assert_refused(run(*args, "--out", str(out)), f"{file}: exists and is not", "--force")
    assert (out / file).read_text() == "not vprof's\n"


def _tune(out: Path, **changes):
    from vprof.runs.tunerequest import TuneRequest

    return TuneRequest(
        **{
            "profile": "chunked-512",
            "slo": "ttft_p95=1000ms",
            "workload": "tiny-smoke",
            "space": ("max-num-seqs=8,16",),
            "out_dir": out,
            **changes,
        }
    )


def test_tune_refuses_a_tune_json_of_another_request_unless_forced(tmp_path):
    from vprof.common.errors import RunError
    from vprof.runs.tunerequest import prepare, request_of

    out = tmp_path / "t"
    out.mkdir()
    earlier = {**request_of(prepare(_tune(out))), "start_failures": {}}
    (out / "tune.json").write_text(json.dumps(earlier))
    prepare(_tune(out))  # the same request resumes
    body = (out / "tune.json").read_bytes()
    with pytest.raises(RunError, match=r"tune.json: holds the tune of another request \(slo"):
        prepare(_tune(out, slo="ttft_p95=500ms"))
    with pytest.raises(RunError, match="another request .*workload 'tiny-smoke', now 'chat'"):
        prepare(_tune(out, workload="chat"))
    assert (out / "tune.json").read_bytes() == body
    prepare(_tune(out, slo="ttft_p95=500ms", force=True))


@pytest.mark.parametrize("name", ["chunked-512-tuned.yaml", "sweep.json", "report.html"])
def test_tune_refuses_a_foreign_file_where_it_writes_before_any_server(tmp_path, name):
    from vprof.common.errors import OutputError
    from vprof.runs.tunerequest import prepare

    out = tmp_path / "t"
    out.mkdir()
    (out / name).write_text("model: mine\n")
    with pytest.raises(OutputError, match=f"{name}: exists and is not"):
        prepare(_tune(out))
    assert (out / name).read_text() == "model: mine\n"
    prepare(_tune(out, force=True))


# ------------------------------------------------------ damage is said wherever a run is read

READERS = {
    "summarize": ["summarize", "{a}", "{b}", "--format", "json"],
    "compare": ["compare", "{a}", "vs", "{b}", "--format", "json"],
    "plan": ["plan", "{a}", "{b}", "--rps", "4", "--slo", "ttft_p95=10s", "--format", "json"],
    "report": ["report", "{a}", "{b}", "-o", "{out}"],
}


@pytest.mark.parametrize("command", list(READERS))
def test_damaged_records_are_said_on_stderr_and_in_the_json_of_every_reader(
    run,  # noqa: F811
    tmp_path,
    command,
):
    a = good_run(tmp_path / "runs" / "a")
    b = good_run(tmp_path / "runs" / "b")
    assert run("summarize", str(a), "--save").exit_code == 0  # a summary.json that is now stale
    cut(a, (batch_ends(a)[2] + batch_ends(a)[3]) // 2)
    note = read_records_file(RunDir(a).records).describe(N)
    out = tmp_path / "r.html"
    args = [x.format(a=a, b=b, out=out) for x in READERS[command]]
    result = run(*args)
    assert result.exit_code == 0, result.output
    # (the synthetic records' prompt lengths earn a tokenizer warning of their own too)
    said = [
        line for line in result.stderr.splitlines() if line.startswith("warning: ") and note in line
    ]
    assert len(said) == 1 and said[0].endswith(f": {note}"), result.stderr
    if command == "report":
        assert note in out.read_text()
        return
    document = json.loads(result.stdout)
    if command == "summarize":
        assert [s.get("records_note") for s in document] == [note, None]
    else:
        assert all(row["warnings"] == [said[0].removeprefix("warning: ")] for row in document)
