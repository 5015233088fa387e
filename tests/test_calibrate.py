"""vprof calibrate's parts: the emulator's send log, request ids on the wire, the error maths,
the certificate in a run folder. (The client's error against an independent exact server is
measured in ``test_calibrate_timing.py``.)"""

from __future__ import annotations

import json
import math

import pytest
import requests
from click.testing import CliRunner

from vprof.analysis.clienterror import TimedRequest, certificate_line, client_error, stamps_of
from vprof.common.errors import VprofError
from vprof.emulator.config import EmulatorConfig
from vprof.emulator.sendlog import read_send_logs
from vprof.emulator.server import Emulator
from vprof.runs.calibrate import CalibrateSpec

# -- the emulator's send log ----------------------------------------------------------------


def test_the_send_log_keeps_when_each_chunk_left_by_request_id(tmp_path):
    config = EmulatorConfig(ttft_ms=20, itl_ms=5, model="m", send_log=str(tmp_path / "sends"))
    body = {"model": "m", "prompt": "hi", "max_tokens": 6, "stream": True}
    with Emulator(config) as emu:
        for name in ("a-1", "a-2"):
            headers = {"x-request-id": name}
            with requests.post(emu.url + "/v1/completions", json=body, headers=headers) as r:
                assert r.status_code == 200 and r.content.endswith(b"[DONE]\n\n")
    sent = read_send_logs(tmp_path / "sends")
    assert sorted(sent) == ["a-1", "a-2"]
    for answer in sent.values():
        assert len(answer.writes_ms) == 6  # five tokens, then the last with usage and [DONE]
        # each chunk left at or after its deadline (20 ms, then every 5 ms), in order
        assert all(w >= 20 + 5 * k - 0.01 for k, w in enumerate(answer.writes_ms))
        assert all(gap > 0 for gap in answer.gaps_ms) and answer.ttft_ms < 1000


def test_a_broken_send_log_names_its_file_and_line(tmp_path):
    (tmp_path / "sends-1.jsonl").write_text('{"id": "x", "received_at": 1, "writes_ms": [1]}\n{')
    with pytest.raises(VprofError) as caught:
        read_send_logs(tmp_path)
    assert "sends-1.jsonl:2" in caught.value.format()


def test_requests_carry_their_record_id_only_when_asked():
    from vprof.locustfiles.transport import Connection

    conn = Connection("http://127.0.0.1:9", connect_timeout_s=1)
    assert b"X-Request-Id" not in conn.request_bytes("/v1/completions", b"{}")
    head = conn.request_bytes("/v1/completions", b"{}", request_id="cal-17").split(b"\r\n\r\n")[0]
    assert b"\r\nX-Request-Id: cal-17\r\n" in head


# -- the error maths ------------------------------------------------------------------------


def test_the_error_is_the_clients_stamps_against_what_the_server_sent():
    # sent at 10.0; the server took 100 ms to its first write, then 10 and 12 ms
    exact = TimedRequest(10.0, stamps_of(10.1005, [10.0, 12.0]), 100.0, [10.0, 12.0])
    late = TimedRequest(10.2, stamps_of(10.3030, [13.0, 12.0]), 100.0, [10.0, 12.0])
    error = client_error([exact, late], 9.0, 11.0)
    assert error.requests == 2 and error.events == 6
    assert error.ttft_p50_ms == pytest.approx((0.5 + 3.0) / 2)
    assert error.itl_p99_ms == pytest.approx(3.0, abs=0.1)
    assert error.bound_ms == pytest.approx(max(error.ttft_p99_ms, error.itl_p99_ms))
    assert not error.within_bounds  # the TTFT p50 is 1.75 ms


def test_a_nominal_gap_stands_in_when_the_server_logged_none():
    r = TimedRequest(0.0, stamps_of(0.05, [10.0, 10.0]), 50.0)
    error = client_error([r], 0.0, 1.0, nominal_gap_ms=10.0)
    assert error.ttft_p50_ms == pytest.approx(0.0, abs=1e-9)
    assert error.itl_p99_ms == pytest.approx(0.0, abs=1e-9) and error.within_bounds


def test_a_request_whose_chunk_count_differs_keeps_its_ttft_but_not_its_gaps():
    r = TimedRequest(0.0, stamps_of(0.05, [10.0]), 50.0, [10.0, 10.0])
    error = client_error([r], 0.0, 1.0)
    assert error.requests == 1 and error.gaps_left_out == 1 and math.isnan(error.itl_p50_ms)


# -- the certificate ------------------------------------------------------------------------


def test_a_load_is_checked_and_named():
    with pytest.raises(VprofError, match="--users"):
        CalibrateSpec(users=0)
    with pytest.raises(VprofError, match="--duration"):
        CalibrateSpec(duration_s=math.inf)
    assert CalibrateSpec(users=8, processes=2).load == {"users": 8, "processes": 2}
    assert CalibrateSpec(rate_rps=5).load == {"rate_rps": 5, "processes": 1}


