"""Servers side by side: device sets, tensor parallel, memory splits (no GPU needed)."""

from __future__ import annotations

import pytest

from vprof.common.errors import LaunchError
from vprof.server.placement import kv_cache_warning, place


def _p(**args):
    return (args, {})


def test_cpu_servers_split_the_kv_cache_and_stay_unbound():
    got = place([_p(), _p()], cpu_only=True, gpus=0, environ={}, cores=2)
    # whole GiB, as the CPU build reads VLLM_CPU_KVCACHE_SPACE: a share below one keeps one;
    # unbound, the cores are shared out as OpenMP threads so two servers never oversubscribe
    assert [s.env for s in got.slots] == [
        {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    ] * 2
    assert "OpenMP's barriers spin" in got.slots[0].notes[1]
    assert "KV cache and OMP_NUM_THREADS=1 of 2 cores" in got.summary[0]
    three = place([_p()] * 3, cpu_only=True, gpus=0, environ={}, cores=16)
    assert {s.env["OMP_NUM_THREADS"] for s in three.slots} == {"5"}
    # a thread count the profile or the environment sets is kept, and vLLM's auto binding too
    kept = place([({}, {"OMP_NUM_THREADS": "2"})] * 2, cpu_only=True, gpus=0, environ={})
    assert "OMP_NUM_THREADS" not in kept.slots[0].env
    auto = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
    assert (
        "OMP_NUM_THREADS"
        not in place([({}, auto)] * 2, cpu_only=True, gpus=0, environ={}).slots[0].env
    )
    got = place([({}, {"VLLM_CPU_KVCACHE_SPACE": "4"})] * 2, cpu_only=True, gpus=0, environ={})
    assert got.slots[0].env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    got = place([({}, {"VLLM_CPU_KVCACHE_SPACE": "5"})] * 2, cpu_only=True, gpus=0, environ={})
    assert got.slots[0].env["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_cpu_servers_that_bind_split_their_cores():
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0-3"}
    got = place([({}, env), ({}, env)], cpu_only=True, gpus=0, environ={})
    assert [s.env["VLLM_CPU_OMP_THREADS_BIND"] for s in got.slots] == ["0,1", "2,3"]
    with pytest.raises(LaunchError, match="cannot split"):
        place([({}, {"VLLM_CPU_OMP_THREADS_BIND": "0"})] * 2, cpu_only=True, gpus=0, environ={})


def test_enough_gpus_give_each_server_its_own_devices():
    got = place([_p(), _p()], cpu_only=False, gpus=2, environ={})
    assert [s.env for s in got.slots] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    assert not got.shared_gpu and not got.slots[0].set_args


def test_tensor_parallel_servers_get_device_sets():
    got = place(
        [_p(**{"tensor-parallel-size": 2}), _p(**{"tensor-parallel-size": 2})],
        cpu_only=False,
        gpus=4,
        environ={},
    )
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in got.slots] == ["0,1", "2,3"]


def test_visible_devices_are_counted_within_what_this_process_sees():
    got = place([_p(), _p()], cpu_only=False, gpus=8, environ={"CUDA_VISIBLE_DEVICES": "4,6"})
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in got.slots] == ["4", "6"]


def test_one_gpu_is_shared_with_memory_split_and_said():
    got = place([_p(**{"gpu-memory-utilization": 0.9}), _p()], cpu_only=False, gpus=1, environ={})
    assert got.shared_gpu
    assert [s.set_args["gpu-memory-utilization"] for s in got.slots] == [0.45, 0.45]
    assert all(s.env["CUDA_VISIBLE_DEVICES"] == "0" for s in got.slots)
    assert "smaller KV cache" in got.summary[0]
    three = place([_p(**{"gpu-memory-utilization": 0.95})] * 3, cpu_only=False, gpus=1, environ={})
    assert sum(s.set_args["gpu-memory-utilization"] for s in three.slots) <= 0.95


def test_too_few_gpus_for_parallel_servers_is_an_error():
    with pytest.raises(LaunchError, match="needs 4 GPUs per server"):
        place([_p(**{"tp": 4}), _p()], cpu_only=False, gpus=2, environ={})
    with pytest.raises(LaunchError, match="unevenly"):
        place([_p(**{"tp": 2}), _p()], cpu_only=False, gpus=2, environ={})
    with pytest.raises(LaunchError, match="no GPU"):
        place([_p(), _p()], cpu_only=False, gpus=0, environ={})


def test_kv_caches_that_differ_are_warned_about():
    assert kv_cache_warning({"a": 100_000, "b": 105_000}) == ""
    assert "differ by 50%" in kv_cache_warning({"a": 16.6e9, "b": 24.9e9})
    assert kv_cache_warning({"a": 100, "b": None}) == ""
