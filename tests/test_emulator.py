"""vprof emulate: vLLM's wire format, timing accuracy, and the routes around them."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time

import pytest
import requests

from vprof.common.errors import VprofError
from vprof.emulator import wire
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator
from vprof.emulator.timing import token_deadlines, true_ttft_ms, ttft_offset_ms

CLI_PORT = 18301  # inside this helper's port range


@pytest.fixture(scope="module")
def emu():
    with Emulator(EmulatorConfig(ttft_ms=30, itl_ms=5, model="tiny")) as emulator:
        yield emulator


def stream_events(url: str, path: str, body: dict) -> list[tuple[float, bytes]]:
    """POST and read the SSE stream like a client: (seconds since send, data payload)."""
    sent = time.perf_counter()
    events = []
    with requests.post(url + path, json=body, stream=True, timeout=30) as resp:
        assert resp.status_code == 200, resp.text
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines(chunk_size=None):
            if line.startswith(b"data: "):
                events.append((time.perf_counter() - sent, line[len(b"data: ") :]))
    return events


def parsed(events: list[tuple[float, bytes]]) -> list[dict]:
    assert events[-1][1] == b"[DONE]"
    return [json.loads(data) for _, data in events[:-1]]


# -- pure parts --------------------------------------------------------------------------


def test_deadlines_are_absolute_so_they_never_drift():
    config = EmulatorConfig(ttft_ms=40, itl_ms=7, prefill_ms_per_token=0.5)
    deadlines = token_deadlines(config, 100.0, prompt_tokens=20, output_tokens=1000)
    assert deadlines[0] == pytest.approx(100.0 + 0.040 + 0.010)
    assert deadlines[-1] == pytest.approx(100.0 + 0.050 + 999 * 0.007, abs=1e-9)


def test_jitter_stays_within_bounds_and_keeps_order():
    config = EmulatorConfig(ttft_ms=10, itl_ms=1, jitter_ms=3)
    deadlines = token_deadlines(config, 0.0, 0, 500, random.Random(1))
    grid = [0.010 + k * 0.001 for k in range(500)]
    assert all(g <= d <= g + 0.003 + 1e-12 for g, d in zip(grid, deadlines, strict=True))
    assert deadlines == sorted(deadlines)
    assert len({round(d - g, 9) for g, d in zip(grid, deadlines, strict=True)}) > 100


def test_ttft_offsets_are_seeded_by_prompt_length_and_spread_evenly():
    config = EmulatorConfig(ttft_ms=100, ttft_spread_ms=10, seed=3)
    offsets = [ttft_offset_ms(config, n) for n in range(64, 4064)]
    assert all(0 <= o < 10 for o in offsets)
    assert offsets == [
        ttft_offset_ms(EmulatorConfig(ttft_spread_ms=10, seed=3), n) for n in range(64, 4064)
    ]
    # each tenth of the spread holds about a tenth of the prompt lengths
    counts = [sum(k <= o < k + 1 for o in offsets) for k in range(10)]
    assert all(340 <= c <= 460 for c in counts), counts
    assert ttft_offset_ms(EmulatorConfig(ttft_spread_ms=10, seed=4), 64) != offsets[0]
    assert ttft_offset_ms(EmulatorConfig(ttft_spread_ms=0), 64) == 0.0
    deadlines = token_deadlines(config, 5.0, prompt_tokens=64, output_tokens=3)
    assert deadlines[0] == pytest.approx(5.0 + true_ttft_ms(config, 64) / 1000)
    assert true_ttft_ms(config, 64) == pytest.approx(100 + offsets[0])
    assert deadlines[2] - deadlines[0] == pytest.approx(2 * 0.010)


def test_with_a_tokenizer_every_emitted_word_is_one_token():
    from tokenizers import Tokenizer

    from vprof.emulator.prompts import output_vocabulary
    from vprof.tinymodel.build import ensure_tiny_model

    path = str(ensure_tiny_model() / "tokenizer.json")
    words = output_vocabulary(path, wire.VOCABULARY)
    assert len(words) >= 4
    text = "".join(wire.token_text(k, words) for k in range(40))
    assert len(Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids) == 40


def test_negative_timing_is_refused_with_the_field_named():
    with pytest.raises(VprofError, match="itl_ms"):
        EmulatorConfig(itl_ms=-1)


def test_chunks_match_vllm_pydantic_serialisation():
    """The emulator's bytes equal what vLLM 0.32's own models serialise."""
    pytest.importorskip("vllm")
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice as ChatChoice,
    )
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionStreamResponse
    from vllm.entrypoints.openai.completion.protocol import (
        CompletionResponseStreamChoice,
        CompletionStreamResponse,
    )
    from vllm.entrypoints.serve.engine.protocol import UsageInfo

    def framed(model) -> bytes:
        return b"data: " + model.encode() + b"\n\n"

    cmpl = wire.CompletionChunks("cmpl-abc", 7, "tiny")
    choice = dict(
        index=0, text=' é"x', logprobs=None, stop_reason=None, prompt_token_ids=None, token_ids=None
    )
    expected = CompletionStreamResponse(
        id="cmpl-abc",
        object="text_completion",
        created=7,
        model="tiny",
        choices=[CompletionResponseStreamChoice(finish_reason=None, **choice)],
    )
    assert cmpl.token(' é"x', last=False) == framed(expected.model_dump_json(exclude_unset=True))
    expected.choices[0] = CompletionResponseStreamChoice(finish_reason="length", **choice)
    assert cmpl.token(' é"x', last=True) == framed(expected.model_dump_json(exclude_unset=True))
    usage = UsageInfo(prompt_tokens=5, completion_tokens=3, total_tokens=8)
    final = CompletionStreamResponse(
        id="cmpl-abc",
        created=7,
        model="tiny",
        choices=[],
        usage=usage,
        system_fingerprint=None,
        metrics=None,
    )
    assert cmpl.usage(5, 3) == framed(final.model_dump_json(exclude_unset=False, exclude_none=True))

    chat = wire.ChatChunks("chatcmpl-abc", 7, "tiny")
    head = dict(id="chatcmpl-abc", object="chat.completion.chunk", created=7, model="tiny")
    role = ChatCompletionStreamResponse(
        **head,
        choices=[
            ChatChoice(
                index=0,
                delta=DeltaMessage(role="assistant", content=""),
                logprobs=None,
                finish_reason=None,
            )
        ],
        prompt_token_ids=None,
        prompt_text=None,
    )
    middle = ChatCompletionStreamResponse(
        **head,
        choices=[
            ChatChoice(
                index=0,
                delta=DeltaMessage(content=" a"),
                logprobs=None,
                finish_reason=None,
                token_ids=None,
            )
        ],
    )
    last = ChatCompletionStreamResponse(
        **head,
        choices=[
            ChatChoice(
                index=0,
                delta=DeltaMessage(content=" b"),
                logprobs=None,
                finish_reason="length",
                stop_reason=None,
                token_ids=None,
            )
        ],
    )
    assert chat.first(" a", last=False) == framed(
        role.model_dump_json(exclude_unset=True)
    ) + framed(middle.model_dump_json(exclude_unset=True))
    assert chat.token(" b", last=True) == framed(last.model_dump_json(exclude_unset=True))
    final = ChatCompletionStreamResponse(
        **head, choices=[], usage=usage, system_fingerprint=None, metrics=None
    )
    assert chat.usage(5, 3) == framed(final.model_dump_json(exclude_unset=True, exclude_none=True))


# -- the wire, read like a client --------------------------------------------------------


def test_completions_stream_has_one_chunk_per_token_then_usage_then_done(emu):
    events = stream_events(
        emu.url,
        "/v1/completions",
        {
            "model": "tiny",
            "prompt": "a b c d",
            "max_tokens": 6,
            "min_tokens": 6,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = parsed(events)
    content, usage = chunks[:-1], chunks[-1]
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 5 + ["length"]
    assert "".join(c["choices"][0]["text"] for c in content) == "".join(
        wire.token_text(k) for k in range(6)
    )
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 4, "total_tokens": 10, "completion_tokens": 6}


@pytest.mark.parametrize(
    ("path", "tokens"),
    [
        ("/v1/completions", 40),
        ("/v1/completions", 1),
        ("/v1/chat/completions", 40),
        ("/v1/chat/completions", 1),
    ],
)
def test_streamed_bytes_are_the_wire_formats_own(emu, path, tokens):
    """Chunks framed once per request carry exactly what the wire module writes per token,
    past the vocabulary's cycle (40 > 16 words) and for a one-token answer."""
    chat = "chat" in path
    body = {"max_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "a b"}
    with requests.post(
        emu.url + path, json=body, headers={"x-request-id": "fixed"}, stream=True, timeout=30
    ) as resp:
        raw = b"".join(resp.iter_content(chunk_size=None))
    created = json.loads(raw.split(b"\n\n")[0][len(b"data: ") :])["created"]
    chunks = (
        wire.ChatChunks("chatcmpl-fixed", created, "tiny")
        if chat
        else wire.CompletionChunks("cmpl-fixed", created, "tiny")
    )
    words = [wire.token_text(k) for k in range(tokens)]
    expected = chunks.first(words[0], tokens == 1)
    expected += b"".join(chunks.token(w, k == tokens - 1) for k, w in enumerate(words) if k)
    prompt_tokens = json.loads(raw.split(b"\n\n")[-3][len(b"data: ") :])["usage"]["prompt_tokens"]
    expected += chunks.usage(prompt_tokens, tokens) + wire.DONE
    assert raw == expected


def test_a_hang_up_aborts_at_once_not_at_the_next_token():
    with Emulator(EmulatorConfig(ttft_ms=1, itl_ms=60_000)) as emulator:
        body = {"prompt": "x", "max_tokens": 3, "stream": True}
        with requests.post(emulator.url + "/v1/completions", json=body, stream=True) as resp:
            lines = resp.iter_lines(chunk_size=None)
            next(lines)
        deadline = time.monotonic() + 5  # the next token is a minute away
        while scrape(emulator.url)["vllm:num_requests_running"] != 0:
            assert time.monotonic() < deadline, "the aborted request kept running"
            time.sleep(0.01)
        assert scrape(emulator.url)["vllm:request_success_total/abort"] == 1


def test_chunk_lateness_is_counted_for_every_chunk(emu):
    def histogram() -> dict[str, float]:
        text = requests.get(emu.url + "/metrics").text
        rows = [line for line in text.splitlines() if line.startswith("vprof_emulator_chunk")]
        # one key per bucket ("..._bucket" + its le label), and the _sum and _count
        return {
            line.split("{")[0] + (line.split("le=")[1][:12] if "le=" in line else ""): float(
                line.rsplit(" ", 1)[1]
            )
            for line in rows
        }

    before = histogram()
    parsed(
        stream_events(emu.url, "/v1/completions", {"prompt": "x", "max_tokens": 7, "stream": True})
    )
    after = histogram()
    count = "vprof_emulator_chunk_lateness_seconds_count"
    assert after[count] - before[count] == 7
    buckets = [v for k, v in after.items() if "_bucket" in k]
    assert buckets == sorted(buckets) and buckets[-1] == after[count]  # cumulative, +Inf last
    assert after["vprof_emulator_chunk_lateness_seconds_sum"] >= 0  # never early


def test_completions_stream_without_include_usage_has_no_usage_chunk(emu):
    chunks = parsed(
        stream_events(emu.url, "/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream": True})
    )
    assert len(chunks) == 3 and all(c["choices"] for c in chunks)
    assert all("usage" not in c for c in chunks)


