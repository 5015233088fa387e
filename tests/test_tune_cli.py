"""`vprof tune` without vLLM: bad input fails before any server starts, and the plumbing —
trials as bench runs, resuming, the written profile, tune.json, the report — works against
the emulator (which only stands in for a server here; the e2e test uses real vLLM)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from vprof.cli.main import cli
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator
from vprof.runs.tune import run_prepared
from vprof.runs.tunerequest import TuneRequest, parse_duration, prepare


@pytest.fixture
def no_server(monkeypatch):
    """Fail the test if anything tries to start a server process."""
    from vprof.server.process import ServerProcess

    def refuse(self, *args, **kwargs):
        raise AssertionError("a server was started")

    monkeypatch.setattr(ServerProcess, "start", refuse)


def tune(*args: str):
    return CliRunner().invoke(cli, ["tune", "chunked-512", *args], catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft_p95=fast"], "Error: --slo: ttft_p95='fast' is not a duration"),
        (["--slo", "errors=1%"], "Error: --slo: tune needs percentile targets"),
        (
            ["--slo", "ttft_p95=1s", "--budget-trials", "0"],
            "Error: --budget-trials: must be between 1 and 1,000, got 0",
        ),
        (
            ["--slo", "ttft_p95=1s", "--budget-trials", "2.5"],
            "Error: --budget-trials: must be a whole number, got 2.5",
        ),
        (
            ["--slo", "ttft_p95=1s", "--budget-time", "2 weeks"],
            "Error: --budget-time: '2weeks' is not a number",
        ),
        (
            ["--slo", "ttft_p95=1s", "--budget-time", "0m"],
            "Error: --budget-time: must be more than 0 and at most 2,592,000, got 0",
        ),
        (
            ["--slo", "ttft_p95=1s", "--budget-time", "inf"],
            "Error: --budget-time: must be a finite number",
        ),
        (
            ["--slo", "ttft_p95=1s", "--space", "max-num-seqs=8,eight"],
            "Error: --space max-num-seqs: must be a whole number, got 'eight'",
        ),
        (
            ["--slo", "ttft_p95=1s", "--space", "max-num-sequences=8"],
            "Error: --space max-num-sequences: unknown vLLM engine argument",
        ),
        (
            [
                "--slo",
                "ttft_p95=1s",
                "--workload",
                "long-prompt-short-answer",
                "--space",
                "max-model-len=1024",
            ],
            "Error: --space max-model-len: 1024 is below the workload's",
        ),
        (["--slo", "ttft_p95=1s", "--objective", "min-latency"], "Error: --rps: min-latency"),
        (
            ["--slo", "ttft_p95=1s", "--objective", "max-rates"],
            "Error: --objective: unknown objective 'max-rates' (did you mean 'max-rate'?)",
        ),
        (
            ["--slo", "ttft_p95=1s", "--set", "max-num-seqs=64", "--space", "max-num-seqs=16,32"],
            "Error: --space max-num-seqs: --set max-num-seqs=64 pins it, and --space max-num-seqs "
            "searches it",
        ),
        (
            ["--slo", "ttft_p95=1s", "--traffic", "steady"],
            "Error: --traffic: steady is closed-loop",
        ),
        (
            ["--slo", "ttft_p95=1s", "--set", "max-model-len=64", "--workload", "chat"],
            "Error: --set max-model-len: 64 is below the workload's longest request",
        ),
        (
            ["--slo", "ttft_p95=1s", "--objective", "min-latency", "--rps", "4", "--guided"],
            "Error: --guided: --guided ranks candidates by their predicted capacity",
        ),
        (
            ["--slo", "ttft_p95=1s", "--workload", "chat-sessions", "--guided"],
            "Error: --guided: workload chat-sessions sends sessions",
        ),
    ],
)
def test_bad_input_fails_before_any_server_starts(no_server, tmp_path, args, message):
    result = tune(*args, "--out", str(tmp_path / "t"))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_bad_profile_file_fails_with_its_line(no_server, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("description: x\nextends: chunked-512\nengine_args:\n  block-size: many\n")
    result = CliRunner().invoke(
        cli, ["tune", str(bad), "--slo", "ttft_p95=1s", "--out", str(tmp_path / "t")]
    )
    assert result.exit_code == 2
    assert f"{bad}:4: block-size: expected an integer" in result.output


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2h", 7200),
        ("90m", 5400),
        ("1h30m", 5400),
        ("45s", 45),
        ("600", 600),
        ("1.5h", 5400),
        ("20min", 1200),
    ],
)
def test_budget_times_read_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


def test_tune_help_lists_it_among_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert "tune" in result.output


@pytest.fixture(scope="module")
def emulated_tune(tmp_path_factory):
    """One small tune whose trials run against the emulator, then the same tune again."""
    out = tmp_path_factory.mktemp("tune") / "t"
    request = TuneRequest(
        profile="chunked-512",
        slo="ttft_p95=1000ms",
        workload="tiny-smoke",
        space=("max-num-seqs=8,16",),
        level_s=1.5,
        warmup_s=0.0,
        start_rps=1.0,
        max_rps=2.0,
        repeat=1,
        out_dir=out,
        set_args=(
            "enforce-eager=true",
            "max-model-len=256",
            "gpu-memory-utilization=0.9",
            "enable-chunked-prefill=true",
            "max-num-batched-tokens=512",
        ),
    )
    said: list[str] = []
    with Emulator(EmulatorConfig(ttft_ms=10, itl_ms=2, model="tiny")) as emulator:
        prepared = prepare(request)
        prepared = replace(prepared, spec=replace(prepared.spec, url=emulator.url))
        first = run_prepared(prepared, said.append)
        again = run_prepared(prepared, said.append)
    return out, first, again, said


def test_every_trial_level_is_a_bench_run_and_the_answer_rests_on_them(emulated_tune):
    out, first, _, _ = emulated_tune
    result = first.result
    assert [t.candidate.get("max-num-seqs") for t in result.measured] == [16, 8]
    runs = sorted(p.parent for p in out.glob("*/run.json"))
    assert len(runs) == sum(len(t.measurements) for t in result.measured)
    for run in runs:
        assert json.loads((run / "status.json").read_text())["state"] == "completed"
    # the emulator answers in 10 ms, far inside the SLO: a level can only miss it when the
    # load generator itself fell behind (a shared machine), and then its summary says so
    for trial in result.measured:
        for m in trial.measurements:
            assert m.met or m.summary.get("client_limited"), (trial.label, m.rate_rps)
    assert first.rows[0]["levels"].startswith("1") and first.rows[0]["server"] is True
    if all(m.met for t in result.measured for m in t.measurements):
        assert first.rows[0]["levels"] == "1✓ 2✓"
        assert result.best is not None and result.best.sustainable_rps > 1.5


def test_re_running_the_same_tune_skips_what_completed_and_agrees(emulated_tune):
    out, first, again, said = emulated_tune
    assert again.result.servers_started == 0
    assert [r["levels"] for r in again.rows] == [r["levels"] for r in first.rows]
    assert again.result.best.label == first.result.best.label
    assert any("already completed" in line for line in map(str, said))


def test_the_written_profile_extends_the_start_and_validates_and_renders(emulated_tune):
    out, first, _, _ = emulated_tune
    path = first.profile_path
    assert path is not None and path == out / "chunked-512-tuned.yaml"
    text = path.read_text()
    assert "extends: chunked-512" in text and "within ttft_p95=1000ms" in text
    assert "workload tiny-smoke" in text and "req/s per replica measured" in text
    assert "port:" not in text
    runner = CliRunner()
    checked = runner.invoke(cli, ["validate", str(path)])
    assert checked.exit_code == 0, checked.output
    assert "ok    chunked-512-tuned" in checked.output
    rendered = runner.invoke(cli, ["render", str(path), "--format", "argv"])
    argv = json.loads(rendered.output)
    seqs = first.result.best.candidate.get("max-num-seqs")
    assert argv[argv.index("--max-num-seqs") + 1] == str(seqs)
    assert "--enforce-eager" in argv and argv[argv.index("--max-model-len") + 1] == "256"


def test_the_tune_folder_holds_its_state_a_ladder_and_a_report(emulated_tune):
    out, first, _, _ = emulated_tune
    state = json.loads((out / "tune.json").read_text())
    assert state["best"] == first.result.best.label
    assert state["grid_size"] == 2 and state["candidates_measured"] == 2
    assert [t["candidate"] for t in state["trials"]] == [t.label for t in first.result.trials]
    ladder = json.loads((out / "sweep.json").read_text())
    assert ladder["kind"] == "tune" and all((out / r["run"]).is_dir() for r in ladder["rows"])
    html = (out / "report.html").read_text()
    assert "vprof tune: chunked-512" in html and first.result.best.label in html


def test_servers_that_did_not_start_are_results_and_not_retried_on_resume(tmp_path):
    from vprof.server.process import free_port

    out = tmp_path / "t"
    request = TuneRequest(
        profile="chunked-512",
        slo="ttft_p95=1000ms",
        workload="tiny-smoke",
        space=("max-num-seqs=8,16",),
        level_s=1.0,
        warmup_s=0.0,
        repeat=1,
        out_dir=out,
        set_args=("enforce-eager=true", "gpu-memory-utilization=0.9"),
    )
    prepared = prepare(request)
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: the "server" never starts
    prepared = replace(prepared, spec=replace(prepared.spec, url=nowhere))
    said: list[str] = []
    first = run_prepared(prepared, said.append)
    assert first.result.best is None and first.profile_path is None
    tried = first.result.tried
    assert tried and {t.state for t in tried} == {"not started"} and not first.result.measured
    state = json.loads((out / "tune.json").read_text())
    assert len(state["start_failures"]) == len(tried)
    assert state["candidates_measured"] == 0 and state["candidates_tried"] == len(tried)
    assert state["answer"].startswith("Nothing was measured")
    said.clear()
    again = run_prepared(prepared, said.append)
    assert [t.label for t in again.result.tried] == [t.label for t in tried]
    assert sum("did not start before; not retried" in line for line in map(str, said)) == len(tried)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"profile": "chunked-512", "start_failures": {', "not valid JSON (line 1"),
        ("[1, 2]", "expected a JSON object, found list"),
        (
            '{\n  "start_failures": {"chunked-512@seqs8": 5}\n}',
            "tune.json:2: start_failures.chunked-512@seqs8: expected text",
        ),
    ],
)
def test_a_damaged_tune_json_is_an_error_and_is_left_as_it_was(no_server, tmp_path, text, message):
    """Resuming from a damaged tune.json would forget which candidates failed to start and then
    overwrite it: it is an error naming the file, before any server starts."""
    from vprof.common.errors import RunError

    out = tmp_path / "t"
    out.mkdir()
    (out / "tune.json").write_text(text)
    request = TuneRequest(
        profile="chunked-512",
        slo="ttft_p95=1000ms",
        workload="tiny-smoke",
        space=("max-num-seqs=8,16",),
        out_dir=out,
    )
    with pytest.raises(RunError) as caught:
        run_prepared(prepare(request), lambda _: None)
    assert str(out / "tune.json") in str(caught.value) and message in str(caught.value)
    assert (out / "tune.json").read_text() == text


def test_a_client_limited_level_is_measured_again_up_to_a_bound(no_server, tmp_path):
    """A level the load generator could not keep up with says nothing of the server: the trial
    runs it again (a further repeat of the level) and stops once a run keeps time."""
    from vprof.records import RunDir
    from vprof.runs.spec import RunOutcome
    from vprof.runs.tunebench import CLIENT_LIMITED_ATTEMPTS, BenchTrials

    request = TuneRequest(
        profile="chunked-512",
        slo="ttft_p95=1000ms",
        workload="tiny-smoke",
        out_dir=tmp_path / "t",
        set_args=("max-model-len=256", "enable-chunked-prefill=true"),
    )
    prepared = prepare(request)

    class Session:
        """Client-limited on the first ``limited`` runs, keeping time after that."""

        def __init__(self, limited: int) -> None:
            self.limited, self.repeats, self.starts = limited, [], 1

        def run(self, shape, repeat=1):
            self.repeats.append(repeat)
            run = RunDir(tmp_path / f"{self.limited}-{repeat}")
            run.path.mkdir()
            summary = {"client_limited": repeat <= self.limited, "request_throughput": 1.0}
            run.summary_json.write_text(json.dumps(summary))
            return RunOutcome(run, "chunked-512", shape.name, "completed", repeat=repeat)

    said: list[str] = []
    trials = BenchTrials(prepared, said.append, {})
    for limited, repeats in (
        (0, [1]),
        (1, [1, 2]),
        (99, list(range(1, CLIENT_LIMITED_ATTEMPTS + 1))),
    ):
        trial = trials.open(prepared.start)
        trial.session = Session(limited)
        measured = trial.measure(2.0)
        assert trial.session.repeats == repeats
        assert measured.summary["client_limited"] is (limited >= CLIENT_LIMITED_ATTEMPTS)
    again = sum("measured again" in line for line in map(str, said))
    assert again == 1 + (CLIENT_LIMITED_ATTEMPTS - 1)
