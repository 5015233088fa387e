"""The plain client of the ceiling benchmark: a Locust ``FastHttpUser`` that only timestamps.

Run by ``loadgen_ceiling.py`` with ``locust -f``. Each user streams ``/v1/completions`` in a
closed loop, reads the body with ``readline(b"\\n")`` (which returns each SSE line as it
arrives; ``FastResponse.iter_content`` reads fixed-size blocks, so a short line can wait for
the bytes after it) and stamps every content line: no JSON parsing, no records, nothing else.
The request's true TTFT comes from the emulator's ``x-vprof-ttft-ms`` header. At the end each
process writes its requests to ``$CEILING_OUT.<pid>.jsonl``.

``$CEILING_PROMPT_IDS=N`` sends N random token ids as the prompt instead of words (what
``closed_loop.py`` did against vLLM before it shared prompts with vprof).
``$CEILING_PROMPTS=FILE`` sends the prompts of FILE (JSON lines, one ``{"prompt": text}`` each),
taken in turn by all users of a process: ``closed_loop.py`` writes there the prompts vprof's
synthesizer builds, so both clients send text of the same exact token counts.
"""

from locust import FastHttpUser, constant, events, task

import json
import os
import random
import time
from typing import Any

ANCHOR = time.time() - time.perf_counter()  # wall clock = ANCHOR + perf_counter()
REQUESTS: list[dict[str, Any]] = []
_PROMPTS_FILE = os.environ.get("CEILING_PROMPTS")
PROMPTS = [json.loads(line)["prompt"] for line in open(_PROMPTS_FILE)] if _PROMPTS_FILE else []
_next_prompt = 0
_USAGE = b'"choices":[]'  # the usage chunk carries no content


class PlainStreamingUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = connection_timeout = 600.0

    def on_start(self) -> None:
        self.rng = random.Random(int(os.environ.get("CEILING_SEED", "0")) + id(self))
        self.low = int(os.environ.get("CEILING_PROMPT_MIN", "32"))
        self.high = int(os.environ.get("CEILING_PROMPT_MAX", "288"))
        self.tokens = int(os.environ.get("CEILING_OUTPUT_TOKENS", "64"))
        self.prompt_ids = int(os.environ.get("CEILING_PROMPT_IDS", "0"))
        self.last_finished: float | None = None  # for the idle time before the next send

    @task
    def stream(self) -> None:
        global _next_prompt
        if PROMPTS:
            prompt: Any = PROMPTS[_next_prompt % len(PROMPTS)]
            _next_prompt += 1
        elif self.prompt_ids:
            prompt = [self.rng.randrange(10, 1000) for _ in range(self.prompt_ids)]
        else:
            words = self.rng.randrange(self.low, self.high)  # lengths vary: so do TTFT offsets
            prompt = " ".join(["hello"] * words)
        body = json.dumps(
            {
                "model": os.environ.get("CEILING_MODEL", "emulated"),
                "prompt": prompt,
                "max_tokens": self.tokens,
                "min_tokens": self.tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        headers = {"content-type": "application/json"}
        stamps: list[float] = []
        sent = time.perf_counter()
        resp = self.client.post("/v1/completions", data=body, headers=headers, stream=True)
        truth_ms = float((resp.headers or {}).get("x-vprof-ttft-ms", "nan"))
        stream = resp.stream
        while True:
            line = stream.readline(b"\n")
            if not line:
                break
            if line.startswith(b"data: {") and _USAGE not in line:
                stamps.append(time.perf_counter())
        finished = time.perf_counter()
        idle_ms = None if self.last_finished is None else (sent - self.last_finished) * 1e3
        self.last_finished = finished
        if stamps:
            REQUESTS.append(
                {
                    "sent_at": ANCHOR + sent,
                    "truth_ms": truth_ms,
                    "stamps": [ANCHOR + s for s in stamps],
                    "finished_at": ANCHOR + finished,
                    "idle_ms": idle_ms,
                }
            )


@events.quitting.add_listener
def _write(environment, **kwargs) -> None:
    out = os.environ.get("CEILING_OUT")
    if out:
        with open(f"{out}.{os.getpid()}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in REQUESTS)
