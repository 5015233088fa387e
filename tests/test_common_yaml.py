"""The shared line-aware YAML reader and layered preset search (vprof.common)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vprof.common.errors import ProfileError, VprofError, WorkloadError
from vprof.common.presets import preset_files, preset_locations, yaml_files
from vprof.common.yamlfile import parse_yaml, read_yaml

# ---------------------------------------------------------------------------- yamlfile


def test_values_are_plain_and_every_key_path_has_its_line():
    doc = parse_yaml(
        "# header\nname: x\nengine_args:\n  port: 1\n  nested:\n    deep: [1, {k: v}]\n",
        "p.yaml",
    )
    assert type(doc.data) is dict and type(doc.data["engine_args"]) is dict
    assert doc.data == {
        "name": "x",
        "engine_args": {"port": 1, "nested": {"deep": [1, {"k": "v"}]}},
    }
    assert doc.line() == 2  # where the top-level mapping starts
    assert doc.line("name") == 2
    assert doc.line("engine_args", "port") == 4
    assert doc.line("engine_args", "nested", "deep") == 6
    assert doc.line("engine_args", "nested", "deep", 1, "k") == 6
    assert doc.line("engine_args", "missing") is None


def test_non_string_keys_are_looked_up_as_strings():
    doc = parse_yaml("2: two\ntrue: yes\n", "f.yaml")
    assert doc.data == {2: "two", True: True}
    assert (doc.line(2), doc.line("2"), doc.line(True)) == (1, 1, 2)


def test_aliases_and_merges_point_at_where_the_keys_were_written():
    doc = parse_yaml("base: &b\n  port: 1\nuse: *b\nmerged:\n  <<: *b\n  host: h\n", "f.yaml")
    assert doc.data["use"] == {"port": 1} and doc.data["merged"] == {"port": 1, "host": "h"}
    assert doc.line("use", "port") == 2
    assert doc.line("merged", "port") == 2 and doc.line("merged", "host") == 6


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_document_is_none(text):
    doc = parse_yaml(text, "e.yaml")
    assert doc.data is None and doc.lines == {}


def test_duplicate_keys_are_an_error_in_the_given_class():
    with pytest.raises(WorkloadError) as info:
        parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "d.yaml", WorkloadError)
    err = info.value
    assert (err.path, err.line, err.key) == ("d.yaml", 4, "c")
    assert err.format() == "d.yaml:4: c: duplicate key (first set on line 3)"


def test_malformed_yaml_names_the_line_with_the_callers_wording():
    with pytest.raises(ProfileError) as info:
        parse_yaml("a: 1\nb: [2\nc: 3\n", "m.yaml", ProfileError)
    assert info.value.line == 3
    assert info.value.message.startswith("malformed YAML: ")
    assert info.value.hint == "check indentation and quoting"
    with pytest.raises(WorkloadError, match="not valid YAML"):
        parse_yaml("a: 1\n  b: 2\n", "m.yaml", WorkloadError, invalid="not valid YAML")


def test_a_mapping_key_must_be_a_plain_value():
    with pytest.raises(VprofError, match="a mapping key must be a plain value") as info:
        parse_yaml("? [a, b]\n: 1\n", "k.yaml")
    assert info.value.line == 1


def test_read_yaml_reports_unreadable_files(tmp_path: Path):
    with pytest.raises(WorkloadError) as info:
        read_yaml(tmp_path / "nope.yaml", WorkloadError, what="the workload file")
    assert info.value.message == "cannot read the workload file: No such file or directory"
    (tmp_path / "bin.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ProfileError, match="cannot read profile file: byte 0xff is not UTF-8"):
        read_yaml(tmp_path / "bin.yaml", ProfileError, what="profile file")


def test_read_yaml_names_the_file(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text("a: 1\n")
    doc = read_yaml(path)
    assert (doc.path, doc.data, doc.line("a")) == (str(path), {"a": 1}, 1)


# ---------------------------------------------------------------------------- presets


def test_locations_are_shipped_local_env_then_extra(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("VPROF_TEST_DIR", f"{tmp_path / 'e1'}:{tmp_path / 'e2'}:")
    found = preset_locations(tmp_path / "shipped", Path("local"), "VPROF_TEST_DIR", ["x", "y"])
    assert [(str(p), o) for p, o in found] == [
        (str(tmp_path / "shipped"), "shipped"),
        ("local", "local"),
        (str(tmp_path / "e1"), "env"),
        (str(tmp_path / "e2"), "env"),
        ("x", "extra"),
        ("y", "extra"),
    ]
    monkeypatch.delenv("VPROF_TEST_DIR")
    assert [o for _, o in preset_locations(None, Path("l"), "VPROF_TEST_DIR")] == ["local"]


def test_yaml_files_of_a_folder_a_file_and_nothing(tmp_path: Path):
    for name in ("b.yaml", "a.yml", "c.txt", "d.yaml"):
        (tmp_path / name).write_text("x: 1\n")
    (tmp_path / "sub.yaml").mkdir()
    assert [p.name for p in yaml_files(tmp_path)] == ["a.yml", "b.yaml", "d.yaml"]
    assert yaml_files(tmp_path / "c.txt") == [tmp_path / "c.txt"]
    assert yaml_files(tmp_path / "missing") == []


def test_preset_files_skip_missing_folders_files_and_repeats(tmp_path: Path, monkeypatch):
    for folder, name in (("low", "a.yaml"), ("high", "b.yaml")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text("x: 1\n")
    monkeypatch.setenv("VPROF_TEST_DIR", str(tmp_path / "missing"))
    locations = preset_locations(
        tmp_path / "low",
        tmp_path / "high",
        "VPROF_TEST_DIR",
        [tmp_path / "low", tmp_path / "high" / "b.yaml", tmp_path / "high"],
    )
    assert preset_files(locations) == [tmp_path / "low" / "a.yaml", tmp_path / "high" / "b.yaml"]
