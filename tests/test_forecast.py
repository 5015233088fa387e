"""vprof forecast: the scheduler replay's rules, the fit on runs (CPU- and GPU-like), the
model file's checks, and predictions read like measured runs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from forecast_runs import cpu_truth, gpu_truth, measured_run, shape

from vprof.cli.main import cli
from vprof.common.errors import ForecastError
from vprof.forecast.check import check_runs
from vprof.forecast.fit import fit_model
from vprof.forecast.model import ForecastModel, read_model, write_model
from vprof.forecast.rules import SchedulerRules
from vprof.forecast.simulate import ClosedLoop, OpenLoop, Replay, Requests, simulate
from vprof.forecast.stepcost import StepCost

FLAT = StepCost(base_ms=2.0, prefill_token_ms=0.01, decode_seq_ms=0.5, frontend_ms=1.0)


def rules(**kw) -> SchedulerRules:
    base = dict(
        max_num_batched_tokens=512,
        max_num_seqs=64,
        chunked_prefill=True,
        prefix_caching=True,
        kv_cache_tokens=1_000_000,
        block_size=16,
        max_model_len=4096,
    )
    return SchedulerRules(**{**base, **kw})


def once(prompts, outputs, sent, r: SchedulerRules, cost: StepCost = FLAT, **requests):
    req = Requests(np.asarray(prompts), np.asarray(outputs), **requests)
    return simulate(req, Replay(np.asarray(sent, dtype=float)), r, cost)


# -- the replay ------------------------------------------------------------------------------


def test_an_idle_server_answers_in_one_prefill_step_then_one_step_per_token():
    out = once([100], [5], [0.0], rules())
    prefill = 2.0 + 0.01 * 100
    assert (out.first_s[0] - out.sent_s[0]) * 1000 == pytest.approx(1.0 + prefill)
    gaps = np.diff(out.token_times(0, 5)) * 1000
    assert gaps == pytest.approx([2.0 + 0.5] * 4)  # a decode step: the constant + one sequence
    assert out.status[0] == "ok" and out.steps == 5


def test_a_request_reaching_a_busy_engine_lengthens_the_step_it_arrives_in():
    # request 0 decodes alone; request 1 reaches the engine mid-run
    plain = once([100, 100], [40, 5], [0.0, 0.050], rules())
    costly = dataclasses.replace(FLAT, arrival_ms=4.0, arrival_ms_per_1k_prompt=10.0)
    out = once([100, 100], [40, 5], [0.0, 0.050], rules(), cost=costly)
    extra = 4.0 + 10.0 * 100 / 1000  # per arrival + per prompt token, ms
    # request 0 reached an idle engine: no step was running to lengthen
    assert out.first_s[0] == plain.first_s[0]
    # request 1 reached it mid-step: that step, and so its first token, ends that much later
    ttft = (out.first_s[1] - out.sent_s[1]) * 1000
    assert ttft == pytest.approx((plain.first_s[1] - plain.sent_s[1]) * 1000 + extra)
    # and request 0's steps, the same ones, take that much longer in all
    decoding = np.ptp(out.token_times(0, 40)) - np.ptp(plain.token_times(0, 40))
    assert decoding * 1000 == pytest.approx(extra)
    assert out.steps == plain.steps


def test_chunked_prefill_spreads_a_long_prompt_over_budget_sized_steps():
    chunked = once([1000], [2], [0.0], rules(max_num_batched_tokens=256))
    assert chunked.first_step[0] == 3  # ceil(1000 / 256) = 4 steps, the last one samples
    whole = once([1000], [2], [0.0], rules(max_num_batched_tokens=2048, chunked_prefill=False))
    assert whole.first_step[0] == 0


def test_without_chunking_a_prompt_that_does_not_fit_the_rest_of_the_budget_waits():
    plain = once(
        [600, 600], [2, 2], [0.0, 0.0], rules(max_num_batched_tokens=1000, chunked_prefill=False)
    )
    assert list(plain.first_step) == [0, 1]
    chunked = once([600, 600], [2, 2], [0.0, 0.0], rules(max_num_batched_tokens=1000))
    # the second prompt takes the 400 tokens left in step 0 and its last 200 in step 1
    assert list(chunked.first_step) == [0, 1]
    assert chunked.steps_s[0] > plain.steps_s[0]  # step 0 held 1000 tokens, not 600


def test_max_num_seqs_caps_the_requests_running_at_once():
    out = once([50] * 6, [10] * 6, [0.0] * 6, rules(max_num_seqs=2))
    # the third request starts only when one of the first two has finished
    assert out.first_s[2] >= min(out.last_s[0], out.last_s[1])
    assert out.first_s[1] < out.last_s[0]


def test_prefix_caching_skips_the_shared_blocks_a_request_before_computed():
    kw = dict(prefix_key=np.array([7, 7]), prefix_tokens=np.array([300, 300]))
    on = once([400, 400], [2, 2], [0.0, 1.0], rules(block_size=16), **kw)
    assert list(on.cached) == [0, 288]  # 300 tokens → 18 whole blocks of 16
    assert on.first_s[1] - on.sent_s[1] < on.first_s[0] - on.sent_s[0]
    off = once([400, 400], [2, 2], [0.0, 1.0], rules(prefix_caching=False), **kw)
    assert list(off.cached) == [0, 0]


def test_a_small_kv_cache_preempts_the_newest_request_and_recomputes_it():
    out = once([200] * 8, [100] * 8, [0.0] * 8, rules(kv_cache_tokens=1200, block_size=16))
    assert out.preemptions > 0
    assert (out.status == "ok").all()
    for i in range(8):
        times = out.token_times(i, 100)
        assert np.all(np.diff(times) > 0), i  # each token after the last, preempted or not


def test_closed_loop_users_keep_their_requests_in_flight_one_each():
    req = Requests(np.full(2000, 100), np.full(2000, 20))
    out = simulate(req, ClosedLoop(((0.0, 4),), end_s=10.0), rules(), FLAT)
    ok = out.status == "ok"
    e2e = float(np.mean(out.last_s[ok] - out.sent_s[ok]))
    assert ok.sum() / 10.0 == pytest.approx(4 / e2e, rel=0.05)


def test_open_loop_arrivals_wait_for_a_free_user_when_every_one_is_busy():
    req = Requests(np.full(40, 100), np.full(40, 200))
    out = simulate(req, OpenLoop(np.zeros(40), max_in_flight=4, end_s=100.0), rules(), FLAT)
    sent = np.sort(out.sent_s)
    assert (sent[:4] == 0).all() and (sent[4:] > 0).all()


def test_a_request_sent_while_others_are_out_reaches_the_engine_later_by_each():
    loaded = dataclasses.replace(FLAT, frontend_ms_per_in_flight=3.0)
    # four sent together, each with none out; one more sent while they all decode
    out = once([100] * 5, [400] * 5, [0.0, 0.0, 0.0, 0.0, 0.05], rules(), loaded)
    plain = once([100] * 5, [400] * 5, [0.0, 0.0, 0.0, 0.0, 0.05], rules())
    ttft = (out.first_s - out.sent_s) * 1000
    late = ttft - (plain.first_s - plain.sent_s) * 1000
    assert late[:4] == pytest.approx([0.0] * 4, abs=1e-9)
    # four out: 12 ms later at the engine, and it waits there for the step then running
    assert 4 * 3.0 <= late[4] < 4 * 3.0 + 2 * (2.0 + 5 * 0.5)


def test_a_paced_step_cost_scales_the_engines_steps_and_not_the_front_end():
    cost = StepCost(3.0, 0.02, 0.5, 0.1, 0.2, 0.3, frontend_ms=2.0, jitter=0.1, decode_exponent=0.8)
    cost = dataclasses.replace(cost, arrival_ms=1.0, prefill_prompt_ms=2.0)
    slower = cost.paced(1.05)
    assert slower.base_ms == pytest.approx(3.15)
    assert slower.prefill_prompt_ms == pytest.approx(2.1)
    assert slower.arrival_ms == pytest.approx(1.05)
    assert slower.decode_context_ms_per_1k == pytest.approx(0.105)
    assert (slower.frontend_ms, slower.jitter, slower.decode_exponent) == (2.0, 0.1, 0.8)
    # a replay with every step 5 % slower ends its answers later
    fast = once([300] * 20, [50] * 20, np.arange(20) * 0.05, rules(), cost)
    slow = once([300] * 20, [50] * 20, np.arange(20) * 0.05, rules(), slower)
    assert np.all(slow.last_s >= fast.last_s) and np.any(slow.last_s > fast.last_s)


def test_a_prediction_near_the_knee_says_so_with_its_step_time_band():
    from vprof.forecast.capacity import sustainable
    from vprof.forecast.predict import predict
    from vprof.forecast.scenario import Scenario
    from vprof.workloads import get_workload

    config = cpu_truth().config
    s = Scenario(get_workload("fixed-800-64"), shape(5.0), 0)
    knee, _ = sustainable(config, s, "ttft_p95=1000ms")
    assert knee is not None

    def at(rate: float) -> tuple[float, list[float], list[str]]:
        summary = predict(config, s.at_rate(rate), pace=True).summary
        forecast = summary["forecast"]
        assert forecast["pace"]["step_time_pct"] == 5.0
        band = forecast["pace"]["range"]["median_ttft_ms"]
        return summary["median_ttft_ms"], band, forecast["notes"]

    light, band, notes = at(0.3 * knee)
    assert band[0] <= light <= band[1] and band[1] / band[0] < 1.2
    assert not [n for n in notes if "knee" in n]
    near, band, notes = at(0.9 * knee)
    assert band[0] <= near <= band[1] and band[1] / band[0] > 1.4
    (note,) = [n for n in notes if "near the knee" in n]
    assert f"{band[1]:.3g} ms" in note and "measure this level" in note


def test_jitter_varies_steps_around_their_mean():
    jittery = dataclasses.replace(FLAT, jitter=0.2)
    out = once([100], [400], [0.0], rules(), jittery)
    gaps = np.diff(out.token_times(0, 400)) * 1000
    assert np.mean(gaps) == pytest.approx(2.5, rel=0.05)
    assert 0.1 < np.std(gaps) / np.mean(gaps) < 0.3


# -- fitting ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cpu")
    truth = cpu_truth()
    for rate in (4.0, 8.0, 12.0):
        measured_run(folder / "fit", truth, "chat", shape(rate))
    for workload, rate in (("fixed-800-64", 10.0), ("rag-shared-prefix", 16.0)):
        measured_run(folder / "held", truth, workload, shape(rate))
    return folder


def _close(value: float, truth: float, rel: float) -> bool:
    return abs(value - truth) <= rel * truth


def test_fit_recovers_the_step_costs_of_cpu_like_runs_and_predicts_held_out_workloads(cpu_runs):
    model = fit_model([cpu_runs / "fit"], holdout=[cpu_runs / "held"], max_evaluations=40)
    (config,) = model.configs
    truth = cpu_truth().cost
    assert _close(config.cost.base_ms, truth.base_ms, 0.15)
    assert _close(config.cost.decode_seq_ms, truth.decode_seq_ms, 0.35)
    assert _close(config.cost.prefill_token_ms, truth.prefill_token_ms, 0.25)
    held = config.errors["held_out"]["median_abs_pct"]
    assert held["request_throughput"] < 5
    assert held["median_ttft_ms"] < 15
    assert held["median_tpot_ms"] < 10
    assert config.rules.kv_cache_tokens == 524_288 and config.rules.block_size == 128


def test_the_servers_prefill_times_give_the_cost_per_prefill_token(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import _prefill_rows, linear_estimate
    from vprof.records import expand_runs

    runs = [load_observed(p) for p in expand_runs([cpu_runs / "fit"])]
    assert all(o.intervals is not None and o.intervals.n >= 3 for o in runs)
    truth = cpu_truth().cost
    # the counters the replayed server kept, less the steps' constant and decodes, leave the
    # prompt tokens' share: the per-token cost that generated them
    b = np.vstack([_prefill_rows(o)[0] for o in runs])
    yb = np.concatenate([_prefill_rows(o)[1] for o in runs])
    left = yb - truth.base_ms * b[:, 0] - truth.decode_seq_ms * b[:, 2]
    assert float(left @ b[:, 1] / (b[:, 1] @ b[:, 1])) == pytest.approx(
        truth.prefill_token_ms, rel=0.1
    )
    cost, active = linear_estimate(runs)
    assert cost.prefill_token_ms == pytest.approx(truth.prefill_token_ms, rel=0.1)
    assert cost.base_ms == pytest.approx(truth.base_ms, rel=0.1)
    assert cost.decode_seq_ms == pytest.approx(truth.decode_seq_ms, rel=0.2)
    assert "prefill_token_ms" not in active  # the server measured it: the replay leaves it


def _fit_synthetic_chat(folder: Path, **changes: float) -> tuple[Any, Any, Any, list[str]]:
    """The first stage fitted on ``chat`` at 4, 8, 12 req/s (15 s) of the CPU-like server with
    ``changes`` to its costs: (the cost it had, the fitted one, the active terms, what it said)."""
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    plain = cpu_truth()
    cost = dataclasses.replace(plain.cost, **changes)
    truth = dataclasses.replace(plain, cost=cost)
    for rate in (4.0, 8.0, 12.0):
        measured_run(folder, truth, "chat", shape(rate, duration_s=15.0))
    said: list[str] = []
    fitted, active = linear_estimate(
        [load_observed(p) for p in expand_runs([folder])], say=said.append
    )
    return cost, fitted, active, said


@pytest.mark.parametrize(
    ("term", "other"),
    [("prefill_chunk_ms", "prefill_prompt_ms"), ("prefill_prompt_ms", "prefill_chunk_ms")],
)
def test_the_steps_in_the_token_times_recover_a_cost_per_chunk_or_per_prompt(tmp_path, term, other):
    """Once per chunk, or once per prompt on the step of its first token however many chunks
    it took: the fit tells them apart where prompts span several chunks."""
    cost, fitted, active, said = _fit_synthetic_chat(tmp_path, prefill_token_ms=0.01, **{term: 2.0})
    assert getattr(fitted, term) == pytest.approx(2.0, rel=0.1)
    assert getattr(fitted, other) == 0.0
    assert fitted.prefill_token_ms == pytest.approx(0.01, rel=0.2)
    assert fitted.base_ms == pytest.approx(cost.base_ms, rel=0.1)
    assert fitted.prefill_attention_ms_per_1m == 0.0
    assert term not in active  # measured on the steps: the replay leaves it
    assert any(f"{term} on" in line for line in said)


def test_a_server_without_a_cost_per_chunk_is_not_given_one(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    runs = [load_observed(p) for p in expand_runs([cpu_runs / "fit"])]
    assert all(o.token_s is not None for o in runs)
    fitted, _ = linear_estimate(runs)
    truth = cpu_truth().cost
    assert fitted.prefill_chunk_ms == 0.0 and fitted.prefill_attention_ms_per_1m == 0.0
    assert fitted.prefill_prompt_ms == 0.0
    assert fitted.prefill_token_ms == pytest.approx(truth.prefill_token_ms, rel=0.1)


def test_the_steps_in_the_token_times_recover_a_decode_cost_that_flattens_with_the_batch(
    tmp_path,
):
    cost, fitted, _, said = _fit_synthetic_chat(tmp_path, decode_seq_ms=1.0, decode_exponent=0.6)
    assert fitted.decode_exponent == pytest.approx(0.6, abs=0.1)
    assert fitted.decode_seq_ms == pytest.approx(1.0, rel=0.25)
    assert fitted.base_ms == pytest.approx(cost.base_ms, rel=0.15)
    assert any("decodes^" in line for line in said)


def test_the_steps_in_the_token_times_recover_a_context_cost_beside_a_flattening_decode_cost(
    tmp_path,
):
    # a window sums steps of different batches, so judged there with a linear decode cost the
    # context term is lost; judged on the decode-only steps with γ it is found
    cost, fitted, _, said = _fit_synthetic_chat(
        tmp_path, decode_seq_ms=1.0, decode_exponent=0.6, decode_context_ms_per_1k=0.5
    )
    assert fitted.decode_context_ms_per_1k == pytest.approx(0.5, rel=0.2)
    assert fitted.decode_exponent == pytest.approx(0.6, abs=0.1)
    assert fitted.base_ms == pytest.approx(cost.base_ms, rel=0.15)
    assert any("per context token" in line for line in said)


def test_the_steps_in_the_token_times_recover_what_an_arrival_costs_the_engine(tmp_path):
    cost, fitted, active, said = _fit_synthetic_chat(tmp_path, arrival_ms=3.0)
    assert fitted.arrival_ms == pytest.approx(3.0, rel=0.25)
    assert fitted.base_ms == pytest.approx(cost.base_ms, rel=0.15)
    assert "arrival_ms" not in active  # measured on the steps: the replay leaves it
    assert any("per arrival on" in line for line in said)


def test_the_token_times_recover_a_front_end_that_grows_with_the_requests_in_flight(tmp_path):
    cost, fitted, active, said = _fit_synthetic_chat(
        tmp_path, frontend_ms=4.0, frontend_ms_per_in_flight=0.5
    )
    assert fitted.frontend_ms_per_in_flight == pytest.approx(0.5, rel=0.25)
    assert fitted.frontend_ms == pytest.approx(4.0, rel=0.25)
    assert fitted.frontend_ms_per_1k_prompt == 0.0
    assert active == ("frontend_ms",)  # the slopes are fitted here, the replay moves the rest
    assert any("per request in flight on" in line for line in said)


def test_a_front_end_that_does_not_grow_is_given_no_growth(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    fitted, _ = linear_estimate([load_observed(p) for p in expand_runs([cpu_runs / "fit"])])
    assert fitted.frontend_ms_per_in_flight == 0.0


def test_the_calibration_recovers_the_front_end_whatever_its_start(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import calibrate, linear_estimate
    from vprof.records import expand_runs

    runs = [load_observed(p) for p in expand_runs([cpu_runs / "fit"])]
    start, active = linear_estimate(runs)
    fits = [
        calibrate(runs, dataclasses.replace(start, frontend_ms=front, jitter=jitter), active)
        for front, jitter in ((start.frontend_ms, 0.0), (start.frontend_ms + 1.5, 0.13))
    ]
    a, b = (dataclasses.asdict(f.cost) for f in fits)
    assert a == pytest.approx(b, rel=1e-6)  # the same jitter, and the front end solved alike
    assert fits[0].cost.frontend_ms == pytest.approx(cpu_truth().cost.frontend_ms, abs=0.5)


def test_a_server_whose_arrivals_cost_nothing_is_given_no_arrival_cost(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    said: list[str] = []
    fitted, _ = linear_estimate(
        [load_observed(p) for p in expand_runs([cpu_runs / "fit"])], say=said.append
    )
    assert fitted.arrival_ms == 0.0 and fitted.arrival_ms_per_1k_prompt == 0.0
    assert any("per arrival on" in line for line in said)  # judged, and refused


def test_a_server_whose_decodes_cost_alike_is_given_no_exponent_nor_context_cost(cpu_runs):
    from vprof.forecast.observed import load_observed
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    said: list[str] = []
    fitted, _ = linear_estimate(
        [load_observed(p) for p in expand_runs([cpu_runs / "fit"])], say=said.append
    )
    assert fitted.decode_exponent == 1.0 and fitted.decode_context_ms_per_1k == 0.0
    assert any("decodes^" in line for line in said)  # judged, and refused


def test_runs_without_token_times_or_the_servers_counters_fit_from_decode_windows(cpu_runs):
    from vprof.forecast.observed import load_observed, server_intervals
    from vprof.forecast.stepfit import linear_estimate
    from vprof.records import expand_runs

    runs = [load_observed(p) for p in expand_runs([cpu_runs / "fit"])]
    older = [
        {**s, "values": {k: v for k, v in s["values"].items() if "prefill_time" not in k}}
        for s in _metric_samples(runs[0].path)
    ]
    assert server_intervals(tuple(older)) is None
    broken = [dict(s, values=dict(s["values"])) for s in _metric_samples(runs[0].path)]
    broken[1]["values"]["vllm:iteration_tokens_total_count"] = float("nan")
    assert server_intervals(tuple(broken)) is None
    bare = [dataclasses.replace(o, intervals=None, token_s=None) for o in runs]
    cost, active = linear_estimate(bare)
    assert "prefill_token_ms" in active
    assert cost.base_ms == pytest.approx(cpu_truth().cost.base_ms, rel=0.15)


def test_a_server_that_reports_no_cache_hits_has_them_replayed_from_the_prefix_groups(tmp_path):
    import pyarrow as pa

    from vprof.forecast.observed import load_observed

    path = measured_run(tmp_path, cpu_truth(), "rag-shared-prefix", shape(8.0, duration_s=10.0))
    reported = np.asarray(load_observed(path).requests.known_hit)
    assert (reported > 0).mean() > 0.8
    # vLLM leaves usage.prompt_tokens_details out unless asked: every record says -1
    records = path / "records.arrow"
    with pa.OSFile(str(records)) as source:  # read into memory: the file is rewritten below
        table = pa.ipc.open_stream(source).read_all()
    column = table.schema.get_field_index("cached_tokens")
    unknown = pa.array(np.full(table.num_rows, -1, dtype=np.int64))
    with pa.ipc.new_stream(str(records), table.schema) as writer:
        writer.write_table(table.set_column(column, "cached_tokens", unknown))
    replayed = np.asarray(load_observed(path).requests.known_hit)
    assert replayed.sum() == pytest.approx(reported.sum(), rel=0.05)
    assert (replayed == reported).mean() > 0.9


def _metric_samples(path: Path) -> list[dict]:
    from vprof.records.rundir import RunDir

    return list(RunDir(path).metric_samples())


def test_fit_takes_gpu_like_runs_the_same_way(tmp_path):
    truth = gpu_truth()
    for rate in (10.0, 25.0, 40.0):
        measured_run(tmp_path / "fit", truth, "chat", shape(rate, duration_s=15.0))
    measured_run(tmp_path / "held", truth, "long-prompt-short-answer", shape(20.0, 15.0))
    model = fit_model([tmp_path / "fit"], holdout=[tmp_path / "held"], max_evaluations=40)
    (config,) = model.configs
    assert config.key.hardware == "1× NVIDIA H200, 143771 MiB"
    assert config.rules.block_size == 16 and config.rules.max_num_seqs == 64
    assert _close(config.cost.base_ms, truth.cost.base_ms, 0.15)
    held = config.errors["held_out"]["median_abs_pct"]
    assert held["request_throughput"] < 5
    assert held["median_tpot_ms"] < 15


# -- the model file --------------------------------------------------------------------------


@pytest.fixture
def model_file(tmp_path) -> Path:
    path = tmp_path / "model.json"
    write_model(ForecastModel((cpu_truth().config,)), path)
    return path


def test_a_model_file_reads_back_as_it_was_written(model_file):
    model = read_model(model_file)
    assert model.configs[0].cost == cpu_truth().cost
    assert model.configs[0].rules == cpu_truth().rules


@pytest.mark.parametrize(
    ("edit", "key", "words"),
    [
        (lambda d: d.update(kind="something-else"), "kind", "not a vprof forecast model"),
        (lambda d: d.update(version=99), "version", "this vprof reads versions 1, 2, 3 and 4"),
        (lambda d: d["configs"][0]["step_cost"].update(base_ms=-1), "step_cost.base_ms", "range"),
        (lambda d: d["configs"][0]["rules"].update(block_size="16"), "rules.block_size", "number"),
        (lambda d: d["configs"][0].pop("rules"), "configs[0].rules", "missing"),
    ],
)
def test_a_foreign_or_damaged_model_file_is_refused_with_its_key(model_file, edit, key, words):
    data = json.loads(model_file.read_text())
    edit(data)
    model_file.write_text(json.dumps(data, indent=2))
    with pytest.raises(ForecastError) as raised:
        read_model(model_file)
    assert key in (raised.value.key or "") and words in raised.value.message
    assert raised.value.path == str(model_file) and raised.value.line


def test_a_model_file_written_before_the_cost_per_chunk_reads_as_none(model_file):
    data = json.loads(model_file.read_text())
    del data["configs"][0]["step_cost"]["prefill_chunk_ms"]
    model_file.write_text(json.dumps(data))
    (config,) = read_model(model_file).configs
    assert config.cost.prefill_chunk_ms == 0.0


def test_a_decode_exponent_is_kept_in_the_model_file_and_older_files_read_as_linear(tmp_path):
    path = tmp_path / "model.json"
    truth = cpu_truth()
    bent = dataclasses.replace(truth.cost, decode_exponent=0.6)
    write_model(ForecastModel((dataclasses.replace(truth, cost=bent).config,)), path)
    assert read_model(path).configs[0].cost == bent
    data = json.loads(path.read_text())
    del data["configs"][0]["step_cost"]["decode_exponent"]
    path.write_text(json.dumps(data))
    assert read_model(path).configs[0].cost.decode_exponent == 1.0


def test_an_arrival_cost_is_kept_in_the_model_file_and_version_1_files_read_as_none(tmp_path):
    path = tmp_path / "model.json"
    truth = cpu_truth()
    costly = dataclasses.replace(truth.cost, arrival_ms=3.5, arrival_ms_per_1k_prompt=2.0)
    write_model(ForecastModel((dataclasses.replace(truth, cost=costly).config,)), path)
    data = json.loads(path.read_text())
    assert data["version"] == 4
    assert read_model(path).configs[0].cost == costly
    for key in ("arrival_ms", "arrival_ms_per_1k_prompt"):
        del data["configs"][0]["step_cost"][key]
    data["version"] = 1  # what this vprof wrote before it fitted the term
    path.write_text(json.dumps(data))
    cost = read_model(path).configs[0].cost
    assert cost.arrival_ms == 0.0 and cost.arrival_ms_per_1k_prompt == 0.0


@pytest.mark.parametrize(
    ("term", "value", "before"),
    [
        ("frontend_ms_per_in_flight", 0.4, 2),  # a front end that grows with load
        ("prefill_prompt_ms", 1.9, 3),  # a cost per prompt
    ],
)
def test_a_later_term_is_kept_and_files_from_before_it_read_as_none(tmp_path, term, value, before):
    path = tmp_path / "model.json"
    truth = cpu_truth()
    cost = dataclasses.replace(truth.cost, **{term: value})
    write_model(ForecastModel((dataclasses.replace(truth, cost=cost).config,)), path)
    data = json.loads(path.read_text())
    assert read_model(path).configs[0].cost == cost
    del data["configs"][0]["step_cost"][term]
    data["version"] = before  # what this vprof wrote before it fitted the term
    path.write_text(json.dumps(data))
    assert getattr(read_model(path).configs[0].cost, term) == 0.0


def test_a_model_file_that_is_not_json_is_refused_with_its_line(model_file):
    model_file.write_text('{\n  "kind": "vprof-forecast-model",\n  oops\n}')
    with pytest.raises(ForecastError) as raised:
        read_model(model_file)
    assert raised.value.line == 3


def test_the_cli_refuses_a_corrupt_model_with_exit_code_2(model_file):
    model_file.write_text("[1, 2]")
    result = CliRunner().invoke(cli, ["forecast", "predict", str(model_file), "-w", "chat"])
    assert result.exit_code == 2
    assert str(model_file) in result.output and "expected a JSON object" in result.output


def test_check_refuses_runs_of_another_profile_or_hardware(cpu_runs, tmp_path, model_file):
    other = dataclasses.replace(cpu_truth("another-profile"))
    run = measured_run(tmp_path / "other", other, "chat", shape(4.0, duration_s=5.0))
    with pytest.raises(ForecastError) as raised:
        check_runs(read_model(model_file), [run])
    assert raised.value.key == "profile.identity" and raised.value.path.endswith("run.json")
    gpu = dataclasses.replace(cpu_truth(), hardware=gpu_truth().hardware)
    run = measured_run(tmp_path / "gpu", gpu, "chat", shape(4.0, duration_s=5.0))
    result = CliRunner().invoke(cli, ["forecast", "check", str(model_file), str(run)])
    assert result.exit_code == 2
    assert "hardware" in result.output and "run.json" in result.output


# -- predictions read like runs --------------------------------------------------------------


def test_a_prediction_has_every_key_a_measured_summary_has(cpu_runs, model_file, tmp_path):
    from vprof.analysis.run import summarize_run
    from vprof.records import expand_runs

    measured = summarize_run(expand_runs([cpu_runs / "fit"])[0])
    result = CliRunner().invoke(
        cli,
        [
            "forecast",
            "predict",
            str(model_file),
            "-w",
            "chat",
            "-t",
            "poisson",
            "--rate",
            "3,6",
            "--format",
            "json",
            "-o",
            str(tmp_path / "predicted"),
        ],
    )
    assert result.exit_code == 0, result.output
    predicted = json.loads(result.stdout)
    assert len(predicted) == 2 and all(p["predicted"] for p in predicted)
    assert set(measured) - {"records_note"} <= set(predicted[0])
    folders = sorted((tmp_path / "predicted").iterdir())
    again = summarize_run(folders[0])
    assert again["predicted"] and again["forecast"]["configuration"] == "tiny-chunked"


def test_plan_takes_predicted_runs_as_levels(model_file, tmp_path):
    from vprof.analysis.plan import plan
    from vprof.records import expand_runs

    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "forecast",
            "predict",
            str(model_file),
            "-w",
            "fixed-800-64",
            "-t",
            "poisson",
            "--rate",
            "2,8,30",
            "-o",
            str(tmp_path / "p"),
        ],
    )
    assert result.exit_code == 0, result.output
    answer = plan(expand_runs([tmp_path / "p"]), target_rps=20, slo="ttft_p95=300ms")
    (profile,) = answer.profiles
    assert profile.sustainable_rps is not None and len(profile.levels) == 3
    # the levels were predicted, and the plan's words say so
    words = " ".join((profile.basis, *profile.notes))
    assert "measured level" not in words and "was measured up to" not in words


def test_plan_for_an_unmeasured_workload_prints_the_models_error_beside_the_answer(model_file):
    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "--model",
            str(model_file),
            "-w",
            "fixed-800-64",
            "--rps",
            "30",
            "--slo",
            "ttft_p95=300ms",
        ],
    )
    assert result.exit_code == 0, result.output
    answer = [
        line for line in result.output.splitlines() if "replica" in line and "you need" in line
    ]
    assert answer and "(predicted)" in answer[0] and "not measured" in answer[0]
    assert "error" in answer[0]
    # beside it, the answer with every step 5 % slower and faster
    (band,) = [line for line in result.output.splitlines() if "5 % faster or slower" in line]
    low, high = (float(x) for x in re.search(r"sustains ([\d.]+)–([\d.]+) req/s", band).groups())
    each = float(re.search(r"\(([\d.]+) req/s each", answer[0]).group(1))
    assert low < each < high and "replica" in band


def test_the_report_draws_predicted_curves_beside_the_measured_levels(cpu_runs, tmp_path):
    from vprof.report import build_data

    model = fit_model([cpu_runs / "fit"], max_evaluations=10)
    write_model(model, tmp_path / "model.json")
    data = build_data([cpu_runs / "held"], slo="ttft_p95=500ms", model=str(tmp_path / "model.json"))
    curves = data["capacity"]["predicted"]
    assert {c["workload"] for c in curves} == {"fixed-800-64", "rag-shared-prefix"}
    assert all(len(c["levels"]) == 12 and c["error"].startswith("median error") for c in curves)
    assert all(lv["median_ttft_ms"] > 0 for c in curves for lv in c["levels"])


def test_a_check_says_whether_each_measured_value_lies_within_the_step_time_band(tmp_path):
    """A run of a server 2 % slower per step than the model lies within its ±5 % band; one
    whose steps take three times as long lies outside it; the command counts both."""
    config = cpu_truth().config
    traffic = shape(4.0, duration_s=10.0)
    model = ForecastModel((config,))
    write_model(model, tmp_path / "model.json")
    for factor, inside in ((1.02, True), (3.0, False)):
        server = dataclasses.replace(config, cost=config.cost.paced(factor))
        run = measured_run(tmp_path / f"x{factor}", cpu_truth(), "chat", traffic, config=server)
        rows, report = check_runs(model, [run])
        tpot = {row["metric"]: row for row in rows}["median_tpot_ms"]
        assert tpot["pace_low"] < tpot["predicted"] < tpot["pace_high"]
        assert tpot["within_pace"] is inside, tpot
        assert report["within_pace"]["median_tpot_ms"] == float(inside)
        # the step costs on the run's own steps: the server's are `factor` × the model's
        (ratio,) = report["step_time"].values()
        assert ratio["all"] == pytest.approx(1.0 / factor, rel=0.06), ratio
        result = CliRunner().invoke(
            cli, ["forecast", "check", str(tmp_path / "model.json"), str(run), "--format", "json"]
        )
        assert result.exit_code == 0, result.output
        parts = json.loads(result.stdout)
        errors = {row["metric"]: row for row in parts["errors"]}
        assert errors["median_tpot_ms"]["within_pace_share"] == float(inside)
        assert parts["steps"][0]["step_time_all"] == pytest.approx(ratio["all"])


def test_a_runs_scenario_has_the_warm_up_its_load_generator_ran(tmp_path):
    """A sweep's level takes the open-loop schedule's lead out of its warm-up, and the
    schedule's length (so its arrivals) follows from it: the run's scenario takes the warm-up
    from locust.json (the schedule's epoch to the warm-up's end), not from the shape's name."""
    from vprof.forecast.scenario import build_stream, scenario_of_run
    from vprof.records.rundir import RunDir, read_json
    from vprof.traffic import arrival_offsets

    run = RunDir(measured_run(tmp_path / "r", cpu_truth(), "chat", shape(5.0, 40.0, 5.0)))
    meta = run.meta(strict=True)
    plain = scenario_of_run(meta, str(run.run_json))
    assert plain.shape.warmup_s == 5.0 and plain.shape.expected_requests() == 225
    locust = {**read_json(run.locust_json), "epoch": 100.0, "warmup_until": 104.5}
    ran = scenario_of_run(meta, str(run.run_json), locust)
    assert ran.shape.warmup_s == 4.5 and ran.shape.expected_requests() == 222
    stream = build_stream(ran)
    np.testing.assert_allclose(stream.scheduled_s, arrival_offsets(ran.shape, ran.seed or 0))
    assert stream.requests.n == 222
    # a warm-up it ran as named, or no epoch to read it from, leaves the shape as it is
    for same in ({"epoch": 100.0, "warmup_until": 105.0}, {"warmup_until": 104.5}, {}):
        assert scenario_of_run(meta, str(run.run_json), same).shape == plain.shape


def test_two_runs_of_one_name_are_checked_apart(tmp_path):
    """Two sittings of one sweep name their runs alike: a check names each by its folder
    then, and counts and times both."""
    config = cpu_truth().config
    traffic = shape(4.0, duration_s=10.0)
    first = measured_run(tmp_path / "first", cpu_truth(), "chat", traffic)
    second = measured_run(tmp_path / "second", cpu_truth(), "chat", traffic)
    name = json.loads((first / "run.json").read_text())["name"]
    assert json.loads((second / "run.json").read_text())["name"] == name
    rows, report = check_runs(ForecastModel((config,)), [first, second])
    assert report["runs"] == 2
    assert {row["run"] for row in rows} == {str(first), str(second)}
    assert set(report["step_time"]) <= {str(first), str(second)}
    alone, _ = check_runs(ForecastModel((config,)), [first])
    assert {row["run"] for row in alone} == {name}
