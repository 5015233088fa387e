"""Hostile input through the CLI: each case ends in exit 2 with one line naming the file, line
and key (or the flag), and no traceback — or, when the input is odd but valid, does exactly
what was written.

Classes: rendering safety (environment names, ``$(…)``, leading dashes, NUL), YAML values that
must arrive as written (``010``, ``1.10``, ``12:30``), numbers that must be finite and in range
(files and flags), and resource exhaustion (alias bombs, huge and deep files). Nothing here
may start a server or a load test: the fixture makes that an assertion failure.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from test_analysis_data import T0, synth_records, write_run

from vprof.cli.main import cli

BILLION_LAUGHS = "lol0: &a0 [lol]\n" + "".join(
    f"lol{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)
SEVEN_LEVEL_BOMB = "l0: &a0 [x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x]\n" + (
    "".join(f"l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 20)}]\n" for i in range(1, 8))
)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Invoke the CLI in an empty folder; starting a server or a load test fails the test."""
    monkeypatch.chdir(tmp_path)
    for var in ("VPROF_PROFILES_DIR", "VPROF_WORKLOADS_DIR", "VPROF_TRAFFIC_DIR"):
        monkeypatch.delenv(var, raising=False)

    def forbidden(*args, **kwargs):
        raise AssertionError("hostile input reached a server or a load test")

    import vprof.emulator.server
    import vprof.runs
    import vprof.runs.bench

    monkeypatch.setattr(vprof.runs.bench, "run_bench", forbidden)
    monkeypatch.setattr(vprof.runs, "run_bench", forbidden)
    monkeypatch.setattr(vprof.emulator.server.Emulator, "serve_forever", forbidden)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args))

    return invoke


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def assert_refused(result, *fragments: str) -> None:
    """Exit 2, one clear message containing every fragment, no traceback."""
    out = result.output
    assert result.exit_code == 2, out + repr(result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in {out!r}"


# ---------------------------------------------------------------------------- profile files

PROFILE_REFUSED = [
    # (file body, fragments of the message: file:line: key: …)
    ('model: m\nenv:\n  "date\\n": "1"\n', ["p.yaml:3: env.'date\\n'", "not a valid environment"]),
    ('model: m\nenv:\n  "X;touch /tmp/pwned;Y": "1"\n', ["p.yaml:3: env.", "not a valid"]),
    ("model: m\nenv:\n  1X: a\n", ["p.yaml:3: env.'1X'"]),
    ('model: m\nenv:\n  "": a\n', ["p.yaml:3: env.''"]),
    ('model: m\nenv:\n  "A=B": a\n', ["p.yaml:3: env.'A=B'"]),
    ('model: m\nenv:\n  "A B": a\n', ["p.yaml:3: env.'A B'"]),
    ('model: m\nenv:\n  "\\u00c9T\\u00c9": a\n', ["p.yaml:3: env.'ÉTÉ'"]),
    ("model: m\nenv:\n  X:\n", ["p.yaml:3: env.X: environment values must be strings, not null"]),
    ("model: m\nenv:\n  X: [a]\n", ["p.yaml:3: env.X", "not a list"]),
    ("model: m\nenv:\n  X: {a: 1}\n", ["p.yaml:3: env.X", "not a mapping"]),
    ('model: m\nenv:\n  X: "a\\0b"\n', ["p.yaml:3: env.X: the value contains a NUL"]),
    ('name: "x\\n"\nmodel: m\n', ["p.yaml:1: name: profile name 'x\\n'"]),
    ("name: a/b\nmodel: m\n", ["p.yaml:1: name:"]),
    ("name: -x\nmodel: m\n", ["p.yaml:1: name:"]),
    ("model: --help\n", ["p.yaml:1: model:", "starts with '-'", "./--help"]),
    ('model: "m\\0"\n', ["p.yaml:1: model:", "NUL"]),
    ("model: m\nengine_args:\n  max-num-seqs: 010\n", ["p.yaml:3: max-num-seqs: YAML reads 010"]),
    ("model: m\nengine_args:\n  max-model-len: 0x1000\n", ["p.yaml:3: max-model-len: YAML reads"]),
    ("model: m\nengine_args:\n  max-num-seqs: 1:30\n", ["p.yaml:3: max-num-seqs: YAML reads 1:30"]),
    ("model: m\nengine_args:\n  gpu-memory-utilization: .nan\n", ["p.yaml:3: gpu-memory-util"]),
    ("model: m\nengine_args:\n  gpu-memory-utilization: .inf\n", ["p.yaml:3: gpu-memory-util"]),
    ("model: m\nengine_args:\n  cpu-offload-gb: .inf\n", ["p.yaml:3: cpu-offload-gb", "finite"]),
    ("model: m\nengine_args:\n  cpu-offload-gb: -.inf\n", ["p.yaml:3: cpu-offload-gb", "finite"]),
    ('model: m\nengine_args:\n  served-model-name: ["a\\0"]\n', ["p.yaml:3: served-model-name"]),
    (BILLION_LAUGHS, ["p.yaml:", "expands to more than 200,000 values"]),
    (SEVEN_LEVEL_BOMB, ["p.yaml:", "expands to more than 200,000 values"]),
    ("model: m\nengine_args:\n  additional-config: &a [*a]\n", ["p.yaml:3:", "contains itself"]),
    ("model: m\nengine_args: &a {x: *a}\n", ["p.yaml:2:", "contains itself"]),
    ("model: m\nx: " + "[" * 150 + "]" * 150 + "\n", ["p.yaml:2:", "nested more than 100"]),
    ("model: m\nengine_args:\n  a: 1\n  a: 2\n", ["p.yaml:4: a: duplicate key"]),
    (b"model: m\ndescription: caf\xe9\n", ["p.yaml:2: cannot read profile file: byte 0xe9"]),
    (b"model: m\n\x00\n", ["p.yaml:2:", "NUL"]),
    ("- model: m\n", ["p.yaml:1:", "must be a mapping"]),
    ("model: m\nengine_args: [a]\n", ["p.yaml:2: engine_args: must be a mapping"]),
    ("model: m\nengine_args:\n  enforce-eager: yes please\n", ["p.yaml:3: enforce-eager"]),
    ('model: m\nengine_args:\n  "max-num-seqs\\n": 4\n', ["p.yaml:3:", "unknown vLLM engine"]),
    ("model: m\nentrypoint: 010\n", ["p.yaml:2: entrypoint: unknown entrypoint '010'"]),
]


@pytest.mark.parametrize("body, fragments", PROFILE_REFUSED)
def test_hostile_profile_files_are_refused_naming_file_line_and_key(run, tmp_path, body, fragments):
    write(tmp_path / "p.yaml", body)
    assert_refused(run("validate", "p.yaml"), *fragments)


def test_a_profile_file_over_4_mib_is_refused_unread(run, tmp_path):
    write(tmp_path / "p.yaml", "model: m\n" + "# padding\n" * 500_000)
    assert_refused(run("validate", "p.yaml"), "p.yaml: profile file is larger than 4 MiB")


# Odd but valid: what was written is what renders.
PROFILE_AS_WRITTEN = [
    ("env: {OCTAL: 010, VER: 1.10, TIME: 12:30}", ["OCTAL=010 VER=1.10 TIME=12:30 vllm serve m"]),
    ("env: {ON: true, OFF: no, DAY: 2024-01-01}", ["ON=true OFF=no DAY=2024-01-01"]),
    ("env: {X: '$(id)', Y: '`id`', Z: \"a'b\"}", ["X='$(id)' Y='`id`' Z='a'\"'\"'b'"]),
    ("engine_args: {served-model-name: 1.10}", ["--served-model-name 1.10"]),
    ("engine_args: {served-model-name: [1.10, 2.0, 010]}", ["--served-model-name 1.10 2.0 010"]),
    ("engine_args: {served-model-name: -x}", ["--served-model-name=-x"]),
    ("engine_args: {chat-template: '--port=1'}", ["--chat-template=--port=1"]),
    ("engine_args: {tokenizer: 'a b;c'}", ["--tokenizer 'a b;c'"]),
    ("engine_args: {max-model-len: -1}", ["--max-model-len -1"]),
    ("engine_args: {max-num-seqs: 1_000}", ["--max-num-seqs 1000"]),
    ("engine_args: {served-model-name: 2024-01-01}", ["--served-model-name 2024-01-01"]),
    ("description: 1.10", ["vllm serve m"]),
]


@pytest.mark.parametrize("extra, fragments", PROFILE_AS_WRITTEN)
def test_odd_profile_values_render_exactly_as_written(run, tmp_path, extra, fragments):
    write(tmp_path / "profiles" / "odd.yaml", f"model: m\n{extra}\n")
    result = run("render", "odd")
    assert result.exit_code == 0, result.output
    for fragment in fragments:
        assert fragment in result.output


def test_a_numeric_profile_name_keeps_its_text(run, tmp_path):
    write(tmp_path / "profiles" / "odd.yaml", "name: 1.10\ndescription: 1.10\nmodel: m\n")
    shown = json.loads(run("profiles", "show", "1.10", "--format", "json").output)
    assert (shown["name"], shown["description"]) == ("1.10", "1.10")


def test_k8s_escapes_kubelet_references_and_keeps_the_header_one_line(run, tmp_path):
    write(
        tmp_path / "profiles" / "odd.yaml",
        "model: m\ndescription: \"two\\nlines: here\"\nenv: {X: '$(HF_TOKEN)'}\n"
        "engine_args: {served-model-name: '$(HF_TOKEN)'}\n",
    )
    result = run("render", "odd", "--format", "k8s")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "# vprof profile odd: two lines: here"
    deployment = next(yaml.safe_load_all(result.output))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--served-model-name", "$$(HF_TOKEN)"]
    assert container["env"][0] == {"name": "X", "value": "$$(HF_TOKEN)"}


# ---------------------------------------------------------------------------- --env / --set

FLAG_REFUSED_RENDER = [
    (["--env", "X;touch /tmp/pwned;Y=1"], ["--env: 'X;touch /tmp/pwned;Y' is not a valid"]),
    (["--env", "date\n=1"], ["--env: 'date\\n' is not a valid"]),
    (["--env", "=1"], ["--env: expected NAME=VALUE"]),
    (["--env", "NOEQUALS"], ["--env: expected NAME=VALUE"]),
    (["--env", "1X=1"], ["--env: '1X' is not a valid"]),
    (["--env", "X=a\x00b"], ["--env: the value of X contains a NUL"]),
    (["--set", "additional-config=&a [*a]"], ["--set additional-config: a value contains itself"]),
    (["--set", "max-num-seqs=010"], ["--set max-num-seqs: YAML reads 010 as octal 8"]),
    (["--set", "max-model-len=0x10"], ["--set max-model-len: YAML reads 0x10 as 16"]),
    (["--set", "additional-config={a: ["], ["--set additional-config: malformed YAML"]),
    (
        ["--set", "gpu-memory-utilization=.nan"],
        ["gpu-memory-utilization: expected a finite number"],
    ),
    (["--set", "gpu-memory-utilization=.inf"], ["gpu-memory-utilization: expected a finite"]),
    (["--set", "cpu-offload-gb=.inf"], ["cpu-offload-gb: expected a finite number"]),
    (["--set", f"additional-config={BILLION_LAUGHS.replace(chr(10), ', ')}"], ["--set additi"]),
    (["--set", "noequals"], ["--set 'noequals' is not KEY=VALUE"]),
    (["--set", "=1"], ["--set '=1' is not KEY=VALUE"]),
    (["--set", "served-model-name=a\x00b"], ["served-model-name", "NUL"]),
    (["--set", "served-model-name=\udcff"], ["served-model-name: the value is not valid Unicode"]),
    (["--set", "max-num-seqs=\udcff"], ["--set max-num-seqs: malformed YAML: not valid Unicode"]),
    (["--env", "X=\udcff"], ["--env: the value of X is not valid Unicode"]),
    (["--model", "\udcff"], ["model: the model name is not valid Unicode"]),
    (["--model", "-x"], ["model: the model '-x' starts with '-'"]),
    (["--model", "m\x00"], ["model: the model name contains a NUL"]),
    (["--format", "docker", "--image", "-x"], ["--image: '-x' is not a container image"]),
    (["--replicas", "-1"], ["Invalid value for '--replicas'"]),
    (["--port", "0"], ["Invalid value for '--port'"]),
    (["--port", "70000"], ["Invalid value for '--port'"]),
    (["--port", "nan"], ["Invalid value for '--port'"]),
]


@pytest.mark.parametrize("args, fragments", FLAG_REFUSED_RENDER)
def test_hostile_render_flags_are_refused_naming_the_flag(run, args, fragments):
    assert_refused(run("render", "base", *args), *fragments)


FLAG_AS_WRITTEN_RENDER = [
    (["--set", "served-model-name=1.10"], "shell", ["--served-model-name 1.10"]),
    (["--set", "served-model-name=a b"], "shell", ["--served-model-name 'a b'"]),
    (["--set", "served-model-name=--help"], "shell", ["--served-model-name=--help"]),
    (["--set", "served-model-name=foo: bar"], "shell", ["--served-model-name 'foo: bar'"]),
    (["--set", "served-model-name='1.10'"], "shell", ["--served-model-name 1.10"]),
    (["--env", "X=$(id)"], "shell", ["X='$(id)' vllm serve"]),
    (["--env", "X=a\nb"], "shell", ["X='a\nb' vllm serve"]),
    (["--set", "served-model-name=$(HF_TOKEN)"], "k8s", ["- $$(HF_TOKEN)"]),
    (["--env", "X=$(HF_TOKEN)"], "k8s", ["value: $$(HF_TOKEN)"]),
    (["--set", "served-model-name=`id`"], "docker", ["--served-model-name '`id`'"]),
]


@pytest.mark.parametrize("args, fmt, fragments", FLAG_AS_WRITTEN_RENDER)
def test_odd_render_flags_render_exactly_as_written(run, args, fmt, fragments):
    result = run("render", "base", "--format", fmt, *args)
    assert result.exit_code == 0, result.output
    for fragment in fragments:
        assert fragment in result.output
    if fmt == "shell":  # and the shell reads back exactly those words
        words = shlex.split(result.output)
        assert words[words.index("vllm") :] == json.loads(
            run("render", "base", "--format", "argv", *args).output
        )


@pytest.mark.parametrize("empty", ["null", "~", ""])
def test_null_still_drops_a_string_flag(run, empty):
    result = run(
        "render", "base", "--set", "served-model-name=x", "--set", f"served-model-name={empty}"
    )
    assert result.exit_code == 0 and "--served-model-name" not in result.output


# ---------------------------------------------------------------------------- workload files

W = "prompt_tokens: 10\noutput_tokens: 3\n"
WORKLOAD_REFUSED = [
    (
        "prompt_tokens: .inf\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens: a token count must be a finite"],
    ),
    (
        "prompt_tokens: .nan\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens: a token count must be a finite"],
    ),
    (
        "prompt_tokens: 1e20\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens:", "YAML reads this as text"],
    ),
    (
        "prompt_tokens: 1.0e+20\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens: a token count must be between 1 and 10,000,000"],
    ),
    (
        "prompt_tokens: " + "9" * 400 + "\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens:", "got 9.99e+399"],
    ),
    (
        "prompt_tokens: {kind: lognormal, mean: 100, sigma: 1000}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.sigma"],
    ),
    (
        "prompt_tokens: {kind: lognormal, mean: .inf, sigma: 0.5}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.mean", "finite"],
    ),
    (
        "prompt_tokens: {kind: normal, mean: 100, stddev: -1}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.stddev"],
    ),
    (
        "prompt_tokens: {kind: normal, mean: 100, stddev: .nan}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.stddev", "finite"],
    ),
    (
        "prompt_tokens: {kind: uniform, min: 50, max: .inf}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.max"],
    ),
    (
        W + "prefix: {groups: 1000000000, length_tokens: 8}\n",
        ["w.yaml:3: prefix.groups: must be between 1 and 100,000"],
    ),
    (
        W + "prefix: {groups: 2, length_tokens: 8, share: .nan}\n",
        ["w.yaml:3: prefix.share", "finite"],
    ),
    (
        W + "prefix: {groups: 2, length_tokens: 8, zipf_s: .inf, popularity: zipf}\n",
        ["w.yaml:3: prefix.zipf_s"],
    ),
    (W + "prefix: {groups: 2, length_tokens: .inf}\n", ["w.yaml:3: prefix.length_tokens"]),
    (
        "endpoint: chat\n" + W + "conversation: {turns: 3, max_context_tokens: .inf}\n",
        ["w.yaml:4: conversation.max_context_tokens"],
    ),
    (
        "endpoint: chat\n" + W + "conversation: {turns: .nan}\n",
        ["w.yaml:4: conversation.turns", "finite"],
    ),
    (
        "prompt_tokens: {kind: empirical, values: [.inf]}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.values"],
    ),
    (
        "prompt_tokens: {kind: empirical, values: [0, 5]}\noutput_tokens: 3\n",
        ["w.yaml:1: prompt_tokens.values"],
    ),
    (W + "seed: .inf\n", ["w.yaml:3: seed: must be an integer"]),
    ("endpoint: 010\n" + W, ["w.yaml:1: endpoint: unknown endpoint '010'"]),
    (BILLION_LAUGHS, ["w.yaml:", "expands to more than 200,000 values"]),
    (W + "x: &a [*a]\n", ["w.yaml:3:", "contains itself"]),
]


