"""Comparisons: repeats give verdicts (Welch t over per-run values), one run a side gives a
request-noise interval and no verdict; the bootstrap's resample arithmetic is exact."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_analysis_data import T0, synth_records, write_run

from vprof.analysis import compare
from vprof.analysis.bootstrap import _bootstrap, _Sample
from vprof.analysis.compare import NEGLIGIBLE_PCT
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


def _repeats(folder, name, n, *, ttft_ms, seed, run_cv=0.08, **kw):
    """``n`` repeats of one configuration, each run with its own run-level shift of latency
    (what really varies between runs), written as `vprof bench --repeat` names them."""
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(1, n + 1):
        shift = float(rng.lognormal(0.0, run_cv))
        suffix = "" if k == 1 else f"--r{k}"
        paths.append(
            write_run(
                folder / f"{name}--chat--steady--0000abcd{suffix}",
                synth_records(400, seed=seed * 100 + k, ttft_ms=ttft_ms * shift, **kw),
                profile=name,
            )
        )
    return paths


def test_one_run_a_side_gives_a_request_noise_interval_and_never_a_verdict(tmp_path):
    base = write_run(tmp_path / "base", synth_records(600, seed=1, ttft_ms=100), profile="base")
    fast = write_run(
        tmp_path / "fast", synth_records(600, seed=2, ttft_ms=70), profile="chunked-256"
    )
    frame = compare([base, fast], metrics=["median_ttft_ms", "p95_ttft_ms"], n_boot=1000)
    assert list(frame["metric"]) == ["median_ttft_ms", "p95_ttft_ms"]
    assert "request noise only" in frame.attrs["notes"][-1]
    for row in frame.itertuples():
        assert not row.significant and row.better == ""
        assert row.ci_low_pct < -30 < row.ci_high_pct  # true change: 70/100 − 1 = −30 %
        assert row.ci_low_pct <= row.diff_pct <= row.ci_high_pct
        assert "request noise only, not a verdict" in row.verdict
        assert row.runs == "1 vs 1" and "bootstrap" in row.method


def test_repeats_find_a_known_difference_and_its_interval_covers_it(tmp_path):
    runs = _repeats(tmp_path, "base", 3, ttft_ms=100, seed=1)
    runs += _repeats(tmp_path, "chunked-256", 3, ttft_ms=70, seed=2)
    frame = compare(runs, metrics=["median_ttft_ms", "p95_ttft_ms"])
    for row in frame.itertuples():
        assert row.runs == "3 vs 3" and row.method.startswith("Welch")
        assert row.significant and row.better == "better"
        assert row.ci_low_pct < -30 < row.ci_high_pct
        assert row.verdict.startswith("chunked-256 lowers ") and "(3 vs 3 runs)" in row.verdict


def test_repeats_of_one_configuration_against_each_other_are_no_difference(tmp_path):
    runs = _repeats(tmp_path, "a", 4, ttft_ms=80, seed=5)
    frame = compare([runs[:2], runs[2:]])  # explicit groups: repeats 1–2 vs 3–4
    assert set(frame["baseline"]) == {"a (r1, r2)"} and set(frame["run"]) == {"a (r3, r4)"}
    latency = frame[frame["metric"].str.endswith("_ms")]
    assert not latency["significant"].any(), latency[["metric", "verdict"]].to_string()
    assert latency["verdict"].str.contains("no significant difference").all()
    throughput = frame.set_index("metric").loc["request_throughput"]
    assert throughput["runs"] == "2 vs 2" and not math.isnan(throughput["ci_low_pct"])


def test_a_statistic_that_flips_between_repeats_is_flagged_unstable_not_compared(tmp_path):
    # median ITL of 0.02 ms in some runs and 3.6 ms in others (chunks bunching on two cores)
    runs = [
        write_run(
            tmp_path / f"a--w--s--0000abcd{'' if k == 1 else f'--r{k}'}",
            synth_records(300, seed=k, itl_ms=itl),
            profile="a",
        )
        for k, itl in ((1, 0.02), (2, 3.6))
    ] + [
        write_run(
            tmp_path / f"b--w--s--0000abcd{'' if k == 1 else f'--r{k}'}",
            synth_records(300, seed=10 + k, itl_ms=itl),
            profile="b",
        )
        for k, itl in ((1, 3.6), (2, 0.02))
    ]
    row = compare(runs, metrics=["median_itl_ms"]).iloc[0]
    assert not row["stable"] and not row["significant"]
    assert "unstable between repeats" in row["verdict"]


def test_runs_whose_load_generator_was_the_bottleneck_are_not_judged(tmp_path):
    busy = [{"t": T0 + i, "worker": "w", "cpu_percent": 99.0} for i in range(10)]
    runs = _repeats(tmp_path, "a", 2, ttft_ms=100, seed=1)
    runs += [
        write_run(
            tmp_path / f"b--chat--steady--0000abcd{'' if k == 1 else f'--r{k}'}",
            synth_records(400, seed=30 + k, ttft_ms=50),
            profile="b",
            loadgen=busy,
        )
        for k in (1, 2)
    ]
    row = compare(runs, metrics=["median_ttft_ms"]).iloc[0]
    assert row["suspect"] and not row["significant"]
    assert "load generator was the bottleneck" in row["verdict"]


def test_an_unknown_metric_names_the_keys_instead_of_not_comparable(tmp_path):
    a = write_run(tmp_path / "a", synth_records(50, seed=3))
    b = write_run(tmp_path / "b", synth_records(50, seed=4))
    with pytest.raises(RunError, match="p95_ttft_ms"):
        compare([a, b], metrics=["p95_ttft"])


def test_compare_notes_different_workloads(tmp_path):
    a = write_run(tmp_path / "a", synth_records(50, seed=3))
    b = write_run(tmp_path / "b", synth_records(50, seed=4))
    meta = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**meta, "workload": {"name": "rag"}}))
    frame = compare([a, b], metrics=["p95_ttft_ms"], n_boot=50)
    assert any("different workloads" in note for note in frame.attrs["notes"])


def test_compare_notes_runs_from_different_hardware(tmp_path):
    a = write_run(tmp_path / "a", synth_records(50, seed=3))
    b = write_run(tmp_path / "b", synth_records(50, seed=4))
    host = {"machine": "x86_64", "cpu_count": 2, "memory_gib": 23.5, "gpus": []}
    for run, cpu, features in ((a, "Intel Xeon", ["avx2", "avx512f"]), (b, "AMD EPYC", ["avx2"])):
        meta = json.loads((run / "run.json").read_text())
        hardware = {**host, "cpu_model": cpu, "cpu_features": features}
        (run / "run.json").write_text(json.dumps({**meta, "hardware": hardware}))
    frame = compare([a, b], metrics=["p95_ttft_ms"], n_boot=50)
    (note,) = [n for n in frame.attrs["notes"] if "different hardware" in n]
    assert "AMD EPYC, avx2, 2 CPUs" in note and "Intel Xeon, avx512f, 2 CPUs" in note
    same = compare([a, a], metrics=["p95_ttft_ms"], n_boot=50)
    assert not any("different hardware" in n for n in same.attrs["notes"])


def test_compare_the_same_run_twice_is_zero_difference(tmp_path):
    a = write_run(tmp_path / "a", synth_records(200, seed=3))
    frame = compare([a, a], metrics=["p95_itl_ms"], n_boot=200)
    row = frame.iloc[0]
    assert row["diff_pct"] == 0 and not row["significant"]
    assert row["baseline"] != row["run"]  # the two sides are told apart
    assert row["verdict"] == "p95 ITL: identical"


def test_compare_is_reproducible_with_a_seed(tmp_path):
    a = write_run(tmp_path / "a", synth_records(200, seed=3))
    b = write_run(tmp_path / "b", synth_records(200, seed=5, itl_ms=25))
    one = compare([a, b], metrics=["p99_itl_ms"], n_boot=300, seed=9)
    two = compare([a, b], metrics=["p99_itl_ms"], n_boot=300, seed=9)
    assert one.equals(two)


def test_compare_needs_two_runs(tmp_path):
    a = write_run(tmp_path / "a", synth_records(10))
    with pytest.raises(RunError, match="at least two runs or groups"):
        compare([a])


def test_order_statistic_resamples_have_the_bootstrap_distribution():
    # Percentiles of one value per request are drawn from beta order statistics; their
    # distribution must be that of explicit resamples (two-sample KS, large samples).
    from scipy.stats import ks_2samp

    rng = np.random.default_rng(11)
    values = np.sort(rng.lognormal(3, 0.6, size=301))
    sample = _Sample(values, np.arange(values.size), values.size)
    fast = _bootstrap(sample, ["median", "p95", "p99"], 6000, np.random.default_rng(2))
    draws = np.random.default_rng(3).integers(0, values.size, size=(6000, values.size))
    for stat, q in (("median", 50), ("p95", 95), ("p99", 99)):
        explicit = np.percentile(values[draws], q, axis=1)
        assert ks_2samp(fast[stat], explicit).pvalue > 0.001, stat
        assert np.median(fast[stat]) == pytest.approx(np.median(explicit), rel=0.01)


def test_runs_held_back_by_the_machine_keep_their_medians_judged_not_their_tails(tmp_path):
    # A loop at 5 % CPU that waited for a core now and then: late stamps in the tail only.
    hist = [0] * 20
    hist[0], hist[8] = 390, 10  # 2.5 % of wake-ups late by tens of ms, the median on time
    held = [
        {
            "t": T0 + i,
            "worker": "w",
            "cpu_percent": 5.0,
            "wait_percent": 30.0,
            "loop_probes": 400,
            "loop_lag_p50_ms": 0.1,
            "loop_lag_p99_ms": 40.0,
            "loop_lag_max_ms": 80.0,
            "loop_lag_histogram": hist,
        }
        for i in range(10)
    ]
    runs = _repeats(tmp_path, "a", 3, ttft_ms=100, seed=1)
    runs += [
        write_run(
            tmp_path / f"b--chat--steady--0000abcd{'' if k == 1 else f'--r{k}'}",
            synth_records(400, seed=30 + k, ttft_ms=50),
            profile="b",
            loadgen=held,
        )
        for k in (1, 2, 3)
    ]
    rows = compare(runs, metrics=["median_ttft_ms", "p95_ttft_ms"]).set_index("metric")
    assert rows.loc["median_ttft_ms", "significant"], rows.loc["median_ttft_ms", "verdict"]
    assert rows.loc["p95_ttft_ms", "suspect"] and not rows.loc["p95_ttft_ms", "significant"]


def test_an_offset_resolved_far_inside_the_noise_floor_is_no_meaningful_difference(tmp_path):
    """Exact timing resolves a 0.5 % offset; a real 5 % one is still found."""

    def runs(name, n, ttft_ms):
        return [
            write_run(
                tmp_path / f"{name}--chat--steady--0000abcd{'' if k == 1 else f'--r{k}'}",
                # the same requests each time, scaled: a run-to-run spread of ±0.1 %
                synth_records(400, seed=7, ttft_ms=ttft_ms * (1 + 0.001 * (k - 2))),
                profile=name,
            )
            for k in range(1, n + 1)
        ]

    base = runs("base", 3, 100.0)
    frame = compare([base, runs("tiny", 3, 100.5)], metrics=["median_ttft_ms"])
    row = frame.iloc[0]
    assert 0 < row.ci_low_pct and row.ci_high_pct < NEGLIGIBLE_PCT, row.verdict
    assert not row.significant and "no meaningful difference" in row.verdict
    found = compare([base, runs("real", 3, 105.0)], metrics=["median_ttft_ms"]).iloc[0]
    assert found.significant and found.verdict.startswith("real raises median TTFT by 5")
