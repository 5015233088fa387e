"""One owner per summary key: a real summary has exactly the keys ``analysis/keys.py`` declares,
and no other library module spells one as a string literal."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import golden
import pytest
from library import LIBRARY
from test_analysis_data import synth_alternating

from vprof.analysis.keys import Metric, SummaryKey, is_declared, split_stat_key
from vprof.analysis.run import summarize_run, write_summary
from vprof.records.rundir import RETIRED_MARK, RunDir, append_jsonl, read_json, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
OWNER = "analysis/keys.py"


def _with_every_extra(path: Path) -> Path:
    """Give a synthetic run what only some runs have: /metrics scrape times (one slow), the
    host's pace, a client-error certificate, the tokenizer, a trace, several replicas scraped
    at one, a forecast, a lost worker, a records file cut short and an earlier attempt."""
    run = RunDir(path)
    meta = read_json(run.run_json)
    meta |= {
        "tokenizer": {"label": "tiny", "path": "/models/tiny"},
        "tokenizer_is_stand_in": True,
        "trace": {"implied_token_hit_rate": 0.4},
        "urls": ["http://a", "http://b"],
        "metrics_from": "http://a",
        "forecast": {"model": "model.json", "notes": []},
    }
    write_json_atomic(run.run_json, meta)
    locust = read_json(run.locust_json)
    locust["records"] += 10  # the load generator counted more than the file holds
    locust["workers_lost"] = [{"worker": "w1", "at": golden.T0 + 9.0, "how": "missed heartbeats"}]
    run.write_locust_info(locust)
    t = [golden.T0 + 2.0 * i for i in range(1, 8)]
    append_jsonl(
        run.metrics_jsonl, [{"t": s, "scrape_s": 0.02 * i, "values": {}} for i, s in enumerate(t)]
    )
    host = [
        {"t": s, "work_ms": 10.0 + i, "cpu_some_us": 1000 * i, "io_full_us": 10 * i}
        for i, s in enumerate(t)
    ]
    append_jsonl(run.host_jsonl, host)
    run.write_calibration({"users": 16, "processes": 1, "client_error_ms": 1.5})
    (path.parent / f"{path.name}{RETIRED_MARK}1").mkdir()
    return path


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Summaries of every kind of run: open loop (with every extra), closed loop, and an
    alternating run (its own head and one summary per side)."""
    root = tmp_path_factory.mktemp("keys")
    open_loop = _with_every_extra(golden.synthetic_run(root / "open", 1, True, 400, 120.0))
    closed = golden.synthetic_run(root / "closed", 3, False, 400, 90.0)
    alternating = write_summary(synth_alternating(root / "alt", blocks=1))
    return {
        "open": summarize_run(open_loop, slo=golden.SLO),
        "closed": summarize_run(closed, slo=golden.SLO),
        "alternating": alternating,
    }


def _keys(summaries: dict[str, Any]) -> set[str]:
    """Every key of the summaries, their sides, and the rows they hold by replica and turn."""
    found: set[str] = set()
    every = [summaries["open"], summaries["closed"], *summaries["alternating"]["sides"]]
    for s in [*every, summaries["alternating"]]:
        found |= set(s)
    for s in every:
        for rows in (s.get(SummaryKey.PER_REPLICA) or {}, s.get(SummaryKey.PER_TURN) or {}):
            for row in rows.values():
                found |= set(row)
    return found


def test_a_real_summary_has_exactly_the_declared_keys(summaries):
    found = _keys(summaries)
    assert sorted(k for k in found if not is_declared(k)) == [], "keys not in analysis/keys.py"
    assert sorted(k.value for k in SummaryKey if k not in found) == [], "declared, never written"
    written = {parsed[1] for k in found if (parsed := split_stat_key(k))}
    assert written == set(Metric)