@pytest.mark.parametrize("body, fragments", WORKLOAD_REFUSED)
def test_hostile_workload_files_are_refused_naming_file_line_and_key(
    run, tmp_path, body, fragments
):
    write(tmp_path / "w.yaml", body)
    assert_refused(run("workloads", "show", "./w.yaml", "-n", "1"), *fragments)


DATA_REFUSED = [
    # (data file name, bytes, fragments)
    ("lengths.txt", b"5\n\xff\xfe\n", ["lengths.txt:2: byte 0xff is not UTF-8"]),
    ("lengths.txt", b"5\n1e20\n", ["lengths.txt:2: expected one integer token count"]),
    (
        "lengths.txt",
        b"5\n" + b"9" * 30 + b"\n",
        ["lengths.txt:2: must be between 1 and 10,000,000"],
    ),
    ("lengths.txt", b"0\n", ["lengths.txt:1: must be between 1"]),
    ("prompts.jsonl", b'{"prompt": "caf\xe9"}\n', ["prompts.jsonl:1: byte 0xe9 is not UTF-8"]),
    (
        "prompts.jsonl",
        b'{"prompt": "a"}\n{"prompt": "\\ud800"}\n',
        ["prompts.jsonl:2: prompt: the prompt holds a lone surrogate"],
    ),
    (
        "prompts.jsonl",
        b'{"prompt": "a", "output_tokens": 100000000000}\n',
        ["prompts.jsonl:1: output_tokens: must be a positive integer up to"],
    ),
    (
        "prompts.jsonl",
        b'{"prompt": "a", "output_tokens": NaN}\n',
        ["prompts.jsonl:1: output_tokens"],
    ),
    ("prompts.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", ["prompts.jsonl:1: not JSON"]),
    (
        "prompts.jsonl",
        b'{"prompt": "a", "output_tokens": ' + b"9" * 5000 + b"}\n",
        ["prompts.jsonl:1: not usable JSON"],
    ),
]


