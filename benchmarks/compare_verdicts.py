"""How often `vprof compare` calls noise significant, and how often it finds a real change.

Simulated runs have what real runs have: request-level noise (lognormal TTFT and gaps) *and*
a run-level shift (every latency of a run multiplied by a lognormal factor with ``--run-cv``,
throughput likewise): the variation between runs that decides whether a user's next run will
agree. For each of ``--pairs`` comparisons, A/A draws both sides from one configuration and
A/B shifts the candidate's latencies by ``--shift`` (and its throughput by the inverse).
Printed: per metric, the share of A/A pairs called significant (the false-positive rate,
target ≤ 5 % at 95 % confidence) and of A/B pairs called significant in the right direction
(the power), for 1, 2 and 3 runs a side. One run a side never yields "significant" by design;
its row shows how often the request-noise interval alone would have excluded zero.

    python benchmarks/compare_verdicts.py --pairs 200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from vprof.analysis import compare
from vprof.analysis.run import Run
from vprof.records.schema import FIELDS, arrow_schema

METRICS = (
    "median_ttft_ms", "p95_ttft_ms", "median_tpot_ms", "p95_tpot_ms", "median_itl_ms",
    "p95_itl_ms", "median_e2el_ms", "p95_e2el_ms", "request_throughput",
)  # fmt: skip
T0 = 1_800_000_000.0


def simulate_run(name: str, rng, *, n: int, latency_factor: float, rate_rps: float) -> Run:
    """One run's records: ``n`` requests at ``rate_rps``, latencies scaled by the factor."""
    tokens = 32
    sent = T0 + np.cumsum(rng.exponential(1.0 / rate_rps, n))
    ttft = rng.lognormal(np.log(80.0 * latency_factor), 0.5, n)
    gaps = rng.lognormal(np.log(10.0 * latency_factor), 0.4, (n, tokens - 1))
    first = sent + ttft / 1000.0
    last = first + gaps.sum(axis=1) / 1000.0
    e2e = (last - sent) * 1000.0
    columns = {name: [None] * n for name in FIELDS}
    columns.update(
        request_id=[f"r{i}" for i in range(n)],
        status=["ok"] * n,
        open_loop=[False] * n,
        scheduled_at=sent.tolist(),
        sent_at=sent.tolist(),
        first_token_at=first.tolist(),
        last_token_at=last.tolist(),
        finished_at=(last + 0.001).tolist(),
        ttft_ms=ttft.tolist(),
        e2e_ms=e2e.tolist(),
        tpot_ms=((e2e - ttft) / (tokens - 1)).tolist(),
        itl_ms=list(gaps),
        prompt_tokens=[100] * n,
        completion_tokens=[tokens] * n,
        cached_tokens=[0] * n,
        expected_prompt_tokens=[100] * n,
        expected_output_tokens=[tokens] * n,
        http_status=[200] * n,
        schedule_lag_ms=[0.0] * n,
    )
    table = pa.Table.from_pydict(columns, schema=arrow_schema())
    meta = {"profile": {"name": name.split("--")[0]}, "workload": {"name": "sim"},
            "traffic": {"name": "steady"}}  # fmt: skip
    return Run(path=Path("/sim") / name, meta=meta, status={"state": "completed"}, records=table)


def side(label: str, runs: int, rng, args, factor: float = 1.0) -> list[Run]:
    out = []
    for k in range(1, runs + 1):
        shift = float(rng.lognormal(0.0, args.run_cv))
        suffix = "" if k == 1 else f"--r{k}"
        out.append(
            simulate_run(
                f"{label}--sim--steady--0000abcd{suffix}",
                rng,
                n=args.requests,
                latency_factor=factor * shift,
                rate_rps=10.0 / (factor * float(rng.lognormal(0.0, args.run_cv))),
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--requests", type=int, default=300, help="requests per run")
    parser.add_argument("--run-cv", type=float, default=0.10, help="run-to-run variation")
    parser.add_argument("--shift", type=float, default=0.20, help="A/B latency change")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"{args.pairs} pairs per cell, {args.requests} requests per run, run-to-run CV "
        f"{args.run_cv:.0%}, A/B shift {args.shift:+.0%} latency"
    )
    for runs in (1, 2, 3):
        started = time.perf_counter()
        false_pos = dict.fromkeys(METRICS, 0)
        request_only = dict.fromkeys(METRICS, 0)
        power = dict.fromkeys(METRICS, 0)
        for _ in range(args.pairs):
            aa = compare(side("a", runs, rng, args) + side("b", runs, rng, args),
                         metrics=METRICS, n_boot=300, seed=int(rng.integers(1 << 30)))  # fmt: skip
            ab = compare(
                side("a", runs, rng, args) + side("b", runs, rng, args, 1.0 + args.shift),
                metrics=METRICS, n_boot=300, seed=int(rng.integers(1 << 30)),
            )  # fmt: skip
            for row in aa.itertuples():
                false_pos[row.metric] += bool(row.significant)
                request_only[row.metric] += bool(row.ci_low_pct > 0 or row.ci_high_pct < 0)
            for row in ab.itertuples():
                # slower latencies and, with them, less throughput: worse on every metric
                power[row.metric] += bool(row.significant and row.better == "worse")
        took = time.perf_counter() - started
        print(f"\n{runs} run(s) a side ({took:.0f} s):")
        print(f"  {'metric':22} {'A/A significant':>16} {'A/B found':>10}", end="")
        print(f" {'A/A interval excl. 0':>22}" if runs == 1 else "")
        for metric in METRICS:
            fp, pw = false_pos[metric] / args.pairs, power[metric] / args.pairs
            line = f"  {metric:22} {fp:16.1%} {pw:10.1%}"
            if runs == 1:
                line += f" {request_only[metric] / args.pairs:22.1%}"
            print(line)


if __name__ == "__main__":
    main()
