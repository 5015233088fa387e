"""Must show: against the emulator at low load, a real headless Locust run measures the
configured TTFT within 3 ms and inter-token gaps within 2 ms at p50; the emulator's
true-TTFT header is what a client on this host reads, within 1 ms; and a minimal client sees
the configured TTFT and gaps within a millisecond."""

from __future__ import annotations

import json
import math
import socket
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


def timed_stream(sock: socket.socket, body: dict) -> tuple[float, float, list[float]]:
    """One request on a raw keep-alive socket: (sent, headers arrived, each content event)."""
    payload = json.dumps(body).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(payload), payload)
    )
    sent = time.perf_counter()
    sock.sendall(request)
    headers_at = math.nan
    stamps: list[float] = []
    received = b""
    while not received.endswith(b"\r\n0\r\n\r\n"):
        data = sock.recv(65536)
        now = time.perf_counter()
        received += data
        if math.isnan(headers_at) and b"\r\n\r\n" in received:
            headers_at = now
        stamps += [now] * data.count(b"data: {")
    return sent, headers_at, stamps


def test_timing_matches_the_configuration_within_a_millisecond():
    """TTFT and gaps as a minimal client sees them, to a millisecond: here with the quiet tests
    (beside a vLLM start-up in CI the median header-to-first-token error once came out 2.25 ms).

    The emulator sends its headers as it takes the request (as uvicorn does), so "first
    token minus headers" is its own TTFT with the request's trip and the client's wake-ups
    cancelled out; on a shared machine those trips alone can take milliseconds.
    """
    config = EmulatorConfig(ttft_ms=40, itl_ms=8)
    ttft_errors, server_ttft_errors, itl_errors, span_errors = [], [], [], []
    body = {"prompt": "x", "max_tokens": 25, "stream": True}
    with (
        Emulator(config) as emulator,
        socket.create_connection(("127.0.0.1", emulator.port), timeout=10) as sock,
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(12):
            sent, headers_at, stamps = timed_stream(sock, body)
            assert len(stamps) == 25
            ttft_errors.append((stamps[0] - sent) * 1000 - config.ttft_ms)
            server_ttft_errors.append((stamps[0] - headers_at) * 1000 - config.ttft_ms)
            itl_errors += [
                (b - a) * 1000 - config.itl_ms for a, b in zip(stamps, stamps[1:], strict=False)
            ]
            # absolute deadlines: token 24 is due 24·itl after token 0, whatever came between
            span_errors.append((stamps[-1] - stamps[0]) * 1000 - 24 * config.itl_ms)
    assert min(ttft_errors) >= 0  # never early
    assert statistics.median(ttft_errors) < 5.0, ttft_errors
    assert abs(statistics.median(server_ttft_errors)) < 1.0, server_ttft_errors
    assert abs(statistics.median(itl_errors)) < 1.0, itl_errors
    # Twelve spans, each read at two of the client's wake-ups: beside vLLM start-ups in CI
    # their median once came out 1.27 ms (spans from -5 to +84 ms). Relative deadlines would
    # add every token's wake-up delay: 24 of them.
    assert abs(statistics.median(span_errors)) < 2.0, span_errors
