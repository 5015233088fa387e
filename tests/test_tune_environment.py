"""`vprof tune` fails fast for the right reason: a server that cannot start because of the
machine (port in use, no GPU, model missing, out of disk) stops the tune at the first
candidate with exit 1, while a candidate whose own settings are refused or run out of memory
only prunes it. Servers are never started: the start is a fake that fails as told."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_tune_search import FakeRunner, space, tune

from vprof.cli.main import cli
from vprof.common.errors import LaunchError
from vprof.runs.tuneevidence import ENVIRONMENT, MEASURED, Measurement
from vprof.runs.tunesearch import SearchSettings
from vprof.runs.tunespace import SEQS
from vprof.server.logparse import environment_cause

PORT = (
    "port 18000 on 127.0.0.1 is already in use (stop what listens there or choose another "
    "with --port)"
)


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        (PORT, "port in use"),
        (
            "vLLM exited with code 1 before it became healthy: OSError: [Errno 28] No space left "
            "on device",
            "out of disk",
        ),
        (
            "vLLM exited with code 1 before it became healthy: RuntimeError: Failed to infer "
            "device type",
            "no GPU",
        ),
        ("RuntimeError: No CUDA GPUs are available", "no GPU"),
        (
            "OSError: org/nope is not a local folder and is not a valid model identifier listed "
            "on 'https://huggingface.co/models'",
            "model missing",
        ),
        (
            "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. Repository Not "
            "Found for url",
            "model missing",
        ),
        ("cannot start /usr/bin/python3: No such file or directory", "vLLM missing"),
        # the settings' own: they prune the candidate, they do not stop the tune
        ("ValueError: max_num_batched_tokens (256) is smaller than max_model_len (2048)", None),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", None),
        ("ValueError: No available memory for the cache blocks", None),
        ("the server did not become healthy within 900 s", None),
    ],
)
def test_start_up_failures_of_the_machine_are_told_from_those_of_the_settings(reason, cause):
    assert environment_cause(reason) == cause


def test_the_search_stops_at_the_first_candidate_the_machine_cannot_start():
    class Runner(FakeRunner):
        def level(self, candidate, rate, n):
            if candidate.get(SEQS) == 64:
                return Measurement(rate, "not-started", reason=PORT, environment="port in use")
            return super().level(candidate, rate, n)

    runner = Runner(lambda c: 4.0)
    result = tune(
        space(seqs=(32, 64, 128, 256)), runner, settings=SearchSettings(repeat=2, budget_trials=9)
    )
    assert [t.candidate.get(SEQS) for t in result.tried] == [32, 64]
    assert [t.state for t in result.tried] == [MEASURED, ENVIRONMENT]
    assert "port in use" in result.trials[-1].note
    assert result.environment and "could not start for a reason of this machine" in (
        result.stopped_by
    )
    assert runner.confirmed == [] and result.confirmation == {}  # no check on that machine
    assert len(result.measured) == 1


def _tune_cli(tmp_path, monkeypatch, reason: str):
    """``vprof tune`` of two candidates whose server start always fails with ``reason``."""
    from vprof.server.process import ServerProcess

    starts: list[str] = []

    def fail(self, *args, **kwargs):
        starts.append(" ".join(self.argv))
        raise LaunchError(reason)

    monkeypatch.setattr(ServerProcess, "start", fail)
    out = tmp_path / "t"
    args = [
        "tune",
        "chunked-512",
        "--slo",
        "ttft_p95=1s",
        "--workload",
        "tiny-smoke",
        "--space",
        "max-num-seqs=8,16",
        "--set",
        "enforce-eager=true",
        "--set",
        "max-model-len=256",
        "--set",
        "enable-chunked-prefill=true",
        "--set",
        "max-num-batched-tokens=512",
        "--level-s",
        "1",
        "--warmup-s",
        "0",
        "--no-report",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result, starts, json.loads((out / "tune.json").read_text())


def test_a_busy_port_stops_the_tune_at_once_with_exit_1_and_is_not_remembered(
    tmp_path, monkeypatch
):
    result, starts, state = _tune_cli(tmp_path, monkeypatch, PORT)
    assert result.exit_code == 1, result.output
    assert len(starts) == 1  # the second candidate would meet the same port
    assert "Stopped: the server of chunked-512@seqs" in result.output
    assert "port in use" in result.output and "Traceback" not in result.output
    assert state["start_failures"] == {}  # fixed, the same command tries it again
    assert state["candidates_measured"] == 0 and state["environment"]
    assert not (tmp_path / "t" / "chunked-512-tuned.yaml").exists()


def test_settings_the_server_refuses_prune_candidates_and_nothing_measured_exits_1(
    tmp_path, monkeypatch
):
    refused = (
        "vLLM exited with code 1 before it became healthy: ValueError: max_num_seqs (16) "
        "exceeds the engine's limit"
    )
    result, starts, state = _tune_cli(tmp_path, monkeypatch, refused)
    assert result.exit_code == 1, result.output
    assert len(starts) == 2  # each candidate is its own question
    assert "Nothing was measured: the server of none of the 2 candidates tried started" in (
        result.output
    )
    assert len(state["start_failures"]) == 2 and state["candidates_measured"] == 0
    assert state["environment"] is None