@pytest.mark.parametrize("name, data, fragments", DATA_REFUSED)
def test_hostile_data_files_are_refused_naming_file_and_line(run, tmp_path, name, data, fragments):
    write(tmp_path / name, data)
    write(
        tmp_path / "w.yaml", f"prompt_tokens: {{kind: empirical, file: {name}}}\noutput_tokens: 3\n"
    )
    assert_refused(run("workloads", "show", "./w.yaml", "-n", "1"), *fragments)


def test_a_numeric_workload_name_keeps_its_text(run, tmp_path):
    write(tmp_path / "w.yaml", "name: 1.10\ndescription: 2.0\n" + W)
    result = run("workloads", "show", "./w.yaml", "-n", "1")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("name: '1.10'\ndescription: '2.0'\n")


# ---------------------------------------------------------------------------- traffic files

T = "kind: steady\nduration_s: 10\n"
TRAFFIC_REFUSED = [
    ("kind: steady\nduration_s: .inf\n", ["t.yaml:2: duration_s: must be a finite number"]),
    ("kind: steady\nduration_s: .nan\n", ["t.yaml:2: duration_s: must be a finite number"]),
    (T + "users: 1e20\n", ["t.yaml:3: users: must be a whole number", "YAML reads this as text"]),
    (T + "users: 1.0e+20\n", ["t.yaml:3: users: must be between 0 and 1,000,000"]),
    (T + "users: 2.5\n", ["t.yaml:3: users: must be a whole number"]),
    (T + "users: .inf\n", ["t.yaml:3: users: must be a finite number"]),
    ("kind: open-loop\nduration_s: 10\nrate_rps: .inf\n", ["t.yaml:3: rate_rps: must be a finite"]),
    (
        "kind: open-loop\nduration_s: 86400\nrate_rps: 1000\n",
        ["t.yaml:3: rate_rps:", "schedules 86,400,000 requests"],
    ),
    (T + "warmup_s: -1\n", ["t.yaml:3: warmup_s: must be between 0 and 86,400"]),
    (
        "kind: open-loop\nduration_s: 10\nrate_rps: 1\nprocess: gamma\nburstiness: .inf\n",
        ["t.yaml:5: burstiness"],
    ),
    (
        "kind: open-loop\nduration_s: 10\nrate_rps: 1\nmax_in_flight: .nan\n",
        ["t.yaml:4: max_in_flight"],
    ),
    (T + "spawn_rate: .inf\n", ["t.yaml:3: spawn_rate"]),
    (T + "duration_s: 5\n", ["t.yaml:3: duration_s: duplicate key"]),
    ("kind: 010\nduration_s: 10\n", ["t.yaml:1: kind: unknown kind '010'"]),
    (SEVEN_LEVEL_BOMB, ["t.yaml:", "expands to more than 200,000 values"]),
    (
        "kind: spike\nduration_s: 10\nusers: 0\nspike_users: 0\n",
        ["t.yaml:3: users: users is 0 and spike_users is 0 too: no request would ever be sent"],
    ),
    (
        "kind: spike\nduration_s: 10\nusers: 0\n",
        ["t.yaml:3: users: users is 0 and spike_users is 0 too"],
    ),
    (
        "kind: spike\nduration_s: 10\nusers: 0\nspike_users: 8\nspike_at_s: 10\nspike_s: 5\n",
        ["t.yaml:3: users: users is 0 and the spike (spike_at_s, spike_s) never falls within"],
    ),
    (
        b"kind: steady\nduration_s: 10\ndescription: \xff\n",
        ["t.yaml:3: cannot read the traffic shape file: byte 0xff"],
    ),
]


