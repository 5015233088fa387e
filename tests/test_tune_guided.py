"""`vprof tune --guided`: a model chooses what to measure next (against a fake guide), and the
level model fitted on summaries carries a step cost over to settings it never saw."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pytest
from test_tune_search import SLO, FakeRunner

from vprof.analysis.slo import parse_slo
from vprof.runs.tuneevidence import OUT_OF_MEMORY, REFUSED, Objective, TrialResult
from vprof.runs.tuneguide import guided_search
from vprof.runs.tuner import tune_on
from vprof.runs.tunesearch import Ledger, SearchSettings
from vprof.runs.tunespace import BATCHED, SEQS, Candidate, Dim, Space

SPACE = Space((Dim(BATCHED, (512, 1024, 2048, 4096), True), Dim(SEQS, (8, 16, 32), True)))
START = Candidate(((BATCHED, 512), (SEQS, 8)))


def capacity(c: Candidate) -> float | str:
    return 10.0 + 0.5 * math.log2(c.get(BATCHED) / 512) + c.get(SEQS) / 40


class FakeGuide:
    """Predicts ``truth`` scaled by ``bias``; counts how often it was asked."""

    def __init__(self, truth, bias: float = 1.0) -> None:
        self.truth, self.bias, self.asked, self.seen = truth, bias, 0, []

    def predict(self, trials: Sequence[TrialResult], candidates: Sequence[Candidate]):
        self.asked += 1
        self.seen.append([t.candidate for t in trials])
        out = {}
        for c in candidates:
            value = self.truth(c)
            out[c] = None if isinstance(value, str) else value * self.bias
        return out


def guided(runner: FakeRunner, guide, **kw):
    settings = kw.pop("settings", SearchSettings(start_rps=1.0, repeat=1, budget_trials=50))
    return tune_on(
        SPACE,
        START,
        runner,
        slo=SLO,
        objective=Objective(),
        settings=settings,
        clock=lambda: runner.clock[0],
        guide=guide,
        **kw,
    )


def test_the_start_is_measured_first_then_the_best_predicted_and_the_model_refits_each_time():
    runner, guide = FakeRunner(capacity), FakeGuide(capacity, bias=1.3)
    result = guided(runner, guide, settings=SearchSettings(repeat=1, budget_trials=3))
    assert runner.opened[0] == START
    # the best predicted first; then, of those predicted within noise of the best left
    # (4096×16, 4096×8, 2048×32 …), the one farthest from both measured settings
    assert runner.opened[1:] == [
        Candidate(((BATCHED, 4096), (SEQS, 32))),
        Candidate(((BATCHED, 4096), (SEQS, 8))),
    ]
    assert guide.asked == 2 and [len(seen) for seen in guide.seen] == [1, 2]
    assert result.best is not None and result.best.candidate == runner.opened[1]
    assert "trial budget (3)" in result.stopped_by
    assert all(t.stage.startswith("guided (predicted") for t in result.trials[1:])


def test_it_stops_when_no_candidate_left_is_predicted_within_noise_of_the_best():
    # the model sees one setting far ahead of the rest: after it, nothing is promising
    def peaked(c: Candidate) -> float:
        return 10.0 if c == Candidate(((BATCHED, 2048), (SEQS, 16))) else 1.0

    runner = FakeRunner(peaked)
    result = guided(runner, FakeGuide(peaked))
    assert [t.candidate for t in result.measured][1] == Candidate(((BATCHED, 2048), (SEQS, 16)))
    assert len(runner.opened) == 2
    assert result.stopped_by.startswith("no candidate left is predicted within 10 % of the best")
    assert "predicted 10 % of it" in result.stopped_by


def test_refused_and_hungrier_than_out_of_memory_candidates_are_never_started():
    def oom_above_2048(c: Candidate) -> float | str:
        return "oom" if c.get(BATCHED) >= 2048 and c.get(SEQS) >= 16 else capacity(c)

    def refuse(c: Candidate) -> str | None:
        return "too big" if c.get(BATCHED) == 4096 and c.get(SEQS) == 8 else None

    runner = FakeRunner(oom_above_2048)
    result = guided(runner, FakeGuide(capacity), refuse=refuse)
    opened = runner.opened
    assert Candidate(((BATCHED, 4096), (SEQS, 8))) not in opened
    oom = {t.candidate for t in result.trials if t.state == OUT_OF_MEMORY}
    assert oom
    for i, c in enumerate(opened):  # none started after a less hungry one ran out of memory
        for o in oom & set(opened[:i]):
            assert not (c.get(BATCHED) >= o.get(BATCHED) and c.get(SEQS) >= o.get(SEQS))
    refused = [t for t in result.trials if t.state == REFUSED]
    assert not {t.candidate for t in refused} & set(opened)
    assert len(set(opened)) == len(opened), "a candidate was measured twice"


def test_without_a_model_yet_the_nearest_neighbour_of_the_start_is_measured():
    class NoModel:
        def predict(self, trials, candidates):
            return {}

    runner = FakeRunner(capacity)
    ledger = Ledger(
        SPACE,
        lambda c, race: _evidence(runner, c),
        objective=Objective(),
        settings=SearchSettings(repeat=1, budget_trials=2),
    )
    found = guided_search(SPACE, START, ledger, NoModel())
    second = found.trials[1].candidate
    assert sum(second.get(k) != START.get(k) for k in SPACE.keys) == 1


def _evidence(runner: FakeRunner, candidate: Candidate):
    from vprof.runs.tunetrial import RateLimits, run_trial

    return run_trial(
        runner.open(candidate),
        "x",
        race_rps=None,
        limits=RateLimits(),
        slo=SLO,
        objective=Objective(),
    )


# ------------------------------------------------------------------------ the level model


@pytest.fixture(scope="module")
def level_model(tmp_path_factory):
    from vprof.forecast.levelfit import LevelModel
    from vprof.forecast.scenario import Scenario
    from vprof.traffic import get_shape
    from vprof.workloads import load_workload_file

    path = tmp_path_factory.mktemp("w") / "long.yaml"
    path.write_text(
        "description: 1000 in, 8 out\nendpoint: completions\nprompt_tokens: 1000\n"
        "output_tokens: 8\nfixed_output: true\n"
    )
    shape = replace(get_shape("constant-rate"), duration_s=6.0, warmup_s=1.0, max_in_flight=256)
    return LevelModel(Scenario(load_workload_file(path), shape, 0), parse_slo("ttft_p95=300ms"))


def rules(batched: int):
    from vprof.forecast.levelfit import AMPLE_KV_TOKENS
    from vprof.forecast.rules import SchedulerRules

    return SchedulerRules(batched, 8, True, True, AMPLE_KV_TOKENS, 16, 2048)


def test_a_cost_fitted_on_one_settings_levels_predicts_another_settings_capacity(level_model):
    """Levels of batched tokens 2048 (one step per prompt) replayed with a known cost are the
    measurements; the fit on them alone predicts that 128 (eight steps per prompt, each with
    the step's constant) sustains less, within 15 % of the known cost's answer."""
    from vprof.forecast.levelfit import MeasuredLevel
    from vprof.forecast.stepcost import StepCost

    truth = StepCost(base_ms=6.0, prefill_token_ms=0.04, decode_seq_ms=0.5, frontend_ms=5.0)
    measured = [
        MeasuredLevel(rules(2048), rate, level_model.level(rules(2048), truth, rate))
        for rate in (2.0, 8.0, 14.0)
    ]
    fitted = level_model.fit(measured)
    want = {b: level_model.sustainable(rules(b), truth, start_rps=4.0) for b in (128, 2048)}
    got = {b: level_model.sustainable(rules(b), fitted, start_rps=4.0) for b in (128, 2048)}
    assert want[128] < 0.9 * want[2048]
    assert got[128] < got[2048]
    for b in want:
        assert got[b] == pytest.approx(want[b], rel=0.15), (b, got, want)


def test_a_level_model_replays_with_its_scenarios_seed(level_model):
    """The scenario's seed also draws the steps' jitter: the same seed gives the same level,
    another seed another one."""
    from vprof.forecast.levelfit import LevelModel
    from vprof.forecast.stepcost import StepCost

    cost = StepCost(base_ms=6.0, prefill_token_ms=0.04, decode_seq_ms=0.5, jitter=0.3)
    again = LevelModel(level_model.scenario, level_model.slo)
    other = LevelModel(replace(level_model.scenario, seed=1), level_model.slo)
    key = "p95_ttft_from_schedule_ms"
    levels = [m.level(rules(256), cost, 14.0)[key] for m in (level_model, again, other)]
    assert levels[0] == levels[1] != levels[2]


def test_a_predicted_level_reads_its_throughput_as_a_bench_does(level_model):
    """Past capacity every request is still answered (the served rate is the offered one),
    but vllm bench serve's throughput divides the answers by the time to the last of them: it
    reads what the server got through, as a measured level's does."""
    from vprof.analysis.keys import SummaryKey as K
    from vprof.forecast.stepcost import StepCost

    cost = StepCost(base_ms=6.0, prefill_token_ms=0.04, decode_seq_ms=0.5)  # ~22 prompts/s
    quiet, past = (level_model.level(rules(2048), cost, rate) for rate in (4.0, 44.0))
    assert quiet[K.REQUEST_THROUGHPUT] == pytest.approx(4.0, rel=0.1)
    assert past[K.SERVED_RATE] == pytest.approx(44.0)
    assert past[K.REQUEST_THROUGHPUT] < 0.7 * past[K.SERVED_RATE]


def test_a_near_tie_goes_to_the_candidate_farthest_from_what_was_measured():
    from vprof.runs.tuneguide import _next

    a, b, c = (Candidate(((BATCHED, v), (SEQS, 8))) for v in (512, 1024, 4096))
    far = Candidate(((BATCHED, 4096), (SEQS, 32)))
    scores = {b: 10.0, c: 9.8, far: 9.7}
    # within 5 %: the farthest from the measured 512×8 wins although predicted lowest
    assert _next(SPACE, [b, c, far], scores, [a], noise=0.05) == far
    # outside the noise the prediction decides alone
    assert _next(SPACE, [b, c, far], scores, [a], noise=0.01) == b
    # nothing measured yet: the higher prediction, then the space's order
    assert _next(SPACE, [c, b], {b: 10.0, c: 10.0}, [], noise=0.05) == c
    assert _next(SPACE, [b, c, far], {**scores, far: -math.inf}, [a], noise=0.5) == c
