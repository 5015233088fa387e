"""The SSE / NDJSON timing readers, fed canned bytes and a fake clock."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from vprof.locustfiles.stream import StreamError, read_ndjson, read_sse


class FakeClock:
    """``now()`` returns the arrival time of the line being read."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def timed(lines: list[tuple[float, bytes]], clock: FakeClock) -> Iterator[bytes]:
    for at, line in lines:
        clock.t = at
        yield line


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode())


def completion_chunk(text: str, finish=None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}], "usage": None}


USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 65,
        "completion_tokens": 3,
        "total_tokens": 68,
        "prompt_tokens_details": {"cached_tokens": 48},
    },
}


def test_completions_stream_gives_vllm_bench_timings_and_usage():
    clock = FakeClock()
    lines = [
        (0.030, b": ping"),  # comments never count
        (0.050, sse(completion_chunk("a"))),
        (0.050, b""),
        (0.060, sse(completion_chunk("b"))),
        (0.060, b""),
        (0.075, sse(completion_chunk("c", "length"))),
        (0.075, b""),
        (0.080, sse(USAGE)),
        (0.080, b""),  # usage-only chunk: no ITL sample
        (0.090, sse(b"[DONE]")),
        (0.090, b""),
    ]
    r = read_sse(timed(lines, clock), now=clock)
    assert r.first_token_s == 0.050 and r.last_token_s == 0.075  # E2E ends at the last content
    assert r.itl_ms == pytest.approx([10.0, 15.0])
    assert r.text == "abc" and r.content_chunks == 3 and r.done
    assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (65, 3, 48)
    assert r.finish_reason == "length"


def test_chat_role_chunk_counts_as_first_token_like_vllm_bench():
    clock = FakeClock()
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    tok = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    lines = [
        (0.02, sse(role)),
        (0.02, b""),
        (0.05, sse(tok)),
        (0.05, b""),
        (0.06, sse(b"[DONE]")),
        (0.06, b""),
    ]
    r = read_sse(timed(lines, clock), now=clock)
    assert r.first_token_s == 0.02 and r.itl_ms == pytest.approx([30.0]) and r.text == "hi"
    assert r.completion_tokens == -1  # no usage sent: unknown, not zero


def test_message_time_is_its_first_data_line_and_multiline_data_joins():
    clock = FakeClock()
    lines = [
        (0.01, b'data: {"choices": [{"text": "x",'),
        (0.04, b'data:  "index": 0}]}'),
        (0.04, b""),
        (0.05, b"data: [DONE]"),
    ]
    r = read_sse(timed(lines, clock), now=clock)
    assert r.first_token_s == 0.01 and r.text == "x" and r.done


def test_missing_done_and_no_choices_are_visible():
    clock = FakeClock()
    r = read_sse(timed([(0.1, sse(USAGE)), (0.1, b"")], clock), now=clock)
    assert r.first_token_s is None and not r.done and r.completion_tokens == 3


def test_error_object_in_stream_is_reported():
    clock = FakeClock()
    err = {"error": {"message": "prompt too long", "code": 400}}
    r = read_sse(timed([(0.1, sse(err)), (0.1, b""), (0.1, sse(b"[DONE]"))], clock), now=clock)
    assert r.error == "prompt too long"


def test_non_json_data_raises_stream_error():
    with pytest.raises(StreamError):
        read_sse(iter([b"data: {oops", b""]))


def test_generate_ndjson_is_cumulative_and_strips_the_prompt():
    clock = FakeClock()
    lines = [
        (0.02, b'{"text": ["Hello a"]}'),
        (0.03, b'{"text": ["Hello ab"]}'),
        (0.045, b'{"text": ["Hello abc"]}'),
    ]
    r = read_ndjson(timed(lines, clock), now=clock, prompt="Hello ")
    assert r.text == "abc" and r.first_token_s == 0.02 and r.last_token_s == 0.045
    assert r.itl_ms == pytest.approx([10.0, 15.0]) and r.content_chunks == 3


def test_generate_accepts_nul_separated_objects_of_older_servers():
    r = read_ndjson(iter([b'{"text": ["p a"]}\0{"text": ["p ab"]}\0']), prompt="p ")
    assert r.text == "ab" and r.content_chunks == 2
