"""`vprof tune` end to end on real vLLM (CPU build) with real Locust: a small tune finishes,
its profile passes `vprof validate` and `vprof launch` starts it, and an independent
`vprof sweep load` of that server confirms the claimed rate within 10 %.

Kept short: a grid of two candidates (max-num-batched-tokens 512 and 2048 with chunked
prefill, the rest pinned, eager start-up) of which the budget measures one (ranking candidates
is test_tune_cli's, against the emulator; here the point is a real claim), 10 s levels (at 6 s
a level's p95 rested on about 17 requests, and a claim and its check once came out 10.3 %
apart). The server must be what saturates, not the
client: vLLM's CPU threads are bound to core 0 (the load generator keeps the other), and the
workload is prefill-bound — long prompts (6000 tokens on an AVX-512 host, fewer on a slower
one: see ``_prompt_tokens``), 8-token answers — so the server tops out near 3 req/s (each
prefill takes about 0.3 s) while the client has almost nothing to do; under
constant arrivals its capacity is then sharp."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import requests
from ports import worker_port

pytestmark = pytest.mark.e2e

SLO = "ttft_p95=1500ms"
ATTEMPTS = 3  # independent checks of one claim (see the claim's test)
RETRY_AFTER_S = 45  # between two checks: the host's slow spells last minutes


def vprof(*args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vprof.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# The prompts are sized so the pinned server prefills one in about 0.3 s on any host: vLLM's
# CPU build is ~5x slower without AVX-512 (an AVX2 host here took 1.51 s for 6000 tokens, where
# the AVX-512 ones took ~0.3 s, and no level of the tune met the SLO). The shared server (two
# threads, not pinned) is timed on distinct 3000-token prompts; the pinned one took 5.4x its
# fastest for 6000 tokens on that host (1.51 against 0.28 s). A prefill's time grows as the
# prompt's length to the power 1.6 (attention): 1200-token prompts served 8.9 req/s there.
PROBE_TOKENS, PINNED_PER_PROBE, PREFILL_S, MAX_PROMPT = 3000, 5.4, 0.3, 6000
PREFILL_POWER = 1.6


def _prompt_tokens(url: str, model: str) -> int:
    """Prompt length for a ~0.3 s prefill on the pinned server, from the shared one's pace."""
    times = []
    for k in range(3):  # distinct prompts: a cached prefix would not be prefilled
        prompt = [100 + (i * (k + 3)) % 500 for i in range(PROBE_TOKENS)]
        started = time.perf_counter()
        body = {"model": model, "prompt": prompt, "max_tokens": 1}
        answer = requests.post(f"{url}/v1/completions", json=body, timeout=120)
        answer.raise_for_status()
        times.append(time.perf_counter() - started)
    pinned_s = PINNED_PER_PROBE * min(times)
    scaled = MAX_PROMPT * min(1.0, PREFILL_S / pinned_s) ** (1 / PREFILL_POWER)
    tokens = max(1000, int(round(scaled, -2)))
    print(f"\nprobe {min(times):.3f} s for {PROBE_TOKENS} tokens: prompts of {tokens}")
    return tokens


@pytest.fixture(scope="module")
def files(tmp_path_factory, vllm_server) -> Path:
    tokens = _prompt_tokens(vllm_server.url, vllm_server.model)
    root = tmp_path_factory.mktemp("tune-e2e")
    (root / "profiles").mkdir()
    (root / "profiles" / "pinned.yaml").write_text(
        "description: chunked-512 with vLLM's CPU threads on core 0\n"
        "extends: chunked-512\n"
        "env:\n  VLLM_CPU_OMP_THREADS_BIND: '0'\n"
    )
    (root / "answers.yaml").write_text(
        f"description: {tokens} tokens in, exactly 8 out\nendpoint: completions\n"
        f"prompt_tokens: {tokens}\noutput_tokens: 8\nfixed_output: true\n"
    )
    (root / "level.yaml").write_text(
        "description: tune's levels\nkind: open-loop\nprocess: constant\nrate_rps: 1\n"
        "duration_s: 10\nwarmup_s: 1\nmax_in_flight: 256\n"
    )
    return root


