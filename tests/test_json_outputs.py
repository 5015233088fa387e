"""Machine-readable output is one document: every command's ``--format json`` parses with one
``json.loads``, and ``ndjson`` is one object per line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner
from test_analysis_data import synth_records, write_run

from vprof.cli.main import cli
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator


@pytest.fixture(scope="module")
def bench_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("json") / "bench"
    write_run(root / "1-baseline", synth_records(200, seed=1, ttft_ms=100), profile="baseline")
    write_run(root / "2-chunked", synth_records(200, seed=2, ttft_ms=60), profile="chunked-256")
    return root


def _document(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _lines(*args: str) -> list:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    "args",
    [
        ("profiles",),
        ("profiles", "show", "chunked-256"),
        ("diff", "baseline", "chunked-256"),
        ("workloads",),
        ("workloads", "show", "tiny-smoke", "-n", "3"),
        ("traffic",),
        ("trace", "stats", "sample-trace"),
    ],
)
def test_registry_and_traffic_commands_print_one_json_document(args):
    assert _document(*args, "--format", "json")
    assert all(isinstance(row, dict) for row in _lines(*args, "--format", "ndjson"))


def test_render_argv_is_json():
    argv = _document("render", "chunked-256", "--format", "argv")
    assert isinstance(argv, list) and "--max-num-batched-tokens" in argv


def test_summarize_compare_and_plan_print_one_json_document(bench_folder):
    folder = str(bench_folder)
    summaries = _document("summarize", folder, "--format", "json")
    assert [s["profile"] for s in summaries] == ["baseline", "chunked-256"]
    with_timeline = _document("summarize", folder, "--timeline", "--format", "json")
    assert set(with_timeline) == {"summaries", "timeline"}
    assert _document("compare", folder, "--format", "json", "--n-boot", "50")
    args = ("plan", folder, "--rps", "20", "--slo", "ttft_p95=150ms")
    assert isinstance(_document(*args, "--format", "json"), list)
    assert set(_document(*args, "--evidence", "--format", "json")) == {"plan", "evidence"}
    parts = {row["part"] for row in _lines(*args, "--evidence", "--format", "ndjson")}
    assert parts == {"plan", "evidence"}


def test_bench_and_sweep_load_print_one_json_document(tmp_path):
    shape = tmp_path / "short.yaml"
    shape.write_text("kind: open-loop\nrate_rps: 2\nwarmup_s: 1\nduration_s: 2\nmax_in_flight: 4\n")
    base = [sys.executable, "-m", "vprof.cli.main"]
    with Emulator(EmulatorConfig(ttft_ms=20, itl_ms=5, model="tiny")) as emulator:
        common = [
            "--url",
            emulator.url,
            "--traffic",
            str(shape),
            "--workload",
            "tiny-smoke",
            "--format",
            "json",
        ]
        bench = subprocess.run(
            [*base, "bench", "emu", *common, "--out", str(tmp_path / "b")],
            capture_output=True,
            text=True,
            timeout=240,
        )
        sweep = subprocess.run(
            [
                *base,
                "sweep",
                "load",
                "emu",
                *common,
                "--levels",
                "2",
                "--slo",
                "ttft_p95=1000ms",
                "--rps",
                "10",
                "--out",
                str(tmp_path / "s"),
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert bench.returncode == 0, bench.stdout + bench.stderr
    document = json.loads(bench.stdout)
    assert set(document) == {"runs", "summaries"} and document["runs"][0]["state"] == "completed"
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    document = json.loads(sweep.stdout)
    assert set(document) == {"rungs", "plan"} and len(document["rungs"]) == 1
