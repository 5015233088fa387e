"""Real Locust (``locust -f locustfiles/locustfile.py``) against the real vLLM CPU server.

Each test runs Locust as a subprocess, exactly as a user would, and checks its records
against what the server itself counted in ``/metrics``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from locust_run import run_headless

from vprof.analysis import summarize_run
from vprof.records import read_records
from vprof.server.metrics import scrape

MASTER_PORT = 18170  # inside this suite's port range (18100-18199)
RUN_TIMEOUT_S = 240

pytestmark = pytest.mark.e2e


def run_locust(server, run_dir: Path, *args: str, master_port: int = MASTER_PORT) -> str:
    extra = [
        "--model",
        server.model,
        "--tokenizer",
        str(server.model_dir),
        "--master-bind-port",
        str(master_port),
    ]
    if "--processes" in args:  # forked workers connect to --master-port, not the bind port
        extra += ["--master-port", str(master_port)]
    return run_headless(server.url, run_dir, *extra, *args, timeout_s=RUN_TIMEOUT_S)


def counters(server) -> dict[str, float]:
    m = scrape(server.url)
    keys = (
        "vllm:request_success_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    )
    return {k: m.get(k, 0.0) for k in keys}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def workload_file(tmp_path: Path, name: str, body: str, seed: int = 0) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"description: {name}\nendpoint: completions\nseed: {seed}\n{body}")
    return path


# Half the requests share a 1024-token prefix, the other half carry unique text of the same
# length in its place (~1100 prompt tokens each), interleaved request by request in one run.
# Seed 6 draws shared, plain, shared, plain for requests 0-3 (seed 0 drew plain four times
# first, and a slow CI run that got 5 answers had one shared request to count).
HALF_SHARED_SEED = 6
HALF_SHARED = (
    "prefix: {groups: 1, length_tokens: 1024, popularity: uniform, share: 0.5}\n"
    "prompt_tokens: 76\noutput_tokens: 8\nfixed_output: true\n"
)


def test_open_loop_schedule_is_shared_by_two_processes_and_met(vllm_server, tmp_path: Path):
    rate_rps, total_s = 8.0, 8.0
    traffic = tmp_path / "ol.yaml"
    # room for 16 in flight on each worker: the schedule is what is tested, not the cap (at 8
    # in all, a server slow for a moment held a burst's requests back by 0.7 s, and the last
    # request of a CI run was never sent)
    traffic.write_text(
        f"kind: open-loop\nprocess: poisson\nrate_rps: {rate_rps}\n"
        f"max_in_flight: 32\nduration_s: {total_s}\n"
    )
    run_dir = tmp_path / "run"
    run_locust(
        vllm_server,
        run_dir,
        "--workload",
        "tiny-smoke",
        "--traffic",
        str(traffic),
        "--processes",
        "2",
        "--seed",
        "11",
    )
    df = read_records(run_dir)
    expected = round(rate_rps * total_s)
    # Every index of the one schedule was sent exactly once, split between both workers.
    assert sorted(df.request_id.astype(int)) == list(range(expected))
    assert (df.status == "ok").all() and df.open_loop.all()
    residues = df.groupby("worker").request_id.apply(lambda ids: {int(i) % 2 for i in ids})
    assert sorted(map(sorted, residues)) == [[0], [1]]  # i % 2 picks the worker
    info = json.loads((run_dir / "locust.json").read_text())
    assert info["open_loop"] and df.scheduled_at.min() == pytest.approx(info["epoch"])
    sent = df.sent_at.sort_values()
    achieved = (len(sent) - 1) / (sent.iloc[-1] - sent.iloc[0])
    scheduled = df.scheduled_at.sort_values()
    intended = (len(scheduled) - 1) / (scheduled.iloc[-1] - scheduled.iloc[0])
    lag = df.schedule_lag_ms.quantile([0.5, 0.99])
    print(
        f"\nopen loop target {rate_rps} req/s: schedule {intended:.2f}, achieved "
        f"{achieved:.2f} req/s; lag p50 {lag[0.5]:.1f} ms p99 {lag[0.99]:.1f} ms"
    )
    assert achieved == pytest.approx(intended, rel=0.05)
    assert lag[0.5] < 20


def test_closed_loop_users_keep_that_many_requests_in_flight(vllm_server, tmp_path: Path):
    # N closed-loop users must mean N requests at the server, not fewer.
    users = 8
    workload = workload_file(
        tmp_path, "inflight", "prompt_tokens: 256\noutput_tokens: 64\nfixed_output: true\n"
    )
    shape = tmp_path / "steady.yaml"
    shape.write_text(
        f"kind: steady\nusers: {users}\nspawn_rate: {users}\nduration_s: 10\nwarmup_s: 2\n"
    )
    run_dir = tmp_path / "run"
    run_locust(vllm_server, run_dir, "--workload", str(workload), "--traffic", str(shape))
    df = read_records(run_dir)
    assert (df.status == "ok").all(), df.error[df.status != "ok"].tolist()
    warmup_until = json.loads((run_dir / "locust.json").read_text())["warmup_until"]
    kept = df[df.sent_at >= warmup_until]
    t0, t1 = kept.sent_at.min(), kept.sent_at.max()
    overlap = (df.finished_at.clip(upper=t1) - df.sent_at.clip(lower=t0)).clip(lower=0)
    mean_in_flight = float(overlap.sum()) / (t1 - t0)
    print(
        f"{len(kept)} requests after the warm-up, mean in flight {mean_in_flight:.3f} of "
        f"{users}, idle before a send p50/max "
        f"{kept.idle_before_ms.median():.2f}/{kept.idle_before_ms.max():.2f} ms"
    )
    assert len(kept) >= 3 * users
    assert mean_in_flight >= 0.97 * users
    summary = summarize_run(run_dir)
    assert summary["mean_in_flight"] == pytest.approx(mean_in_flight, rel=1e-9)
    assert summary["users_asked"] == users
    # the closed loop kept its users busy (on two shared cores the machine may still hold the
    # loop back now and then: that is the timing verdict's business, not this one's)
    assert not any("in flight" in why for why in summary["client_limited_by"])


def test_requests_that_share_a_prefix_are_answered_sooner(vllm_server, tmp_path: Path):
    # Timed, so in the quiet part (what such a run counts is test_locust_counts_e2e's): beside
    # the unit tests a run once got 13 answers in 16 s, each waiting ~0.4 s for a core, which
    # buries a prefill of 12 ms against 44 (alone on an AMX host; ~9× apart on an AVX2 one).
    workload = workload_file(tmp_path, "half-shared", HALF_SHARED, HALF_SHARED_SEED)
    run_dir = tmp_path / "run"
    run_locust(vllm_server, run_dir, "--workload", str(workload), "-u", "1", "-t", "6s")
    df = read_records(run_dir)
    ok = df[df.status == "ok"]
    shared, plain = ok[ok.prefix_group == 0], ok[ok.prefix_group == -1]
    assert len(shared) >= 6 and len(plain) >= 5, df.status.value_counts()
    # the first shared request puts the prefix in the cache
    shared_ttft, plain_ttft = shared.ttft_ms.iloc[1:].median(), plain.ttft_ms.median()
    print(
        f"\nTTFT p50 shared prefix {shared_ttft:.1f} ms ({len(shared) - 1} requests) vs "
        f"unique text {plain_ttft:.1f} ms ({len(plain)} requests)"
    )
    assert shared_ttft < plain_ttft
