"""Stalls: the server's pauses found in token times, fitted as a process, and replayed."""

from __future__ import annotations

import numpy as np
import pytest

from vprof.forecast.rules import SchedulerRules
from vprof.forecast.simulate import Replay, Requests, simulate
from vprof.forecast.stalls import StallProcess, find_stalls, fit_stalls, token_times
from vprof.forecast.stepcost import StepCost

RULES = SchedulerRules(512, 64, True, False, 1_000_000, 16, 8192)
STEP = StepCost(5.0, 0.0, 0.0)  # every step 5 ms


def _replay(process: StallProcess | None, duration_s: float, seed: int = 0):
    """Requests of 200 tokens sent every 0.4 s: always one or more decoding."""
    n = int(duration_s / 0.4)
    requests = Requests(np.full(n, 50), np.full(n, 200))
    sent = np.arange(n) * 0.4
    return requests, simulate(requests, Replay(sent), RULES, STEP, seed=seed, stalls=process)


def _times(requests: Requests, out) -> list:
    return [out.token_times(i, int(requests.output_tokens[i])) for i in range(requests.n)]


def test_a_replay_without_stalls_has_none_to_find():
    requests, out = _replay(None, 60.0)
    found = find_stalls(_times(requests, out))
    assert found is not None and len(found.pause_ms) == 0
    assert found.exposure_s == pytest.approx(60.0, rel=0.05)
    assert fit_stalls([found]) is None


def test_a_known_stall_process_is_recovered_from_the_token_times():
    truth = StallProcess(rate_per_s=0.5, continue_prob=0.4, min_ms=40.0, mean_excess_ms=80.0)
    requests, out = _replay(truth, 400.0)
    found = find_stalls(_times(requests, out))
    assert found is not None
    fitted = fit_stalls([found])
    assert fitted is not None
    assert fitted.rate_per_s == pytest.approx(truth.rate_per_s, rel=0.2)
    assert fitted.continue_prob == pytest.approx(truth.continue_prob, abs=0.1)
    assert fitted.min_ms == pytest.approx(truth.min_ms, abs=5.0)
    assert fitted.mean_excess_ms == pytest.approx(truth.mean_excess_ms, rel=0.2)
    # the pauses' time, taken out of a window, leaves the steps' own time
    decoding = found.exposure_s * 1e3 - found.paused_ms(np.array([0.0]), np.array([1e9]))[0]
    assert decoding / out.steps == pytest.approx(STEP.base_ms, rel=0.05)


def test_a_pause_holds_every_decoding_request_alike_and_is_seeded():
    truth = StallProcess(rate_per_s=1.0, continue_prob=0.0, min_ms=100.0, mean_excess_ms=0.0)
    requests, out = _replay(truth, 20.0)
    again = _replay(truth, 20.0)[1]
    np.testing.assert_array_equal(out.steps_s, again.steps_s)
    gaps = np.diff(out.steps_s) * 1e3
    long = gaps[gaps > 50]
    # each pause lengthens one step by exactly its length; the steps between keep theirs
    assert long.size >= 10
    np.testing.assert_allclose(long, 105.0, atol=1e-6)
    assert np.median(gaps) == pytest.approx(5.0)


def test_token_times_follow_the_records_gaps():
    per = token_times(np.array([1.0, 2.0]), np.array([10.0, 20.0, 5.0]), np.array([2, 1]))
    np.testing.assert_allclose(per[0], [1.0, 1.01, 1.03])
    np.testing.assert_allclose(per[1], [2.0, 2.005])


# -- how far the stalls alone move a prediction ----------------------------------------------

PAUSES = StallProcess(rate_per_s=0.5, continue_prob=0.4, min_ms=40.0, mean_excess_ms=80.0)


def _stalling(truth):
    import dataclasses

    return dataclasses.replace(truth.config, stalls=PAUSES)