def _tune(files: Path, name: str):
    """One small tune into ``files/name``: its folder, its tune.json and the process."""
    out = files / name
    # prompts of a ~0.3-s prefill serve 3-5 req/s: the search starts at 3 (from 1.5 it spent
    # a 10-s level on reaching 3; an AVX2 host sustained 4.55)
    proc = vprof(
        "tune",
        "pinned",
        "--profiles-dir",
        str(files / "profiles"),
        "--workload",
        str(files / "answers.yaml"),
        "--traffic",
        str(files / "level.yaml"),
        "--slo",
        SLO,
        "--space",
        "max-num-batched-tokens=512,2048",
        "--set",
        "enforce-eager=true",
        "--set",
        "enable-chunked-prefill=true",
        "--set",
        "max-num-seqs=8",
        "--budget-trials",
        "1",
        "--repeat",
        "1",
        "--level-s",
        "10",
        "--warmup-s",
        "1",
        "--start-rps",
        "3",
        "--port",
        str(worker_port(18800, 18899)),
        "--out",
        str(out),
        timeout_s=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr + _levels(out)
    return out, json.loads((out / "tune.json").read_text()), proc


def _levels(out: Path) -> str:
    """Each measured level's SLO figures and client verdicts, for a failure's message."""
    keys = (
        "completed",
        "p95_ttft_from_schedule_ms",
        "p95_ttft_ms",
        "served_rate",
        "client_limited",
        "loadgen_saturated",
        "host_unsteady",
        "state",
    )
    lines = []
    for path in sorted(out.glob("*/summary.json")):
        summary = json.loads(path.read_text())
        row = {k: summary.get(k) for k in keys}
        lines.append(f"{path.parent.name}: {row}")
    return "\n" + "\n".join(lines)


@pytest.fixture(scope="module")
def tuned(files: Path):
    return _tune(files, "tune")


def test_a_small_tune_finishes_and_says_what_it_measured(tuned):
    out, state, proc = tuned
    assert state["candidates_measured"] == 1 and state["grid_size"] == 2
    assert state["best"].startswith("pinned@bt")
    assert state["sustainable_rps"] > 0
    rows = {row["candidate"]: row for row in state["trials"]}
    assert len(rows) == 1
    for row in rows.values():
        assert row["state"] == "measured", row
        assert all((out / Path(run).name / "summary.json").is_file() for run in row["runs"])
    assert "Best: pinned@bt" in proc.stdout
    assert (out / "report.html").is_file()


def test_the_written_profile_validates_launches_and_holds_its_claim(tuned, files):
    """The claim and its check are measured minutes apart, and this host's own speed drifts
    that much: a loop pinned to core 0 of the idle machine ran at 0.49–0.87 of its best pace
    in consecutive 10 s windows (0.60–0.83 over whole minutes; benchmarks/host_steadiness.py),
    and a server's rate follows: within one 10 s level it went from about 2.5 to 3.3 req/s.
    In a CI run a claim and its check came out 14 % and then 21 % apart on two launches, and
    10 % apart in a run that passed. So a disagreement is checked again, by a new independent
    sweep of the launched server, up to ``ATTEMPTS`` times and ``RETRY_AFTER_S`` apart: the
    host's drift passes in minutes, while a claim that is really wrong (a bias) misses in every
    attempt. (In one CI run the claim's two levels ran while the runs' host probe read 0.79 ms
    and the three checks, back to back, at 0.77–0.91 ms: each missed the SLO at 0.91 × the
    claim. Judging each check against the claim scaled by that probe was tried and dropped: in
    the next run it read the host 3 % faster while the server served 9 % less.)"""
    _, state, _ = tuned
    dirs = ["--profiles-dir", str(files / "profiles")]
    path = Path(state["profile_path"])
    checked = vprof("validate", str(path), *dirs, timeout_s=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok    pinned-tuned" in checked.stdout
    claim = float(state["sustainable_rps"])
    attempts = []
    best = re.fullmatch(r"pinned@bt(\d+)", state["best"])
    assert best, state["best"]
    with _launched(path, dirs, files, int(best.group(1))) as url:
        for attempt in range(1, ATTEMPTS + 1):
            if attempt > 1:
                time.sleep(RETRY_AFTER_S)
            measured, basis = _sweep(url, path, dirs, files, claim, f"confirm-{attempt}")
            attempts.append(f"claim {claim:.3f}, measured {measured}: {basis}")
            if measured is not None and abs(measured - claim) <= 0.10 * claim:
                return
    pytest.fail("no attempt's check came within 10 % of its claim: " + "; ".join(attempts))


@contextmanager
def _launched(path: Path, dirs: list[str], files: Path, batched: int) -> Iterator[str]:
    """The written profile started with `vprof launch` (its output says what it changed for
    this host and the KV cache it got; it serves a streamed completion), then Ctrl-C: it exits
    0 and nothing of it is left, nor anything listening on its port. (`vprof launch` on real
    vLLM is tested here only, on a server the claim's check needs anyway.)"""
    port = worker_port(18800, 18899)
    log_path = files / "confirm.launch.log"
    log = log_path.open("w")
    launch = subprocess.Popen(
        [sys.executable, "-m", "vprof.cli.main", "launch", str(path), *dirs, "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    family: list[psutil.Process] = []
    try:
        _wait_healthy(url, launch, log_path, deadline_s=420)
        _wait_for_text(log_path, "Ctrl-C stops the server", launch)
        output = log_path.read_text()
        assert "ready after" in output and url in output, output
        assert "serve → openai-module" in output and "vprof's tiny model" in output, output
        assert f"--max-num-batched-tokens {batched} " in output, output  # the tuned candidate's
        assert "--enable-chunked-prefill" in output, output
        # the tuned max-model-len: the workload's longest request, rounded up as tune rounds it
        assert "KV cache: " in output
        assert re.search(r"maximum concurrency for [\d,]+ tokens", output), output
        _stream_completion(url, max_tokens=12)
        family = psutil.Process(launch.pid).children(recursive=True)
        assert any("vllm" in " ".join(p.cmdline()) for p in family)
        yield url
    finally:
        launch.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            rc = launch.wait(timeout=180)
        except subprocess.TimeoutExpired:
            _kill_tree(launch.pid)
            raise
        finally:
            log.close()
    assert rc == 0 and "stopped; no server process is left" in log_path.read_text()
    _, alive = psutil.wait_procs(family, timeout=10)
    assert alive == []
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more


def _wait_for_text(log: Path, text: str, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)


def _stream_completion(url: str, max_tokens: int) -> None:
    """A streamed completion: server-sent events, text chunks, then the usage, then [DONE]."""
    body = {
        "model": "tiny",
        "prompt": "Tell me about the prefill queue",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with requests.post(f"{url}/v1/completions", json=body, stream=True, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in events[:-1]]
    assert any(c["choices"] and c["choices"][0]["text"] for c in chunks)
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == max_tokens


def _sweep(
    url: str, path: Path, dirs: list[str], files: Path, claim: float, name: str
) -> tuple[float | None, str]:
    """An independent `vprof sweep load` around ``claim``: its sustainable rate and basis."""
    # 0.91× must meet the SLO and 1.1× miss it, so the answer lands within ±10 % unless the
    # claim is wrong: too high and 0.91× misses, too low and 1.1× meets too. Not 0.9×: when
    # more than 5 % of the missed level's requests go unanswered its p95 is unbounded, there is
    # no slope to follow and the answer is the met level itself (a CI run: claim 1.601, levels
    # 1.44 and 1.76, answer 1.44 — 10.06 % below)
    levels = ",".join(f"{claim * f:.4g}" for f in (0.91, 1.1))
    sweep = vprof(
        "sweep",
        "load",
        str(path),
        *dirs,
        "--url",
        url,
        "--workload",
        str(files / "answers.yaml"),
        "--traffic",
        str(files / "level.yaml"),
        "--levels",
        levels,
        "--slo",
        SLO,
        "--out",
        str(files / name),
        "--format",
        "json",
        timeout_s=600,
    )
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    (plan,) = json.loads(sweep.stdout)["plan"]
    return plan["sustainable_rps"], str(plan["basis"])


def _kill_tree(pid: int) -> None:
    """The last resort of a failed test: no process of ours is left behind."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for proc in [*root.children(recursive=True), root]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _wait_healthy(url: str, launch: subprocess.Popen, log: Path, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert launch.poll() is None, log.read_text()
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1.0)
    raise AssertionError(f"{url} did not become healthy")
