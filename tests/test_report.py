"""`vprof report`: the HTML's embedded numbers are the summaries', the plan's and the
comparison's; curves are downsampled but percentiles are not; inputs and options are checked."""

from __future__ import annotations

import html as html_lib
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from test_analysis_data import synth_records, write_run
from test_report_data import write_bench, write_level, write_sweep

from vprof.analysis import compare, load_run, summarize_run, timeline, write_summary
from vprof.analysis.run import json_safe
from vprof.cli.main import cli
from vprof.common.errors import ReportError, RunError
from vprof.records.rundir import sweep_manifest
from vprof.report import build_data, write_report
from vprof.report import series as series_module
from vprof.report.html import SECTIONS
from vprof.report.series import cdf_curve, cdf_probabilities, envelope, nice_interval_s

SLO = "ttft_p95=400ms,tpot_p95=60ms"


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def embedded(path) -> dict:
    """The data a report embeds, read back the way a browser would."""
    text = path.read_text(encoding="utf-8")
    match = re.search(
        r'<script type="application/json" id="vprof-data">(.*?)</script>', text, re.DOTALL
    )
    assert match, "no #vprof-data script in the report"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return write_bench(tmp_path_factory.mktemp("report") / "bench")


@pytest.fixture(scope="module")
def report(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report.html"
    write_report(
        [bench], out, slo=SLO, target_rps=20, headroom=0.25, gpu_hour_price=2.5, n_boot=200
    )
    return out


def test_every_run_summary_equals_summarize_run_and_summary_json(bench, report, tmp_path):
    data = embedded(report)
    assert len(data["runs"]) == 6
    for run in data["runs"]:
        path = run["summary"]["path"]
        expected = json_safe(summarize_run(path, slo=SLO))
        assert run["summary"] == expected
        write_summary(path, slo=SLO)
        with open(f"{path}/summary.json") as f:
            assert run["summary"] == json.load(f)


def test_plan_equals_vprof_plan_output(bench, report):
    data = embedded(report)
    result = _invoke(
        "plan", str(bench), "--rps", "20", "--slo", SLO, "--headroom", "0.25", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    plan = data["capacity"]["plan"]
    assert plan["rows"] == json.loads(result.output)
    assert {r["profile"] for r in plan["rows"]} == {"baseline", "chunked-256"}
    evidence = _invoke(
        "plan",
        str(bench),
        "--rps",
        "20",
        "--slo",
        SLO,
        "--headroom",
        "0.25",
        "--format",
        "json",
        "--evidence",
    )
    # --evidence makes one JSON document: the rows and the levels
    document = json.loads(evidence.stdout)
    assert plan["rows"] == document["plan"] and plan["evidence"] == document["evidence"]
    # each profile's chart markers are the plan's own sustainable rate and binding constraint
    for entry in data["capacity"]["profiles"]:
        (row,) = [r for r in plan["rows"] if r["profile"] == entry["profile"]]
        assert entry["sustainable_rps"] == row["sustainable_rps"]
        assert entry["binding"] == row["binding"]
        assert entry["replicas"] == row["replicas"]
        assert [lv["run"] for lv in entry["levels"]] == [
            e["run"] for e in plan["evidence"] if e["profile"] == entry["profile"]
        ]


def test_comparisons_equal_vprof_compare_output(bench, report):
    data = embedded(report)
    # runs under the same traffic are compared; levels at different rates are not
    assert len(data["comparisons"]) == 3
    for cmp in data["comparisons"]:
        paths = [
            next(r for r in data["runs"] if r["id"] == i)["summary"]["path"] for i in cmp["run_ids"]
        ]
        result = _invoke("compare", *paths, "--format", "json", "--n-boot", "200")
        assert result.exit_code == 0, result.output
        expected = json.loads(result.stdout)
        rows = [
            {k: v for k, v in row.items() if k not in ("run_id", "baseline_id")}
            for row in cmp["rows"]
        ]
        assert rows == expected
        assert all(r["run_id"] == cmp["run_ids"][1] for r in cmp["rows"])
        # and what compare says a reader must know (one run a side, the family's adjustment)
        assert cmp["notes"] == compare(paths, n_boot=200).attrs["notes"] and cmp["notes"]
    page = html_lib.unescape(report.read_text(encoding="utf-8"))
    assert all(note in page for cmp in data["comparisons"] for note in cmp["notes"])


def test_percentile_marks_are_the_summary_values(report):
    data = embedded(report)
    for run in data["runs"]:
        s = run["summary"]
        for metric in ("ttft", "tpot", "itl", "e2el"):
            marks = run["distributions"][metric]["percentiles"]
            assert marks["50"] == s[f"median_{metric}_ms"]
            for q in ("90", "95", "99", "99.9"):
                assert marks[q] == s[f"p{q}_{metric}_ms"]
        assert run["distributions"]["ttft"]["n"] == s["completed"]


def test_curve_is_numpy_linear_and_marks_survive_downsampling(tmp_path, monkeypatch):
    values = np.random.default_rng(3).lognormal(3.0, 0.6, 5000)
    curve = cdf_curve(values)
    expected = np.percentile(values, np.asarray(curve["p"]) * 100)
    assert np.allclose(curve["ms"], expected, rtol=1e-3)  # drawn to 4 significant digits
    assert curve["n"] == curve["drawn_from"] == 5000
    assert len(curve["p"]) < 400 and curve["p"][0] == 0 and curve["p"][-1] == 1
    assert min(1 - p for p in curve["p"] if p < 1) <= 1e-4  # the tail is drawn to p99.99

    # A run with more gaps than the cap: the curve samples, the percentiles do not.
    monkeypatch.setattr(series_module, "MAX_CURVE_VALUES", 500)
    run = write_run(tmp_path / "big", synth_records(200, seed=4, tokens=(20, 40)))
    data = build_data([run])
    itl = data["runs"][0]["distributions"]["itl"]
    summary = summarize_run(run)
    gaps = sum(len(r) for r in load_run(run).frame().query("status == 'ok'")["itl_ms"])
    assert itl["n"] == gaps > 500 and itl["drawn_from"] == 500
    assert itl["percentiles"]["99"] == summary["p99_itl_ms"]


def test_envelope_keeps_every_peak_and_trough_within_its_budget():
    t = np.arange(10_000, dtype=float)
    y = np.sin(t / 50.0)
    y[1234], y[8765] = 9.0, -9.0
    ts, ys = envelope(t, y, max_points=200)
    assert len(ts) <= 200 and ts == sorted(ts)
    assert 9.0 in ys and -9.0 in ys
    small_t, small_y = envelope([0, 1, 2], [1.0, float("nan"), 3.0])
    assert small_t == [0, 2] and small_y == [1.0, 3.0]


@pytest.mark.parametrize(
    "span_s, expected", [(30, 1.0), (600, 5.0), (5000, 50.0), (0, 1.0), (float("nan"), 1.0)]
)
def test_timeline_bins_are_round_and_few(span_s, expected):
    assert nice_interval_s(span_s) == expected


def test_cdf_probabilities_reach_both_ends():
    p = cdf_probabilities()
    assert p[0] == 0.0 and p[-1] == 1.0 and np.all(np.diff(p) > 0)


def test_timelines_come_from_the_records_and_the_samples(bench, report):
    data = embedded(report)
    run = data["runs"][0]
    tl = run["timeline"]
    frame = timeline(load_run(run["summary"]["path"]).records, tl["interval_s"])
    assert tl["t_s"] == frame["t_s"].tolist()
    assert np.allclose(tl["output_throughput"], frame["output_throughput"], rtol=1e-3)
    server = tl["server"]
    assert max(server["kv_cache_percent"]["y"]) == pytest.approx(90.0)  # 0.9 of the cache
    assert max(server["running"]["y"]) == 6.0
    rate = float(run["summary"]["traffic"].split("=")[1])
    # the counter grows 40 × rate tokens every 2 s
    rates = server["generation_tokens_per_s"]["y"]
    assert rates == pytest.approx([20.0 * rate] * len(rates))
    assert tl["schedule_lag_ms"]["p99"]  # open loop: lag per interval
    assert list(tl["loadgen"]["workers"]) == ["vm:1:local"]
    assert tl["warmup_s"] == pytest.approx(2.0, abs=0.01)


def test_sections_are_all_there_and_empty_ones_say_why(report, tmp_path):
    text = report.read_text()
    for section, _ in SECTIONS:
        assert f'<section id="{section}"' in text
    one = write_run(tmp_path / "one", synth_records(50, seed=1))
    out = write_report([one], tmp_path / "one.html")
    body = out.read_text()
    assert "give --gpu-hour-price" in body
    assert "no two runs share a workload and traffic shape" in body
    assert "no ladder here" in body


def test_report_is_self_contained_and_small(report):
    text = report.read_text()
    assert len(text.encode()) < 5_000_000
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert all("src=" not in tag for tag in re.findall(r"<script\b[^>]*>", text))
    markup = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", text, flags=re.DOTALL)
    assert not re.search(r"<(img|iframe|link|object|embed)\b", markup)
    assert "echarts" in text and "Apache" in text  # the library, inline, with its notice


def test_embedded_json_cannot_close_its_script_element(tmp_path):
    run = write_run(tmp_path / "r", synth_records(20), profile="</script><script>alert(1)//")
    out = write_report([run], tmp_path / "x.html")
    text = out.read_text()
    assert "</script><script>alert(1)" not in text
    assert embedded(out)["runs"][0]["summary"]["profile"] == "</script><script>alert(1)//"
    assert html_lib.escape("</script><script>alert(1)//") in text  # in tables, escaped


def test_costs_multiply_the_plan_by_gpus_and_price(bench, report):
    data = embedded(report)
    cost = {row["profile"]: row for row in data["cost"]["rows"]}
    plan = {row["profile"]: row for row in data["capacity"]["plan"]["rows"]}
    for profile, row in cost.items():
        assert row["gpus_per_replica"] == 2  # tensor-parallel-size 2
        assert row["plan_cost_per_hour"] == pytest.approx(plan[profile]["replicas"] * 2 * 2.5)
        levels = next(p for p in data["capacity"]["profiles"] if p["profile"] == profile)["levels"]
        tokens = sum(lv["total_output_tokens"] for lv in levels) / sum(
            lv["completed"] for lv in levels
        )
        per_hour = plan[profile]["sustainable_rps"] * tokens * 3600
        assert row["cost_per_million_output_tokens"] == pytest.approx(2 * 2.5 / per_hour * 1e6)
    assert any("without GPUs" in note for note in data["cost"]["notes"])


def test_gpus_per_replica_multiply_every_parallel_size(tmp_path):
    sizes = {"tensor-parallel-size": 4, "pipeline-parallel-size": 2, "data-parallel-size": 2}
    run = write_level(tmp_path / "tp", "big", 2.0, n=40, engine_args=sizes)
    data = build_data([run], slo="ttft_p95=1s", target_rps=10, gpu_hour_price=1.0)
    (row,) = data["cost"]["rows"]
    assert row["gpus_per_replica"] == 16
    bad = write_level(
        tmp_path / "bad", "bad", 2.0, n=40, engine_args={"tensor-parallel-size": "two"}
    )
    with pytest.raises(ReportError, match="tensor-parallel-size"):
        build_data([bad], slo="ttft_p95=1s", gpu_hour_price=1.0)


def test_a_launched_servers_recorded_gpus_are_read_without_the_registry(tmp_path):
    """`vprof bench` records a launched server's GPUs in run.json; reading a run then takes
    them as recorded (no profile registry, whose flag table may need a child process), and a
    run from before is counted from its engine arguments as before."""
    from vprof.registry import get_profile
    from vprof.runs.measure import launched_gpus

    profile = get_profile("baseline").with_overrides(
        set_args={"tensor-parallel-size": 2, "pipeline-parallel-size": 2}
    )
    recorded = launched_gpus(profile)
    assert recorded == {
        "gpus_per_server": 4,
        "parallelism": "tensor-parallel-size 2 × pipeline-parallel-size 2",
    }
    run = write_level(tmp_path / "r", "big", 2.0, n=40, engine_args={"tensor-parallel-size": 2})
    meta = json.loads((run / "run.json").read_text())
    meta["profile"] |= recorded  # the count recorded at launch is the one read
    (run / "run.json").write_text(json.dumps(meta))
    code = (
        "import sys; from vprof.report import build_data; "
        f"d = build_data([{str(run)!r}], slo='ttft_p95=1s', target_rps=10, gpu_hour_price=1.0); "
        "(row,) = d['cost']['rows']; print(row['gpus_per_replica'], row['parallelism']); "
        "print(sorted(m for m in sys.modules if m.startswith('vprof.registry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "4 tensor-parallel-size 2 × pipeline-parallel-size 2",
        "[]",
    ]
    old = write_level(tmp_path / "old", "old", 2.0, n=40, engine_args={"tensor-parallel-size": 2})
    data = build_data([old], slo="ttft_p95=1s", target_rps=10, gpu_hour_price=1.0)
    assert data["cost"]["rows"][0]["gpus_per_replica"] == 2


def test_a_sweep_manifest_gives_its_rungs_and_recommendation(tmp_path):
    sweep = write_sweep(tmp_path / "sweep")
    data = embedded(write_report([sweep], tmp_path / "sweep.html", n_boot=0))
    (entry,) = [s for s in data["sweeps"] if s["source"] == "manifest"]
    assert entry["kind"] == "batched-tokens" and entry["profile"] == "baseline"
    assert [r["rung"] for r in entry["rows"]][-1] == "baseline@mnbt=6144"
    ids = {r["id"]: r for r in data["runs"]}
    linked = [r for r in entry["rows"] if r.get("run_id")]
    assert len(linked) == 2
    for row in linked:
        assert ids[row["run_id"]]["provenance"]["run"] == row["run"]
        assert row["offered_load"] == 4.0  # from the run's summary
    assert entry["recommendation"].startswith("Recommended: baseline@mnbt=4096")


def test_without_a_manifest_load_levels_make_a_ladder(bench, report):
    data = embedded(report)
    ladders = [s for s in data["sweeps"] if s["source"] == "offered load"]
    assert {s["profile"] for s in ladders} == {"baseline", "chunked-256"}
    for ladder in ladders:
        assert [r["offered_load"] for r in ladder["rows"]] == [2.0, 4.0, 8.0]
        assert "replicas of" in ladder["recommendation"]


@pytest.mark.parametrize(
    "manifest, fragment",
    [
        ({"profile": "p", "rows": []}, "the sweep's kind is missing"),
        ({"kind": "load", "rows": []}, "profile"),
        ({"kind": "load", "profile": "p", "rows": {}}, "rows must be a list"),
        ({"kind": "load", "profile": "p", "rows": [{"run": "../elsewhere"}]}, "rows[0].run"),
    ],
)
def test_a_bad_manifest_is_refused_naming_the_key(tmp_path, manifest, fragment):
    folder = tmp_path / "sweep"
    write_run(folder / "r", synth_records(10))
    sweep_manifest(folder).write_text(json.dumps(manifest))
    with pytest.raises(ReportError) as err:
        build_data([folder])
    assert fragment in str(err.value) and "sweep.json" in str(err.value)


def test_torn_manifest_says_where(tmp_path):
    folder = tmp_path / "sweep"
    write_run(folder / "r", synth_records(10))
    sweep_manifest(folder).write_text('{"kind": "load",\n "rows": [')
    with pytest.raises(RunError, match=r"sweep.json:2: not valid JSON"):
        build_data([folder])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--rps", "nan", "--slo", "ttft_p95=1s"], "--rps: nan is not a finite number"),
        (["--rps", "10"], "--rps: a target rate needs an SLO"),
        (["--rps", "-1", "--slo", "ttft_p95=1s"], "must be positive"),
        (["--gpu-hour-price", "0"], "--gpu-hour-price"),
        (["--gpu-hour-price", "inf"], "--gpu-hour-price: inf is not a finite number"),
        (["--headroom", "-0.5"], "--headroom"),
        (["--slo", "ttft_p95=soon"], "--slo"),
        (["--baseline", "nobody"], "--baseline: no compared run is 'nobody'"),
    ],
)
def test_bad_options_exit_2_with_one_line(bench, tmp_path, args, fragment):
    result = CliRunner().invoke(cli, ["report", str(bench), "-o", str(tmp_path / "r.html"), *args])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert fragment in line
    assert not (tmp_path / "r.html").exists()


