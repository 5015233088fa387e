"""How often `vprof compare` calls noise significant, and how often it finds a real change, by
the design of the experiment: interleaved repeats judged as independent runs (Welch, vprof's
way before) or paired by repeat, and alternating slices between two live servers (paired over
ABBA blocks, with and without ``--swap``).

Simulated records carry what real ones carry, shaped by measurements on an H200 and on the CPU
build (the README's table says which): request noise (lognormal TTFT and gaps), a factor per
15–20 s of time (a slice's own noise: the same server's median TPOT ranged 13–26 ms over 15-s
slices), a slow drift over the whole experiment (TPOT ~16 → ~19 ms over 15 minutes), and an
offset per server instance (two copies of one profile differed by 8–10 %), drawn anew at
every restart. Closed-loop throughput follows latency. Each design gets the same measured time
per comparison (``--measure-s``, 10 minutes); repeats also pay a server start per run.

For each design, ``--pairs`` A/A comparisons (one configuration twice) and A/B comparisons
(B's latency ``--shift`` higher, its throughput lower by as much) go through vprof's own
`compare`. Printed per headline metric: the A/A false-positive rate (target ≤ 5 %), the A/B
power (target ≥ 80 % on a 10 % shift), the median detectable change, and the wall time.

    python benchmarks/compare_verdicts.py --pairs 200
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa

from vprof.analysis import compare
from vprof.analysis.compare import DEFAULT_METRICS
from vprof.analysis.designs import ALPHA
from vprof.analysis.run import Run
from vprof.records.schema import FIELDS, arrow_schema
from vprof.runs.order import block_order
from vprof.traffic.slices import STRIDE, SliceSchedule

METRICS = ("median_ttft_ms", "p95_ttft_ms", "median_tpot_ms", "request_throughput")
T0 = 1_800_000_000.0
TOKENS = 32
URLS = ("http://127.0.0.1:1", "http://127.0.0.1:2")
# Measured on the CPU build (2026-12-04, an open-loop A/A of chunked-256 on chat, 437 requests
# sent to both sides of a block): within a slice, log TTFT has a standard deviation of 0.49 and
# a request's log TPOT of 0.30; between a request and its twin on the other side, log TTFT
# correlates 0.59 and log TPOT 0.35 (each slice's own mean taken off) (--shared-ttft, --shared-tpot)
TTFT_SD, TPOT_SD = 0.5, 0.3
MAX_REQUESTS = 4096  # a period's requests at most (their own noise is drawn this long)


@dataclass(frozen=True)
class Noise:
    ttft_cv: float  # a 15–20 s period's own factor on first-token latency
    itl_cv: float  # and on the gaps between tokens
    drift: float  # latency change over the whole experiment (0.2: +20 %); capacity falls alike
    instance_cv: float  # a server instance's offset, on latency and on capacity
    throughput_cv: float  # a period's own throughput factor
    rate_rps: float  # requests per second a server of capacity 1 serves
    # The share of a request's log-latency variance that is the request's own (its prompt, its
    # answer's length, who arrived with it): both sides of a block (or of a pair of repeats)
    # are sent the same requests at the same offsets, so this part is the same on both sides.
    shared_ttft: float = 0.0
    shared_tpot: float = 0.0


def _factor(rng, cv: float) -> float:
    return float(rng.lognormal(0.0, cv)) if cv > 0 else 1.0


def _period_records(
    rng,
    *,
    start: float,
    length_s: float,
    factor: float,
    capacity: float,
    noise: Noise,
    slice_k: int = -1,
    replica: str = "",
    first_index: int = 0,
    stream: tuple[int, ...] = (),
) -> dict[str, np.ndarray]:
    """One period's requests against a server whose latencies are scaled by ``factor`` and
    whose throughput by ``capacity``, each times the period's own factors. ``stream`` seeds
    the requests' own noise: periods given the same stream were sent the same requests."""
    # as vprof's open-loop schedules: the count a period serves is its rate's, evenly spread
    rate = noise.rate_rps * capacity * _factor(rng, noise.throughput_cv)
    n = max(1, round(rate * length_s))
    sent = start + (np.arange(n) + rng.uniform(0.0, 1.0, n)) * (length_s / n)
    ttft_factor = factor * _factor(rng, noise.ttft_cv)
    itl_factor = factor * _factor(rng, noise.itl_cv)
    own = np.random.default_rng(stream) if stream else rng
    requests = own.standard_normal((2, max(n, MAX_REQUESTS)))[:, :n]  # the same per stream
    ttft_z = _mix(requests[0], rng.standard_normal(n), noise.shared_ttft)
    tpot_z = _mix(requests[1], rng.standard_normal(n), noise.shared_tpot)
    ttft = np.exp(np.log(80.0 * ttft_factor) + TTFT_SD * ttft_z)
    # a request's gaps: its own level (shared like its TPOT) times each gap's own noise
    level = np.exp(np.log(10.0 * itl_factor) + TPOT_SD * tpot_z)
    gaps = level[:, None] * rng.lognormal(0.0, 0.22, (n, TOKENS - 1))
    first = sent + ttft / 1000.0
    last = first + gaps.sum(axis=1) / 1000.0
    return {
        "index": np.arange(first_index, first_index + n),
        "sent": sent,
        "ttft": ttft,
        "gaps": gaps,
        "first": first,
        "last": last,
        "slice": np.full(n, slice_k),
        "replica": np.full(n, replica, dtype=object),
    }


