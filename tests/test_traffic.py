"""Traffic shapes: user counts over time, open-loop schedules, YAML presets and errors."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from vprof.common.errors import WorkloadError
from vprof.traffic.load import get_shape, load_shapes, shape_from_dict
from vprof.traffic.shape import TrafficShape, arrival_offsets, partition


def shape(**kw) -> TrafficShape:
    base = {"name": "t", "kind": "steady", "duration_s": 60.0}
    base.update(kw)
    return TrafficShape(**base)


def test_steady_holds_users_through_warmup_and_ends_after_it():
    s = shape(users=8, warmup_s=10, duration_s=60)
    assert s.users_at(0)[0] == 8
    assert s.users_at(69.9)[0] == 8
    assert s.users_at(70.0) is None


def test_ramp_rises_linearly_after_warmup_then_holds():
    s = shape(kind="ramp", start_users=1, users=11, ramp_s=10, duration_s=20, warmup_s=5)
    assert s.users_at(3)[0] == 1  # warm-up holds the starting level
    assert s.users_at(10)[0] == 6  # halfway up the ramp
    assert s.users_at(20)[0] == 11
    assert s.users_at(24.9)[0] == 11


def test_step_adds_users_every_step_up_to_the_cap():
    s = shape(kind="step", start_users=2, step_users=2, step_s=15, users=6, duration_s=90)
    assert [s.users_at(t)[0] for t in (0, 14.9, 15, 30, 45, 80)] == [2, 2, 4, 6, 6, 6]


def test_spike_jumps_for_its_window_only():
    s = shape(kind="spike", users=4, spike_users=24, spike_at_s=20, spike_s=10, duration_s=60)
    assert [s.users_at(t)[0] for t in (19.9, 20, 29.9, 30)] == [4, 24, 24, 4]


def test_open_loop_holds_max_in_flight_users():
    s = shape(kind="open-loop", rate_rps=5, max_in_flight=12, duration_s=10)
    assert s.users_at(1) == (12, 12.0)
    assert s.expected_requests() == 50


def test_spawn_rate_defaults_to_all_at_once_capped_at_100():
    assert shape(users=8).users_at(0) == (8, 8.0)
    assert shape(users=500).users_at(0) == (500, 100.0)
    assert shape(users=8, spawn_rate=2).users_at(0) == (8, 2.0)


def test_constant_arrivals_are_evenly_spaced_at_the_rate():
    s = shape(kind="open-loop", process="constant", rate_rps=4, duration_s=5)
    offsets = arrival_offsets(s, seed=1)
    assert len(offsets) == 20
    assert offsets[:3] == [0.0, 0.25, 0.5]


def test_poisson_arrivals_are_reproducible_and_hit_the_rate():
    s = shape(kind="open-loop", process="poisson", rate_rps=10, duration_s=200)
    a, b = arrival_offsets(s, seed=7), arrival_offsets(s, seed=7)
    assert a == b
    assert a != arrival_offsets(s, seed=8)
    assert a[0] == 0.0 and a == sorted(a)
    achieved = (len(a) - 1) / (a[-1] - a[0])
    assert achieved == pytest.approx(10, rel=0.02)
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert cv == pytest.approx(1.0, abs=0.1)  # exponential gaps: CV = 1


def test_gamma_burstiness_sets_the_coefficient_of_variation():
    # vllm bench: CV of the gaps = 1/sqrt(burstiness)
    for burstiness in (0.25, 4.0):
        s = shape(
            kind="open-loop", process="gamma", burstiness=burstiness, rate_rps=10, duration_s=300
        )
        a = arrival_offsets(s, seed=3)
        gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
        cv = statistics.pstdev(gaps) / statistics.mean(gaps)
        assert cv == pytest.approx(burstiness**-0.5, rel=0.15)


def test_partition_across_workers_covers_every_index_exactly_once():
    n = 1003
    for workers in (1, 2, 3, 7):
        taken = [i for k in range(workers) for i in partition(n, k, workers)]
        assert sorted(taken) == list(range(n))


def test_presets_load_and_are_sized_for_a_small_box():
    shapes = load_shapes()
    assert {"steady", "ramp", "step", "spike", "poisson", "constant-rate", "smoke"} <= set(shapes)
    assert shapes["steady"].users == 8 and shapes["steady"].warmup_s == 10
    assert shapes["poisson"].open_loop and shapes["constant-rate"].process == "constant"
    assert shapes["smoke"].total_s <= 10
    for s in shapes.values():
        assert s.total_s <= 120


def test_unknown_key_names_file_line_and_suggestion(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: open-loop\nduration_s: 10\nrate_rps: 2\nproces: poisson\n")
    with pytest.raises(WorkloadError) as err:
        get_shape(path)
    assert err.value.line == 4 and err.value.key == "proces"
    assert "did you mean 'process'" in str(err.value)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("yaml_text", "key", "line"),
    [
        ("kind: steddy\nduration_s: 5\n", "kind", 1),
        ("kind: steady\nduration_s: -5\n", "duration_s", 2),
        ("kind: steady\nusers: 2.5\nduration_s: 5\n", "users", 2),
        ("kind: open-loop\nduration_s: 5\nrate_rps: 0\n", "rate_rps", 3),
        ("kind: open-loop\nduration_s: 5\nrate_rps: 1\nprocess: gama\n", "process", 4),
        # out of range on any kind, as the schema says (a fuzzed ramp found the loader took it)
        ("kind: ramp\nduration_s: 5\nusers: 4\nburstiness: 0\n", "burstiness", 4),
    ],
)
def test_invalid_values_are_located(tmp_path: Path, yaml_text: str, key: str, line: int):
    path = tmp_path / "s.yaml"
    path.write_text(yaml_text)
    with pytest.raises(WorkloadError) as err:
        get_shape(path)
    assert (err.value.key, err.value.line) == (key, line)


def test_broken_yaml_reports_its_line(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text("kind: steady\nduration_s: [5\n")
    with pytest.raises(WorkloadError) as err:
        get_shape(path)
    assert err.value.line is not None and "YAML" in str(err.value)


def test_unknown_name_suggests_the_closest_preset():
    with pytest.raises(WorkloadError, match="did you mean 'steady'"):
        get_shape("stedy")


def test_user_dir_from_environment_overrides_and_adds(tmp_path: Path, monkeypatch):
    (tmp_path / "mine.yaml").write_text("kind: steady\nusers: 3\nduration_s: 4\n")
    monkeypatch.setenv("VPROF_TRAFFIC_DIR", str(tmp_path))
    assert get_shape("mine").users == 3


def test_shape_from_dict_round_trips():
    s = shape_from_dict({"kind": "spike", "users": 2, "spike_users": 5, "duration_s": 9}, name="x")
    assert shape_from_dict(
        {k: v for k, v in s.to_dict().items() if k not in ("name", "source")}, name="x"
    ) == TrafficShape(**{**s.to_dict(), "source": "<dict>"})


def test_cli_lists_presets_and_shows_one():
    from vprof.cli.main import cli

    result = CliRunner().invoke(cli, ["traffic", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"poisson"' in result.output
    shown = CliRunner().invoke(cli, ["traffic", "show", "poisson"])
    assert shown.exit_code == 0 and "rate_rps: 6.0" in shown.output
    missing = CliRunner().invoke(cli, ["traffic", "show", "stedy"])
    assert missing.exit_code == 2
    assert "did you mean 'steady'" in missing.output
