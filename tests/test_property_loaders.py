"""Property tests for the file loaders: whatever a profile, workload, traffic shape or trace
holds under its known keys — any YAML value, NaN and infinities, huge integers, nested lists,
text in any script — the loader returns a checked object or raises vprof's own error naming
the file; it never fails with another exception (a ``TypeError`` deep inside, a crash).

Each loader's test runs ``EXAMPLES`` examples; the option parsers' test about 50 for each of
15 parsers (hypothesis shrinks a failure to its smallest input)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from vprof.common.errors import VprofError
from vprof.registry.loader import get_profile
from vprof.registry.validate import validate
from vprof.runs.tunespace import TUNED_KEYS
from vprof.traffic.load import get_shape
from vprof.workloads.loading import load_workload_file
from vprof.workloads.trace import load_trace

EXAMPLES = 150
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["0", "1e9", "-1", "nan", "inf", "512", "0.5", "true", "4k", "1s", ""]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def documents(keys: list[str], nested: dict[str, list[str]] | None = None):
    """Mappings over ``keys`` (some of them) with any value; a key in ``nested`` may hold a
    mapping over its own known keys instead."""
    value_of = {key: VALUES for key in keys}
    for key, inner in (nested or {}).items():
        value_of[key] = st.one_of(VALUES, st.dictionaries(st.sampled_from(inner), VALUES))
    return st.fixed_dictionaries({}, optional=value_of)


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, allow_unicode=True)


def _written_and_loaded(doc: dict, load) -> None:
    """``doc`` written as ``fuzzed.yaml`` in a fresh folder, then ``load(path)``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzzed.yaml"
        path.write_text(_dump(doc), encoding="utf-8")
        _loads_or_says_where(lambda: load(path), path)


def _loads_or_says_where(load, path: Path) -> None:
    try:
        load()
    except VprofError as exc:
        assert exc.path and exc.message, f"an error that does not say which file: {exc}"
        event(f"refused: {type(exc).__name__}")  # --hypothesis-show-statistics counts them
    else:
        event("loaded")


ENGINE_ARGS = [*TUNED_KEYS, "tensor-parallel-size"]  # the knobs tune searches, and one more


@SETTINGS
@given(
    documents(
        ["description", "extends", "engine_args", "env", "model", "port"],
        {"engine_args": ENGINE_ARGS, "env": ["VLLM_CPU_KVCACHE_SPACE", "X"]},
    )
)
def test_any_profile_loads_checked_or_is_refused_by_name(doc):
    def load(path: Path) -> None:
        profile = get_profile("fuzzed", [path.parent])
        assert isinstance(validate(profile), list)

    _written_and_loaded(doc, load)


DISTRIBUTION = ["kind", "mean", "stddev", "sigma", "min", "max", "value", "file"]


@SETTINGS
@given(
    documents(
        [
            "description",
            "endpoint",
            "seed",
            "prompt_tokens",
            "output_tokens",
            "fixed_output",
            "prefix",
            "kind",
            "conversation",
            "max_model_len",
        ],
        {
            "prompt_tokens": DISTRIBUTION,
            "output_tokens": DISTRIBUTION,
            "prefix": ["groups", "length_tokens", "share"],
            "conversation": ["turns", "think_time_s", "history"],
        },
    )
)
def test_any_workload_loads_checked_or_is_refused_by_name(doc):
    _written_and_loaded(doc, load_workload_file)


@SETTINGS
@given(
    documents(
        [
            "description",
            "kind",
            "users",
            "rate_rps",
            "duration_s",
            "warmup_s",
            "max_in_flight",
            "process",
            "burstiness",
            "spawn_rate",
            "ramp_s",
            "step_users",
            "step_s",
            "spike_users",
            "spike_at_s",
            "spike_s",
            "start_users",
        ]
    )
)
def test_any_traffic_shape_loads_checked_or_is_refused_by_name(doc):
    _written_and_loaded(doc, get_shape)