def _share(text: str) -> float:
    """A share of variance from the command line: a finite number from 0 to 1."""
    value = float(text)
    if not 0.0 <= value <= 1.0:  # False for nan too
        raise argparse.ArgumentTypeError(f"{text!r} is not a share from 0 to 1")
    return value


def _mix(shared: np.ndarray, own: np.ndarray, share: float) -> np.ndarray:
    """Standard normal noise of which ``share`` of the variance is ``shared``."""
    return math.sqrt(share) * shared + math.sqrt(1.0 - share) * own


def _table(parts: list[dict[str, np.ndarray]]) -> pa.Table:
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    n = cat["sent"].size
    e2e = (cat["last"] - cat["sent"]) * 1000.0
    columns: dict[str, object] = {name: [None] * n for name in FIELDS}
    columns.update(
        request_id=[str(i) for i in cat["index"]],
        status=["ok"] * n,
        open_loop=[False] * n,
        replica=list(cat["replica"]),
        slice=cat["slice"].tolist(),
        scheduled_at=cat["sent"].tolist(),
        sent_at=cat["sent"].tolist(),
        first_token_at=cat["first"].tolist(),
        last_token_at=cat["last"].tolist(),
        finished_at=(cat["last"] + 0.001).tolist(),
        ttft_ms=cat["ttft"].tolist(),
        e2e_ms=e2e.tolist(),
        tpot_ms=((e2e - cat["ttft"]) / (TOKENS - 1)).tolist(),
        itl_ms=list(cat["gaps"]),
        prompt_tokens=[100] * n,
        completion_tokens=[TOKENS] * n,
        cached_tokens=[0] * n,
        expected_prompt_tokens=[100] * n,
        expected_output_tokens=[TOKENS] * n,
        http_status=[200] * n,
        schedule_lag_ms=[0.0] * n,
    )
    return pa.Table.from_pydict(columns, schema=arrow_schema())


def _drift(t_s: float, total_s: float, noise: Noise) -> float:
    return 1.0 + noise.drift * min(max(t_s / total_s, 0.0), 1.0)


