"""`vprof launch` and `vprof model`: refusals before anything starts. A real launch on vLLM
(served, then Ctrl-C) is test_tune_e2e's, on the profile a tune wrote."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from ports import worker_port

from vprof.cli.launch import launch, model
from vprof.common.errors import ProfileError
from vprof.registry import parse_set_args
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
        [VPROF, "launch", "chunked-256", "--port", str(worker_port(PORTS[0], PORTS[1]))]
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
        listener.bind(("127.0.0.1", worker_port(PORTS[0], PORTS[1])))
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
