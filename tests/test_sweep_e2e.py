"""`vprof sweep batched-tokens` end to end: real vLLM (CPU build), real Locust, a server
launched per rung."""

from __future__ import annotations

import pytest
from test_bench_e2e import launch_and_run, run_dirs

pytestmark = pytest.mark.e2e


def test_sweep_batched_tokens_walks_two_rungs_and_recommends_one(tmp_path):
    out = tmp_path / "runs"
    proc = launch_and_run(out, "sweep", "batched-tokens", "baseline", "--rungs", "2",
                          "--traffic", "smoke", timeout_s=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for value in ("2048", "4096"):
        assert f"mnbt={value}" in proc.stdout
    assert "Recommended: baseline@mnbt=" in proc.stdout
    assert len(run_dirs(out)) == 2
