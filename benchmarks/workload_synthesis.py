"""How fast workload synthesis plans requests: plans per second for each preset.

A Locust user calls ``RequestSynthesizer.plan`` once per request, so its cost comes out of the
load generator's budget. This prints, per preset, the one-off set-up cost (the vocabulary scan,
shared by every synthesizer of a tokenizer) and the steady plans per second and microseconds per
plan in one process, with and without checking each prompt by re-encoding it.

    .venv/bin/python benchmarks/workload_synthesis.py [--tokenizer DIR] [--plans 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from vprof.workloads.loading import load_workloads
from vprof.workloads.synthesis import RequestSynthesizer, load_tokenizer


def _measure(synth: RequestSynthesizer, n: int) -> float:
    """Seconds to plan ``n`` requests (whole conversations for multi-turn workloads)."""
    start = time.perf_counter()
    if synth.workload.conversation is None:
        for i in range(n):
            synth.plan(i)
        return time.perf_counter() - start
    planned = 0
    cid = 0
    while planned < n:
        conversation = synth.start_conversation(cid)
        plan = conversation.next_turn(None)
        while plan is not None and planned < n:
            planned += 1
            plan = conversation.next_turn(" a short reply of a few words")
        cid += 1
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=None, help="model folder or tokenizer.json")
    parser.add_argument("--plans", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args()
    if args.tokenizer is None:
        from vprof.tinymodel.build import ensure_tiny_model

        args.tokenizer = str(ensure_tiny_model())
    tokenizer = load_tokenizer(args.tokenizer)
    start = time.perf_counter()
    rows = []
    for name, workload in sorted(load_workloads().items()):
        setup_start = time.perf_counter()
        synth = RequestSynthesizer(workload, tokenizer, salt="bench")
        synth.plan(0)  # builds the vocabulary pool (once per tokenizer) and the prefix texts
        setup_s = time.perf_counter() - setup_start
        seconds = _measure(synth, args.plans)
        # The cost of verifying every prompt by re-encoding it, which synthesis skips when the
        # tokenizer's word tokens concatenate exactly.
        plans = [synth.plan(i) for i in range(200)]
        verify_start = time.perf_counter()
        for p in plans:
            texts = [p.prompt] if p.prompt is not None else [m["content"] for m in p.messages]
            tokenizer.count(texts)
        verify_us = (time.perf_counter() - verify_start) / len(plans) * 1e6
        rows.append(
            {
                "workload": name,
                "setup_ms": round(setup_s * 1000, 1),
                "plans_per_s": round(args.plans / seconds),
                "us_per_plan": round(seconds / args.plans * 1e6, 1),
                "reencode_us_per_plan": round(verify_us, 1),
                "mean_prompt_tokens": round(
                    sum(p.expected_prompt_tokens for p in plans) / len(plans)
                ),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        cols = list(rows[0])
        widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
        for r in rows:
            print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))
        print(
            f"tokenizer {args.tokenizer}; exact word-token concatenation: "
            f"{synth._builder.exact}; total {time.perf_counter() - start:.1f} s"
        )


if __name__ == "__main__":
    main()