def test_chat_stream_starts_with_the_role_chunk(emu):
    chunks = parsed(
        stream_events(
            emu.url,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hello"}],
                "max_completion_tokens": 4,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    )
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert len(deltas) == 4 and chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_generate_streams_ndjson_of_prompt_plus_cumulative_text(emu):
    with requests.post(
        emu.url + "/generate", json={"prompt": "Hi", "max_tokens": 4, "stream": True}, stream=True
    ) as resp:
        lines = [json.loads(line) for line in resp.iter_lines(chunk_size=None) if line]
    texts = [line["text"][0] for line in lines]
    assert texts == ["Hi" + "".join(wire.token_text(k) for k in range(n)) for n in (1, 2, 3, 4)]
    whole = requests.post(emu.url + "/generate", json={"prompt": "Hi", "max_tokens": 2}).json()
    assert whole == {"text": ["Hi" + wire.token_text(0) + wire.token_text(1)]}


def test_non_streamed_completion_and_chat_carry_usage(emu):
    body = requests.post(
        emu.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 3}
    ).json()
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"
    chat = requests.post(
        emu.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
    ).json()
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"prompt": "x", "max_tokens": 4096}, 400, "maximum context length is 2048"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ({"prompt": "x", "model": "other"}, 404, "does not exist"),
        ({"prompt": "x", "max_tokens": 2, "min_tokens": 5}, 400, "min_tokens"),
        ({"max_tokens": 2}, 400, "prompt"),
    ],
)
def test_bad_requests_get_vllm_style_errors(emu, body, status, needle):
    resp = requests.post(emu.url + "/v1/completions", json=body)
    assert resp.status_code == status
    assert needle in resp.json()["error"]["message"]


