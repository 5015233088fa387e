"""The server lifecycle against real vLLM: the shared fixture, /metrics, and vLLM refusing."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest
import requests
from ports import worker_port

from vprof.common.errors import LaunchError
from vprof.server.logparse import parse_log
from vprof.server.metrics import metric_labels, scrape
from vprof.server.process import ServerProcess

pytestmark = pytest.mark.e2e


def test_shared_server_reports_its_settings_and_serves_the_tiny_model(vllm_server) -> None:
    models = requests.get(f"{vllm_server.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [vllm_server.model] == ["tiny"]
    assert models["data"][0]["max_model_len"] == vllm_server.max_model_len
    assert (vllm_server.model_dir / "tokenizer.json").is_file()
    if vllm_server.log_path is not None:
        settings = parse_log(vllm_server.log_path.read_text())
        assert settings.kv_cache_tokens and settings.kv_cache_tokens > 100_000
        assert settings.max_concurrency_tokens_per_request == vllm_server.max_model_len
        assert settings.vllm_version


def test_metrics_scrape_counts_a_finished_request(vllm_server) -> None:
    before = scrape(vllm_server.url)
    assert "vllm:num_requests_running" in before and "vllm:kv_cache_usage_perc" in before
    body = {"model": vllm_server.model, "prompt": "hello", "max_tokens": 5, "ignore_eos": True}
    reply = requests.post(f"{vllm_server.url}/v1/completions", json=body, timeout=120).json()
    assert reply["usage"]["completion_tokens"] == 5
    after = scrape(vllm_server.url)
    assert after["vllm:request_success_total"] == before["vllm:request_success_total"] + 1
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 5
    text = requests.get(f"{vllm_server.url}/metrics", timeout=10).text
    (cache_info,) = metric_labels(text, "vllm:cache_config_info")
    assert int(cache_info["kv_cache_size_tokens"]) > 0


def test_vllm_refusing_its_config_fails_fast_with_vllms_own_error(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Bypasses vprof's validation to check that vLLM's own refusal reaches the user."""
    port = worker_port(18000, 18099)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model)]
    argv += ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "2048"]
    argv += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "256"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    server = ServerProcess(
        argv, log_path=tmp_path / "vllm.log", port=port, env={"VLLM_CPU_KVCACHE_SPACE": "1"}
    )
    server.start()
    family = psutil.Process(server.pid).children(recursive=True)
    with pytest.raises(LaunchError) as caught:
        server.wait_healthy(timeout_s=600)
    message = str(caught.value)
    assert "exited with code 1 before it became healthy" in message
    assert "max_num_batched_tokens (256) is smaller than max_model_len (2048)" in message
    assert "last lines of" in message
    _, alive = psutil.wait_procs(family, timeout=10)
    assert alive == [] and not server.alive()