def test_the_certificate_reads_as_one_line():
    cert = {"users": 64, "processes": 2, "client_error_ms": 2.31}
    assert certificate_line(cert) == "≤ 2.3 ms at this load (64 users, 2 processes)"
    assert certificate_line({"rate_rps": 7.5, "client_error_ms": None}).startswith("not measured")


def test_calibrate_help_names_its_outputs():
    from vprof.cli.main import cli

    result = CliRunner().invoke(cli, ["calibrate", "--help"])
    assert result.exit_code == 0 and "--search" in result.output and "--rate" in result.output
    result = CliRunner().invoke(cli, ["calibrate", "--users", "0"])
    assert result.exit_code == 2


def test_the_json_certificate_has_the_documented_keys(monkeypatch):
    import vprof.runs.calibrate as cal
    from vprof.cli.main import cli

    fake = {
        "users": 4,
        "processes": 1,
        "ttft_error_p50_ms": 0.2,
        "ttft_error_p99_ms": 1.1,
        "itl_error_p50_ms": 0.0,
        "itl_error_p99_ms": 0.9,
        "events_per_s": 300.0,
        "max_load_within_bounds": None,
        "client_error_ms": 1.1,
    }
    monkeypatch.setattr(cal, "calibrate", lambda spec, say: fake)
    result = CliRunner().invoke(cli, ["calibrate", "--users", "4", "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    for key in (
        "ttft_error_p50_ms",
        "ttft_error_p99_ms",
        "itl_error_p99_ms",
        "events_per_s",
        "max_load_within_bounds",
    ):
        assert key in document


def test_a_calibrated_run_shows_its_client_error_beside_its_latencies(tmp_path):
    from test_analysis_data import synth_records, write_run

    from vprof.analysis import summarize_run
    from vprof.analysis.keys import SUMMARY_TABLE_KEYS
    from vprof.records import RunDir
    from vprof.report.html import OVERVIEW_COLUMNS

    run = tmp_path / "run"
    write_run(run, synth_records(40))
    cert = {
        "users": 8,
        "processes": 1,
        "client_error_ms": 1.26,
        "ttft_error_p99_ms": 1.26,
        "itl_error_p99_ms": 0.8,
        "within_bounds": True,
        "measured_at": 1.8e9,
    }
    RunDir(run).write_calibration(cert)
    summary = summarize_run(run)
    assert summary["client_error"] == "≤ 1.3 ms at this load (8 users, 1 process)"
    assert summary["client_error_ms"] == 1.26
    table = list(SUMMARY_TABLE_KEYS)
    assert table.index("p99_e2el_ms") < table.index("client_error") < table.index("slo_met")
    assert "client_error" in OVERVIEW_COLUMNS


def test_a_damaged_certificate_is_refused_with_its_key(tmp_path):
    from vprof.common.errors import RunError
    from vprof.records import RunDir

    folder = RunDir(tmp_path)
    folder.calibration_json.write_text('{"users": 8, "ttft_error_p99_ms": "fast"}')
    with pytest.raises(RunError) as caught:
        folder.calibration()
    assert "ttft_error_p99_ms" in caught.value.format()
    assert RunDir(tmp_path / "none").calibration() == {}


def test_bench_calibrates_each_planned_load_once_and_refuses_remote_workers(monkeypatch):
    import vprof.runs.calibrate as cal
    from vprof.runs import BenchSpec
    from vprof.traffic import get_shape

    seen = []
    monkeypatch.setattr(cal, "calibrate", lambda spec, say: seen.append(spec) or {"users": 1})
    shapes = [get_shape("steady"), get_shape("smoke"), get_shape("poisson"), get_shape("steady")]
    certs = cal.certify_shapes(shapes, processes=2, say=lambda _: None)
    assert set(certs) == {"steady", "smoke", "poisson"}
    assert len(seen) == 3 and all(s.processes == 2 for s in seen)
    assert any(s.rate_rps > 0 for s in seen)  # open loop: its rate
    with pytest.raises(VprofError, match="vprof calibrate"):
        BenchSpec(
            traffic=("smoke",), workers_expected=1, master_bind="0.0.0.0:5557", calibrate=True
        )


def test_search_doubles_then_bisects_to_the_highest_load_within_bounds(monkeypatch):
    import vprof.runs.calibrate as cal

    tried = []

    def fake(spec, say):  # within bounds up to 100 users
        tried.append(spec.users)
        ok = spec.users <= 100
        return {
            "users": spec.users,
            "within_bounds": ok,
            "ttft_error_p99_ms": 1.0 if ok else 9.0,
            "itl_error_p99_ms": 1.0,
        }

    monkeypatch.setattr(cal, "calibrate", fake)
    cert = cal.search(CalibrateSpec(users=64))
    assert tried[:3] == [64, 128, 96] and len(tried) <= cal.SEARCH_STEPS
    best = cert["max_load_within_bounds"]["users"]
    assert 88 <= best <= 100 and cert["users"] == 64  # within an eighth of the true limit
    assert [s["users"] for s in cert["searched"]] == sorted(set(tried))
    monkeypatch.setattr(
        cal, "calibrate", lambda spec, say: fake(spec, say) | {"within_bounds": False}
    )
    assert cal.search(CalibrateSpec(users=8))["max_load_within_bounds"] is None
