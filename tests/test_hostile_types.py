"""Hostile input: types are strict and hints fit (issue 26 item 8).

Text settings must be text (a list is not a name), a quoted number is told to lose its quotes,
a prompt dataset's empty prompt and an empirical ``file:`` that is a folder are refused at
their line, a folder named by a flag or a variable that does not exist is refused (as
``--profiles-dir`` always was), Markdown cells are escaped, JSON output parses with a strict
parser, and YAML scalars in ``env`` keep their text.
"""

from __future__ import annotations

import json

import pytest
from test_hostile_input import assert_refused, run, write  # noqa: F401  (run is a fixture)


def _strict_json(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------- text is text

SHAPE = "kind: steady\nusers: 2\nduration_s: 5\n"


@pytest.mark.parametrize(
    "head, fragments",
    [
        ("name: [a, b]\n", ["s.yaml:1: name: must be a non-empty string, got list ['a', 'b']"]),
        ('name: ""\n', ["s.yaml:1: name: must be a non-empty string"]),
        ("description: [1, 2]\n", ["s.yaml:1: description: must be a string, got list [1, 2]"]),
        ("description:\n", ["s.yaml:1: description: must be a string, got nothing"]),
        ("description: {a: 1}\n", ["s.yaml:1: description: must be a string, got dict"]),
    ],
)
def test_a_traffic_shapes_text_settings_must_be_text(run, tmp_path, head, fragments):  # noqa: F811
    path = write(tmp_path / "s.yaml", head + SHAPE)
    assert_refused(run("traffic", "show", str(path)), *fragments)


def test_text_settings_written_as_numbers_or_dates_keep_their_text(tmp_path):
    from vprof.traffic import get_shape

    shape = get_shape(write(tmp_path / "s.yaml", "name: 1.10\ndescription: 2024-01-01\n" + SHAPE))
    assert (shape.name, shape.description) == ("1.10", "2024-01-01")


# ---------------------------------------------------------------------------- number hints


@pytest.mark.parametrize(
    "file, text, fragments",
    [
        (
            "s.yaml",
            'kind: steady\nusers: "2"\nduration_s: 5\n',
            [
                "s.yaml:2: users: must be a whole number, got '2'",
                "a quoted number is text: write 2 without quotes",
            ],
        ),
        (
            "w.yaml",
            'name: w\nprompt_tokens: "300"\noutput_tokens: 8\n',
            [
                "w.yaml:2: prompt_tokens: must be a token count, got '300'",
                "write 300 without quotes",
            ],
        ),
        (
            "e.yaml",
            "name: w\nprompt_tokens: 3e2\noutput_tokens: 8\n",
            ["e.yaml:2: prompt_tokens:", "write exponents with a dot and a sign (1.0e+20)"],
        ),
    ],
)
def test_a_number_written_as_text_gets_the_hint_that_fits(run, tmp_path, file, text, fragments):  # noqa: F811
    path = write(tmp_path / file, text)
    command = "traffic" if file.startswith("s") else "workloads"
    result = run(command, "show", str(path))
    assert_refused(result, *fragments)
    if "quoted" in fragments[-1]:
        assert "exponent" not in result.output


# ---------------------------------------------------------------------------- data files


def test_an_empty_prompt_in_a_prompt_dataset_is_refused_at_its_line(run, tmp_path):  # noqa: F811
    write(tmp_path / "p.jsonl", '{"prompt": "hello there"}\n\n{"prompt": " \\n "}\n')
    path = write(
        tmp_path / "w.yaml",
        "name: w\nprompt_tokens: {kind: empirical, file: p.jsonl}\noutput_tokens: 8\n",
    )
    assert_refused(run("workloads", "show", str(path)), "p.jsonl:3: prompt: is empty")


def test_an_empirical_file_that_is_a_folder_says_so(run, tmp_path):  # noqa: F811
    (tmp_path / "lengths").mkdir()
    path = write(
        tmp_path / "w.yaml",
        "name: w\nprompt_tokens:\n  empirical: {file: lengths}\noutput_tokens: 8\n",
    )
    assert_refused(
        run("workloads", "show", str(path)),
        "w.yaml:3: prompt_tokens.empirical.file: is a folder, not a file",
    )


# ---------------------------------------------------------------------------- folders named


@pytest.mark.parametrize(
    "args, env, fragment",
    [
        (["workloads", "--dir", "/nonexistent"], {}, "--dir '/nonexistent' does not exist"),
        (["traffic", "--dir", "/nonexistent"], {}, "--dir '/nonexistent' does not exist"),
        (["workloads"], {"VPROF_WORKLOADS_DIR": "/nope"}, "$VPROF_WORKLOADS_DIR entry '/nope'"),
        (["traffic"], {"VPROF_TRAFFIC_DIR": "/nope"}, "$VPROF_TRAFFIC_DIR entry '/nope' does"),
        (["profiles"], {"VPROF_PROFILES_DIR": "/nope"}, "$VPROF_PROFILES_DIR entry '/nope'"),
        (["profiles", "--profiles-dir", "/nope"], {}, "--profiles-dir '/nope' does not exist"),
    ],
)
def test_a_named_folder_that_does_not_exist_is_refused_not_skipped(
    run,  # noqa: F811
    monkeypatch,
    args,
    env,
    fragment,
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert_refused(run(*args), fragment, "create it or fix the path")


def test_a_preset_looked_up_by_name_meets_the_same_check(monkeypatch):
    from vprof.common.errors import WorkloadError
    from vprof.traffic import get_shape
    from vprof.workloads import get_workload

    monkeypatch.setenv("VPROF_TRAFFIC_DIR", "/nope")
    with pytest.raises(WorkloadError, match="VPROF_TRAFFIC_DIR entry '/nope' does not exist"):
        get_shape("steady")
    monkeypatch.setenv("VPROF_WORKLOADS_DIR", "/nope")
    with pytest.raises(WorkloadError, match="VPROF_WORKLOADS_DIR entry '/nope' does not exist"):
        get_workload("chat")


# ---------------------------------------------------------------------------- output


def test_markdown_cells_escape_pipes_and_line_breaks(run, tmp_path):  # noqa: F811
    write(tmp_path / "shapes" / "odd.yaml", 'description: "a | b\\nc"\n' + SHAPE)
    result = run("traffic", "--dir", str(tmp_path / "shapes"), "--format", "markdown")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (row,) = [line for line in lines if line.startswith("| odd ")]
    assert "a \\| b c" in row
    bars = lambda line: line.replace("\\|", "").count("|")  # noqa: E731
    assert {bars(line) for line in lines if line.startswith("|")} == {bars(lines[0])}


def test_json_output_is_strict_json_with_null_for_what_is_not_a_number():
    from vprof.cli.output import json_text, render_rows

    rows = [{"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": float("-inf")}}]
    for fmt in ("json", "ndjson"):
        text = render_rows(rows, fmt)
        parsed = _strict_json(text if fmt == "json" else text.splitlines()[0])
        assert parsed in (
            [{"a": None, "b": [None, 1.5], "c": {"d": None}}],
            {"a": None, "b": [None, 1.5], "c": {"d": None}},
        )
    assert json_text({"x": 1e308 * 10}) == '{"x": null}'


def test_profiles_show_json_is_strict_and_nan_in_a_json_argument_is_refused(run, tmp_path):  # noqa: F811
    folder = tmp_path / "p"
    write(folder / "ok.yaml", "description: d\nmodel: m\nengine_args:\n  max-num-seqs: 8\n")
    result = run("profiles", "show", "ok", "--profiles-dir", str(folder), "--format", "json")
    assert result.exit_code == 0, result.output
    assert _strict_json(result.output)["name"] == "ok"
    write(folder / "nan.yaml", "model: m\nengine_args:\n  additional-config: {a: .nan}\n")
    assert_refused(
        run("profiles", "show", "nan", "--profiles-dir", str(folder), "--format", "json"),
        "nan.yaml:3: additional-config: expected JSON, whose numbers are finite",
    )


# ---------------------------------------------------------------------------- env as written


def test_env_values_keep_their_text_through_anchors_and_extends(run, tmp_path):  # noqa: F811
    folder = tmp_path / "p"
    write(folder / "base8.yaml", "model: m\nenv:\n  OCTAL: &o 010\n  COPY: *o\n  TAG: !!int 010\n")
    write(folder / "child8.yaml", "extends: base8\nenv:\n  MODE: 0755\n")
    result = run("render", "child8", "--profiles-dir", str(folder))
    assert result.exit_code == 0, result.output
    assert "OCTAL=010 COPY=010 TAG=010 MODE=0755 vllm serve m" in result.output
