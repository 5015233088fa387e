"""`vprof launch` and `vprof model`: refusals before anything starts, and a real launch (e2e)."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
from click.testing import CliRunner

from vprof.cli.launch import launch, model
from vprof.common.errors import ProfileError
from vprof.registry import parse_set_args
from vprof.server.process import free_port
from vprof.tinymodel.build import TINY_MODEL_VERSION

TINY_DIR = f"tiny-{TINY_MODEL_VERSION}"

VPROF = str(Path(sys.executable).with_name("vprof"))
PORTS = (18000, 18099)  # this test file's port range


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_set_args_are_read_as_yaml_scalars() -> None:
    assert parse_set_args(
        ["max-num-batched-tokens=512", "enable-chunked-prefill=false", "--dtype=half", "x="]
    ) == {
        "max-num-batched-tokens": 512,
        "enable-chunked-prefill": False,
        "dtype": "half",
        "x": None,
    }


def test_set_arg_without_equals_is_a_user_error() -> None:
    with pytest.raises(ProfileError, match="is not KEY=VALUE"):
        parse_set_args(["max-num-batched-tokens"])


def test_model_command_prints_the_tiny_model_folder(cache: Path) -> None:
    result = CliRunner().invoke(model, [])
    assert result.exit_code == 0
    folder = Path(result.output.strip())
    assert folder == cache / "models" / TINY_DIR
    assert (folder / "tokenizer.json").is_file()


def test_profile_vllm_would_refuse_fails_before_launch(cache: Path) -> None:
    result = subprocess.run(
        [VPROF, "launch", "chunked-256", "--port", str(free_port(lo=PORTS[0], hi=PORTS[1]))]
        + ["--set", "enable-chunked-prefill=false", "--set", "max-num-batched-tokens=256"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "max-num-batched-tokens" in result.stderr and "max-model-len" in result.stderr
    assert "Traceback" not in result.stderr
    assert "command:" not in result.stdout  # nothing was started
    assert not (cache / "logs").exists()


def test_port_in_use_is_refused_with_a_clear_message(cache: Path) -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        listener.bind(("127.0.0.1", free_port(lo=PORTS[0], hi=PORTS[1])))
        listener.listen()
        port = listener.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [VPROF, "launch", "chunked-256", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port" in result.stderr  # says what to do
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30  # refused up front, not after vLLM's start-up


def test_unknown_profile_is_a_one_line_error(cache: Path) -> None:
    result = CliRunner().invoke(launch, ["chunked-265"])
    assert result.exit_code != 0
    assert "chunked-256" in str(result.exception) + result.output


def _reader(stream) -> tuple[queue.Queue[str], list[str]]:
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        for line in stream:
            seen.append(line.rstrip("\n"))
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines, seen


def _wait_for_line(lines: queue.Queue[str], prefix: str, proc, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            assert proc.poll() is None, f"vprof launch exited with {proc.returncode}"
            continue
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no line starting {prefix!r} within {timeout_s} s")


def _stream_completion(url: str, model_name: str, max_tokens: int) -> list[dict]:
    body = {
        "model": model_name,
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
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    return [json.loads(line[len("data: ") :]) for line in events[:-1]]


@pytest.mark.e2e
def test_launch_serves_a_streamed_completion_and_ctrl_c_leaves_no_process(cache: Path) -> None:
    """The real CLI on the real CPU build. enforce-eager halves start-up (no torch.compile)."""
    port = free_port(lo=PORTS[0], hi=PORTS[1])
    proc = subprocess.Popen(
        [VPROF, "launch", "chunked-256", "--port", str(port), "--set", "enforce-eager=true"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines, seen = _reader(proc.stdout)
    family: list[psutil.Process] = []
    try:
        ready = _wait_for_line(lines, "ready after", proc, timeout_s=600)
        _wait_for_line(lines, "Ctrl-C stops the server", proc, timeout_s=30)
        assert f"http://127.0.0.1:{port}" in ready and "tiny" in ready
        output = "\n".join(seen)
        assert "serve → openai-module" in output  # the host's changes, one line each
        assert "vprof's tiny model" in output
        assert "--max-num-batched-tokens 256" in output and "--enable-chunked-prefill" in output
        assert "KV cache: " in output and "maximum concurrency for 4,096 tokens" in output

        chunks = _stream_completion(f"http://127.0.0.1:{port}", "tiny", max_tokens=12)
        text_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["text"]]
        assert text_chunks and all(c["object"] == "text_completion" for c in chunks)
        usage = chunks[-1]["usage"]
        assert chunks[-1]["choices"] == []
        assert usage["completion_tokens"] == 12 and usage["prompt_tokens"] > 1

        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("vllm" in " ".join(p.cmdline()) for p in family)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
        assert "stopped; no server process is left" in "\n".join(seen)
        _, alive = psutil.wait_procs(family, timeout=10)
        assert alive == []
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens any more
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        for p in family:
            if p.is_running():
                p.kill()
