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