def test_missing_run_folder_exits_2(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "no such run folder" in result.output


def test_cli_writes_the_file_and_says_where(bench, tmp_path):
    out = tmp_path / "sub" / "r.html"
    result = _invoke(
        "report",
        str(bench),
        "-o",
        str(out),
        "--slo",
        SLO,
        "--n-boot",
        "50",
        "--baseline",
        "chunked-256",
        "--title",
        "Two profiles",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {out} (") and out.is_file()
    assert "comparing 3 group(s) of runs under the same traffic with 50 bootstrap" in result.stderr
    data = embedded(out)
    assert data["title"] == "Two profiles"
    # --baseline puts chunked-256 first in every comparison
    for cmp in data["comparisons"]:
        assert {r["baseline"] for r in cmp["rows"]} == {"chunked-256"}
    # without --rps the plan keeps its sustainable rates but claims no replicas
    assert all("replicas" not in row for row in data["capacity"]["plan"]["rows"])
    assert all(not math.isnan(p["sustainable_rps"]) for p in data["capacity"]["profiles"])


def test_the_report_command_ends_at_once_with_its_file_and_line_out(bench, tmp_path):
    # the process skips the interpreter's teardown (EXIT_AT_ONCE): nothing it wrote is lost
    import subprocess
    import sys

    out = tmp_path / "r.html"
    command = ["report", str(bench), "-o", str(out), "--n-boot", "50"]
    done = subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out} (") and done.stdout.endswith(" MB)\n")
    assert embedded(out)["runs"]


def test_a_run_that_sent_nothing_still_reports(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "run.json").write_text(json.dumps({"name": "empty", "profile": {"name": "p"}}))
    (empty / "status.json").write_text(json.dumps({"state": "failed", "reason": "no server"}))
    data = embedded(write_report([empty], tmp_path / "e.html", slo="ttft_p95=1s"))
    (run,) = data["runs"]
    assert run["timeline"] == {"empty": "no request was sent"}
    assert run["distributions"]["ttft"]["n"] == 0
    assert data["warnings"] == ["p: the run is failed: no server"]


def test_an_slo_without_percentiles_gives_goodput_but_no_plan(bench, tmp_path):
    data = embedded(write_report([bench], tmp_path / "g.html", slo="ttft=300ms", n_boot=0))
    assert data["capacity"]["plan"] is None
    assert "no percentile target" in data["capacity"]["why"]
    assert all(r["summary"]["request_goodput"] is not None for r in data["runs"])


def test_a_sweep_load_folder_reports_its_manifest_and_plan(tmp_path):
    """`vprof sweep load` against the emulator climbs its rates, plans and writes the folder
    (the CLI path; the real vLLM path is the end-to-end suite's); the report reads its
    manifest, links every rung to its run, and answers with `vprof plan`'s numbers."""
    import subprocess
    import sys

    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator

    shape = tmp_path / "short.yaml"
    shape.write_text("kind: open-loop\nrate_rps: 1\nwarmup_s: 1\nduration_s: 2\nmax_in_flight: 8\n")
    out = tmp_path / "out"
    with Emulator(EmulatorConfig(ttft_ms=20, itl_ms=5, model="tiny")) as emulator:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "vprof.cli.main",
                "sweep",
                "load",
                "emu",
                "--url",
                emulator.url,
                "--traffic",
                str(shape),
                "--levels",
                "2,6",
                "--workload",
                "tiny-smoke",
                "--slo",
                "ttft_p95=1000ms",
                "--rps",
                "30",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "short@rate_rps=2" in proc.stdout and "short@rate_rps=6" in proc.stdout
    assert "to serve 30 req/s of this traffic within ttft_p95=1000ms you need" in proc.stdout
    result = _invoke(
        "report",
        str(out),
        "-o",
        str(tmp_path / "r.html"),
        "--slo",
        "ttft_p95=1000ms",
        "--rps",
        "30",
        "--n-boot",
        "0",
    )
    assert result.exit_code == 0, result.output
    data = embedded(tmp_path / "r.html")
    (sweep,) = data["sweeps"]
    assert sweep["source"] == "manifest" and sweep["kind"] == "load"
    assert [r["offered_load"] for r in sweep["rows"]] == [2.0, 6.0]
    assert all(r["run_id"] for r in sweep["rows"])
    plan = _invoke("plan", str(out), "--rps", "30", "--slo", "ttft_p95=1000ms", "--format", "json")
    assert data["capacity"]["plan"]["rows"] == json.loads(plan.output)
    assert sweep["recommendation"] == data["capacity"]["profiles"][0]["message"]
    assert "you need" in sweep["recommendation"]
