"""Bootstrap comparisons: exact resample arithmetic, coverage of a known difference, and
"no significant difference" for identical distributions."""

from __future__ import annotations

import numpy as np
import pytest
from test_analysis_data import synth_records, write_run

from vprof.analysis import compare
from vprof.analysis.compare import _bootstrap, _Sample
from vprof.common.errors import RunError


def test_resample_statistics_equal_explicit_resamples():
    # The counts trick must give exactly what materialising each resample would.
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 6, size=40)
    values = rng.lognormal(3, 0.5, size=lengths.sum())
    owner = np.repeat(np.arange(40), lengths)
    order = np.argsort(values, kind="stable")
    sample = _Sample(values[order], owner[order], 40)
    stats = ["mean", "std", "median", "p95", "p99.9"]
    got = _bootstrap(sample, stats, 25, np.random.default_rng(1))

    draws = np.random.default_rng(1).integers(0, 40, size=(25, 40))
    groups = [values[owner == i] for i in range(40)]
    for b in range(25):
        pooled = np.concatenate([groups[i] for i in draws[b]])
        assert got["mean"][b] == pytest.approx(pooled.mean(), rel=1e-12)
        assert got["std"][b] == pytest.approx(pooled.std(), rel=1e-9)
        for stat, q in (("median", 50), ("p95", 95), ("p99.9", 99.9)):
            assert got[stat][b] == pytest.approx(np.percentile(pooled, q), rel=1e-12)


def test_compare_finds_a_known_difference_and_its_interval_covers_it(tmp_path):
    base = write_run(tmp_path / "base", synth_records(600, seed=1, ttft_ms=100), profile="base")
    fast = write_run(
        tmp_path / "fast", synth_records(600, seed=2, ttft_ms=70), profile="chunked-256"
    )
    frame = compare([base, fast], metrics=["median_ttft_ms", "p95_ttft_ms"], n_boot=1000)
    assert list(frame["metric"]) == ["median_ttft_ms", "p95_ttft_ms"]
    for row in frame.itertuples():
        assert row.significant
        assert row.ci_low_pct < -30 < row.ci_high_pct  # true change: 70/100 − 1 = −30 %
        assert row.ci_low_pct <= row.diff_pct <= row.ci_high_pct
        assert row.better == "better"
        assert row.verdict.startswith("chunked-256 lowers ")
        assert " TTFT by " in row.verdict and "[" in row.verdict


def test_compare_calls_identical_distributions_no_significant_difference(tmp_path):
    a = write_run(tmp_path / "a", synth_records(500, seed=3))
    b = write_run(tmp_path / "b", synth_records(500, seed=4))
    frame = compare([a, b], n_boot=500)
    latency = frame[frame["metric"].str.endswith("_ms")]
    assert len(latency) == 9
    assert not latency["significant"].any()
    assert latency["verdict"].str.contains("no significant difference").all()
    assert (latency["ci_low_pct"] < 0).all() and (latency["ci_high_pct"] > 0).all()
    throughput = frame.set_index("metric").loc["request_throughput"]
    assert "no interval" in throughput["verdict"]


def test_compare_the_same_run_twice_is_zero_difference(tmp_path):
    a = write_run(tmp_path / "a", synth_records(200, seed=3))
    frame = compare([a, a], metrics=["p95_itl_ms"], n_boot=200)
    row = frame.iloc[0]
    assert row["diff_pct"] == 0 and not row["significant"]
    assert (row["baseline"], row["run"]) == ("a#1", "a#2")


def test_compare_is_reproducible_with_a_seed(tmp_path):
    a = write_run(tmp_path / "a", synth_records(200, seed=3))
    b = write_run(tmp_path / "b", synth_records(200, seed=5, itl_ms=25))
    one = compare([a, b], metrics=["p99_itl_ms"], n_boot=300, seed=9)
    two = compare([a, b], metrics=["p99_itl_ms"], n_boot=300, seed=9)
    assert one.equals(two)


def test_compare_needs_two_runs(tmp_path):
    a = write_run(tmp_path / "a", synth_records(10))
    with pytest.raises(RunError, match="at least two runs"):
        compare([a])
