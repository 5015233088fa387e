"""Overload is a result: an open-loop run past its in-flight cap says what it held back and
cut off, is judged from the schedule, and a plan never counts that level as met."""

from __future__ import annotations

import pytest
from locust_run import run_headless

from vprof.analysis import plan, summarize_run
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator

SLO = "ttft_p95=500ms"


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory) -> dict:
    """40 req/s offered to a server that answers 2 at a time in ~0.25 s each (~8 req/s)."""
    folder = tmp_path_factory.mktemp("overload")
    shape = folder / "overload.yaml"
    shape.write_text(
        "kind: open-loop\nrate_rps: 40\nduration_s: 6\nmax_in_flight: 2\nprocess: constant\n"
    )
    run = folder / "run"
    with Emulator(EmulatorConfig(ttft_ms=100, itl_ms=10, model="tiny")) as emulator:
        run_headless(
            emulator.url,
            run,
            "--workload",
            "tiny-smoke",
            "--traffic",
            str(shape),
            "--stop-timeout",
            "2",
            timeout_s=120,
        )
    return {"run": run, "summary": summarize_run(run, slo=SLO)}


def test_every_scheduled_request_is_accounted_for(overloaded):
    s = overloaded["summary"]
    assert s["requests"] == pytest.approx(240, abs=2)  # 40 req/s × 6 s, all scheduled
    assert s["completed"] + s["failed"] + s["cancelled"] == s["requests"]
    assert s["not_sent"] > 100 and s["cancelled"] >= s["not_sent"]  # the cap kept most back
    assert s["held_back"] > 5 and s["held_back_s"] > 1.0
    assert s["in_flight_cap"] == 2 and s["in_flight_cap_reached"]
    assert s["unanswered_rate"] > 0.5 and s["error_rate"] == 0.0


def test_open_loop_is_judged_from_the_schedule_and_marked_client_limited(overloaded):
    s = overloaded["summary"]
    assert s["slo_basis"].startswith("open loop: TTFT and E2E from the intended send time")
    (check,) = s["slo_checks"]
    assert check["unanswered_counted_as_unbounded"] == s["requests"] - s["completed"]
    assert not check["met"] and not s["slo_met"]
    assert s["p95_ttft_from_schedule_ms"] > s["p95_ttft_ms"]  # the wait the send hides
    assert s["client_limited"]
    assert any("in-flight cap (2)" in why for why in s["client_limited_by"])


def test_a_plan_never_counts_a_client_limited_level_as_met(overloaded):
    result = plan([overloaded["run"]], target_rps=40, slo=SLO)
    (profile,) = result.profiles
    assert profile.replicas is None and not profile.levels[0].passed
    assert "no measured level met" in profile.message
