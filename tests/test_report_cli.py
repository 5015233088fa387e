"""`vprof summarize`, `vprof compare` and `vprof plan` through the real click group."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_analysis_data import synth_records, write_run

from vprof.cli.main import cli


@pytest.fixture()
def bench(tmp_path):
    """A bench folder with a baseline and a faster candidate."""
    root = tmp_path / "bench"
    write_run(root / "1-baseline", synth_records(300, seed=1, ttft_ms=100), profile="baseline")
    write_run(root / "2-chunked", synth_records(300, seed=2, ttft_ms=60), profile="chunked-256")
    return root


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_summarize_json_has_vllm_key_names_for_every_run_in_a_bench(bench):
    result = _invoke("summarize", str(bench), "--format", "json", "--slo", "ttft_p95=150ms")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["run"] for r in rows] == ["1-baseline", "2-chunked"]
    for key in (
        "median_ttft_ms",
        "p99_tpot_ms",
        "p99.9_itl_ms",
        "mean_e2el_ms",
        "request_throughput",
        "request_goodput",
        "max_concurrent_requests",
    ):
        assert key in rows[0]
    assert rows[1]["slo_met"] is True


def test_summarize_table_puts_runs_side_by_side(bench):
    result = _invoke("summarize", str(bench / "1-baseline"), str(bench / "2-chunked"))
    assert result.exit_code == 0, result.output
    header, rule, *lines = result.stdout.splitlines()
    assert header.split() == ["metric", "baseline", "chunked-256"]  # labelled by profile
    assert any(line.startswith("p95_ttft_ms ") for line in lines)


def test_summarize_markdown_timeline_and_save(bench):
    run = bench / "1-baseline"
    result = _invoke("summarize", str(run), "--format", "markdown", "--timeline", "--save")
    assert result.exit_code == 0, result.output
    assert "| metric | baseline |" in result.output
    assert "| run | t_s | started |" in result.output
    assert json.loads((run / "summary.json").read_text())["completed"] == 300
    assert (run / "timeline.csv").is_file()


def test_bad_slo_exits_2_with_one_clear_line(bench):
    result = CliRunner().invoke(cli, ["summarize", str(bench), "--slo", "ttft_p95=fast"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: --slo: ttft_p95='fast' is not a duration (write a number with its unit: ms, s "
        "or us, e.g. 500ms or 0.5s)"
    ]


def test_missing_run_folder_exits_2(tmp_path):
    result = CliRunner().invoke(cli, ["summarize", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such run folder" in result.output and "Traceback" not in result.output


def test_compare_prints_verdicts_with_intervals(bench):
    result = _invoke(
        "compare", str(bench), "--metric", "p95_ttft_ms", "--n-boot", "300", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)  # stdout is one JSON document; notes go to stderr
    assert row["baseline"] == "baseline" and row["run"] == "chunked-256"
    assert row["significant"] is False  # one run a side: request noise only
    assert row["verdict"].startswith("p95 TTFT: -") and "not a verdict" in row["verdict"]


def test_plan_prints_replicas_and_the_sentence(bench):
    result = _invoke("plan", str(bench), "--rps", "40", "--slo", "ttft_p95=150ms", "--evidence")
    assert result.exit_code == 0, result.output
    assert "replicas of chunked-256" in result.output
    assert "sustainable_rps" in result.output
    assert "1-baseline" in result.output  # evidence rows


def test_show_functions_used_by_bench_print_summaries_and_comparison(bench, capsys):
    from vprof.cli.output import emit_parts
    from vprof.cli.report import comparison_parts, summary_parts

    runs = sorted(bench.iterdir())  # Paths, as `vprof bench` passes them
    parts = summary_parts(runs, fmt="json", slo="ttft_p95=150ms")
    parts += comparison_parts(runs, fmt="json", metrics=["p95_ttft_ms"], n_boot=200)
    emit_parts(parts, "json")
    document = json.loads(capsys.readouterr().out)  # several tables, one JSON document
    assert [s["run"] for s in document["summaries"]] == ["1-baseline", "2-chunked"]
    assert document["comparison"][0]["verdict"].startswith("p95 TTFT: -")
    emit_parts(summary_parts(runs, fmt="csv"), "csv")
    assert capsys.readouterr().out.startswith("metric,baseline,chunked-256")


def test_report_commands_import_no_heavy_libraries():
    import subprocess
    import sys

    code = (
        "import sys, vprof.cli.report, vprof.analysis;"
        "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'locust') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_summary_and_compare_tables_fit_120_columns_with_sentences_below(tmp_path):
    """Four recorded runs as a bench of two configurations' repeats (the README's main job with
    `--repeat 2`): the tables fit 120 columns, and what does not fit a cell, the load
    generator's verdicts and the comparison's sentences, is printed below, named by run."""
    import shutil
    from pathlib import Path

    recorded = Path(__file__).parent / "data" / "recorded"
    bench = tmp_path / "bench"
    for source, name in (
        ("mnbt2048-smoke", "baseline--chat--steady--0000abcd"),
        ("mnbt4096-smoke", "baseline--chat--steady--0000abcd--r2"),
        ("rate2-open", "chunked-256--chat--steady--0000beef"),
        ("rate2-open-seqs16", "chunked-256--chat--steady--0000beef--r2"),
    ):
        shutil.copytree(recorded / source, bench / name)
    summary = _invoke("summarize", str(bench))
    compared = _invoke("compare", str(bench), "--n-boot", "200")
    for result in (summary, compared):
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(map(len, lines)) <= 120, "\n".join(line for line in lines if len(line) > 120)
    summary_lines = summary.stdout.splitlines()
    verdict_row = next(line for line in summary_lines if line.startswith("loadgen_verdict "))
    markers = verdict_row.split()[1:]  # one per run, the text below
    assert len(markers) == 4 and all(m.startswith("[") and m.endswith("]") for m in markers)
    note = next(line for line in summary_lines if line.startswith(markers[0] + " "))
    assert ", loadgen_verdict: load generator healthy" in note  # "[n] <run>, <key>: <text>"
    header = compared.stdout.splitlines()[2]  # after the method line and a blank one
    assert header.split()[:3] == ["metric", "baseline", "run"] and header.endswith("outcome")
    assert "against" in compared.stdout  # the verdicts the outcomes stand for, below
    as_json = json.loads(
        _invoke("compare", str(bench), "--n-boot", "200", "--format", "json").stdout
    )
    assert all(row["verdict"] and row["outcome"] for row in as_json)  # JSON keeps both
