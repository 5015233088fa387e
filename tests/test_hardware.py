"""What a run records of its hardware, and when two records are the same hardware."""

from __future__ import annotations

from pathlib import Path

from vprof.records.hardware import hardware_summary
from vprof.runs.environment import cpu_identity, hardware, server_hardware

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8 fma

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8 fma
"""
EPYC = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma
"""
GRACE = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes sve sve2 bf16 i8mm
CPU implementer\t: 0x41
"""
OLD = {"machine": "x86_64", "processor": "x86_64", "cpu_count": 2, "memory_gib": 23.5, "gpus": []}


def test_the_cpu_model_and_the_features_that_pick_kernels_are_read():
    assert cpu_identity(XEON) == {
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "cpu_features": [
            "amx_bf16",
            "amx_int8",
            "amx_tile",
            "avx2",
            "avx512_bf16",
            "avx512_vnni",
            "avx512f",
        ],
    }
    assert cpu_identity(EPYC) == {"cpu_model": "AMD EPYC", "cpu_features": ["avx2"]}
    assert cpu_identity(GRACE) == {"cpu_features": ["asimd", "bf16", "i8mm", "sve", "sve2"]}
    assert cpu_identity("") == {} and cpu_identity("garbage without colons") == {}


def test_two_cpus_of_one_core_count_are_different_hardware():
    """An AVX-512 host prefilled ~3x faster than an AVX2-only one with the same two cores:
    a model fitted on one must not predict the other."""
    xeon, epyc = ({**OLD, **cpu_identity(text)} for text in (XEON, EPYC))
    (xeon_shown, xeon_id), (epyc_shown, epyc_id) = map(hardware_summary, (xeon, epyc))
    assert xeon_id != epyc_id
    assert xeon_shown == "Intel(R) Xeon(R) Platinum 8480+, amx_bf16, 2 CPUs, no GPU"
    assert epyc_shown == "AMD EPYC, avx2, 2 CPUs, no GPU"
    arm = hardware_summary({**OLD, "machine": "aarch64", **cpu_identity(GRACE)})
    assert arm[0] == "aarch64, sve2, 2 CPUs, no GPU"


def test_a_record_from_before_the_cpu_was_recorded_keeps_its_id():
    # model.json files name the hardware they were fitted on by this id
    assert hardware_summary(OLD) == ("x86_64, 2 CPUs, no GPU", "8a461424be73")
    gpus = {**OLD, "gpus": ["NVIDIA H200, 143771 MiB"] * 2}
    assert hardware_summary(gpus)[0] == "2× NVIDIA H200, 143771 MiB"


def test_this_host_records_its_cpu():
    host = hardware()
    if Path("/proc/cpuinfo").exists():
        assert host.get("cpu_model") or host.get("cpu_features")
    shown, digest = hardware_summary(host)
    assert len(digest) == 12 and shown


def test_a_server_elsewhere_has_no_known_hardware():
    host = {**OLD, **cpu_identity(EPYC)}
    # vprof's own servers and servers on this host (loopback) run on the load host
    for urls in (("http://127.0.0.1:8000",), ["http://localhost:1", "http://[::1]:2/v1"]):
        assert server_hardware(urls, host) is host
    # a server elsewhere (or one of several): not the load host's hardware, not known
    for urls in (
        ("http://10.0.0.5:8000",),
        ("http://gpu-box:8000",),
        ("http://127.0.0.1:1", "http://h200:8000"),
    ):
        assert server_hardware(urls, host) is None
    assert hardware_summary({})[0] == "hardware not known"


def test_a_damaged_hardware_record_reads_without_an_error():
    """run.json's hardware is not checked field by field: compare and forecast read whatever a
    damaged or hand-edited one holds, in one line."""
    for bad in (
        {"memory_gib": "lots"},
        {"memory_gib": float("nan")},
        {"memory_gib": float("inf")},
        {"cpu_features": 5, "gpus": "H200"},
    ):
        shown, digest = hardware_summary({**OLD, **bad})
        assert shown.endswith("2 CPUs, no GPU") and len(digest) == 12
    shown, _ = hardware_summary({**OLD, "cpu_model": "Xeon\nX; rm -rf /"})
    assert shown == "Xeon X; rm -rf /, 2 CPUs, no GPU"
