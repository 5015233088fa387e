"""`vprof sweep batched-tokens` end to end: real vLLM (CPU build), real Locust, a server
launched per rung."""

from __future__ import annotations

import json

import pytest
from test_bench_e2e import launch_and_run, run_dirs

from vprof.analysis.summary import HELD_BACK

pytestmark = pytest.mark.e2e


def test_sweep_batched_tokens_walks_two_rungs_and_recommends_one(tmp_path):
    out = tmp_path / "runs"
    proc = launch_and_run(
        out,
        "sweep",
        "batched-tokens",
        "baseline",
        "--rungs",
        "2",
        "--traffic",
        "smoke",
        timeout_s=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = run_dirs(out)
    assert len(runs) == 2
    # each rung's server ran with its own budget, as vLLM itself reported it
    served = {
        json.loads((r / "run.json").read_text())["server"]["max_num_batched_tokens"]: r
        for r in runs
    }
    assert set(served) == {2048, 4096}
    for value in served:
        assert f"mnbt={value}" in proc.stdout
    if "Recommended: baseline@mnbt=" in proc.stdout:
        return
    # This runs beside the unit tests: a load generator the machine held back is no ground
    # to pick a rung on, and the sweep must say that that, and nothing else, stood in the way.
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["client_limited_by"] == [HELD_BACK], proc.stdout
    assert "Left out because the load generator was the bottleneck:" in proc.stdout
    assert "give the load generator cores of its own" in proc.stdout