def repeats(rng, noise: Noise, args, shift: float, *, paired: bool) -> list[Run]:
    """Runs of ``--run-s`` each, a fresh server (and instance offset) per run, in vprof's
    interleaved order (rounds alternating in direction), compared paired by repeat, or
    (``paired=False``) as independent runs with Welch's t, as vprof compared them before."""
    n = max(2, int(args.measure_s / 2 // args.run_s))
    order = block_order(2, n, "interleaved")  # vprof bench's own order: A B | B A | …
    span = len(order) * (args.run_s + args.restart_s)
    base = int(rng.integers(2**32))  # this comparison's request streams: one per repeat
    runs = []
    for position, (side, r) in enumerate(order):
        start = T0 + position * (args.run_s + args.restart_s)
        instance = _factor(rng, noise.instance_cv) * (shift if side else 1.0)
        speed = _factor(rng, noise.instance_cv) / (shift if side else 1.0)
        parts = []
        for p in range(max(1, round(args.run_s / args.period_s))):
            t = start + p * args.period_s
            drift = _drift(t - T0, span, noise)
            parts.append(
                _period_records(
                    rng,
                    start=t,
                    length_s=args.period_s,
                    factor=instance * drift,
                    capacity=speed / drift,
                    noise=noise,
                    first_index=p * STRIDE,
                    stream=(base, r, p),
                )
            )
        name = "ab"[side] + ("" if r == 1 else f"--r{r}")
        meta = {
            "profile": {"name": "ab"[side]},
            "workload": {"name": "sim"},
            "traffic": {"name": "sim"},
            # "shuffled" is an order compare does not pair: the same runs, judged by Welch
            "order": "interleaved" if paired else "shuffled",
            "repeat": r,
        }
        runs.append(
            Run(
                path=Path("/sim/bench") / f"{name}",
                meta=meta,
                status={"state": "completed"},
                records=_table(parts),
            )
        )
    return runs


def alternating(rng, noise: Noise, args, shift: float, *, swap: bool) -> list[Run]:
    """One alternating run (two phases with ``swap``): ``--slice-s`` slices, ABBA, the first
    ``--warmup-s`` of each not measured; one server instance per side and phase."""
    block_s = 2 * args.slice_s
    blocks = int(args.measure_s // (block_s - 2 * args.warmup_s))  # measured time, as for repeats
    phases = [blocks // 2, blocks - blocks // 2] if swap else [blocks]
    total_s = blocks * block_s + (args.restart_s if swap else 0.0)
    instances = [_factor(rng, noise.instance_cv), _factor(rng, noise.instance_cv)]
    speeds = [_factor(rng, noise.instance_cv), _factor(rng, noise.instance_cv)]
    base = int(rng.integers(2**32))  # this comparison's request streams: one per block
    runs, epoch = [], T0
    for number, count in enumerate(phases, start=1):
        schedule = SliceSchedule(epoch=epoch, slice_s=args.slice_s, warmup_s=args.warmup_s, sides=2)
        parts = []
        for k in range(count * 2):
            side = schedule.side_of(k)
            slot = side if number == 1 else 1 - side  # swapped: each side on the other instance
            t = schedule.start(k)
            drift = _drift(t - T0, total_s, noise)
            parts.append(
                _period_records(
                    rng,
                    start=t,
                    length_s=args.slice_s,
                    factor=instances[slot] * (shift if side else 1.0) * drift,
                    capacity=speeds[slot] / (shift if side else 1.0) / drift,
                    noise=noise,
                    slice_k=k,
                    replica=URLS[side],
                    first_index=k * STRIDE,
                    stream=(base, number, schedule.block_of(k)),
                )
            )
        sides = [
            {"name": name, "urls": [url], "profile": {"name": name}}
            for name, url in zip("ab", URLS, strict=True)
        ]
        meta = {
            "profile": {"name": "a vs b"},
            "workload": {"name": "sim"},
            "traffic": {"name": "sim"},
            "alternate": {"sides": sides, "phase": number, "swapped": number == 2},
        }
        locust = {"slices": schedule.to_dict(), "stopped_at": schedule.start(count * 2)}
        name = "alt--a-vs-b--sim--steady--00000000" + ("" if number == 1 else "--p2")
        runs.append(
            Run(
                path=Path("/sim/alt") / name,
                meta=meta,
                locust=locust,
                status={"state": "completed"},
                records=_table(parts),
            )
        )
        epoch = schedule.start(count * 2) + args.restart_s
    return runs


DESIGNS = {
    "interleaved repeats, Welch (vprof before)": partial(repeats, paired=False),
    "interleaved repeats, paired": partial(repeats, paired=True),
    "alternating slices": partial(alternating, swap=False),
    "alternating slices, --swap": partial(alternating, swap=True),
}


# slice-to-slice CVs seen on an H200 (vLLM 0.25.1, eager and CUDA graphs, 15-s slices)
MEASURED_CV = "median TTFT 5-16 %, p95 TTFT 10-11 %, median TPOT 1.5-18 %, throughput 1.8-3.5 %"


def _slice_cvs(rng, noise: Noise, args) -> str:
    """The model's slice-to-slice CV of each metric on one side of an A/A alternating run
    (drift removed by taking consecutive slices' ratios), to set beside measured ones."""
    from vprof.analysis.alternation import slice_values

    rows = [
        r
        for r in slice_values(alternating(rng, noise, args, 1.0, swap=False)[0], METRICS)
        if r["side"] == "a"
    ]
    out = []
    for metric in METRICS:
        values = np.log([r[metric] for r in rows])
        out.append(f"{metric} {np.std(np.diff(values)) / math.sqrt(2):.1%}")
    return ", ".join(out)


def wall_s(design: str, args) -> float:
    if design.startswith("alternating"):
        swap = 1 if "swap" in design else 0
        blocks = int(args.measure_s // (2 * args.slice_s - 2 * args.warmup_s))
        return blocks * 2 * args.slice_s + (2 + 2 * swap) * args.restart_s
    n = max(2, int(args.measure_s / 2 // args.run_s))
    return 2 * n * (args.run_s + args.restart_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--shift", type=float, default=0.10, help="A/B latency change")
    parser.add_argument("--measure-s", type=float, default=600.0, help="measured s per comparison")
    parser.add_argument("--run-s", type=float, default=60.0, help="one repeat's measured s")
    parser.add_argument("--restart-s", type=float, default=90.0, help="one server start")
    parser.add_argument("--slice-s", type=float, default=15.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--period-s", type=float, default=15.0, help="noise period")
    parser.add_argument("--ttft-cv", type=float, default=0.07, help="a period's TTFT factor")
    parser.add_argument("--itl-cv", type=float, default=0.08, help="a period's gap factor")
    parser.add_argument("--drift", type=float, default=0.20)
    parser.add_argument("--instance-cv", type=float, default=0.04)
    parser.add_argument("--throughput-cv", type=float, default=0.025)
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second")
    parser.add_argument(
        "--shared-ttft", type=_share, default=0.59, help="a request's own share of TTFT variance"
    )
    parser.add_argument(
        "--shared-tpot", type=_share, default=0.35, help="a request's own share of TPOT variance"
    )
    parser.add_argument("--design", action="append", help="only these designs (repeatable)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    noise = Noise(
        args.ttft_cv,
        args.itl_cv,
        args.drift,
        args.instance_cv,
        args.throughput_cv,
        args.rate,
        args.shared_ttft,
        args.shared_tpot,
    )
    print(
        f"{args.pairs} A/A and {args.pairs} A/B pairs per design; {args.measure_s:g} s measured "
        f"per comparison; noise per {args.period_s:g} s period: TTFT {args.ttft_cv:.0%}, gaps "
        f"{args.itl_cv:.0%}, throughput {args.throughput_cv:.1%}; drift "
        f"{args.drift:+.0%} over the experiment, {args.instance_cv:.0%} per server instance; "
        f"A/B: latency {args.shift:+.0%}"
    )
    rng = np.random.default_rng(args.seed)
    print(f"per-slice CV of this model (measured: {MEASURED_CV}):", _slice_cvs(rng, noise, args))
    for design, make in DESIGNS.items():
        if args.design and not any(d in design for d in args.design):
            continue
        started = time.perf_counter()
        false_pos = dict.fromkeys(METRICS, 0)
        false_alone = dict.fromkeys(METRICS, 0)
        power = dict.fromkeys(METRICS, 0)
        power_alone = dict.fromkeys(METRICS, 0)
        any_false = any_false_alone = 0
        detectable: dict[str, list[float]] = {m: [] for m in METRICS}
        for _ in range(args.pairs):
            aa = compare(make(rng, noise, args, 1.0), metrics=DEFAULT_METRICS, n_boot=1)
            ab = compare(
                make(rng, noise, args, 1.0 + args.shift), metrics=DEFAULT_METRICS, n_boot=1
            )
            any_false += bool(aa.significant.any())
            any_false_alone += bool((aa.p_value <= ALPHA).any())
            for row in aa[aa.metric.isin(METRICS)].itertuples():
                false_pos[row.metric] += bool(row.significant)
                false_alone[row.metric] += bool(row.p_value <= ALPHA)
                if math.isfinite(row.detectable_pct):
                    detectable[row.metric].append(row.detectable_pct)
            for row in ab[ab.metric.isin(METRICS)].itertuples():
                power[row.metric] += bool(row.significant and row.better == "worse")
                worse = (row.diff_pct > 0) == (row.metric != "request_throughput")
                power_alone[row.metric] += bool(row.p_value <= ALPHA and worse)
        took = time.perf_counter() - started
        print(
            f"\n{design} — wall time per comparison {wall_s(design, args) / 60:.1f} min "
            f"(simulated in {took:.0f} s); any of the {len(DEFAULT_METRICS)} metrics called "
            f"different in an A/A: {any_false / args.pairs:.1%} (each judged alone: "
            f"{any_false_alone / args.pairs:.1%})"
        )
        print(
            f"  {'metric':20} {'A/A significant':>16} {'(alone)':>8} {'A/B found':>10} "
            f"{'(alone)':>8} {'detectable':>11}"
        )
        for metric in METRICS:
            fp, pw = false_pos[metric] / args.pairs, power[metric] / args.pairs
            fpa, pwa = false_alone[metric] / args.pairs, power_alone[metric] / args.pairs
            det = float(np.median(detectable[metric])) if detectable[metric] else math.nan
            print(f"  {metric:20} {fp:16.1%} {fpa:8.1%} {pw:10.1%} {pwa:8.1%} {det:10.1f}%")


if __name__ == "__main__":
    main()
