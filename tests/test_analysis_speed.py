"""The fast paths of summaries and comparisons give the slow paths' numbers: the gap pass in
two threads, columns read on first use, bootstrap resamples sized by the precision asked for."""

from __future__ import annotations

import math
import os
from pathlib import Path

import golden
import pytest

from vprof.analysis import compare, load_run
from vprof.analysis.run import summarize_loaded


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("speed")
    out = {}
    for name, seed, open_loop, _, ttft_ms in golden.SYNTHETIC[:2]:
        out[name] = golden.synthetic_run(root / name, seed, open_loop, 1500, ttft_ms)
    return out


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_the_gap_pass_in_two_threads_gives_the_one_thread_summary(runs, monkeypatch, compiled):
    from vprof.analysis import gapkernel, summary

    monkeypatch.setenv(gapkernel.DISABLE, compiled)
    path = runs["synthetic-open-a"]
    one = summarize_loaded(load_run(path), slo=golden.SLO)
    monkeypatch.setattr(summary, "_THREADED_GAPS", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(summary, "_GROUP_VALUES", 512)  # many steps in each piece
    monkeypatch.setattr(summary, "_PIECE_GAPS", 4000)  # and many pieces, taken by two threads
    cols = load_run(path).columns
    assert summary._threaded(cols) and len(summary._pieces(cols)) > 2
    two = summarize_loaded(load_run(path), slo=golden.SLO)
    assert one.keys() == two.keys()
    for key, value in one.items():
        if key in ("mean_itl_ms", "std_itl_ms"):  # sums added in another order
            assert math.isclose(value, two[key], rel_tol=1e-12), key
        else:
            assert value == two[key] or (value != value and two[key] != two[key]), key


def test_the_install_built_the_compiled_gap_pass():
    from vprof.analysis import gapkernel

    assert gapkernel.load() is not None, (
        "analysis/_gappass.c was not compiled: `pip install -e .` builds it where a C compiler is"
    )


@pytest.mark.parametrize("guess", ["sampled", "missed"])
@pytest.mark.parametrize("name", ["synthetic-open-a", "synthetic-open-b"])
def test_the_compiled_gap_pass_gives_the_numpy_passes_summary(runs, monkeypatch, name, guess):
    """Every figure of a summary alike with the compiled pass and without (numpy's passes),
    the gap pass shared by two threads in small pieces, with the sample's guess of the
    percentiles' buckets as it comes and made to miss (a second pass then collects them)."""
    import numpy as np

    from vprof.analysis import gapkernel, summary

    if guess == "missed":
        monkeypatch.setattr(summary, "_gap_sample", lambda cols: np.full(1000, 0.5))
    monkeypatch.setattr(summary, "_THREADED_GAPS", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(summary, "_PIECE_GAPS", 4000)
    monkeypatch.setattr(summary, "_GROUP_VALUES", 512)
    out = {}
    for compiled in ("0", "1"):
        monkeypatch.setenv(gapkernel.DISABLE, compiled)
        out[compiled] = summarize_loaded(load_run(runs[name]), slo=golden.SLO)
    numpy_passes, compiled_pass = out["0"], out["1"]
    assert numpy_passes.keys() == compiled_pass.keys()
    assert compiled_pass["max_output_tokens_per_s"] > 0
    for key, value in numpy_passes.items():
        if key in ("mean_itl_ms", "std_itl_ms"):  # sums added in another order
            assert math.isclose(value, compiled_pass[key], rel_tol=1e-12), key
        else:
            assert value == compiled_pass[key] or (
                value != value and compiled_pass[key] != compiled_pass[key]
            ), key


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_pass_counts_keeps_and_bins_as_numpy_does(seed):
    """One call of the compiled pass against numpy on the same requests: the gaps of the kept
    requests counted per bucket, the wanted buckets' values kept in order, their sums, and
    each chunk in the 1-s bin of its time (before the first bin in the first, after the last
    in the last), with requests of no gaps, zero gaps, a first chunk never seen, spans of
    many seconds and first chunks before the bins' start."""
    import numpy as np

    from vprof.analysis import gapkernel
    from vprof.analysis.stats import BlockQuantiles

    rng = np.random.default_rng(seed)
    lengths, gaps, first_s = _random_requests(rng, 400, -3.0, 60.0)
    keep = rng.random(lengths.size) < 0.8
    shift = BlockQuantiles.SHIFT
    keys = gaps.view(np.int64) >> shift
    wanted = np.zeros(1 << (63 - shift), dtype=bool)
    wanted[rng.choice(np.unique(keys), 5)] = True
    counts, bins = np.zeros(wanted.size, dtype=np.int64), np.zeros(50, dtype=np.int64)
    kept, sums, state = np.empty(gaps.size), np.zeros(2), np.zeros(2, dtype=np.int64)
    found = gapkernel.gap_pass(
        gaps, lengths, first_s, keep, wanted, counts, shift, bins, kept, sums, state
    )
    mine = np.repeat(keep, lengths)
    assert state.tolist() == [int(lengths[keep].sum()), 0]
    assert counts.tolist() == np.bincount(keys[mine], minlength=wanted.size).tolist()
    assert kept[:found].tolist() == gaps[mine & wanted[keys]].tolist()
    assert math.isclose(sums[0], gaps[mine].sum(), rel_tol=1e-12)
    assert math.isclose(sums[1], (gaps[mine] ** 2).sum(), rel_tol=1e-12)
    assert bins.tolist() == _binned(lengths, gaps, first_s, keep, bins.size).tolist()


def test_the_compiled_pass_stops_counting_at_a_negative_gap_and_bins_an_endless_one_last():
    """A negative gap stops the bucket counts (the summary then partitions every value, as
    numpy's passes do) while the sums go on; an infinite gap puts its request's later chunks
    in the last bin, and the pass ends."""
    import numpy as np

    from vprof.analysis import gapkernel

    gaps = np.array([10.0, -1.0, 20.0, 10.0, np.inf, 10.0])
    lengths = np.array([3, 3])
    first_s = np.array([0.5, 2.5])
    keep = np.ones(2, dtype=bool)
    counts, bins = np.zeros(1 << 17, dtype=np.int64), np.zeros(6, dtype=np.int64)
    kept, sums, state = np.empty(6), np.zeros(2), np.zeros(2, dtype=np.int64)
    wanted = np.ones(counts.size, dtype=bool)
    found = gapkernel.gap_pass(
        gaps, lengths, first_s, keep, wanted, counts, 46, bins, kept, sums, state
    )
    assert state.tolist() == [6, 1] and found == 1 and kept[0] == 10.0 and counts.sum() == 1
    assert sums[0] == np.inf
    # request 1: 0.5, 0.51, 0.50 (a negative gap goes back), 0.52 s; request 2: 2.5, 2.51 s,
    # then never: the last bin
    assert bins.tolist() == [4, 0, 2, 0, 0, 2]


def test_the_compiled_pass_refuses_arrays_it_cannot_read():
    import numpy as np

    from vprof.analysis import gapkernel

    gaps, lengths = np.ones(4), np.array([2, 2])
    args = dict(
        first_s=np.zeros(2),
        keep=np.ones(2, dtype=bool),
        wanted=None,
        counts=np.zeros(1 << 17, dtype=np.int64),
        shift=46,
        bins=np.zeros(3, dtype=np.int64),
        kept=np.empty(4),
        sums=np.zeros(2),
        state=np.zeros(2, dtype=np.int64),
    )
    with pytest.raises(TypeError, match="contiguous float64"):
        gapkernel.gap_pass(gaps.astype(np.float32), lengths, **args)
    with pytest.raises(TypeError, match="contiguous"):
        gapkernel.gap_pass(np.ones(8)[::2], lengths, **args)
    with pytest.raises(ValueError, match="one length"):
        gapkernel.gap_pass(np.ones(5), lengths, **args)
    with pytest.raises(ValueError, match="room for every gap"):
        gapkernel.gap_pass(gaps, lengths, **{**args, "kept": np.empty(3)})
    assert gapkernel.gap_pass(gaps, lengths, **args) == 0


def test_a_process_that_reads_a_run_keeps_freed_memory_where_glibc_allows(runs):
    """Reading a run raises glibc's thresholds once (``common/memory.py``), in a fresh process
    so the test's own is left as it was; elsewhere the C library is left alone."""
    import platform
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from vprof.analysis import load_run\n"
        "from vprof.common.memory import keep_freed_memory\n"
        "load_run(sys.argv[1])\n"
        "print(keep_freed_memory.cache_info().currsize, keep_freed_memory())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(runs["synthetic-open-a"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    glibc = platform.libc_ver()[0] == "glibc"
    assert done.stdout.split() == ["1", str(glibc)]


def test_a_summary_reads_only_the_columns_it_uses(runs):
    run = load_run(runs["synthetic-open-a"])
    summarize_loaded(run)
    read = set(run.columns.floats._got)  # type: ignore[attr-defined]
    assert "sent_at" in read and "ttft_ms" in read
    assert "think_ms" not in read  # closed-loop sessions' think time: not an open-loop run's


def test_bootstrap_resamples_are_sized_by_the_precision_asked_for(runs):
    paths = [runs["synthetic-open-a"], runs["synthetic-open-b"]]
    metrics = ["p95_ttft_ms", "p99_itl_ms"]
    coarse = compare(paths, metrics=metrics, precision_pct=5.0)
    fine = compare(paths, metrics=metrics, precision_pct=0.5)
    from vprof.analysis.bootstrap import MAX_SIZED_N_BOOT, PILOT_N_BOOT

    assert coarse.attrs["n_boot"] == PILOT_N_BOOT
    assert PILOT_N_BOOT < fine.attrs["n_boot"] <= MAX_SIZED_N_BOOT
    # the point estimates are the summaries' whatever the count; the intervals agree
    assert list(coarse["value"]) == list(fine["value"])
    for a, b in zip(coarse["ci_low_pct"], fine["ci_low_pct"], strict=True):
        assert abs(a - b) < 10.0
    # a count given is drawn exactly
    assert compare(paths, metrics=metrics, n_boot=300).attrs["n_boot"] == 300


def test_a_precision_that_is_not_a_positive_number_is_refused(runs):
    from vprof.common.errors import RunError

    paths = [runs["synthetic-open-a"], runs["synthetic-open-b"]]
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(RunError, match="precision"):
            compare(paths, metrics=["p95_ttft_ms"], precision_pct=bad)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1000, 4099])
