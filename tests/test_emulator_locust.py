"""Must show: against the emulator at low load, a real headless Locust run measures the
configured TTFT within 3 ms and inter-token gaps within 2 ms at p50; and the emulator's
true-TTFT header is what a client on this host reads, within 1 ms."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from locust_run import run_headless

from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator
from vprof.emulator.timing import true_ttft_ms
from vprof.records import read_records

pytestmark = pytest.mark.e2e  # a real client timed against the emulator: the slow tier
TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.fixture(scope="module")
def emulator():
    from vprof.tinymodel.build import ensure_tiny_model

    # the tiny model's tokenizer makes the emulator's prompt counts exact, like vLLM's usage
    config = EmulatorConfig(
        ttft_ms=TTFT_MS, itl_ms=ITL_MS, model="tiny", tokenizer_path=str(ensure_tiny_model())
    )
    with Emulator(config) as emu:
        yield emu


def run_locust(url: str, run_dir: Path, endpoint: str, seconds: int) -> None:
    run_headless(
        url,
        run_dir,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        f"{seconds}s",
        "--workload",
        "tiny-smoke",
        "--endpoint",
        endpoint,
        "--stop-timeout",
        "10",
        timeout_s=seconds + 90,
    )


@pytest.mark.parametrize(
    ("endpoint", "seconds"), [("completions", 8), ("chat", 5), ("generate", 5)]
)
def test_locust_measures_the_configured_timing(emulator, tmp_path, endpoint, seconds):
    run_locust(emulator.url, tmp_path, endpoint, seconds)
    records = read_records(tmp_path)
    assert len(records) >= 10
    assert (records.status == "ok").all(), records.error[records.status != "ok"].tolist()
    assert (records.endpoint == endpoint).all()

    ttft_error_ms = float(np.median(records.ttft_ms)) - TTFT_MS
    gaps = np.concatenate(records.itl_ms.to_numpy())
    itl_error_ms = float(np.median(gaps)) - ITL_MS
    tpot_error_ms = float(np.median(records.tpot_ms)) - ITL_MS
    print(
        f"{endpoint}: {len(records)} requests, p50 errors: TTFT {ttft_error_ms:+.3f} ms, "
        f"ITL {itl_error_ms:+.3f} ms, TPOT {tpot_error_ms:+.3f} ms"
    )
    # TTFT carries the request's way in (send, the server's parse): +1.0-1.4 ms at p50 on a
    # quiet host, +2.1-2.7 ms in a fresh-clone run on a slower hour; the gaps carry neither
    assert abs(ttft_error_ms) <= 3.0
    assert abs(itl_error_ms) <= 2.0
    assert abs(tpot_error_ms) <= 2.0
    # /generate sends no usage: Locust counts its text with the same tokenizer, and the
    # emulator emits single-token words, so the counts agree there too
    assert (records.completion_tokens == 16).all()
    # chat streams a role-only chunk with the first token, as vLLM does: one more gap (~0 ms)
    gaps_per_request = 16 if endpoint == "chat" else 15
    assert all(len(gap_list) == gaps_per_request for gap_list in records.itl_ms)
    if endpoint == "completions":  # chat prompts carry their template's tokens too
        assert (records.prompt_tokens == records.expected_prompt_tokens).all()


def test_a_response_names_its_true_ttft_and_keeps_it():
    """Timed to a millisecond by a client on this host, so here with the quiet tests: beside the
    suite's other work the reading thread was late by 1.5-4.7 ms either side (the headers' or
    the first token's stamp)."""
    config = EmulatorConfig(ttft_ms=20, itl_ms=5, ttft_spread_ms=10, seed=1)
    body = {"prompt": [1, 2, 3, 4, 5], "max_tokens": 2, "stream": True}
    with Emulator(config) as emulator:
        errors = []
        for _ in range(5):
            with requests.post(emulator.url + "/v1/completions", json=body, stream=True) as resp:
                headers_at = time.perf_counter()
                next(resp.iter_lines(chunk_size=None))
                first_at = time.perf_counter()
                truth_ms = float(resp.headers["x-vprof-ttft-ms"])
                # the headers leave as the request is taken: first token minus headers is TTFT
                errors.append((first_at - headers_at) * 1000 - truth_ms)
    assert truth_ms == pytest.approx(true_ttft_ms(config, 5), abs=1e-6)
    assert truth_ms != 20.0  # the offset is in it
    assert abs(statistics.median(errors)) < 1.0, errors
