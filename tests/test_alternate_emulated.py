"""`vprof bench --alternate` against emulators with exact timing: one Locust run switches
the load between three servers in ABBA slices; a known 30 % TTFT shift is found, two servers
with one timing are called no different, and a re-run resumes instead of measuring again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator


@pytest.fixture(scope="module")
def three_emulators():
    from vprof.tinymodel.build import ensure_tiny_model

    tokenizer = str(ensure_tiny_model())
    configs = [
        EmulatorConfig(
            ttft_ms=ttft, itl_ms=5.0, model="tiny", tokenizer_path=tokenizer, jitter_ms=2.0
        )
        for ttft in (100.0, 100.0, 130.0)
    ]
    with Emulator(configs[0]) as a, Emulator(configs[1]) as a2, Emulator(configs[2]) as b:
        yield a.url, a2.url, b.url


def _bench(out: Path, urls, *extra: str) -> subprocess.CompletedProcess[str]:
    a, a2, b = urls
    shape = out.parent / "steady4.yaml"
    shape.write_text("kind: steady\nusers: 4\nduration_s: 24\n")
    argv = [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "bench",
        "--alternate",
        "--url",
        f"a={a}",
        "--url",
        f"a2={a2}",
        "--url",
        f"b={b}",
        "--workload",
        "tiny-smoke",
        "--traffic",
        str(shape),
        "--slice",
        "2s",
        "--slice-warmup",
        "0.5s",
        "--out",
        str(out),
        "--format",
        "json",
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240)


@pytest.mark.e2e  # a real client timed for 24 s: with the units beside it a copy once read ±15 %
def test_alternating_slices_find_a_shift_and_call_a_copy_no_different(three_emulators, tmp_path):
    out = tmp_path / "alt"
    proc = _bench(out, three_emulators)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    rows = {(r["run"], r["metric"]): r for r in result["comparison"]}
    found = rows[("b", "median_ttft_ms")]
    assert found["method"] == "paired t over alternating slices"
    assert found["significant"] and 25 < found["diff_pct"] < 35, found["verdict"]
    same = rows[("a2", "median_ttft_ms")]
    assert not same["significant"], same["verdict"]
    assert same["detectable_pct"] < 5  # exact timing: a copy is seen to within a few %
    # three sides, 2 s slices: 24 s = 4 whole blocks, the first visiting a a2 b, then b a2 a
    (run,) = [p for p in out.iterdir() if p.name.startswith("alt--a-vs-a2-vs-b")]
    meta = json.loads((run / "run.json").read_text())
    assert [s["name"] for s in meta["alternate"]["sides"]] == ["a", "a2", "b"]
    summaries = {s["profile"]: s for s in result["summaries"]}
    assert set(summaries) == {"a", "a2", "b"}
    assert summaries["b"]["median_ttft_ms"] > 1.2 * summaries["a"]["median_ttft_ms"]
    assert "alternating slices: 4 blocks of a / a2 / b" in proc.stderr
    assert "the servers did not swap profiles" in proc.stderr  # --url: vprof cannot restart
    from vprof.report.build import build_data

    data = build_data([out])  # the report shows each side as a run, and their paired verdict
    assert sorted(r["summary"]["profile"] for r in data["runs"]) == ["a", "a2", "b"]
    (paired,) = data["comparisons"]
    assert {r["method"] for r in paired["rows"]} == {"paired t over alternating slices"}
    assert {r["run_id"] for r in paired["rows"]} == set(paired["run_ids"][1:])
    from vprof.analysis.plan import plan

    planned = plan([run], target_rps=100, slo="ttft_p95=1s")  # and `vprof plan`: one per side
    assert sorted(row["profile"] for row in planned.rows()) == ["a", "a2", "b"]

    again = _bench(out, three_emulators)
    assert again.returncode == 0 and "already completed" in again.stderr


def test_swap_needs_servers_vprof_launches_and_alternate():
    from click.testing import CliRunner

    from vprof.cli.main import cli

    urls = ["--url", "a=http://127.0.0.1:1", "--url", "b=http://127.0.0.1:2"]
    refused = CliRunner().invoke(cli, ["bench", "--alternate", "--swap", *urls])
    assert refused.exit_code == 2 and "--swap" in refused.output, refused.output
    alone = CliRunner().invoke(cli, ["bench", "chunked-256", "--no-swap"])
    assert alone.exit_code == 2 and "need --alternate" in alone.output, alone.output