def test_the_running_sum_in_rows_searches_like_a_cumulative_sum(n):
    import numpy as np

    from vprof.analysis.summary import _RunningSum

    rng = np.random.default_rng(n)
    values = rng.lognormal(3.0, 1.0, n)
    values[::7] = 0.0  # a gap of zero: equal sums side by side
    plain = np.cumsum(values)
    running = _RunningSum(values)
    sums = running.at(np.arange(n)) if n else np.zeros(0)
    # within a rounding of the one-after-another sum, and rising as it does
    assert np.allclose(sums, plain, rtol=1e-12, atol=0)
    assert (np.diff(sums) >= 0).all()
    total = plain[-1] if n else 0.0
    anywhere = rng.uniform(-1.0, total + 1.0, 500)
    assert running.count_below(anywhere).tolist() == np.searchsorted(plain, anywhere).tolist()
    # at its own sums (ties, the ends) exactly as a search in them
    exact = np.concatenate([sums, [0.0, total, -1.0, total + 1.0]])
    assert running.count_below(exact).tolist() == np.searchsorted(sums, exact).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_chunks_are_binned_as_their_times_say(seed):
    """Each request's chunks (the first, then one per gap) land in the 1-s bin of their time,
    with requests of no gaps, zero gaps, a first chunk never seen, and spans of many seconds."""
    import numpy as np

    from vprof.analysis.summary import _bin_chunks

    lengths, gaps, first_s = _random_requests(np.random.default_rng(seed), 300, 0.0, 50.0)
    bins = np.zeros(200, dtype=np.int64)
    _bin_chunks(bins, gaps, lengths, first_s, workspace=np.empty(7))  # too small: not used
    every = np.ones(lengths.size, dtype=bool)
    assert bins.tolist() == _binned(lengths, gaps, first_s, every, bins.size).tolist()


