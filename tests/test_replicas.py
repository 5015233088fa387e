"""More than one server: ``vprof bench --url A --url B`` spreads load over replicas.

The policies are plain objects, tested directly; the flags are checked before anything runs;
and two emulators with clearly different first-token times (20 ms and 200 ms) show that every
record names its replica, that the per-replica summary separates the two, and that the two
policies split requests as they should: round-robin evenly, least-outstanding towards the
faster replica in closed loop.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from vprof.common.errors import RunError
from vprof.locustfiles.balance import (
    LeastOutstanding,
    RoundRobin,
    check_policy,
    make_balancer,
    parse_hosts,
)
from vprof.runs.spec import BenchSpec

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


# -- the policies ----------------------------------------------------------------------------
def test_round_robin_takes_each_replica_in_turn_whatever_is_in_flight():
    balancer = RoundRobin([A, B, C])
    picks = [balancer.pick() for _ in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    assert balancer.in_flight == [3, 2, 2] and balancer.sent == [3, 2, 2]
    balancer.done(1)
    assert balancer.pick() == 1  # its turn, though others have as many in flight


def test_least_outstanding_sends_to_the_replica_with_fewest_in_flight():
    balancer = LeastOutstanding([A, B])
    assert [balancer.pick(), balancer.pick()] == [0, 1]  # a tie goes round-robin
    assert balancer.pick() == 0 and balancer.in_flight == [2, 1]
    assert balancer.pick() == 1  # 1 has fewer
    balancer.done(0)
    balancer.done(0)
    assert balancer.in_flight == [0, 2]
    assert [balancer.pick(), balancer.pick()] == [0, 0]  # 0 is idle: it gets both
    assert balancer.pick() == 1  # now a tie at 2 each, and 1's turn


def test_least_outstanding_in_closed_loop_serves_in_proportion_to_speed():
    """Four users against a replica 10× faster than the other: in flight stays even, so the
    fast one finishes (and is sent) about 10× as many requests."""
    balancer = LeastOutstanding([A, B])
    latency_s = [0.02, 0.2]
    ends: list[tuple[float, int]] = []  # (finish time, replica) of each request in flight
    now = 0.0
    for _ in range(4):
        index = balancer.pick()
        ends.append((now + latency_s[index], index))
    while now < 20.0:
        ends.sort()
        now, index = ends.pop(0)
        balancer.done(index)
        picked = balancer.pick()
        ends.append((now + latency_s[picked], picked))
    fast, slow = balancer.sent
    assert fast / slow == pytest.approx(10, rel=0.1)
    assert balancer.in_flight == [2, 2]


def test_done_never_counts_below_zero():
    balancer = make_balancer("least-outstanding", [A, B])
    balancer.done(1)
    assert balancer.in_flight == [0, 0]


def test_a_misspelt_policy_is_refused_with_a_suggestion():
    with pytest.raises(RunError, match="not a balancing policy") as info:
        check_policy("round-robn")
    assert info.value.key == "--balance" and "did you mean 'round-robin'" in str(info.value)


# -- the flags and the spec ------------------------------------------------------------------
def test_the_spec_keeps_every_url_and_the_first_is_url():
    spec = BenchSpec(traffic=("smoke",), urls=(A + "/", B), balance="round-robin")
    assert spec.urls == (A, B) and spec.url == A and spec.balance == "round-robin"
    assert BenchSpec(traffic=("smoke",), url=A).urls == (A,)
    assert BenchSpec(traffic=("smoke",)).urls == () and BenchSpec(traffic=("smoke",)).url is None


@pytest.mark.parametrize(
    "urls, fragment",
    [
        ((A, "HTTP://10.0.0.1:8000/"), "names the same server as"),
        (("http://10.0.0.1", "http://10.0.0.1:80"), "names the same server as"),
        ((A, "ftp://10.0.0.2"), "is not a server URL"),
        ((A, ""), "is empty"),
        ((A, B + "/v1"), "ends in /v1"),
    ],
)
def test_bad_or_duplicate_urls_are_refused_before_anything_runs(urls, fragment):
    with pytest.raises(RunError, match=fragment):
        BenchSpec(traffic=("smoke",), urls=urls)


def test_a_bad_balance_in_the_library_is_refused():
    with pytest.raises(RunError, match="not a balancing policy"):
        BenchSpec(traffic=("smoke",), urls=(A, B), balance="random")


def test_locust_hosts_option_is_a_checked_comma_list():
    assert parse_hosts("") == ()
    assert parse_hosts(f"{A}, {B}/") == (A, B)
    with pytest.raises(RunError, match="names the same server") as info:
        parse_hosts(f"{A},{A}")
    assert info.value.key == "--hosts"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--url", A, "--url", A], "names the same server as"),
        (["--url", A, "--url", "10.0.0.2:8000"], "is not a server URL"),
        (["--url", A, "--url", B, "--balance", "round-robn"], "Invalid value for '--balance'"),
    ],
)
def test_bench_flags_give_one_clear_line_and_exit_2(tmp_path, args, fragment):
    from vprof.cli.main import cli

    result = CliRunner().invoke(cli, ["bench", "dep", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_the_parent_passes_every_replica_and_the_policy_to_locust(tmp_path):
    from vprof.records.rundir import RunDir
    from vprof.runs.loadgen import LoadSpec

    spec = LoadSpec(
        url=A,
        run_dir=RunDir(tmp_path),
        workload="w.yaml",
        traffic="{}",
        seed=1,
        salt="s",
        urls=(A, B),
        balance="round-robin",
    )
    argv = spec.argv()
    assert argv[argv.index("--host") + 1] == A
    assert argv[argv.index("--hosts") + 1] == f"{A},{B}"
    assert argv[argv.index("--balance") + 1] == "round-robin"
    one = LoadSpec(
        url=A, run_dir=RunDir(tmp_path), workload="w.yaml", traffic="{}", seed=1, salt="s"
    ).argv()
    assert "--hosts" not in one and "--balance" not in one  # one server: as before


def test_a_run_of_several_replicas_has_its_own_key():
    from vprof.registry import resolve_profile
    from vprof.runs.bench import run_key
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    profile, workload, shape = resolve_profile("base"), get_workload("chat"), get_shape("smoke")

    def key(**kw):
        return run_key(profile, BenchSpec(traffic=("smoke",), **kw), workload, shape)

    assert len({key(url=A), key(urls=(A, B)), key(urls=(A, B), balance="round-robin")}) == 3


# -- two emulators ---------------------------------------------------------------------------
FAST_MS, SLOW_MS = 20.0, 200.0


@pytest.fixture(scope="module")
def replicas():
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator

    with (
        Emulator(EmulatorConfig(ttft_ms=FAST_MS, itl_ms=1, model="tiny")) as fast,
        Emulator(EmulatorConfig(ttft_ms=SLOW_MS, itl_ms=1, model="tiny")) as slow,
    ):
        yield fast.url, slow.url


def _served(url: str) -> float:
    from vprof.server.metrics import scrape

    return scrape(url)["vllm:request_success_total"]


def _bench(tmp_path: Path, urls: tuple[str, ...], shape: str, *args: str) -> dict:
    """``vprof bench --url FAST --url SLOW`` (or one ``--url``); the run's summary, records
    and what each emulator says it served meanwhile."""
    import pyarrow.compute as pc

    from vprof.cli.main import cli
    from vprof.records.rundir import RunDir
    from vprof.records.store import read_records_file

    (tmp_path / "t.yaml").write_text(shape)
    (tmp_path / "w.yaml").write_text(
        "endpoint: completions\nprompt_tokens: 16\noutput_tokens: 4\nfixed_output: true\n"
    )
    before = [_served(url) for url in urls]
    argv = [
        "bench",
        "emulators",
        *(arg for url in urls for arg in ("--url", url)),
        "--traffic",
        str(tmp_path / "t.yaml"),
        "--workload",
        str(tmp_path / "w.yaml"),
        "--out",
        str(tmp_path / "out"),
        "--format",
        "json",
        *args,
    ]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # one document, per-replica parts and all
    (summary,) = document["summaries"]
    run = RunDir(Path(summary["path"]))
    table = read_records_file(run.records).table
    ok = table.filter(pc.equal(table.column("status"), "ok"))
    return {
        "summary": summary,
        "meta": run.meta(),
        "metrics": run.metric_samples(),
        "replicas": table.column("replica").to_pylist(),
        "ok_per_replica": [pc.sum(pc.equal(ok.column("replica"), u)).as_py() for u in urls],
        # the emulators' own count: 4 warm-up requests each, then the run's answers
        "served": [_served(url) - b - 4 for url, b in zip(urls, before, strict=True)],
    }


def _check_replicas(run: dict, urls: tuple[str, str]) -> tuple[dict, dict]:
    summary = run["summary"]
    assert set(run["replicas"]) == set(urls)  # every record names its replica
    assert run["ok_per_replica"] == pytest.approx(run["served"], abs=1)  # as the servers saw
    assert run["meta"]["urls"] == list(urls) and "metrics_from" not in run["meta"]
    # /metrics from each replica, each line naming its own; the run's counters are the sum
    lines = {url: [m for m in run["metrics"] if m["replica"] == url] for url in urls}
    assert all(len(mine) >= 2 for mine in lines.values()) and len(run["metrics"]) == sum(
        map(len, lines.values())
    )
    assert summary["replicas"] == 2 and "metrics_from" not in summary
    assert summary["num_preemptions"] == 0
    fast, slow = (summary["per_replica"][url] for url in urls)
    assert fast["num_preemptions"] == slow["num_preemptions"] == 0
    assert FAST_MS <= fast["median_ttft_ms"] < FAST_MS + 15
    assert SLOW_MS <= slow["median_ttft_ms"] < SLOW_MS + 15
    total = fast["request_throughput"] + slow["request_throughput"]
    assert total == pytest.approx(summary["request_throughput"], rel=0.03)
    return fast, slow


@pytest.mark.e2e  # real Locust timed against two emulators: the slow tier
def test_least_outstanding_sends_the_faster_replica_more_in_closed_loop(tmp_path, replicas):
    run = _bench(tmp_path, replicas, "kind: steady\nusers: 4\nduration_s: 5\nwarmup_s: 1\n")
    assert run["meta"]["balance"] == "least-outstanding"  # the default
    fast, slow = _check_replicas(run, replicas)
    # two in flight at each: the fast one answers ~(200 + 4)/(20 + 4) ≈ 8× as often
    assert fast["completed"] > 4 * slow["completed"]


OPEN_LOOP = "kind: open-loop\nprocess: constant\nrate_rps: {}\nduration_s: 5\nwarmup_s: 1\n"


@pytest.fixture(scope="module")
def open_loop(tmp_path_factory, replicas) -> dict[str, dict]:
    """20 req/s round-robin over both replicas (two Locust processes), and 10 req/s to the
    fast one alone: the same profile label and workload, for the plan's scaling check."""
    root = tmp_path_factory.mktemp("open-loop")
    (root / "two").mkdir()
    (root / "one").mkdir()
    two = _bench(
        root / "two", replicas, OPEN_LOOP.format(20), "--balance", "round-robin", "--processes", "2"
    )
    one = _bench(root / "one", replicas[:1], OPEN_LOOP.format(10))
    return {"two": two, "one": one}


