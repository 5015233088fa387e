"""Capacity-plan arithmetic: interpolation, the binding constraint, honesty when nothing
passed, and run folders as evidence."""

from __future__ import annotations

import math

import pytest
from test_analysis_data import synth_records, write_run

from vprof.analysis import SloError, plan


def _level(run: str, rps: float, ttft: float, tpot: float = 10.0, profile: str = "p", **kw):
    return {
        "run": run,
        "profile": profile,
        "request_throughput": rps,
        "p95_ttft_ms": ttft,
        "p95_tpot_ms": tpot,
        "error_rate": 0.0,
        "state": "completed",
        **kw,
    }


def test_plan_interpolates_between_last_pass_and_first_fail():
    levels = [_level("r1", 1.0, 100), _level("r3", 3.0, 700), _level("r2", 2.0, 300)]
    result = plan(levels, target_rps=40, slo="ttft_p95=500ms", headroom=0.2)
    (p,) = result.profiles
    # 2 + (500 − 300) / (700 − 300) × (3 − 2) = 2.5 req/s; ceil(40 / 2.5 × 1.2) = ceil(19.2)
    assert p.sustainable_rps == pytest.approx(2.5)
    assert p.replicas == 20
    assert p.binding == "ttft_p95"
    assert "interpolated between 2.00 req/s (met) and 3.00 req/s (missed)" == p.basis
    assert "you need 20 replicas of p" in p.message
    assert [lv.run for lv in p.levels] == ["r1", "r2", "r3"]
    assert any("scale linearly" in note for note in p.notes)


