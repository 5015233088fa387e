"""``vprof calibrate``: how exactly vprof's own client measures on this host, at a given load.

It runs the emulator with a send log (``emulator.sendlog``: when each chunk's write really
returned) on this host, drives it with the load generator exactly as a bench does
(``runs.loadgen``, the shipped locustfile, ``--processes``), and compares each request's
stamps with what the emulator sent (``analysis.clienterror``). Both sides stamp this host's
clock, so the TTFT error is how much later the client stamped its first token than the
emulator's write of it returned, and the ITL error how much its gaps differ from the writes'
gaps: the emulator's lateness — in reading a request or in writing a chunk — never counts. (The
client stamps a request's send just before writing it, in the same step, so its send adds
nothing here.) It reports TTFT error p50/p99, ITL error p50/p99, the chunk events per second
the client kept up with, and its own event-loop verdict. With a search it also finds the
highest load whose error stays within ±1 ms at the median and ±5 ms at p99. The result is a
certificate, a dict that ``vprof bench --calibrate`` keeps in each run folder
(``records.rundir``).
"""

from __future__ import annotations

import math
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vprof.analysis.clienterror import certificate_line
from vprof.analysis.keys import SummaryKey as K
from vprof.common.errors import RunError, VprofError

Progress = Callable[[str], None]

# The emulated server: about what a fast GPU serves (first token after 100 ms plus a spread so
# streams are not in step, then one token every 10 ms); loadgen_ceiling.py measures the same.
TTFT_MS, TTFT_SPREAD_MS, ITL_MS, OUTPUT_TOKENS = 100.0, 10.0, 10.0, 64
PROMPT_TOKENS = (32, 288)
DEFAULT_DURATION_S = 20.0
WARMUP_S = 3.0  # left out of the window: users starting, connections opening
# the test runs on after the window, so what was sent in it finishes under the same load
# (an answer takes TTFT + spread + 64 tokens: 0.75 s)
TAIL_S = 1.0
MODEL = "calibrate"
ID_PREFIX = "cal-"
SEARCH_STEPS = 8  # at most this many loads tried by a search (each a whole measurement)


@dataclass(frozen=True)
class CalibrateSpec:
    """The load to certify: ``users`` closed-loop users, or open-loop arrivals at
    ``rate_rps`` when it is above zero, from ``processes`` Locust processes."""

    users: int = 64
    processes: int = 1
    rate_rps: float = 0.0
    duration_s: float = DEFAULT_DURATION_S
    emulator_workers: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.users <= 100_000:
            raise VprofError(f"must be 1 to 100000, got {self.users}", key="--users")
        if not 1 <= self.processes <= 512:
            raise VprofError(f"must be 1 to 512, got {self.processes}", key="--processes")
        if not (math.isfinite(self.rate_rps) and 0 <= self.rate_rps <= 100_000):
            raise VprofError(f"must be 0 to 100000, got {self.rate_rps}", key="--rate")
        if not (math.isfinite(self.duration_s) and 1 <= self.duration_s <= 3600):
            raise VprofError(f"must be 1 s to an hour, got {self.duration_s}", key="--duration")

    @property
    def load(self) -> dict[str, Any]:
        """What load this is, as a certificate names it."""
        if self.rate_rps > 0:
            return {"rate_rps": self.rate_rps, "processes": self.processes}
        return {"users": self.users, "processes": self.processes}

    def describe(self) -> str:
        what = f"{self.rate_rps:g} req/s" if self.rate_rps > 0 else f"{self.users} users"
        return f"{what}, {self.processes} process{'es' if self.processes > 1 else ''}"


def calibrate(spec: CalibrateSpec, say: Progress = lambda _: None) -> dict[str, Any]:
    """Measure the client's error at ``spec``'s load on this host; the certificate."""
    with tempfile.TemporaryDirectory(prefix="vprof-calibrate-") as work:
        say(f"calibrating the client at {spec.describe()} for {spec.duration_s:g} s")
        return _measure(spec, Path(work))