@pytest.mark.e2e  # real Locust timed against two emulators: the slow tier
def test_round_robin_splits_evenly_in_open_loop_over_two_processes(open_loop, replicas):
    run = open_loop["two"]
    fast, slow = _check_replicas(run, replicas)
    assert run["meta"]["balance"] == "round-robin"
    assert abs(fast["requests"] - slow["requests"]) <= 2  # each process alternates its share


# -- the summary table -----------------------------------------------------------------------
def _two_replica_run(folder: Path, on_a: int, on_b: int) -> Path:
    """A run folder of ``on_a`` requests answered by A (40 ms first tokens) and ``on_b`` by B
    (160 ms), as a two-replica bench writes it."""
    from test_analysis_data import synth_records, write_run

    fast, slow = synth_records(on_a, seed=1, ttft_ms=40), synth_records(on_b, seed=2, ttft_ms=160)
    for rec in fast:
        rec.replica = A
    for rec in slow:
        rec.replica = B
    run = write_run(folder, fast + slow)
    meta = json.loads((run / "run.json").read_text())
    meta |= {"url": A, "urls": [A, B], "balance": "round-robin", "metrics_from": A}
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_summarize_shows_a_per_replica_table_and_json_stays_one_document(tmp_path):
    from vprof.cli.main import cli

    run = _two_replica_run(tmp_path / "two", 100, 100)
    table = CliRunner().invoke(cli, ["summarize", str(run)])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert any(line.startswith("metrics_from") and f"{A} only (of 2)" in line for line in lines)
    # its columns in blocks that fit 120 characters, each led by the run
    headers = [line for line in lines if line.startswith("run ")]
    assert "replica" in headers[0] and "request_throughput" in headers[0]
    assert any("p95_ttft_ms" in header for header in headers)
    assert max(map(len, table.stdout.splitlines())) <= 120  # warnings go to stderr
    assert sum(1 for line in lines if A in line or B in line) >= 2
    document = CliRunner().invoke(cli, ["summarize", str(run), "--format", "json"])
    (summary,) = json.loads(document.stdout)
    assert set(summary["per_replica"]) == {A, B} and summary["replicas"] == 2