ROW = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": VALUES,
        "input_length": VALUES,
        "output_length": VALUES,
        "hash_ids": st.one_of(VALUES, st.lists(st.integers(-5, 2**40), max_size=6)),
    },
)


@SETTINGS
@given(st.lists(ROW, max_size=5), st.sampled_from([16, 512]))
def test_any_trace_loads_checked_or_is_refused_by_name(rows, block_size):
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "fuzzed.jsonl"
        lines = []
        for row in rows:
            try:
                lines.append(json.dumps(row, allow_nan=True))
            except (TypeError, ValueError):
                lines.append("{")  # what json cannot say is a torn line
        trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
        workload = Path(folder) / "replay.yaml"
        workload.write_text(f"kind: trace\nfile: {trace}\nblock_size: {block_size}\n")

        def load():
            loaded = load_trace(load_workload_file(workload).trace)
            for request in loaded.requests:
                assert request.prompt_tokens >= 1 and request.output_tokens >= 1
                assert math.isfinite(request.t_s)

        _loads_or_says_where(load, trace)


# -- option parsers --------------------------------------------------------------------------

OPTION_TEXT = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.sampled_from(
            [
                "ttft_p95",
                "=",
                "500",
                "ms",
                "s",
                ",",
                "errors",
                "1",
                "%",
                "nan",
                "inf",
                "-",
                "e9",
                "0.5",
                "tpot_p99",
                "rps",
                " ",
                "x",
                "max-num-seqs",
                "16",
                "true",
                "10m",
                "3h",
                "http://",
                "127.0.0.1",
                ":8000",
                "/v1",
                "localhost",
                "[::1]",
            ]
        ),
        max_size=8,
    ).map("".join),
)


def _parser_cases():
    from vprof.analysis.designs import parse_shift
    from vprof.analysis.slo import parse_slo
    from vprof.common.numbers import parse_number, parse_number_list
    from vprof.common.urls import check_server_url
    from vprof.locustfiles.balance import parse_hosts
    from vprof.registry.overrides import parse_env_args, parse_ladder_values, parse_set_args
    from vprof.runs.sweep import parse_levels, parse_sizes
    from vprof.runs.tunerequest import parse_budget_trials, parse_duration
    from vprof.runs.tunespace import parse_space
    from vprof.traffic.slices import parse_sides

    return {
        "--slo": parse_slo,
        "--detect": parse_shift,
        "--budget-time": parse_duration,
        "--budget-trials": parse_budget_trials,
        "--levels": parse_levels,
        "--sizes": parse_sizes,
        "LADDER": parse_ladder_values,
        "--set": lambda text: parse_set_args([text]),
        "--env": lambda text: parse_env_args([text]),
        "--space": lambda text: parse_space([text]),
        "--sides": lambda text: parse_sides(text, 2),
        "--url": lambda text: check_server_url(text, key="--url"),
        "--hosts": parse_hosts,
        "a number": lambda text: parse_number(text, minimum=0, key="n"),
        "a list": lambda text: parse_number_list(text, minimum=0, key="n"),
    }


# about 50 for each of the 15 parsers; a loaded machine may generate them slowly (no failure)
@settings(max_examples=50 * 15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_parser_cases())), OPTION_TEXT)
def test_any_option_text_is_parsed_checked_or_refused_by_name(option, text):
    """Every option parser either returns finite values or raises vprof's own error saying
    which option (never a ValueError, a KeyError or a NaN let through)."""
    parse = _parser_cases()[option]
    try:
        value = parse(text)
    except VprofError as exc:
        assert exc.message and (exc.key or option in str(exc)), f"{option}: {exc}"
        event(f"{option}: refused")
        return
    event(f"{option}: parsed")
    for number in _numbers(value):
        assert math.isfinite(number), (option, text, value)


def _numbers(value):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            yield from _numbers(item)