def search(spec: CalibrateSpec, say: Progress = lambda _: None) -> dict[str, Any]:
    """``spec``'s certificate, plus ``max_load_within_bounds``: the highest load (users, or
    req/s in open loop) found within bounds, doubling from ``spec``'s load while within and
    halving while not, then bisecting between the last load within and the first beyond."""
    first = calibrate(spec, say)
    results = {_level(spec): first}
    key = "rate_rps" if spec.rate_rps > 0 else "users"
    level = _level(spec)
    within = level if first["within_bounds"] else None
    beyond = None if first["within_bounds"] else level
    for _ in range(SEARCH_STEPS - 1):
        if within is None:
            nxt = level / 2
        elif beyond is None:
            nxt = within * 2
        else:
            nxt = (within + beyond) / 2
        if key == "users":
            nxt = float(round(nxt))
        if nxt < (1 if key == "users" else 0.1) or nxt in results:
            break
        if within is not None and beyond is not None and beyond - within <= max(1, within / 8):
            break  # within an eighth: close enough for a figure to plan by
        level = nxt
        results[level] = calibrate(_at(spec, level), say)
        if results[level]["within_bounds"]:
            within = max(within or 0.0, level)
        else:
            beyond = min(beyond or math.inf, level)
    first["max_load_within_bounds"] = (
        None if within is None else {key: int(within) if key == "users" else within}
    )
    first["searched"] = [
        {
            key: int(k) if key == "users" else k,
            "within_bounds": r["within_bounds"],
            "ttft_error_p99_ms": r["ttft_error_p99_ms"],
            "itl_error_p99_ms": r["itl_error_p99_ms"],
        }
        for k, r in sorted(results.items())
    ]
    return first


def _at(spec: CalibrateSpec, level: float) -> CalibrateSpec:
    """``spec`` at another load: that many users, or req/s in open loop."""
    if spec.rate_rps > 0:
        return replace(spec, rate_rps=level)
    return replace(spec, users=int(level))


def _level(spec: CalibrateSpec) -> float:
    return spec.rate_rps if spec.rate_rps > 0 else float(spec.users)


def _measure(spec: CalibrateSpec, work: Path) -> dict[str, Any]:
    from vprof.server.process import ServerProcess, free_port

    sends = work / "sends"
    port = free_port()
    emulator = ServerProcess(
        _emulator_argv(port, sends, spec.emulator_workers),
        log_path=work / "emulator.log",
        port=port,
    )
    emulator.start()
    try:
        emulator.wait_healthy(timeout_s=120)
        run = run_client(emulator.url, spec, work / "run")
    finally:
        emulator.stop()  # its processes write their send logs as they stop
    return _certificate(spec, run, sends)


def run_client(url: str, spec: CalibrateSpec, folder: Path):  # -> RunDir
    """Drive the server at ``url`` with vprof's client at ``spec``'s load, as a bench does
    (calibrate's requests, each with its id as ``X-Request-Id``: ``ID_PREFIX`` + record id);
    the records land in ``folder``. The measured window is ``measured_window``."""
    from vprof.records.rundir import RunDir
    from vprof.runs.loadgen import LoadProcess, LoadSpec
    from vprof.traffic import shape_to_json

    run = RunDir(folder)
    run.path.mkdir(parents=True)
    load = LoadProcess(
        LoadSpec(
            url=url,
            run_dir=run,
            workload=str(_workload_file(run.path)),
            traffic=shape_to_json(_shape(spec)),
            seed=0,
            salt="calibrate",
            model=MODEL,
            processes=spec.processes,
            request_id_prefix=ID_PREFIX,
        )
    )
    rc = load.wait(timeout_s=WARMUP_S + spec.duration_s + TAIL_S + 120)
    if rc != 0:
        log = run.locust_log.read_text(errors="replace")[-2000:] if run.locust_log.exists() else ""
        raise RunError(f"the load generator exited with code {rc} while calibrating:\n{log}")
    return run


def measured_window(spec: CalibrateSpec, first_sent_at: float) -> tuple[float, float]:
    """The seconds measured, given the first request's send time: after the warm-up, for
    ``spec.duration_s``."""
    start = first_sent_at + WARMUP_S
    return start, start + spec.duration_s


def _emulator_argv(port: int, sends: Path, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vprof.cli.main",
        "emulate",
        "--port",
        str(port),
        "--model",
        MODEL,
        "--ttft-ms",
        f"{TTFT_MS:g}",
        "--ttft-spread-ms",
        f"{TTFT_SPREAD_MS:g}",
        "--itl-ms",
        f"{ITL_MS:g}",
        "--max-model-len",
        "8192",
        "--workers",
        str(workers),
        "--send-log",
        str(sends),
    ]


def _workload_file(work: Path) -> Path:
    path = work / "calibrate.yaml"
    lo, hi = PROMPT_TOKENS
    path.write_text(
        "description: vprof calibrate's requests\nendpoint: completions\nseed: 0\n"
        f"prompt_tokens: {{kind: uniform, min: {lo}, max: {hi}}}\n"
        f"output_tokens: {OUTPUT_TOKENS}\nfixed_output: true\n"
    )
    return path