def test_operational_routes(emu):
    assert requests.get(emu.url + "/health").status_code == 200
    card = requests.get(emu.url + "/v1/models").json()["data"][0]
    assert card["id"] == "tiny" and card["max_model_len"] == 2048
    assert requests.post(emu.url + "/tokenize", json={"prompt": "a b c"}).json()["count"] == 3
    assert requests.get(emu.url + "/nope").status_code == 404


def scrape(url: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in requests.get(url + "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[
                name.split("{")[0]
                + (
                    ""
                    if "finished_reason" not in name
                    else "/" + name.split('finished_reason="')[1][:-2]
                )
            ] = float(value)
    return values


def test_metrics_count_tokens_and_requests(emu):
    before = scrape(emu.url)
    requests.post(emu.url + "/v1/completions", json={"prompt": "a b c d e", "max_tokens": 3})
    after = scrape(emu.url)
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 5
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 3
    assert (
        after["vllm:request_success_total/length"] - before["vllm:request_success_total/length"]
        == 1
    )
    assert after["vllm:prefix_cache_hits_total"] == 0
    assert after["vllm:num_requests_running"] == 0


def test_a_client_that_hangs_up_aborts_its_request(emu):
    before = scrape(emu.url)
    with requests.post(
        emu.url + "/v1/completions",
        json={"prompt": "x", "max_tokens": 2000, "stream": True},
        stream=True,
    ) as resp:
        lines = resp.iter_lines(chunk_size=None)  # held: a dropped iterator closes the stream
        next(lines)
        # poll: the gauge is read over another connection, on a shared, busy machine
        deadline = time.monotonic() + 5
        while scrape(emu.url)["vllm:num_requests_running"] != 1:
            assert time.monotonic() < deadline, "the streaming request is not counted as running"
            time.sleep(0.01)
    deadline = time.monotonic() + 5
    while scrape(emu.url)["vllm:num_requests_running"] != 0:
        assert time.monotonic() < deadline, "the aborted request kept running"
        time.sleep(0.01)
    after = scrape(emu.url)
    assert (
        after["vllm:request_success_total/abort"] - before["vllm:request_success_total/abort"] == 1
    )


def test_keep_alive_serves_several_requests_on_one_connection(emu):
    body = json.dumps({"prompt": "x", "max_tokens": 2, "stream": True}).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (len(body), body)
    )
    opened_before = scrape(emu.url)["vprof_emulator_connections_opened_total"]
    with socket.create_connection(("127.0.0.1", emu.port), timeout=5) as sock:
        for _ in range(3):
            sock.sendall(request)
            received = b""
            while not received.endswith(b"\r\n0\r\n\r\n"):
                received += sock.recv(65536)
            assert received.startswith(b"HTTP/1.1 200")
            assert b"transfer-encoding: chunked" in received and b"data: [DONE]" in received
    # three requests on this socket, one more connection for the scrape itself
    assert scrape(emu.url)["vprof_emulator_connections_opened_total"] - opened_before == 2


# -- timing ------------------------------------------------------------------------------


# -- the command -------------------------------------------------------------------------


def test_emulate_help_has_an_example():
    from click.testing import CliRunner

    from vprof.cli.main import cli

    result = CliRunner().invoke(cli, ["emulate", "--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    bad = CliRunner().invoke(cli, ["emulate", "--itl-ms", "-3"])
    assert bad.exit_code == 2 and "--itl-ms" in bad.output


def test_vprof_emulate_serves_until_terminated():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vprof.cli.main",
            "emulate",
            "--port",
            str(CLI_PORT),
            "--ttft-ms",
            "5",
            "--itl-ms",
            "1",
            "--model",
            "m",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{CLI_PORT}/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "emulate did not start"
            time.sleep(0.05)
        chunks = parsed(
            stream_events(
                f"http://127.0.0.1:{CLI_PORT}",
                "/v1/completions",
                {"model": "m", "prompt": "x", "max_tokens": 3, "stream": True},
            )
        )
        assert len(chunks) == 3
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert f"127.0.0.1:{CLI_PORT}" in err