def test_stat_keys_are_split_into_statistic_and_metric():
    assert split_stat_key("p99.9_later_ttft_from_schedule_ms") == (
        "p99.9",
        Metric.LATER_TTFT_FROM_SCHEDULE,
    )
    assert split_stat_key("median_ttft_ms") == ("median", Metric.TTFT)
    for other in ("max_schedule_lag_ms", "p95_ttft", "p95_nothing_ms", "loadgen_loop_lag_p99_ms"):
        assert split_stat_key(other) is None
    assert not is_declared("p95_nothing_ms") and is_declared(SummaryKey.RUN)


_RUN_FOLDER_WORDS = (
    *("run", "path", "profile", "workload", "traffic", "state", "reason", "vllm_version"),
    *("warmup_until", "open_loop", "tokenizer", "tokenizer_is_stand_in", "forecast"),
    *("workers_lost", "metrics_from", "sides", "requests", "client_error_ms"),
)
# Words that are a summary key and also a key of another contract, with its owner: spelled
# as literals there, they mean that contract's key. Each is flagged only where it reads a
# summary (``summary["state"]``, ``o.summary.get("slo")``).
SHARED_WORDS = {
    # run.json, status.json, locust.json and calibration.json (records/rundir.py)
    **dict.fromkeys(_RUN_FOLDER_WORDS, "the run folder's files"),
    # a request's or a run's status (records/schema.py, records/rundir.py); trace statistics
    **dict.fromkeys(("completed", "failed", "cancelled", "sent", "sessions"), "statuses"),
    "slo": "the --slo option",
    "max_in_flight": "a traffic shape's field (traffic/shape.py)",
    # a capacity plan's rows (analysis/plan.py)
    **dict.fromkeys(("replicas", "gpus_per_replica", "predicted"), "the plan's rows"),
}
_SUMMARY_NAME = re.compile(r"summar", re.IGNORECASE)
# f"{stat}_{metric}_ms" and the like: a stat key built by hand instead of with stat_key
_BUILT_STAT_KEY = re.compile(r"^(\{\}|mean|median|std|p\{\}|p\d+(\.\d+)?)_\{\}_ms$")


def literal_keys(path: Path) -> list[str]:
    """Where ``path`` spells a summary key as a literal, as ``file:line: key``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found: list[tuple[int, str]] = []
    pieces: set[int] = set()  # the text between an f-string's fields
    read_from: dict[int, ast.AST] = {}  # shared words read as keys: id(literal) -> what of
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            pieces.update(id(v) for v in node.values)
            shape = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if _BUILT_STAT_KEY.match(shape):
                found.append((node.lineno, f"f-string {shape!r} (use stat_key)"))
        elif isinstance(node, ast.Subscript):
            read_from[id(node.slice)] = node.value
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
        ):
            read_from[id(node.args[0])] = node.func.value
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in pieces or not is_declared(node.value):
            continue
        if node.value in SHARED_WORDS:
            of = read_from.get(id(node))
            if of is None or not _SUMMARY_NAME.search(ast.unparse(of)):
                continue
        found.append((node.lineno, repr(node.value)))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_no_library_module_but_the_owner_spells_a_summary_key():
    modules = sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))
    found = [
        hit for p in modules if p.relative_to(ROOT).as_posix() != OWNER for hit in literal_keys(p)
    ]
    assert found == [], "spell these with SummaryKey (K) or stat_key:\n" + "\n".join(found)


def test_the_literal_check_finds_what_it_is_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(summary, meta, s, q, metric):\n"
        '    a = summary["p95_ttft_ms"]\n'  # a distinctive key, anywhere
        '    b = meta.get("state")\n'  # run.json's state: another contract's word
        '    c = s.summary.get("state")\n'  # but read from a summary
        '    d = {"request_throughput": 1}\n'
        '    e = f"p{q}_{metric}_ms"\n'
        "    return f\"{summary['run']}\"\n"
    )
    found = literal_keys(sample)
    lines = [hit.split(":")[1] for hit in found]
    assert lines == ["2", "4", "5", "6", "7"], found