def test_plan_names_the_constraint_that_breaks_first():
    levels = [_level("a", 2.0, 200, tpot=20), _level("b", 4.0, 600, tpot=60)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms,tpot_p95=30ms", headroom=0).profiles[0]
    # TTFT would allow 2 + 300/400·2 = 3.5; TPOT only 2 + 10/40·2 = 2.5: TPOT binds.
    assert p.binding == "tpot_p95"
    assert p.sustainable_rps == pytest.approx(2.5)
    assert p.replicas == 4


def test_plan_says_so_when_no_level_met_the_slo():
    levels = [_level("a", 2.0, 900), _level("b", 4.0, 1500)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms").profiles[0]
    assert p.replicas is None and p.sustainable_rps is None
    assert "no measured level met" in p.message and "replicas unknown" in p.message
    assert "ttft_p95 900.0 ms > 500 ms" in p.message


@pytest.mark.parametrize(
    ("limit", "what", "fix"),
    [
        ({"loadgen_starved": True}, "load generator was the bottleneck", "cores of its own"),
        ({"loadgen_saturated": True}, "load generator was the bottleneck", "--processes N"),
        (
            {"in_flight_cap": 64, "client_limited_by": ["the in-flight cap (64) was reached: …"]},
            "the server kept the traffic's in-flight cap (64) full",
            "raise max_in_flight",
        ),
    ],
)
def test_a_client_limited_level_says_why_and_what_to_do(limit, what, fix):
    """A level the in-flight cap held back is the server's doing (it kept the cap full), not a
    client that --processes or fewer users would fix; other processes on the cores and a
    loop that fell behind each get their own advice."""
    levels = [_level("a", 2.0, 100), _level("b", 4.0, 200, client_limited=True, **limit)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms").profiles[0]
    assert p.sustainable_rps == 2.0 and p.binding == "client limit"
    assert what in p.basis
    (note,) = [n for n in p.notes if " in b:" in n]
    assert what in note and fix in note and "not counted as met" in note
    assert ("--processes" in note) == ("saturated" in str(limit))


def test_a_plan_over_predicted_levels_says_predicted_where_it_would_say_measured():
    levels = [_level("a", 2.0, 900, predicted=True), _level("b", 4.0, 1500, predicted=True)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms").profiles[0]
    assert p.basis == "no predicted level met the SLO"
    assert "predict lower load levels" in p.message and "measure" not in p.message
    levels = [_level("a", 2.0, 100, predicted=True), _level("b", 4.0, 200, predicted=True)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms").profiles[0]
    assert p.basis.startswith("highest predicted level")
    assert any(n.startswith("one replica was predicted up to 4.00 req/s") for n in p.notes)


@pytest.mark.parametrize(
    ("band", "words"),
    [
        ([2.0, 3.0], "sustains 2.00–3.00 req/s: 5 to 8 replicas"),
        ([2.4, 2.6], "sustains 2.40–2.60 req/s: 6 replicas"),
        ([None, 3.0], "with steps 5 % slower no predicted level met the SLO"),
    ],
)
def test_a_plan_over_predicted_levels_says_what_steps_5_pct_off_would_make_of_it(band, words):
    forecast = {"error": "e", "pace": {"step_time_pct": 5.0, "sustainable_rps": band}}
    levels = [
        _level(run, rps, ttft, predicted=True, forecast=forecast)
        for run, rps, ttft in (("a", 2.0, 300), ("b", 3.0, 700))
    ]
    p = plan(levels, target_rps=12, slo="ttft_p95=500ms", headroom=0.2).profiles[0]
    assert p.sustainable_rps == pytest.approx(2.5) and p.replicas == 6
    (note,) = [n for n in p.notes if n.startswith("with steps 5 %")]
    assert words in note
    assert "not measured" in p.message


def test_levels_of_other_workloads_or_traffic_are_planned_apart_and_a_ladder_is_one():
    """Two workloads' sweeps of one profile are two plans (their 15 req/s levels are not
    repeats of one load), and so are two traffic shapes of one workload; a load ladder's
    levels (poisson@rate_rps=N) are one."""
    levels = [
        _offered(f"{w}@{x}", x, x, ttft, workload=w, traffic=f"poisson@rate_rps={x}")
        for w, ttft_of in (("rag", (100, 200, 900)), ("fixed", (100, 600, 900)))
        for x, ttft in zip((5, 10, 15), ttft_of, strict=True)
    ]
    plans = {p.profile: p for p in plan(levels, target_rps=20, slo="ttft_p95=500ms").profiles}
    assert set(plans) == {"p × rag", "p × fixed"}
    assert plans["p × rag"].sustainable_rps == pytest.approx(10 + 300 / 700 * 5)
    assert plans["p × fixed"].sustainable_rps == pytest.approx(5 + 400 / 500 * 5)
    shapes = [
        _offered("a", 5, 5, 100, workload="chat", traffic="poisson"),
        _offered("b", 5, 5, 100, workload="chat", traffic="burst"),
    ]
    names = {p.profile for p in plan(shapes, target_rps=20, slo="ttft_p95=500ms").profiles}
    assert names == {"p × poisson", "p × burst"}


def test_plan_when_every_level_passed_is_a_lower_bound_on_capacity():
    levels = [_level("a", 2.0, 100), _level("b", 4.0, 200)]
    p = plan(levels, target_rps=10, slo="ttft_p95=500ms", headroom=0.25).profiles[0]
    assert p.sustainable_rps == 4.0
    assert p.replicas == math.ceil(10 / 4 * 1.25)  # 3.125 → 4
    assert "capacity may be higher" in p.basis


def test_plan_does_not_extrapolate_past_a_throughput_plateau():
    # Overloaded: 16 users achieved less throughput than 8 users, and missed the SLO.
    levels = [
        _level("u16", 2.8, 2000, offered_load=16, offered_load_unit="users"),
        _level("u8", 3.0, 300, offered_load=8, offered_load_unit="users"),
    ]
    p = plan(levels, target_rps=6, slo="ttft_p95=500ms", headroom=0).profiles[0]
    assert [lv.run for lv in p.levels] == ["u8", "u16"]  # ordered by offered load
    assert p.sustainable_rps == 3.0
    assert "throughput did not grow beyond it" in p.basis
    assert p.replicas == 2


def test_plan_ranks_profiles_by_replicas_needed():
    levels = [
        _level("a1", 2.0, 100, profile="baseline"),
        _level("a2", 4.0, 900, profile="baseline"),
        _level("b1", 2.0, 100, profile="chunked-256"),
        _level("b2", 4.0, 300, profile="chunked-256"),
    ]
    result = plan(levels, target_rps=20, slo="ttft_p95=500ms", headroom=0)
    assert [p.profile for p in result.profiles] == ["chunked-256", "baseline"]
    assert result.best.profile == "chunked-256" and result.best.replicas == 5
    assert result.profiles[1].replicas == math.ceil(20 / 3.0)  # 2 + 400/800·2 = 3 req/s
    rows = result.rows()
    assert rows[0]["profile"] == "chunked-256" and rows[0]["replicas"] == 5


def test_plan_treats_a_failed_run_and_error_rate_as_failures():
    levels = [
        _level("a", 2.0, 100),
        _level("b", 4.0, 100, error_rate=0.2),
    ]
    p = plan(levels, target_rps=8, slo="ttft_p95=500ms,errors=5%", headroom=0).profiles[0]
    assert p.binding == "errors"
    assert p.sustainable_rps == pytest.approx(2.0 + 0.05 / 0.2 * 2.0)
    crashed = [_level("a", 2.0, 100), _level("b", 4.0, 100, state="failed")]
    q = plan(crashed, target_rps=8, slo="ttft_p95=500ms", headroom=0).profiles[0]
    assert q.sustainable_rps == 2.0 and q.binding == "run failure"


def test_plan_reads_run_folders(tmp_path):
    runs = [
        write_run(tmp_path / f"r{i}", synth_records(200, seed=i, rate_rps=rate, ttft_ms=ttft))
        for i, (rate, ttft) in enumerate([(2.0, 50), (4.0, 120), (8.0, 900)])
    ]
    result = plan(runs, target_rps=40, slo="ttft_p95=300ms")
    (p,) = result.profiles
    assert p.profile == "baseline"
    assert [lv.passed for lv in p.levels] == [True, True, False]
    assert 3.9 < p.sustainable_rps < 8.0
    assert p.replicas == math.ceil(40 / p.sustainable_rps * 1.2)
    assert result.evidence_rows()[2]["slo"] == "missed"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"target_rps": 0, "slo": "ttft_p95=1s"}, "--rps: must be more than 0, got 0"),
        ({"target_rps": float("nan"), "slo": "ttft_p95=1s"}, "--rps: must be a finite number"),
        ({"target_rps": 1, "slo": "ttft=1s"}, "a plan needs percentile targets"),
        ({"target_rps": 1, "slo": "ttft_p95=1s", "headroom": -1}, "headroom"),
        ({"target_rps": 1, "slo": "ttft_p95=1s", "headroom": float("inf")}, "--headroom"),
    ],
)
def test_plan_rejects_what_it_cannot_answer(kwargs, fragment):
    with pytest.raises(SloError, match=fragment):
        plan([_level("a", 1.0, 1.0)], **kwargs)


def _offered(run: str, load: float, rps: float, ttft: float, **kw):
    return _level(run, rps, ttft, offered_load=load, offered_load_unit="req/s", **kw)


def test_a_measured_multi_replica_run_checks_linear_scaling_and_the_plan_uses_it():
    levels = [
        _offered("a@2", 2, 2.0, 100, gpus_per_replica=2),
        _offered("a@4", 4, 4.0, 200, gpus_per_replica=2),
        _offered("a@8", 8, 6.0, 900, gpus_per_replica=2),
        # two replicas behind the balancer at 4 req/s each: 7.2 of 2 × 4.0 = 90 %
        _offered("a×2@8", 8, 7.2, 250, replicas=2, gpus_per_replica=2),
    ]
    (p,) = plan(levels, target_rps=20, slo="ttft_p95=500ms", headroom=0.0).profiles
    assert p.scaling_efficiency == pytest.approx(0.9)
    # sustainable from the single-replica levels: 4 + (500 − 200)/(900 − 200) × 2 = 4.857
    assert p.sustainable_rps == pytest.approx(4 + 300 / 700 * 2)
    assert p.replicas == math.ceil(20 / (p.sustainable_rps * 0.9))
    assert p.gpus_per_replica == 2 and p.gpus == 2 * p.replicas
    assert "90% of that together" in p.message
    assert any(
        "measured with 2 replicas at 4 req/s each: 7.20 req/s, 90% of 2 × one replica's 4.00"
        in note
        for note in p.notes
    )
    (row,) = plan(levels, target_rps=20, slo="ttft_p95=500ms").rows()
    assert row["gpus"] == row["replicas"] * 2 and row["scaling_efficiency"] == pytest.approx(0.9)


def _scaling(*multi, single=None, **kw):
    single = single or [
        _offered("a@2", 2, 2.0, 100),
        _offered("a@4", 4, 3.8, 200),
        _offered("a@8", 8, 5.0, 900),
    ]
    (p,) = plan([*single, *multi], target_rps=20, slo="ttft_p95=500ms", headroom=0.0, **kw).profiles
    return p


def test_scaling_compares_with_one_replica_interpolated_at_the_same_load_per_replica():
    # 6 req/s per replica: one replica's rate there is 3.8 + (6 − 4)/(8 − 4) × 1.2 = 4.4
    p = _scaling(_offered("a×2@12", 12, 8.0, 700, replicas=2))
    assert p.scaling_efficiency == pytest.approx(8.0 / (2 * 4.4))
    # throughput nearly scaled, but the SLO did not: one replica at 6 req/s sits between a
    # level that met it and one that missed, so no claim is made about the SLO there
    assert not any("did not hold at the SLO" in n for n in p.notes)


def test_a_multi_replica_level_that_misses_the_slo_where_one_replica_met_it_is_named():
    p = _scaling(_offered("a×2@8", 8, 7.6, 800, replicas=2))
    assert p.scaling_efficiency == pytest.approx(1.0)  # the throughput scaled…
    (flag,) = [n for n in p.notes if "did not hold at the SLO" in n]
    assert "2 replicas at 4 req/s each missed it (ttft_p95 800.0 ms > 500 ms)" in flag


def test_scaling_is_not_checked_outside_the_single_replica_levels_or_across_workloads():
    far = _scaling(_offered("a×2@40", 40, 20.0, 400, replicas=2))
    assert far.scaling_efficiency is None
    assert any(
        "no single-replica run at that load" in n and "span 2–8 req/s" in n for n in far.notes
    )
    # a level of another workload is planned apart, never against this one's levels
    single = [_offered(f"a@{x}", x, x * 0.9, 100 * x, workload="chat") for x in (2, 4, 8)]
    multi = _offered("a×2@8", 8, 6.0, 300, replicas=2, workload="rag")
    plans = plan([*single, multi], target_rps=20, slo="ttft_p95=500ms").profiles
    by_name = {p.profile: p for p in plans}
    assert set(by_name) == {"p × chat", "p × rag"}
    assert by_name["p × rag"].scaling_efficiency is None
    assert [lv.run for lv in by_name["p × chat"].levels] == ["a@2", "a@4", "a@8"]


def test_only_multi_replica_levels_plan_on_the_rate_per_replica():
    multi = [
        _offered("a×2@4", 4, 4.0, 100, replicas=2),
        _offered("a×2@8", 8, 8.0, 300, replicas=2),
        _offered("a×2@16", 16, 10.0, 900, replicas=2),
    ]
    (p,) = plan(multi, target_rps=20, slo="ttft_p95=500ms", headroom=0.0).profiles
    # per replica: 4 req/s (met at 300 ms) and 5 req/s (missed at 900 ms) → 4 + 200/600 × 1
    assert p.sustainable_rps == pytest.approx(4 + 200 / 600)
    assert p.replicas == math.ceil(20 / p.sustainable_rps)
    assert any("measured only with several replicas" in n for n in p.notes)
