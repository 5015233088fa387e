"""The JSON Schemas `vprof schema` writes agree with the loaders they are built from.

Every shipped profile, workload and traffic preset validates; files the loaders accept in odd
but valid spellings validate; a sample of hostile files (unknown keys, wrong types, numbers out
of range, unknown choices, settings that need each other) is refused by the loader *and* by the
schema; and a fuzzed file the loader accepts is never refused by the schema.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vprof.cli.main import cli
from vprof.common.errors import VprofError
from vprof.common.yamlfile import parse_yaml, read_yaml
from vprof.registry.fileschema import profile_schema
from vprof.registry.loader import get_profile, shipped_dir
from vprof.registry.validate import validate
from vprof.registry.vllm_args import FlagSpec, FlagTable
from vprof.traffic.fileschema import traffic_schema
from vprof.traffic.load import PRESETS_DIR as TRAFFIC_PRESETS
from vprof.traffic.load import get_shape
from vprof.workloads.fileschema import workload_schema
from vprof.workloads.loading import PRESETS_DIR as WORKLOAD_PRESETS
from vprof.workloads.loading import load_workload_file

SCHEMAS = {"profile": profile_schema, "workload": workload_schema, "traffic": traffic_schema}
_VALIDATORS: dict[str, jsonschema.Draft7Validator] = {}


def validator(kind: str) -> jsonschema.Draft7Validator:
    if kind not in _VALIDATORS:
        _VALIDATORS[kind] = jsonschema.Draft7Validator(SCHEMAS[kind]())
    return _VALIDATORS[kind]


def schema_problems(kind: str, text: str) -> list[str]:
    """What the schema says about a file's text, read as vprof reads YAML."""
    data = parse_yaml(text, "f.yaml").data
    return [f"{e.json_path}: {e.message}" for e in validator(kind).iter_errors(data)]


