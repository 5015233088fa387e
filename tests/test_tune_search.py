"""The search behind `vprof tune`, against a fake trial runner: candidates have a known
capacity, and each level meets the SLO exactly when its rate is at or below it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from vprof.analysis.slo import parse_slo
from vprof.runs.tuneevidence import (
    MEASURED,
    NOT_STARTED,
    OUT_OF_MEMORY,
    REFUSED,
    Measurement,
    Objective,
    TuneResult,
    Verdict,
)
from vprof.runs.tuner import tune_on
from vprof.runs.tunesearch import SearchSettings
from vprof.runs.tunespace import BATCHED, CHUNKED, SEQS, Candidate, Dim, Space
from vprof.runs.tunetrial import RateSearch, round_rate

SLO = parse_slo("ttft_p95=100ms")


def summary(label: str, rate: float, capacity: float, n: int, *, preemptions: int = 0) -> dict:
    """A run's summary as the plan reads it: p95 TTFT (from the schedule) crosses 100 ms
    exactly at the capacity."""
    return {
        "run": f"{label}#{n}",
        "profile": label,
        "state": "completed",
        "open_loop": True,
        "offered_load": rate,
        "offered_load_unit": "req/s",
        "request_throughput": min(rate, capacity),
        "p95_ttft_from_schedule_ms": 100.0 * (rate / capacity) ** 3,
        "client_limited": False,
        "num_preemptions": preemptions,
    }


Capacity = Callable[[Candidate], "float | str"]


@dataclass
class FakeRunner:
    """Trials on a model of servers: ``capacity(candidate)`` is a rate, "oom" (out of memory
    at start-up) or "fail" (another start-up error)."""

    capacity: Capacity
    preempts: Callable[[Candidate], bool] = lambda c: False
    opened: list[Candidate] = field(default_factory=list)
    levels: list[tuple[Candidate, float]] = field(default_factory=list)
    confirmed: list[tuple[tuple[Candidate, ...], float, int]] = field(default_factory=list)
    clock: list[float] = field(default_factory=lambda: [0.0])
    level_s: float = 0.0
    start_s: float = 0.0

    def open(self, candidate: Candidate) -> FakeTrial:
        self.opened.append(candidate)
        return FakeTrial(self, candidate)

    def level(self, candidate: Candidate, rate: float, n: int) -> Measurement:
        cap = self.capacity(candidate)
        self.levels.append((candidate, rate))
        self.clock[0] += self.level_s
        if cap == "oom":
            return Measurement(rate, "not-started", reason="CUDA out of memory", oom=True)
        if cap == "fail":
            return Measurement(rate, "not-started", reason="ValueError: unsupported")
        assert isinstance(cap, float)
        label = candidate.label("fake")
        pre = 3 if self.preempts(candidate) else 0
        return Measurement(
            rate, "completed", summary(label, rate, cap, n, preemptions=pre), run=f"{label}#{n}"
        )

    def confirm(self, candidates: Sequence[Candidate], rate: float, repeats: int):
        """Interleaved as a bench runs them: a server start per run unless alone; asked again
        with more repeats, the runs made before are resumed (no start)."""
        done = max(
            (r for g, x, r in self.confirmed if g == tuple(candidates) and x == rate), default=0
        )
        self.confirmed.append((tuple(candidates), rate, repeats))
        out = {}
        for c in candidates:
            out[c] = [self.level(c, rate, 1000 + r) for r in range(repeats)]
            for r, m in enumerate(out[c]):
                m.started_server = r >= done and (len(candidates) > 1 or r == 0)
        return out

    # a near tie is decided once its interval is within ±noise: here from the fifth repeat
    decided_from: int = 5

    def verdict(self, base, other, metric: str) -> Verdict:
        n = min(len(base), len(other))
        text = f"{metric}: no significant difference ({len(base)} vs {len(other)} runs)"
        return Verdict(text, half_width_pct=5.0 if n >= self.decided_from else 40.0)


@dataclass
class FakeTrial:
    runner: FakeRunner
    candidate: Candidate
    server_started: bool = False
    n: int = 0

    def measure(self, rate_rps: float) -> Measurement:
        if not self.server_started:
            self.runner.clock[0] += self.runner.start_s
        self.server_started = True
        self.n += 1
        return self.runner.level(self.candidate, rate_rps, self.n)

    def close(self) -> None:
        pass


def space(**dims: tuple) -> Space:
    keys = {"bt": BATCHED, "chunked": CHUNKED, "seqs": SEQS}
    out = []
    for short, values in dims.items():
        key = keys.get(short, short.replace("_", "-"))
        ordered = not isinstance(values[0], bool)
        out.append(Dim(key, tuple(values), ordered))
    return Space(tuple(out))


def tune(space_: Space, runner: FakeRunner, start: Candidate | None = None, **kw) -> TuneResult:
    settings = kw.pop("settings", SearchSettings(start_rps=1.0, repeat=1, budget_trials=50))
    start = start or Candidate(tuple((d.key, d.values[0]) for d in space_.dims))
    return tune_on(
        space_,
        start,
        runner,
        slo=SLO,
        objective=kw.pop("objective", Objective()),
        settings=settings,
        clock=lambda: runner.clock[0],
        **kw,
    )


# ------------------------------------------------------------------------ the rate search


def drive(search: RateSearch, capacity: float) -> tuple[list[float], str]:
    met: dict[float, bool] = {}
    while True:
        rate, why = search.next_rate(met)
        if rate is None:
            return list(met), why
        met[rate] = rate <= capacity


def test_the_rate_search_climbs_by_doubling_then_bisects_to_the_resolution():
    rates, why = drive(RateSearch(start_rps=1.0), 13.0)
    assert rates == [1.0, 2.0, 4.0, 8.0, 16.0, 11.3, 13.4, 12.3]
    assert why == "met at 12.3, missed at 13.4 req/s"


def test_a_first_level_that_misses_halves_until_one_meets():
    rates, why = drive(RateSearch(start_rps=8.0), 3.0)
    assert rates[:3] == [8.0, 4.0, 2.0]
    lo, hi = max(r for r in rates if r <= 3), min(r for r in rates if r > 3)
    assert hi / lo <= 1.1 and "met at" in why


def test_a_candidate_clearly_worse_than_the_best_stops_after_one_level():
    rates, why = drive(RateSearch(race_rps=10.0), 6.0)
    assert rates == [9.0]
    assert why.startswith("clearly worse than the best")


def test_racing_a_best_it_beats_settles_the_question_first_then_climbs():
    rates, _ = drive(RateSearch(race_rps=10.0), 30.0)
    assert rates[:3] == [9.0, 11.0, 22.0]


def test_a_near_tie_is_bracketed_beside_the_best():
    rates, why = drive(RateSearch(race_rps=10.0), 9.7)
    assert rates == [9.0, 11.0, 9.95]
    assert why.startswith("a near tie below the best: met at 9, missed at 9.95")


def test_the_rate_search_stops_at_its_floor_and_its_ceiling():
    rates, why = drive(RateSearch(start_rps=1.0, min_rps=0.2), 0.01)
    assert rates == [1.0, 0.5, 0.25] and why.startswith("no level met")
    rates, why = drive(RateSearch(start_rps=1.0, max_rps=5.0), 100.0)
    assert rates == [1.0, 2.0, 4.0, 5.0] and "highest rate allowed" in why


def test_rates_are_rounded_to_three_significant_digits():
    assert [round_rate(x) for x in (11.3137, 0.123456, 1234.5)] == [11.3, 0.123, 1230.0]


# ------------------------------------------------------------------------ the staged search


def landscape(c: Candidate) -> float | str:
    """Capacity peaking at chunked, 2048 batched tokens, 128 sequences; non-chunked lower."""
    bt, seqs = c.get(BATCHED), c.get(SEQS)
    shape_bt = math.exp(-(math.log2(bt / 2048) ** 2) / 4)
    shape_seqs = math.exp(-(math.log2(seqs / 128) ** 2) / 6)
    return 20.0 * shape_bt * shape_seqs * (1.0 if c.get(CHUNKED) else 0.8)


def guide_space() -> Space:
    return space(
        chunked=(True, False), bt=(256, 512, 1024, 2048, 4096, 8192), seqs=(32, 64, 128, 256, 512)
    )


def refuse_short_non_chunked(c: Candidate) -> str | None:
    if not c.get(CHUNKED) and c.get(BATCHED) < 2048:
        return "below max-model-len with chunked prefill off"
    return None


def test_the_search_finds_the_grid_best_within_5_percent_starting_a_third_of_the_servers():
    grid = [c for c in guide_space().grid() if refuse_short_non_chunked(c) is None]
    grid_best = max(landscape(c) for c in grid)  # type: ignore[type-var]
    runner = FakeRunner(landscape)
    start = Candidate(((CHUNKED, True), (BATCHED, 512), (SEQS, 256)))
    result = tune(guide_space(), runner, start, refuse=refuse_short_non_chunked)
    assert result.best is not None
    truth = landscape(result.best.candidate)
    assert truth >= 0.95 * grid_best  # type: ignore[operator]
    assert result.servers_started <= len(grid) / 3
    assert len(runner.opened) == len(set(runner.opened)), "a candidate was measured twice"


def test_an_optimum_off_both_lines_is_found_by_walking_the_coupled_key_from_a_near_tie():
    # the best batched tokens grow with max-num-seqs (a ridge), and the ridge peaks at 4
    # sequences: from 8 sequences, batched tokens then max-num-seqs one at a time stop at
    # 93 % (bt 8192, seqs 8); bt 4096 at seqs 8 comes within noise, and max-num-seqs walked
    # from there finds the peak
    height = {1: 0.8, 2: 0.9, 4: 1.0, 8: 0.93}

    def ridge(c: Candidate) -> float:
        off = math.log2(c.get(BATCHED)) - (10 + math.log2(c.get(SEQS)))
        return 10.0 * height[c.get(SEQS)] * math.exp(-(off**2) / 10)

    sp = space(bt=(512, 1024, 2048, 4096, 8192), seqs=(1, 2, 4, 8))
    runner = FakeRunner(ridge)
    result = tune(sp, runner, Candidate(((BATCHED, 512), (SEQS, 8))))
    assert result.best is not None
    assert result.best.candidate == Candidate(((BATCHED, 4096), (SEQS, 4)))
    assert result.best.stage == "prefill × max-num-seqs"
    assert len(runner.opened) == len(set(runner.opened))


def test_refused_candidates_are_never_started_and_say_why():
    runner = FakeRunner(landscape)
    start = Candidate(((CHUNKED, True), (BATCHED, 512), (SEQS, 256)))
    result = tune(guide_space(), runner, start, refuse=refuse_short_non_chunked)
    refused = [t for t in result.trials if t.state == REFUSED]
    assert refused and all("max-model-len" in t.note for t in refused)
    assert not {t.candidate for t in refused} & set(runner.opened)
    assert all(t.number is None and not t.server_started for t in refused)


def test_later_candidates_race_the_best_and_losers_cost_one_level():
    runner = FakeRunner(landscape)
    start = Candidate(((CHUNKED, True), (BATCHED, 2048), (SEQS, 128)))  # the peak
    result = tune(guide_space(), runner, start, refuse=refuse_short_non_chunked)
    first, *others = result.measured
    assert first.candidate == start and len(first.measurements) > 3
    clear_losers = [t for t in others if t.note.startswith("clearly worse")]
    assert clear_losers and all(len(t.measurements) == 1 for t in clear_losers)


def test_out_of_memory_at_start_up_is_a_result_and_hungrier_candidates_are_not_started():
    def capacity(c: Candidate) -> float | str:
        return "oom" if c.get(BATCHED) >= 4096 else 5.0 * c.get(BATCHED) / 2048

    runner = FakeRunner(capacity)
    sp = space(bt=(1024, 2048, 4096, 8192), seqs=(64, 128))
    start = Candidate(((BATCHED, 2048), (SEQS, 64)))
    result = tune(sp, runner, start)
    oom = [t for t in result.trials if t.state == OUT_OF_MEMORY]
    assert [t.candidate.get(BATCHED) for t in oom] == [4096]
    assert "out of memory" in oom[0].note.lower()
    assert all(c.get(BATCHED) != 8192 for c in runner.opened)
    refused = [t for t in result.trials if t.state == REFUSED]
    assert any("ran out of memory" in t.note for t in refused) or not any(
        c.get(BATCHED) > 4096 for c in sp.grid()
    )
    assert result.best is not None and result.best.candidate.get(BATCHED) == 2048


def test_a_server_that_fails_to_start_is_a_result_not_a_crash():
    runner = FakeRunner(lambda c: "fail" if c.get(SEQS) == 256 else 4.0)
    result = tune(space(seqs=(64, 256)), runner)
    states = {t.candidate.get(SEQS): t.state for t in result.tried}
    assert states == {64: MEASURED, 256: NOT_STARTED}
    assert [t.candidate.get(SEQS) for t in result.measured] == [64]  # only what ran counts
    assert result.best is not None and result.best.candidate.get(SEQS) == 64


def test_preemptions_stop_the_climb_of_a_memory_hungry_key():
    runner = FakeRunner(lambda c: 2.0 * c.get(SEQS), preempts=lambda c: c.get(SEQS) >= 64)
    result = tune(space(seqs=(16, 32, 64, 128, 256)), runner)
    assert max(c.get(SEQS) for c in runner.opened) == 64  # better, but it preempted
    assert result.best is not None and result.best.candidate.get(SEQS) == 64


def test_the_trial_budget_caps_the_trials():
    runner = FakeRunner(landscape)
    settings = SearchSettings(budget_trials=3, repeat=1)
    result = tune(guide_space(), runner, refuse=refuse_short_non_chunked, settings=settings)
    assert len(result.measured) == 3 and len(runner.opened) == 3
    assert "trial budget (3)" in result.stopped_by


def test_the_time_budget_stops_before_a_trial_that_would_not_fit():
    runner = FakeRunner(landscape, level_s=10.0, start_s=30.0)
    settings = SearchSettings(budget_trials=None, budget_time_s=300.0, repeat=1)
    result = tune(guide_space(), runner, refuse=refuse_short_non_chunked, settings=settings)
    assert "time budget" in result.stopped_by
    assert runner.clock[0] <= 300.0 + max(t.wall_s for t in result.measured)
    assert result.wall_s == runner.clock[0]


def test_near_ties_are_measured_again_with_repeats_and_the_answer_rests_on_them():
    # two settings of max-num-seqs serve the same load: a near tie
    runner = FakeRunner(lambda c: 10.0 if c.get(SEQS) in (64, 128) else 4.0)
    settings = SearchSettings(repeat=3, budget_trials=10)
    result = tune(space(seqs=(32, 64, 128)), runner, settings=settings)
    # undecided after 3 and 4 repeats each (the interval wider than ±noise): a round more
    # each time, until the fifth decides it
    assert [r for _, _, r in runner.confirmed] == [3, 4, 5]
    group, rate, _ = runner.confirmed[-1]
    assert {c.get(SEQS) for c in group} == {64, 128}
    assert result.best is not None and rate == round_rate(rate)
    assert result.best.confirmed == f"5 of 5 runs at {rate:g} req/s met the SLO"
    assert result.confirmation["verdicts"][0]["verdict"].startswith("p95_ttft_ms")
    assert result.confirmation["verdicts"][0]["decided"] and result.confirmation["repeats"] == 5
    assert result.servers_started == len(runner.opened) + 2 * 5  # A B A B …: a start each


def test_a_near_tie_decided_at_once_takes_no_more_repeats():
    runner = FakeRunner(lambda c: 10.0 if c.get(SEQS) in (64, 128) else 4.0, decided_from=3)
    settings = SearchSettings(repeat=3, budget_trials=10)
    result = tune(space(seqs=(32, 64, 128)), runner, settings=settings)
    assert [r for _, _, r in runner.confirmed] == [3]
    assert result.confirmation["repeats"] == 3


def test_a_clear_winner_is_still_repeated_at_its_rate_for_the_answer():
    runner = FakeRunner(lambda c: 10.0 if c.get(SEQS) == 64 else 2.0)
    result = tune(space(seqs=(32, 64)), runner, settings=SearchSettings(repeat=2))
    ((group, _, _),) = runner.confirmed
    assert [c.get(SEQS) for c in group] == [64]
    assert result.best is not None and result.best.candidate.get(SEQS) == 64


def test_min_latency_measures_each_candidate_once_at_the_target_rate():
    runner = FakeRunner(lambda c: float(c.get(SEQS)) / 4)
    objective = Objective("min-latency", target_rps=6.0)
    result = tune(space(seqs=(16, 32, 64)), runner, objective=objective)
    assert {rate for _, rate in runner.levels} == {6.0}
    assert all(len(t.measurements) == 1 for t in result.measured)
    # capacity 16 req/s: the lowest p95 at 6 req/s
    assert result.best is not None and result.best.candidate.get(SEQS) == 64
    assert result.best.latency_ms == pytest.approx(100.0 * (6 / 16) ** 3)


def test_min_cost_ranks_by_rate_per_gpu_where_max_rate_ranks_by_rate_per_replica():
    def capacity(c: Candidate) -> float:
        return 10.0 * (1.8 if c.get("tensor-parallel-size") == 2 else 1.0)

    sp = space(tensor_parallel_size=(1, 2))

    def gpus(c: Candidate) -> int:
        return int(c.get("tensor-parallel-size"))

    by_rate = tune(sp, FakeRunner(capacity), gpus=gpus)
    by_cost = tune(sp, FakeRunner(capacity), gpus=gpus, objective=Objective("min-cost"))
    assert by_rate.best is not None and by_rate.best.candidate.get("tensor-parallel-size") == 2
    assert by_cost.best is not None and by_cost.best.candidate.get("tensor-parallel-size") == 1


def test_a_candidate_that_never_meets_the_slo_has_no_answer():
    runner = FakeRunner(lambda c: 0.001)
    settings = SearchSettings(start_rps=1.0, min_rps=0.1, repeat=2)
    result = tune(space(seqs=(32, 64)), runner, settings=settings)
    assert result.best is None and runner.confirmed == []
    assert all(t.sustainable_rps is None for t in result.measured)