def test_a_prediction_with_stalls_says_the_range_of_its_draws():
    from forecast_runs import cpu_truth, shape

    from vprof.forecast.predict import predict
    from vprof.forecast.scenario import Scenario
    from vprof.workloads import get_workload

    config = _stalling(cpu_truth())
    s = Scenario(get_workload("chat"), shape(4.0, duration_s=10.0), 0)
    spread = predict(config, s, spread=True).summary["forecast"]["spread"]
    kept = predict(config, s).summary
    low, high = spread["p95_ttft_ms"]
    assert low < high  # the draws' stalls move the tail
    assert low <= kept["p95_ttft_ms"] <= high  # the kept draw is one of them
    assert set(spread) >= {"request_throughput", "median_ttft_ms", "median_tpot_ms"}
    assert "spread" not in kept["forecast"]  # asked for only: each draw is summarised
    plain = predict(cpu_truth().config, s, spread=True).summary["forecast"]
    assert "spread" not in plain  # no stalls: one replay, nothing to range over


def test_a_check_says_whether_each_measured_value_lies_within_the_draws(tmp_path):
    """A run of the model's own server (stalls and all) lies within its draws; a run of a
    server three times slower per step lies outside them; the report counts both."""
    import dataclasses

    from forecast_runs import cpu_truth, measured_run, shape

    from vprof.forecast.check import check_runs
    from vprof.forecast.model import ForecastModel

    truth = cpu_truth()
    config = _stalling(truth)
    slow = dataclasses.replace(config, cost=dataclasses.replace(config.cost, base_ms=9.0))
    traffic = shape(4.0, duration_s=10.0)
    same = measured_run(tmp_path / "same", truth, "chat", traffic, config=config)
    slower = measured_run(tmp_path / "slow", truth, "chat", traffic, config=slow)
    model = ForecastModel((config,))
    for run, inside in ((same, True), (slower, False)):
        rows, report = check_runs(model, [run])
        by_metric = {row["metric"]: row for row in rows}
        tpot = by_metric["median_tpot_ms"]
        assert tpot["draws_low"] <= tpot["predicted"] <= tpot["draws_high"]
        assert tpot["within_draws"] is inside, tpot
        assert report["within_draws"]["median_tpot_ms"] == float(inside)
    # the command says it too, per metric: the share of runs within the draws
    import json

    from click.testing import CliRunner

    from vprof.cli.main import cli
    from vprof.forecast.model import write_model

    write_model(model, tmp_path / "model.json")
    result = CliRunner().invoke(
        cli, ["forecast", "check", str(tmp_path / "model.json"), str(same), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    errors = {row["metric"]: row for row in json.loads(result.stdout)["errors"]}
    assert errors["median_tpot_ms"]["within_draws_share"] == 1.0


# -- a run's own stalls, replayed where they happened ---------------------------------------


def _recorded(starts_s, pauses_ms):
    from vprof.forecast.stalls import RecordedPauses, RunStalls

    starts = np.asarray(starts_s, dtype=np.float64)
    return RecordedPauses(
        RunStalls(
            starts, np.asarray(pauses_ms, dtype=np.float64), np.zeros(len(starts), bool), 60.0, 30.0
        )
    )


def test_a_recorded_pause_holds_the_step_after_the_one_in_progress_and_none_is_lost():
    clock = _recorded([0.012, 0.5, 1.0, 2.001, 2.002, 3.0], [100.0, 100.0, 50.0, 30.0, 20.0, 10.0])
    # found after the last token before a gap: the step in progress delivers its tokens on
    # time, the one after it is held for the whole pause
    assert clock.step_end(0.010, 0.015) == pytest.approx(0.015)
    assert clock.due_before(0.016)
    assert clock.step_end(0.015, 0.020) == pytest.approx(0.120)
    # one that began while the engine was idle holds the next step for what is left of it
    assert clock.step_end(0.55, 0.56) == pytest.approx(0.61)
    # one that came and went while the engine was idle is not seen
    assert clock.step_end(1.2, 1.205) == pytest.approx(1.205)
    # two during one step: each holds a step of its own after it
    assert clock.step_end(2.0, 2.005) == pytest.approx(2.005)
    assert clock.step_end(2.005, 2.010) == pytest.approx(2.040)
    assert clock.step_end(2.040, 2.045) == pytest.approx(2.065)
    # one at a step's very start holds that step
    assert clock.step_end(3.0, 3.005) == pytest.approx(3.015)
    assert not clock.due_before(1e9)


def test_recorded_pauses_shift_a_run_of_steps_as_one_step_at_a_time_would():
    starts, pauses = [0.02, 0.08, 0.3, 0.3004, 0.71, 5.0], [40.0, 40.0, 25.0, 5.0, 60.0, 80.0]
    ends = 0.1 + np.cumsum(np.full(400, 0.005))  # idle until 0.1 s, then 5-ms steps
    stepwise, t = [], 0.1
    one = _recorded(starts, pauses)
    for dt in np.full(400, 0.005):
        t = one.step_end(t, t + dt)
        stepwise.append(t)
    at_once = _recorded(starts, pauses).shift_ends(0.1, ends.copy())
    np.testing.assert_allclose(at_once, stepwise)
    # what the engine was busy for is all there, the one that began while it was idle in
    # part (20 of its 40 ms), the one that ended while it was idle not at all, and the one
    # after the last step not yet
    assert at_once[-1] - ends[-1] == pytest.approx(0.020 + 0.025 + 0.005 + 0.060)


def test_a_check_replays_each_run_with_its_own_stalls(tmp_path):
    """A run of the model's own server (stalls and all), predicted with the stalls it measured
    where they happened, matches what it measured — its tail too, which the model's drawn
    stalls only range over; a server three times slower per step misses by as much with its
    own stalls as without: they do not hide a wrong step. (Prompts are priced low here, so
    that no prompt's step is three times the decodes' and read as a stall.)"""
    import dataclasses

    from forecast_runs import cpu_truth, measured_run, shape

    from vprof.forecast.check import check_runs
    from vprof.forecast.model import ForecastModel

    truth = cpu_truth()
    truth = dataclasses.replace(truth, cost=dataclasses.replace(truth.cost, prefill_token_ms=0.002))
    config = _stalling(truth)
    slow = dataclasses.replace(config, cost=config.cost.paced(3.0))
    traffic = shape(4.0, duration_s=20.0)
    same = measured_run(tmp_path / "same", truth, "chat", traffic, config=config)
    slower = measured_run(tmp_path / "slow", truth, "chat", traffic, config=slow)
    model = ForecastModel((config,))
    rows, report = check_runs(model, [same])
    by_metric = {row["metric"]: row for row in rows}
    for metric in ("median_ttft_ms", "p95_ttft_ms", "median_tpot_ms", "p95_tpot_ms"):
        assert abs(by_metric[metric]["own_stalls_error_pct"]) < 6.0, by_metric[metric]
    assert report["median_abs_pct_own_stalls"]["p95_ttft_ms"] < 6.0
    rows, _ = check_runs(model, [slower])
    tpot = {row["metric"]: row for row in rows}["median_tpot_ms"]
    assert tpot["own_stalls_error_pct"] < -50.0 and tpot["error_pct"] < -50.0, tpot
    # the command gives both, per run and per metric
    import json

    from click.testing import CliRunner

    from vprof.cli.main import cli
    from vprof.forecast.model import write_model

    write_model(model, tmp_path / "model.json")
    result = CliRunner().invoke(
        cli, ["forecast", "check", str(tmp_path / "model.json"), str(same), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    parts = json.loads(result.stdout)
    errors = {row["metric"]: row for row in parts["errors"]}
    assert errors["p95_ttft_ms"]["own_stalls_median_abs_error_pct"] < 6.0
    assert all("own_stalls" in row for row in parts["checks"])