def test_the_report_has_a_replicas_table_and_names_where_server_metrics_came_from(tmp_path):
    import html

    from test_analysis_data import synth_records, write_run

    from vprof.report import write_report

    run = _two_replica_run(tmp_path / "two", 60, 40)
    page = html.unescape(write_report([run], tmp_path / "report.html").read_text())
    start = page.index("<h3>Replicas</h3>")
    table = page[start : page.index("</table>", start)]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows[1:]]
    assert [c[1] for c in cells] == [A, B]
    assert [c[2] for c in cells] == ["60", "40"]  # requests, from the records that name them
    assert f"/metrics) are from {A} only (of 2)" in page
    single = write_run(tmp_path / "one", synth_records(20, seed=5))
    assert "<h3>Replicas</h3>" not in write_report([single], tmp_path / "r1.html").read_text()


@pytest.mark.e2e  # real Locust timed against two emulators: the slow tier
def test_plan_checks_linear_scaling_against_the_measured_two_replica_run(open_loop):
    """Throughput scaled (two replicas at 10 req/s each served 2 × what one did at 10 req/s),
    but the SLO did not: the slow replica's 200 ms first tokens miss it."""
    from vprof.analysis import plan

    runs = [Path(open_loop[k]["summary"]["path"]) for k in ("one", "two")]
    single = open_loop["one"]["summary"]
    assert "replicas" not in single and single["offered_load"] == 10
    (p,) = plan(runs, target_rps=40, slo="ttft_p95=100ms", headroom=0.0).profiles
    # Not quite 100 %: a run's throughput window ends with its last answer, 200 ms later on
    # the slow replica, in a window of about 4 s.
    assert 0.9 < p.scaling_efficiency <= 1.02
    assert any("measured with 2 replicas at 10 req/s each" in n for n in p.notes)
    assert any("linear scaling did not hold at the SLO" in n for n in p.notes)
    efficiency = min(p.scaling_efficiency, 1.0)
    assert p.replicas == math.ceil(40 / (p.sustainable_rps * efficiency) - 1e-9)


@pytest.mark.e2e  # real Locust timed against two emulators: the slow tier
def test_plain_locust_spreads_over_hosts_and_refuses_a_repeated_one(tmp_path, replicas):
    import subprocess
    import sys

    from locust_run import LOCUSTFILE, run_headless

    from vprof.analysis import summarize_run

    hosts = ",".join(replicas)
    run_headless(
        replicas[0],
        tmp_path / "run",
        "--hosts",
        hosts,
        "--balance",
        "round-robin",
        "--workload",
        "tiny-smoke",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
    )
    summary = summarize_run(tmp_path / "run")
    assert set(summary["per_replica"]) == set(replicas)
    fast, slow = (summary["per_replica"][url] for url in replicas)
    assert abs(fast["requests"] - slow["requests"]) <= 1  # in turn
    assert fast["median_ttft_ms"] < FAST_MS + 15 and slow["median_ttft_ms"] >= SLOW_MS
    repeated = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "-t",
            "1s",
            "--hosts",
            f"{replicas[0]},{replicas[0]}/",
            "--run-dir",
            str(tmp_path / "bad"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert repeated.returncode == 2
    assert "--hosts:" in repeated.stderr and "names the same server" in repeated.stderr
