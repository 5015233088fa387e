"""``vprof emulate``: a fast streaming server that emulates vLLM's wire format."""

from __future__ import annotations

import click

from vprof.cli.options import FiniteFloat
from vprof.common.numbers import MAX_TOKENS

_MS = FiniteFloat(minimum=0, maximum=3_600_000)  # up to an hour per token is plenty


@click.command(short_help="Run a fast streaming server that emulates vLLM.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="0 picks a free port.",
)
@click.option("--model", default="emulated", show_default=True, help="Served model name.")
@click.option(
    "--ttft-ms",
    default=20.0,
    show_default=True,
    type=_MS,
    help="Delay from request to first token.",
)
@click.option("--itl-ms", default=10.0, show_default=True, type=_MS, help="Delay between tokens.")
@click.option(
    "--jitter-ms",
    default=0.0,
    show_default=True,
    type=_MS,
    help="Each token late by up to this much (uniform).",
)
@click.option(
    "--ttft-spread-ms",
    default=0.0,
    show_default=True,
    type=float,
    help="First token later by an offset in [0, this) per request: a seeded function of its "
    "prompt length, so clients can recompute the truth; streams stop arriving in lockstep.",
)
@click.option(
    "--prefill-ms-per-token",
    default=0.0,
    show_default=True,
    type=_MS,
    help="Extra first-token delay per prompt token.",
)
@click.option(
    "--default-max-tokens",
    default=16,
    show_default=True,
    type=click.IntRange(1, MAX_TOKENS),
    help="Output length when a request gives no max_tokens.",
)
@click.option(
    "--max-model-len",
    default=2048,
    show_default=True,
    type=click.IntRange(1, MAX_TOKENS),
    help="Prompt + output limit, enforced like vLLM.",
)
@click.option(
    "--tokenizer",
    "tokenizer_path",
    default=None,
    type=click.Path(exists=True, dir_okay=True),
    help="tokenizer.json or model folder for exact prompt counts (default: estimate).",
)
@click.option(
    "--coarse-timers",
    is_flag=True,
    help="Let tokens leave up to 1 ms late instead of spinning for the last 0.5 ms (less CPU).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Processes serving the port together (SO_REUSEPORT), so the emulator uses more than "
    "one core; /metrics counts for all.",
)
@click.option(
    "--seed", default=0, show_default=True, type=int, help="Seed of the jitter and TTFT spread."
)
@click.option(
    "--send-log",
    default=None,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Exact timing: keep when each streamed chunk really left, per request (by its "
    "X-Request-Id), and write DIR/sends-PID.jsonl on stopping (what vprof calibrate reads).",
)
def emulate(
    host: str,
    port: int,
    model: str,
    ttft_ms: float,
    itl_ms: float,
    jitter_ms: float,
    ttft_spread_ms: float,
    prefill_ms_per_token: float,
    default_max_tokens: int,
    max_model_len: int,
    tokenizer_path: str | None,
    coarse_timers: bool,
    workers: int,
    seed: int,
    send_log: str | None,
) -> None:
    """Serve /v1/completions, /v1/chat/completions, /generate, /metrics with set timing.

    Token k of a request leaves at ttft + offset + k·itl after it arrived (absolute
    deadlines); each response names its true TTFT in an x-vprof-ttft-ms header. For tests,
    dry runs and measuring the load generator; never instead of real vLLM.

    \b
    Example:
      vprof emulate --port 8000 --ttft-ms 50 --itl-ms 10
      vprof emulate --ttft-ms 100 --ttft-spread-ms 10 --workers 2   # measuring a client
      locust -f locustfiles/locustfile.py -H http://127.0.0.1:8000 --headless -u 4 -t 30s
    """
    from vprof.emulator.config import EmulatorConfig

    config = EmulatorConfig(
        host=host,
        port=port,
        model=model,
        ttft_ms=ttft_ms,
        itl_ms=itl_ms,
        jitter_ms=jitter_ms,
        ttft_spread_ms=ttft_spread_ms,
        prefill_ms_per_token=prefill_ms_per_token,
        default_max_tokens=default_max_tokens,
        max_model_len=max_model_len,
        tokenizer_path=tokenizer_path,
        seed=seed,
        precise_timers=not coarse_timers,
        send_log=send_log,
    )

    def ready(url: str) -> None:
        spread = f" + [0, {ttft_spread_ms:g})" if ttft_spread_ms else ""
        click.echo(
            f"vprof emulate: model {model!r} at {url} (ttft {ttft_ms:g}{spread} ms, "
            f"itl {itl_ms:g} ms, jitter {jitter_ms:g} ms"
            f"{f', {workers} workers' if workers > 1 else ''}); Ctrl-C stops",
            err=True,
        )

    if workers > 1:
        from vprof.emulator.workers import serve_workers

        serve_workers(config, workers, on_ready=ready)
    else:
        from vprof.emulator.server import Emulator

        Emulator(config).serve_forever(on_ready=ready)