def _shape(spec: CalibrateSpec):  # -> TrafficShape
    from vprof.traffic import shape_from_dict

    total_s = WARMUP_S + spec.duration_s + TAIL_S
    if spec.rate_rps > 0:
        data: dict[str, Any] = {
            "kind": "open-loop",
            "process": "poisson",
            "rate_rps": spec.rate_rps,
            "duration_s": total_s,
        }
    else:
        data = {
            "kind": "steady",
            "users": spec.users,
            "spawn_rate": spec.users,
            "duration_s": total_s,
        }
    data |= {"warmup_s": WARMUP_S, "description": f"vprof calibrate at {spec.describe()}"}
    return shape_from_dict(data, name="calibrate")


def _certificate(spec: CalibrateSpec, run: Any, sends: Path) -> dict[str, Any]:
    from vprof.analysis.clienterror import TimedRequest, client_error, stamps_of
    from vprof.analysis.samples import loadgen_stats
    from vprof.emulator.sendlog import read_send_logs
    from vprof.records.store import read_records_file

    sent = read_send_logs(sends)
    table = read_records_file(run.records).table
    columns = ("request_id", "status", "sent_at", "first_token_at", "itl_ms")
    rows = table.select(list(columns)).to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        raise RunError("no request of the calibration succeeded (see its locust.log)")
    timed, unmatched = [], 0
    for r in ok:
        truth = sent.get(ID_PREFIX + str(r["request_id"]))
        if truth is None:
            unmatched += 1
            continue
        stamps = stamps_of(r["first_token_at"], r["itl_ms"] or [])
        # the truth from the send to the first write, both on this host's clock
        first_write_ms = (truth.received_at - r["sent_at"]) * 1e3 + truth.ttft_ms
        timed.append(TimedRequest(r["sent_at"], stamps, first_write_ms, truth.gaps_ms))
    start, end = measured_window(spec, min(r["sent_at"] for r in ok))
    error = client_error(timed, start, end)
    health = loadgen_stats(run.loadgen_samples(), start, end)
    return {
        **spec.load,
        "duration_s": spec.duration_s,
        "requests": error.requests,
        "events_per_s": round(error.events_per_s, 1),
        "ttft_error_p50_ms": _ms(error.ttft_p50_ms),
        "ttft_error_p99_ms": _ms(error.ttft_p99_ms),
        "itl_error_p50_ms": _ms(error.itl_p50_ms),
        "itl_error_p99_ms": _ms(error.itl_p99_ms),
        "client_error_ms": _ms(error.bound_ms),
        "within_bounds": error.within_bounds,
        "loop_lag_verdict": health.get(K.LOADGEN_VERDICT, "not measured"),
        "loop_lag_p99_ms": health.get(K.LOADGEN_LOOP_LAG_P99_MS),
        "unmatched": unmatched,
        "emulator": {
            "ttft_ms": TTFT_MS,
            "ttft_spread_ms": TTFT_SPREAD_MS,
            "itl_ms": ITL_MS,
            "output_tokens": OUTPUT_TOKENS,
            "workers": spec.emulator_workers,
        },
        "host": socket.gethostname(),
        "measured_at": time.time(),
        "max_load_within_bounds": None,
    }


def _ms(value: float) -> float | None:
    return round(value, 3) if math.isfinite(value) else None


def planned_load(shape: Any, processes: int) -> CalibrateSpec:
    """The load a traffic shape plans: its peak users, or its open-loop rate."""
    if shape.open_loop:
        return CalibrateSpec(rate_rps=float(shape.rate_rps), processes=processes)
    return CalibrateSpec(users=max(1, int(shape.peak_users())), processes=processes)


def certify_shapes(
    shapes: Sequence[Any], processes: int, say: Progress = lambda _: None
) -> dict[str, dict[str, Any]]:
    """A certificate for each shape's planned load (one measurement per distinct load), by
    shape name: what ``vprof bench --calibrate`` measures before its runs."""
    by_load: dict[CalibrateSpec, dict[str, Any]] = {}
    out = {}
    for shape in shapes:
        spec = planned_load(shape, processes)
        if spec not in by_load:
            by_load[spec] = calibrate(spec, say)
            say(f"  client error {certificate_line(by_load[spec])}")
        out[shape.name] = by_load[spec]
    return out