def _random_requests(rng, n: int, first_lo: float, first_hi: float):
    """``n`` requests' gap counts (some none), gaps (ms; some zero, some of seconds) and first
    chunks' times (s, uniform in the range; some never seen: NaN)."""
    import numpy as np

    lengths = rng.integers(0, 40, n)
    lengths[::11] = 0
    gaps = rng.lognormal(np.log(30.0), 1.2, int(lengths.sum()))
    gaps[rng.random(gaps.size) < 0.1] = 0.0
    first_s = rng.uniform(first_lo, first_hi, n)
    first_s[::13] = np.nan
    return lengths, gaps, first_s


def _binned(lengths, gaps, first_s, keep, size: int):
    """The kept requests' chunks counted in the 1-s bin of their times, request by request
    (before the first bin in the first, after the last in the last)."""
    import numpy as np

    expected = np.zeros(size, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    for k, first, start, taken in zip(lengths, first_s, starts, keep, strict=True):
        if not taken or np.isnan(first):
            continue
        times = first + np.concatenate([[0.0], np.cumsum(gaps[start : start + k])]) / 1000.0
        np.add.at(expected, np.clip(np.floor(times), 0, size - 1).astype(np.int64), 1)
    return expected


@pytest.mark.parametrize("n_groups", [0, 1, 7, 240, 5000])
def test_values_sorted_within_groups_are_a_lexsort(n_groups):
    import numpy as np

    from vprof.analysis.stats import sorted_within_groups

    rng = np.random.default_rng(n_groups)
    groups = np.sort(rng.integers(0, max(n_groups, 1), 20_000)) if n_groups else np.zeros(0)
    groups = groups[np.argsort(groups + rng.normal(0, 2, groups.size))]  # nearly in order
    values = np.round(rng.lognormal(3, 1, groups.size), 1)  # ties too
    ordered, starts = sorted_within_groups(groups, values, n_groups)
    order = np.lexsort((values, groups))
    assert ordered.tolist() == values[order].tolist()
    assert starts.tolist() == np.searchsorted(groups[order], np.arange(n_groups + 1)).tolist()


def test_comparison_rows_read_as_a_dataframe_gives_them():
    import random

    import numpy as np
    import pandas as pd

    from vprof.analysis.compare import Rows

    pool = [1, 0, 1.5, math.nan, math.inf, None, True, False, np.float64(2.5), np.int64(3)]
    pool += [np.bool_(True), "x", ["w"], [], np.float64("nan")]

    def kinds(rows):  # NaN != NaN: compare by type and text
        return [[(k, type(v).__name__, repr(v)) for k, v in row.items()] for row in rows]

    rng = random.Random(0)
    for _ in range(3000):  # rows with keys missing, numbers mixed, text with gaps
        rows = [
            {k: rng.choice(pool) for k in rng.sample("abcd", rng.randint(0, 4))}
            for _ in range(rng.randint(1, 4))
        ]
        assert kinds(Rows(rows).records()) == kinds(pd.DataFrame(rows).to_dict("records"))


def test_a_report_built_two_runs_at_a_time_is_the_one_built_one_by_one(runs, monkeypatch):
    from vprof.report import build, build_data

    def data() -> dict:
        out = build_data(list(runs.values()), slo=golden.SLO, n_boot=50)
        return {k: v for k, v in out.items() if k not in ("build_s", "generated_at")}

    monkeypatch.setattr(build, "usable_cpus", lambda: 2)
    two = data()
    monkeypatch.setattr(build, "usable_cpus", lambda: 1)
    assert data() == two


@pytest.mark.parametrize("share", [0.0, 0.001, 0.03, 0.5, 1.0])
def test_the_gaps_of_a_few_requests_are_those_of_a_pass_over_all(runs, share, monkeypatch):
    import numpy as np

    from vprof.analysis import columns

    cols = load_run(runs["synthetic-open-a"]).columns
    mask = np.random.default_rng(7).random(cols.n) < share
    few = cols.gaps(mask)
    monkeypatch.setattr(columns, "_FEW_ROWS", 0)  # never "few": the pass over every block
    all_blocks = cols.gaps(mask)
    assert [a.tolist() for a in few] == [a.tolist() for a in all_blocks]
