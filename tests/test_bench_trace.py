"""``vprof bench PROFILE --trace FILE`` replays a trace in one flag: no YAML
written by the user, every request at its trace time, its lengths as the trace says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vprof.cli.main import cli
from vprof.traffic.replay import write_trace_replay
from vprof.workloads.trace import TraceSpec, load_trace

SAMPLE = Path(__file__).resolve().parents[1] / "workloads" / "traces" / "sample-trace.jsonl"


def test_bench_trace_replays_the_shipped_sample_at_its_own_times(tmp_path):
    from vprof.emulator.config import EmulatorConfig
    from vprof.emulator.server import Emulator
    from vprof.records import read_records
    from vprof.tinymodel import ensure_tiny_model

    window = {"time_scale": 10.0, "duration_s": 10.0}  # 10 trace seconds in 1 s
    trace = load_trace(TraceSpec(file=str(SAMPLE), format="mooncake", **window))
    tokenizer = str(ensure_tiny_model())
    env = {**os.environ, "VPROF_CACHE_DIR": str(tmp_path / "cache")}
    with Emulator(
        EmulatorConfig(ttft_ms=5, itl_ms=1, model="tiny", tokenizer_path=tokenizer)
    ) as emu:
        bench = subprocess.run(
            [
                sys.executable,
                "-m",
                "vprof.cli.main",
                "bench",
                "emu",
                "--url",
                emu.url,
                "--trace",
                str(SAMPLE),
                "--time-scale",
                "10",
                "--duration",
                "10",
                "--tokenizer",
                tokenizer,
                "--format",
                "json",
                "--out",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
    assert bench.returncode == 0, bench.stderr
    assert f"replaying {len(trace.requests)} requests" in bench.stderr
    (summary,) = json.loads(bench.stdout)["summaries"]
    assert summary["open_loop"] is True and summary["traffic"] == "trace"
    frame = read_records(Path(summary["path"])).sort_values("scheduled_at")
    assert len(frame) == len(trace.requests) and (frame.status == "ok").all()
    # every request was due at its trace time, and went out at it
    offsets = frame.scheduled_at.to_numpy() - frame.scheduled_at.min()
    assert np.allclose(offsets, trace.offsets_s(), atol=1e-3)
    assert float(np.median(frame.schedule_lag_ms)) < 50
    # its lengths are the trace's: planned, counted by the server, and generated
    wanted = [r.prompt_tokens for r in trace.requests]
    assert frame.expected_prompt_tokens.tolist() == wanted
    assert frame.prompt_tokens.tolist() == wanted
    assert frame.completion_tokens.tolist() == [r.output_tokens for r in trace.requests]


def test_the_replay_files_are_the_yaml_form_of_the_same_replay(tmp_path, monkeypatch):
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path))
    replay = write_trace_replay(str(SAMPLE), time_scale=2.0, max_requests=50)
    again = write_trace_replay(str(SAMPLE), time_scale=2.0, max_requests=50)
    assert (again.workload, again.traffic) == (replay.workload, replay.traffic)  # resumable
    other = write_trace_replay(str(SAMPLE), time_scale=3.0, max_requests=50)
    assert other.workload != replay.workload
    workload = get_workload(str(replay.workload))
    assert workload.trace is not None and workload.trace.time_scale == 2.0
    assert workload.trace.max_requests == 50 and workload.trace.file == str(SAMPLE)
    shape = get_shape(str(replay.traffic))
    assert shape.process == "trace" and shape.expected_requests() == replay.requests == 50


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time-scale", "2"], "--time-scale applies only with --trace"),
        (["--trace", str(SAMPLE), "--traffic", "steady"], "leave out --traffic"),
        (["--trace", str(SAMPLE), "--time-scale", "0"], "--time-scale: must be more than 0"),
        (["--trace", str(SAMPLE), "--max-requests", "0"], "--max-requests"),
        (["--trace", "no-such.jsonl"], "no such trace file"),
    ],
)
def test_bad_trace_flags_fail_before_anything_runs(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("VPROF_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["bench", "emu", "--url", "http://127.0.0.1:9", *args, "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()
