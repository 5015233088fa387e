"""Comparison designs: Welch and paired intervals match textbook t-tests, the detectable change
is where the power reaches 80 %, and pairing repeats made A B A B cancels drift."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats
from test_analysis_data import synth_records, write_run

from vprof.analysis import compare
from vprof.analysis.designs import paired, parse_shift, welch
from vprof.common.errors import RunError


def test_welch_interval_is_scipys_on_logs():
    a, b = [100.0, 110.0, 96.0, 104.0], [120.0, 131.0, 118.0]
    got = welch(a, b)
    assert got is not None and got.logs and got.design == "welch"
    want = stats.ttest_ind(np.log(b), np.log(a), equal_var=False).confidence_interval(0.95)
    assert got.diff - got.half == pytest.approx(want.low, rel=1e-9)
    assert got.diff + got.half == pytest.approx(want.high, rel=1e-9)
    assert got.low_pct == pytest.approx((math.exp(want.low) - 1) * 100)


def test_paired_interval_is_scipys_over_differences():
    a, b = [100.0, 140.0, 90.0, 120.0, 105.0], [111.0, 152.0, 99.0, 133.0, 114.0]
    got = paired(a, b)
    assert got is not None and got.design == "paired" and got.n == 5 and got.df == 4
    want = stats.ttest_rel(np.log(b), np.log(a)).confidence_interval(0.95)
    assert got.diff - got.half == pytest.approx(want.low, rel=1e-9)
    assert got.diff + got.half == pytest.approx(want.high, rel=1e-9)
    assert got.significant  # ~ +10 % in every pair, although the pairs spread by ±25 %
    assert got.p_value == pytest.approx(stats.ttest_rel(np.log(b), np.log(a)).pvalue, rel=1e-9)
    assert welch(a, b).p_value == pytest.approx(  # type: ignore[union-attr]
        stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue, rel=1e-9
    )


def test_values_with_zeros_are_compared_on_their_scale():
    got = welch([0.0, 0.01, 0.02], [0.03, 0.04, 0.05])
    assert got is not None and not got.logs
    assert got.diff_pct == pytest.approx((0.04 - 0.01) / 0.01 * 100)


def test_the_detectable_change_is_where_power_reaches_80_percent():
    got = paired([100.0, 104.0, 98.0, 101.0, 97.0, 103.0], [101.0, 103.0, 99.0, 104.0, 96.0, 104.0])
    assert got is not None
    assert got.power_at(got.detectable_pct) == pytest.approx(0.80, abs=0.03)
    assert got.power_at(got.detectable_pct * 2) > 0.99
    assert got.power_at(0.5 * got.detectable_pct) < 0.5
    # a decrease of the same log size is as easy to see
    shrink = (1 / (1 + got.detectable_pct / 100) - 1) * 100
    assert got.power_at(shrink) == pytest.approx(got.power_at(got.detectable_pct), abs=1e-9)


def test_too_few_values_give_no_interval():
    assert welch([1.0], [1.0, 2.0]) is None
    assert paired([1.0], [2.0]) is None
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])


@pytest.mark.parametrize("text,value", [("10%", 10.0), ("2.5 %", 2.5), ("7", 7.0)])
def test_detect_shift_parses(text, value):
    assert parse_shift(text) == value


@pytest.mark.parametrize("text", ["", "ten", "0%", "-5%", "nan", "inf%", "5000%"])
def test_detect_shift_refuses_nonsense(text):
    with pytest.raises(RunError):
        parse_shift(text)


def _interleaved(folder, drift, *, order="interleaved", shift=1.0, seed=0):
    """Repeats of a and b made A1 B1 A2 B2 …: each repeat shares a drift factor (the host got
    slower), b's latency is ``shift`` × a's."""
    paths = []
    for k, factor in enumerate(drift, start=1):
        suffix = "" if k == 1 else f"--r{k}"
        for name, scale in (("a", 1.0), ("b", shift)):
            records = synth_records(
                800, seed=seed + 10 * k + (name == "b"), ttft_ms=100 * factor * scale
            )
            paths.append(
                write_run(
                    folder / f"{name}--chat--steady--0000abcd{suffix}",
                    records,
                    profile=name,
                    meta={"order": order, "repeat": k},
                )
            )
    return paths


DRIFT = (0.8, 1.0, 1.25, 1.5)  # the host slows down by half over the bench


def test_interleaved_repeats_are_paired_and_drift_cancels(tmp_path):
    runs = _interleaved(tmp_path / "ab", DRIFT, shift=1.10)
    row = compare(runs, metrics=["median_ttft_ms"], detect=10.0).iloc[0]
    assert row["method"].startswith("paired") and row["significant"], row["verdict"]
    assert row["ci_low_pct"] < 10 < row["ci_high_pct"]
    assert "4 interleaved pairs of runs" in row["verdict"]
    assert row["power_pct"] > 50


def test_the_same_runs_in_blocked_order_are_welch_and_see_less(tmp_path):
    blocked = compare(
        _interleaved(tmp_path / "bl", DRIFT, order="blocked", shift=1.10),
        metrics=["median_ttft_ms"],
    ).iloc[0]
    paired_row = compare(
        _interleaved(tmp_path / "il", DRIFT, shift=1.10), metrics=["median_ttft_ms"]
    ).iloc[0]
    assert blocked["method"].startswith("Welch") and not blocked["significant"]
    assert "could not have seen a change under ±" in blocked["verdict"]
    assert blocked["detectable_pct"] > 3 * paired_row["detectable_pct"]


def test_interleaved_a_a_is_no_difference_and_says_what_it_could_see(tmp_path):
    row = compare(_interleaved(tmp_path / "aa", DRIFT), metrics=["median_ttft_ms"]).iloc[0]
    assert row["method"].startswith("paired") and not row["significant"], row["verdict"]
    assert 0 < row["detectable_pct"] < 20
    assert f"under ±{row['detectable_pct']:.1f} %" in row["verdict"] or "under ±" in row["verdict"]


def test_one_run_a_side_has_no_detectable_change(tmp_path):
    runs = _interleaved(tmp_path / "one", DRIFT[:1])
    row = compare(runs, metrics=["median_ttft_ms"]).iloc[0]
    assert math.isnan(row["detectable_pct"]) and not row["significant"]


def test_crossover_cancels_an_instance_offset_that_paired_t_counts_as_noise():
    from vprof.analysis.designs import crossover

    rng = np.random.default_rng(4)
    # b is 5 % slower; in phase 1 it sits on the slower instance (+8 %), in phase 2 on the
    # faster one (-8 %)
    phases = []
    for offset in (1.08, 1 / 1.08):
        a = list(rng.lognormal(np.log(100), 0.02, 10))
        b = [x * 1.05 * offset * float(rng.lognormal(0, 0.02)) for x in a]
        phases.append((a, b))
    got = crossover(phases)
    plain = paired([x for a, _ in phases for x in a], [x for _, b in phases for x in b])
    assert got is not None and plain is not None and got.design == "crossover"
    assert got.df == 18 and got.n == 20
    assert got.low_pct < 5 < got.high_pct and got.significant
    assert got.half < plain.half / 3  # the offset left the interval
    assert crossover([phases[0]]) is None and crossover([phases[0], ([1.0], [1.0])]) is None


def test_runs_on_an_unsteady_or_slower_host_are_flagged(tmp_path):
    from vprof.analysis.samples import host_stats

    steady = [{"t": 1e9 + i, "work_ms": 1.0 + 0.01 * (i % 3), "late_ms": 0.1} for i in range(30)]
    shaky = [{"t": 1e9 + i, "work_ms": 1.0 + 0.5 * (i % 2), "late_ms": 0.1} for i in range(30)]
    assert host_stats(steady)["host_unsteady"] is False
    got = host_stats(shaky)
    assert got["host_unsteady"] and got["host_pace_spread_pct"] == pytest.approx(50.0)
    assert host_stats(steady[:3]) == {}

    runs = _interleaved(tmp_path / "h", DRIFT[:2])
    slow = [dict(r, work_ms=1.4) for r in steady]
    for path, rows in zip(runs, (steady, shaky, steady, slow), strict=True):
        stamp = [dict(r, t=1_800_000_000.0 + i) for i, r in enumerate(rows)]
        (path / "host.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stamp))
    notes = " ".join(compare(runs, metrics=["median_ttft_ms"]).attrs["notes"])
    assert "the host was unsteady during b--chat--steady--0000abcd" in notes
    assert "slower during b--chat--steady--0000abcd--r2" in notes


def test_interleaved_rounds_alternate_in_direction_and_keep_their_order_as_rounds_are_added():
    from vprof.runs.order import block_order

    assert block_order(2, 3, "interleaved") == [(0, 1), (1, 1), (1, 2), (0, 2), (0, 3), (1, 3)]
    assert block_order(3, 2, "interleaved") == [(0, 1), (1, 1), (2, 1), (2, 2), (1, 2), (0, 2)]
    assert block_order(2, 4, "interleaved")[:6] == block_order(2, 3, "interleaved")
    assert block_order(2, 2, "blocked") == [(0, 1), (0, 2), (1, 1), (1, 2)]


def _family(size: int) -> list[dict]:
    """A comparison's rows for ``size`` metrics: the first differs on its own (p 0.018, four
    interleaved pairs), the others not at all (p 0.76)."""
    from vprof.analysis.compare import METHOD_PAIRED, Group, _judge_family, _row, interval_fields

    base, other = Group("a", (), ()), Group("b", (), ())
    lone = paired([100, 102, 98, 101], [103, 103, 100, 104])
    null = paired([100, 102, 98, 101], [101, 100, 99, 102])
    rows = [
        {**_row(f"metric_{k}", base, other, method=METHOD_PAIRED), **interval_fields(interval)}
        for k, interval in enumerate([lone] + [null] * (size - 1))
    ]
    return _judge_family(rows, base, other, detect=10.0)


def test_a_metric_found_alone_is_judged_again_with_its_family():
    """Twelve metrics of an A/A give twelve chances of a chance "difference" unless they are
    judged as one family: a p of 0.018 is a difference alone, not as one of twelve, and what
    the design could have seen alone grows with the family."""
    (alone,) = _family(1)
    assert alone["significant"] and alone["p_adjusted"] == alone["p_value"] < 0.05
    first, *rest = _family(12)
    assert first["p_value"] == alone["p_value"] and first["p_adjusted"] > 0.05
    assert not first["significant"] and not any(row["significant"] for row in rest)
    assert "adjusted 0.21 over the 12 metrics judged together" in first["verdict"]
    assert "in this metric alone" in first["verdict"]
    assert first["detectable_pct"] > 1.3 * alone["detectable_pct"]
    assert first["power_pct"] < alone["power_pct"]