def load(kind: str, path: Path) -> None:
    """Load (and for a profile validate) the file the way the CLI does."""
    if kind == "profile":
        validate(get_profile(str(path)))
    elif kind == "workload":
        load_workload_file(path)
    else:
        get_shape(str(path))


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty working folder with no preset folders from the environment."""
    monkeypatch.chdir(tmp_path)
    for var in ("VPROF_PROFILES_DIR", "VPROF_WORKLOADS_DIR", "VPROF_TRAFFIC_DIR"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_each_schema_is_a_valid_draft_7_schema(kind):
    schema = SCHEMAS[kind]()
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["title"] == f"vprof {'traffic shape' if kind == 'traffic' else kind}"


PROFILE_PRESETS = shipped_dir()
assert PROFILE_PRESETS is not None, "vprof.profiles ships no folder"
SHIPPED = [
    *[("profile", p) for p in sorted(PROFILE_PRESETS.glob("*.yaml"))],
    *[("workload", p) for p in sorted(WORKLOAD_PRESETS.glob("*.yaml"))],
    *[("traffic", p) for p in sorted(TRAFFIC_PRESETS.glob("*.yaml"))],
]


def test_every_preset_kind_ships_files():
    assert {kind for kind, _ in SHIPPED} == set(SCHEMAS)
    assert len(SHIPPED) >= 25


@pytest.mark.parametrize(("kind", "path"), SHIPPED, ids=lambda v: getattr(v, "name", v))
def test_every_shipped_preset_validates(kind, path):
    data = read_yaml(path).data
    assert [e.message for e in validator(kind).iter_errors(data)] == []


# Files the loaders accept although they are written unusually; each is loaded too.
ACCEPTED = [
    ("profile", "model: m\nengine_args:\n  max_num_seqs: 8\n"),  # flag_key: _ for -
    ("profile", "model: m\nengine_args:\n  --max-num-seqs: 8\n"),
    ("profile", "model: m\nengine_args:\n  tp: 2\n"),  # an alias
    ("profile", "model: m\nengine_args:\n  max-model-len: 4k\n"),
    ("profile", "model: m\nengine_args:\n  max-model-len: auto\n"),
    ("profile", "model: m\nengine_args:\n  max-model-len: -1\n"),
    ("profile", "model: m\nengine_args:\n  served-model-name: 1.10\n"),  # kept as written
    ("profile", "model: m\nengine_args:\n  served-model-name: [a, b]\n"),
    ("profile", "model: m\nengine_args:\n  max-lora-rank: 8\n"),  # a choice written as a number
    ("profile", "model: m\nengine_args:\n  compilation-config: {mode: 3}\n"),
    ("profile", "name: 1.10\nmodel: m\nenv:\n  VER: 1.10\n  ON: yes\n"),
    ("profile", "extends: base\nengine_args:\n  max-model-len: null\n"),  # no model: inherited
    ("workload", "prompt_tokens: {empirical: {values: [3, 5]}}\noutput_tokens: 4\n"),
    ("workload", "prompt_tokens: {kind: lognormal, median: 30, sigma: 0.5}\noutput_tokens: 4\n"),
    ("workload", "prompt_tokens: 9.5\noutput_tokens: {kind: uniform, min: 1, max: 9}\n"),
    (
        "workload",
        "endpoint: chat\nprompt_tokens: 9\noutput_tokens: 4\n"
        "conversation: {turns: 3, think_time_s: {kind: lognormal, median: 2, sigma: 1}}\n",
    ),
    (
        "workload",
        "endpoint: chat\nprompt_tokens: 9\noutput_tokens: 4\n"
        "agent: {steps: 3, tool_tokens: 5, fan_out: {kind: uniform, min: 1, max: 4}}\n",
    ),
    ("traffic", "kind: open-loop\nprocess: trace\ntrace: sample-trace\n"),  # duration: the trace's
    ("traffic", "kind: spike\nduration_s: 9\nusers: 0\nspike_users: 4\nspike_s: 2\n"),
    ("traffic", "kind: step\nduration_s: 9\nstep_users: 2\nstep_s: 3\nusers: 8\n"),
]


@pytest.mark.parametrize(("kind", "text"), ACCEPTED)
def test_odd_but_valid_files_validate(folder, kind, text):
    path = folder / "odd.yaml"
    path.write_text(text, encoding="utf-8")
    load(kind, path)
    assert schema_problems(kind, text) == []


def test_a_prompts_file_may_bring_the_output_lengths(folder):
    (folder / "prompts.jsonl").write_text('{"prompt": "hi", "output_tokens": 3}\n', "utf-8")
    text = "prompt_tokens: {kind: empirical, file: prompts.jsonl}\n"
    (folder / "w.yaml").write_text(text, encoding="utf-8")
    load("workload", folder / "w.yaml")
    assert schema_problems("workload", text) == []
    lengths = "prompt_tokens: {kind: empirical, file: lengths.txt}\n"
    assert any("output_tokens" in p for p in schema_problems("workload", lengths))


W = "prompt_tokens: 10\noutput_tokens: 3\n"
T = "kind: steady\nduration_s: 10\n"
# (kind, file, what the schema should complain about): unknown keys, wrong types, numbers out
# of range, unknown choices and settings that need each other; many from test_hostile_input
REFUSED = [
    ("profile", "model: m\nengine_arg:\n  port: 80\n", "engine_arg"),
    ("profile", "model: m\nmax-model-len: 4096\n", "max-model-len"),
    ("profile", "model: m\nengine_args:\n  max-model-lenn: 4096\n", "max-model-lenn"),
    ("profile", "model: m\nengine_args:\n  model: x\n", "'model'"),
    ("profile", "model: m\nengine_args:\n  enforce-eager: yes please\n", "enforce-eager"),
    ("profile", "model: m\nengine_args:\n  max-num-seqs: many\n", "max-num-seqs"),
    ("profile", "model: m\nengine_args:\n  max-num-seqs: 0\n", "max-num-seqs"),
    ("profile", "model: m\nengine_args:\n  max-num-seqs: [1, 2]\n", "max-num-seqs"),
    ("profile", "model: m\nengine_args:\n  port: 70000\n", "port"),
    ("profile", "model: m\nengine_args:\n  gpu-memory-utilization: 1.5\n", "gpu-memory"),
    ("profile", "model: m\nengine_args:\n  gpu-memory-utilization: .inf\n", "gpu-memory"),
    ("profile", "model: m\nengine_args:\n  cpu-offload-gb: -.inf\n", "cpu-offload-gb"),
    ("profile", "model: m\nengine_args:\n  dtype: float64\n", "dtype"),
    ("profile", "model: m\nengine_args:\n  max-model-len: 4.5K\n", "max-model-len"),
    ("profile", 'model: m\nengine_args:\n  served-model-name: ["a\\0"]\n', "served-model"),
    ("profile", "model: m\nengine_args: [a]\n", "engine_args"),
    ("profile", "model: m\nentrypoint: 010\n", "entrypoint"),
    ("profile", "model: --help\n", "model"),
    ("profile", "description: no model\n", "model"),
    ("profile", 'name: "x\\n"\nmodel: m\n', "name"),
    ("profile", "name: a/b\nmodel: m\n", "name"),
    ("profile", "model: m\nenv:\n  1X: a\n", "1X"),
    ("profile", 'model: m\nenv:\n  "A=B": a\n', "A=B"),
    ("profile", "model: m\nenv:\n  X:\n", "env.X"),
    ("profile", "model: m\nenv:\n  X: [a]\n", "env.X"),
    ("profile", 'model: m\nenv:\n  X: "a\\0b"\n', "env.X"),
    ("profile", "- model: m\n", "object"),
    ("workload", W + "prompts: 3\n", "prompts"),
    ("workload", W + "file: t.jsonl\n", "file"),  # a trace setting without kind: trace
    ("workload", "prompt_tokens: .inf\noutput_tokens: 3\n", "prompt_tokens"),
    ("workload", "prompt_tokens: 1e20\noutput_tokens: 3\n", "prompt_tokens"),
    ("workload", "prompt_tokens: 1.0e+20\noutput_tokens: 3\n", "prompt_tokens"),
    ("workload", "prompt_tokens: 0\noutput_tokens: 3\n", "prompt_tokens"),
    ("workload", "output_tokens: 3\n", "prompt_tokens"),
    ("workload", "prompt_tokens: 3\n", "output_tokens"),
    ("workload", "prompt_tokens: {kind: gaussian, mean: 3}\noutput_tokens: 3\n", "gaussian"),
    ("workload", "prompt_tokens: {kind: uniform, min: 3}\noutput_tokens: 3\n", "max"),
    ("workload", "prompt_tokens: {kind: fixed, value: 3, max: 4}\noutput_tokens: 3\n", "max"),
    ("workload", "prompt_tokens: {mean: 3}\noutput_tokens: 3\n", "prompt_tokens"),
    (
        "workload",
        "prompt_tokens: {kind: lognormal, mean: 100, sigma: 1000}\noutput_tokens: 3\n",
        "sigma",
    ),
    ("workload", "prompt_tokens: {kind: lognormal, mean: 10, sigma: 0}\noutput_tokens: 3\n", "0"),
    (
        "workload",
        "prompt_tokens: {kind: lognormal, mean: 9, median: 9, sigma: 1}\noutput_tokens: 3\n",
        "median",
    ),
    ("workload", "prompt_tokens: {kind: normal, mean: 100, stddev: -1}\noutput_tokens: 3\n", "-1"),
    ("workload", "prompt_tokens: {kind: empirical, values: [0, 5]}\noutput_tokens: 3\n", "0"),
    ("workload", "prompt_tokens: {kind: empirical}\noutput_tokens: 3\n", "prompt_tokens"),
    ("workload", W + "prefix: {groups: 1000000000, length_tokens: 8}\n", "groups"),
    ("workload", W + "prefix: {groups: 2, length_tokens: 8, share: 1.5}\n", "share"),
    ("workload", W + "prefix: {groups: 2, length_tokens: 8, popularity: zipff}\n", "zipff"),
    ("workload", W + "prefix: {groups: 2}\n", "length_tokens"),
    ("workload", W + "prefix: {groups: 2, length_tokens: 8, size: 3}\n", "size"),
    ("workload", W + "conversation: {turns: 3}\n", "endpoint"),  # sessions need endpoint: chat
    (
        "workload",
        "endpoint: chat\n" + W + "conversation: {turns: 3, max_context_tokens: .inf}\n",
        "max_context_tokens",
    ),
    ("workload", "endpoint: chat\n" + W + "conversation: {turns: 3, think_time_s: -1}\n", "-1"),
    (
        "workload",
        "endpoint: chat\n" + W + "conversation: {turns: 3, think_time_s: {kind: poisson}}\n",
        "poisson",
    ),
    ("workload", "endpoint: chat\n" + W + "agent: {steps: 3}\n", "tool_tokens"),
    (
        "workload",
        "endpoint: chat\n" + W + "agent: {steps: 3, tool_tokens: 4, fan_out: 2000}\n",
        "2000",
    ),
    (
        "workload",
        "endpoint: chat\n" + W + "conversation: {turns: 2}\nagent: {steps: 3, tool_tokens: 4}\n",
        "agent",
    ),
    ("workload", W + "seed: .inf\n", "seed"),
    ("workload", W + "seed: x\n", "seed"),
    ("workload", W + "fixed_output: maybe\n", "fixed_output"),
    ("workload", "endpoint: 010\n" + W, "endpoint"),
    ("workload", "kind: replay\n" + W, "replay"),
    ("workload", "kind: trace\nformat: mooncake\n", "file"),
    ("workload", "kind: trace\nfile: t.jsonl\nformat: sharegpt\n", "sharegpt"),
    ("workload", "kind: trace\nfile: t.jsonl\ntime_scale: 0\n", "time_scale"),
    ("workload", "kind: trace\nfile: t.jsonl\nblock_size: 100000\n", "block_size"),
    ("workload", "kind: trace\nfile: t.jsonl\n" + W, "prompt_tokens"),
    ("traffic", "duration_s: 10\n", "kind"),
    ("traffic", "kind: steady\n", "duration_s"),
    ("traffic", "kind: 010\nduration_s: 10\n", "kind"),
    ("traffic", "kind: steady\nduration_s: .inf\n", "duration_s"),
    ("traffic", "kind: steady\nduration_s: 0\n", "duration_s"),
    ("traffic", T + "user: 3\n", "user"),
    ("traffic", T + "users: 1e20\n", "users"),
    ("traffic", T + "users: 1.0e+20\n", "users"),
    ("traffic", T + "users: 2.5\n", "users"),
    ("traffic", T + "users: 0\n", "users"),
    ("traffic", T + "warmup_s: -1\n", "warmup_s"),
    ("traffic", T + "spawn_rate: .inf\n", "spawn_rate"),
    ("traffic", "kind: open-loop\nduration_s: 10\n", "rate_rps"),
    ("traffic", "kind: open-loop\nduration_s: 10\nrate_rps: .inf\n", "rate_rps"),
    ("traffic", "kind: open-loop\nduration_s: 10\nrate_rps: 1\nmax_in_flight: 0\n", "max_in"),
    ("traffic", "kind: open-loop\nduration_s: 10\nrate_rps: 1\nprocess: bursty\n", "bursty"),
    ("traffic", "kind: open-loop\nduration_s: 10\nrate_rps: 1\nburstiness: 0\n", "burstiness"),
    ("traffic", "kind: steady\nprocess: trace\ntrace: sample-trace\n", "open-loop"),
    ("traffic", "kind: open-loop\nprocess: trace\n", "trace"),
    ("traffic", "kind: open-loop\nduration_s: 10\nrate_rps: 1\ntrace: sample-trace\n", "process"),
    ("traffic", "kind: step\nduration_s: 10\nstep_s: 0\n", "step_s"),
    ("traffic", "kind: spike\nduration_s: 10\nusers: 0\n", "spike_users"),
    ("traffic", "kind: spike\nduration_s: 10\nusers: 0\nspike_users: 0\n", "spike_users"),
]


@pytest.mark.parametrize(("kind", "text", "named"), REFUSED)
def test_what_the_loader_refuses_the_schema_refuses(folder, kind, text, named):
    path = folder / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(VprofError):
        load(kind, path)
    problems = schema_problems(kind, text)
    assert problems, f"the schema accepts {text!r}"
    assert any(named in p for p in problems), problems


def test_the_profile_schema_follows_the_flag_table_it_is_given():
    spec = FlagSpec(
        name="max-num-seqs",
        kind="int",
        is_list=False,
        append=False,
        nullable=False,
        negatable=False,
        human_readable=False,
        choices=None,
        default=256,
        help="Maximum number of sequences per iteration.",
    )
    table = FlagTable("9.9", {"max-num-seqs": spec}, {"mns": "max-num-seqs"})
    schema = profile_schema(table)
    check = jsonschema.Draft7Validator(schema)
    assert "vLLM 9.9" in schema["description"]
    assert check.is_valid({"model": "m", "engine_args": {"mns": 4, "max_num_seqs": None}})
    assert not check.is_valid({"model": "m", "engine_args": {"enforce-eager": True}})
    flag = schema["definitions"]["max-num-seqs"]
    assert flag["description"] == spec.help and flag["default"] == 256


# --------------------------------------------------------------------- fuzzing: never stricter

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 2, 8, 300, -1, 0.5, 2.5, 1e9, "", "x", "4k", "auto", "chat", "zipf"]),
    st.sampled_from(["steady", "spike", "open-loop", "poisson", "gamma", "constant", "trace"]),
    st.sampled_from(["sample-trace", "completions", "serve", "openai-module", "base", "-x"]),
    st.sampled_from([[], [3], ["a"], {}, {"kind": "fixed", "value": 3}, {"turns": 2}]),
    st.sampled_from([{"groups": 2, "length_tokens": 8}, {"steps": 2, "tool_tokens": 3}]),
    st.sampled_from([{"kind": "exponential", "mean": 2}, {"empirical": {"values": [2]}}]),
)
FLAGS = ["max-num-seqs", "max_num_batched_tokens", "tp", "enforce-eager", "dtype", "port"]
SEEDS = {kind: [read_yaml(p).data for k, p in SHIPPED if k == kind] for kind in SCHEMAS}
KEYS = {
    "profile": ["name", "description", "extends", "model", "entrypoint", "env"],
    "workload": [
        "name",
        "kind",
        "endpoint",
        "seed",
        "prompt_tokens",
        "output_tokens",
        "prefix",
        "conversation",
        "agent",
        "fixed_output",
        "format",
        "time_scale",
    ],
    "traffic": [
        "kind",
        "duration_s",
        "users",
        "spike_users",
        "spike_s",
        "rate_rps",
        "process",
        "burstiness",
        "max_in_flight",
        "trace",
        "step_s",
        "start_users",
    ],
}


@st.composite
def mutated(draw, kind: str):
    """A shipped preset with a few of its keys set to other values, or dropped."""
    doc = dict(draw(st.sampled_from(SEEDS[kind])))
    if doc.get("file"):  # the trace file, from wherever the test runs
        doc["file"] = str(WORKLOAD_PRESETS / doc["file"])
    for _ in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from(KEYS[kind]))
        if kind == "profile" and draw(st.booleans()):
            args = dict(doc.get("engine_args") or {})
            args[draw(st.sampled_from(FLAGS))] = draw(VALUES)
            doc["engine_args"] = args
        elif draw(st.integers(0, 3)) == 0:
            doc.pop(key, None)
        else:
            doc[key] = draw(VALUES)
    return doc


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_a_file_the_loader_accepts_the_schema_accepts(kind, monkeypatch):
    import yaml

    for var in ("VPROF_PROFILES_DIR", "VPROF_WORKLOADS_DIR", "VPROF_TRAFFIC_DIR"):
        monkeypatch.delenv(var, raising=False)
    accepted = []

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutated(kind))
    def check(doc):
        text = yaml.safe_dump(doc)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "fuzzed.yaml"
            path.write_text(text, encoding="utf-8")
            try:
                load(kind, path)
            except VprofError:
                return
        accepted.append(doc)
        assert schema_problems(kind, text) == [], text

    with tempfile.TemporaryDirectory() as empty:
        monkeypatch.chdir(empty)
        check()
    assert accepted, "no fuzzed file was accepted: the test checked nothing"


# --------------------------------------------------------------------- the command


def test_vprof_schema_prints_what_the_generator_builds():
    result = CliRunner().invoke(cli, ["schema", "workload"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == workload_schema()


def test_vprof_schema_writes_into_a_folder_and_says_how_to_use_it(folder):
    (folder / "profiles").mkdir()
    result = CliRunner().invoke(cli, ["schema", "profile", "-o", "profiles"])
    assert result.exit_code == 0, result.output
    written = folder / "profiles" / "vprof-profile.schema.json"
    assert json.loads(written.read_text("utf-8")) == profile_schema()
    assert "# yaml-language-server: $schema=vprof-profile.schema.json" in result.output
    again = CliRunner().invoke(cli, ["schema", "profile", "-o", str(written)])
    assert again.exit_code == 0, again.output  # its own file: replaced


def test_vprof_schema_leaves_a_file_it_did_not_write(folder):
    (folder / "mine.json").write_text('{"title": "my schema"}', "utf-8")
    result = CliRunner().invoke(cli, ["schema", "traffic", "-o", "mine.json"])
    assert result.exit_code == 2
    assert "exists and is not a JSON Schema written by vprof schema" in result.output
    assert (folder / "mine.json").read_text("utf-8") == '{"title": "my schema"}'
    forced = CliRunner().invoke(cli, ["schema", "traffic", "-o", "mine.json", "--force"])
    assert forced.exit_code == 0 and json.loads((folder / "mine.json").read_text("utf-8"))