@pytest.mark.parametrize("body, fragments", TRAFFIC_REFUSED)
def test_hostile_traffic_files_are_refused_naming_file_line_and_key(run, tmp_path, body, fragments):
    write(tmp_path / "t.yaml", body)
    assert_refused(run("traffic", "show", "t.yaml"), *fragments)


# ---------------------------------------------------------------------------- number flags


@pytest.fixture
def runs_dir(tmp_path):
    """A run folder with 40 records over 100 s (what summarize and plan read)."""
    write_run(tmp_path / "runs" / "a", synth_records(40, rate_rps=0.4, start=T0))
    return str(tmp_path / "runs")


FLAGS_REFUSED = [
    (
        ["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "nan"],
        ["--rps", "must be a finite number, got nan"],
    ),
    (["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "inf"], ["--rps", "finite"]),
    (["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "-1"], ["--rps", "must be more than 0"]),
    (
        ["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "abc"],
        ["--rps", "'abc' is not a number"],
    ),
    (
        ["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "4", "--headroom", "nan"],
        ["--headroom", "finite"],
    ),
    (
        ["plan", "{runs}", "--slo", "ttft_p95=1s", "--rps", "4", "--headroom", "-0.1"],
        ["--headroom"],
    ),
    (
        ["plan", "{runs}", "--slo", "ttft_p95=" + "9" * 400 + "ms", "--rps", "4"],
        ["--slo: ttft_p95=", "is not a finite duration"],
    ),
    (
        ["summarize", "{runs}", "--timeline", "--interval", "-1"],
        ["--interval", "must be more than 0"],
    ),
    (["summarize", "{runs}", "--timeline", "--interval", "nan"], ["--interval", "finite"]),
    (
        ["summarize", "{runs}", "--timeline", "--interval", "1e-9"],
        ["--interval: ", "timeline rows (at most 100,000)", "use an interval of at least"],
    ),
    (
        ["summarize", "{runs}", "--save", "--timeline", "--interval", "1e-9"],
        ["--interval: ", "timeline rows"],
    ),
    (["compare", "{runs}", "{runs}", "--n-boot", "0"], ["--n-boot"]),
    (["sweep", "chunked", "base", "--sizes", "a,b"], ["--sizes: 'a' is not a whole number"]),
    (
        ["sweep", "chunked", "base", "--sizes", "0"],
        ["--sizes: must be between 1 and 10,000,000, got 0"],
    ),
    (["sweep", "chunked", "base", "--sizes", "1e20"], ["--sizes: must be between 1"]),
    (["sweep", "chunked", "base", "--sizes", "128.5"], ["--sizes: must be a whole number"]),
    (["sweep", "chunked", "base", "--sizes", ""], ["--sizes: expected a comma-separated list"]),
    (["sweep", "chunked", "base", "--sizes", "128,,256"], ["--sizes: an empty item"]),
    (["sweep", "load", "base", "--levels", "abc"], ["--levels: 'abc' is not a number"]),
    (["sweep", "load", "base", "--levels", "nan"], ["--levels: must be a finite number"]),
    (["sweep", "load", "base", "--levels", "2,inf"], ["--levels: must be a finite number"]),
    (["sweep", "load", "base", "--levels", "-1"], ["--levels: must be more than 0"]),
    (
        ["sweep", "load", "base", "--levels", "2.5", "--traffic", "steady"],
        ["--levels: must be a whole number", "closed-loop"],
    ),
    (["sweep", "load", "base", "--levels", "2", "--rps", "nan"], ["--rps", "finite"]),
    (["sweep", "batched-tokens", "base", "--rungs", "0"], ["--rungs"]),
    (["sweep", "set", "base", "max-num-seqs=010,16"], ["--set max-num-seqs: YAML reads 010"]),
    (["sweep", "set", "base", "max-num-seqs=16,,32"], ["max-num-seqs: an empty value"]),
    (["bench", "base", "--out", "{file}"], ["--out", "is a file, not a folder"]),
    (["bench", "base", "--out", "{file}/sub"], ["--out", "a parent of"]),
    (["bench", "base", "--out", "/proc/vprof-runs"], ["--out", "cannot write in '/proc'"]),
    (["bench", "base", "--processes", "0"], ["--processes"]),
    (["sweep", "chunked", "base", "--out", "{file}"], ["--out", "is a file"]),
    (["emulate", "--ttft-ms", "nan"], ["--ttft-ms", "finite"]),
    (["emulate", "--itl-ms", "inf"], ["--itl-ms", "finite"]),
    (["emulate", "--jitter-ms", "-1"], ["--jitter-ms"]),
    (["emulate", "--max-model-len", "0"], ["--max-model-len"]),
    (["emulate", "--tokenizer", "{file}"], ["--tokenizer: not a tokenizer.json"]),
    (["launch", "base", "--timeout", "nan"], ["--timeout", "finite"]),
    (["workloads", "show", "chat", "-n", "-1"], ["--samples"]),
    (["workloads", "show", "chat", "--tokenizer", "{file}"], ["cannot read the tokenizer"]),
]


@pytest.mark.parametrize("args, fragments", FLAGS_REFUSED)
def test_hostile_number_and_path_flags_are_refused_naming_the_flag(
    run, tmp_path, runs_dir, args, fragments
):
    garbage = write(tmp_path / "garbage.bin", bytes(range(256)) * 4)
    args = [a.format(runs=runs_dir, file=garbage) for a in args]
    assert_refused(run(*args), *fragments)
    for name in ("summary.json", "timeline.csv"):  # nothing half-written
        assert not (tmp_path / "runs" / "a" / name).exists()


# ---------------------------------------------------------------- units are said, never guessed

SLO_REFUSED = [
    ("errors=0.5", ["errors='0.5' has no unit", "errors=0.5%", "errors=50% if 0.5 is a fraction"]),
    ("errors=5", ["errors='5' has no unit", "errors=5%"]),
    ("ttft_p95=0.5", ["ttft_p95='0.5' has no unit", "ttft_p95=0.5ms or ttft_p95=0.5s"]),
    ("ttft_p95=500,tpot_p95=50ms", ["ttft_p95='500' has no unit"]),
    ("ttft_p95=0ms", ["ttft_p95='0ms': a bound must be more than 0"]),
    ("tpot_p99=0s", ["tpot_p99='0s': a bound must be more than 0"]),
    ("ttft_p95=-5ms", ["ttft_p95='-5ms': a bound must be more than 0"]),
    ("e2el=2d", ["e2el='2d': unknown unit 'd'"]),
    ("ttft_p95=100000s", ["is more than a day"]),
    ("errors=-1%", ["must be between 0 and 100 %"]),
    ("errors=nan%", ["errors='nan%' is not a rate"]),
]


@pytest.mark.parametrize("command", ["summarize", "plan", "report", "bench", "tune"])
@pytest.mark.parametrize("slo, fragments", SLO_REFUSED)
def test_an_slo_term_without_its_unit_or_with_a_bound_never_met_is_refused(
    run, tmp_path, runs_dir, command, slo, fragments
):
    args = {
        "summarize": ["summarize", runs_dir],
        "plan": ["plan", runs_dir, "--rps", "4"],
        "report": ["report", runs_dir, "-o", str(tmp_path / "r.html")],
        "bench": ["bench", "base", "--out", str(tmp_path / "out")],
        "tune": ["tune", "chunked-512", "--out", str(tmp_path / "out")],
    }[command]
    assert_refused(run(*args, "--slo", slo), "--slo", *fragments)
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "slo, ms, errors",
    [
        ("ttft_p95=0.5s", 500.0, None),
        ("ttft_p95=500 ms,errors=0.5%", 500.0, 0.005),
        ("tpot_p99=40000us,errors=0", 40.0, 0.0),
        ("ttft_p95=1e3ms,errors=100%", 1000.0, 1.0),
    ],
)
def test_an_slo_with_its_units_reads_as_written(slo, ms, errors):
    from vprof.analysis.slo import parse_slo

    parsed = parse_slo(slo)
    assert parsed.targets[0].threshold_ms == ms and parsed.max_error_rate == errors
    assert parse_slo(str(parsed)) == parsed
