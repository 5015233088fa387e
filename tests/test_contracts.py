"""One owner per contract: the run folder, profile → server, the load generator's options."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from library import LIBRARY

from vprof.locustfiles.optiontable import OPTIONS, STOP_TIMEOUT_S
from vprof.records import RunDir
from vprof.runs.loadgen import LoadSpec

ROOT = Path(__file__).resolve().parents[1]
RUN_FOLDER_FILES = (
    "run.json",
    "status.json",
    "records.arrow",
    "locust.json",
    "loadgen.jsonl",
    "metrics.jsonl",
    "server.log",
    "locust.log",
    "locust.out",
    "summary.json",
    "timeline.csv",
    "sweep.json",
    "tune.json",
    "host.jsonl",
)


def _library_modules() -> list[Path]:
    return sorted(p for folder in LIBRARY for p in (ROOT / folder).rglob("*.py"))


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_importing_analysis_loads_nothing_of_the_bench_orchestrator():
    code = (
        "import vprof.analysis, sys; "
        "print(sorted(m for m in sys.modules if m.startswith('vprof.runs')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_folder_file_names_are_spelled_in_one_library_module():
    spelled: dict[str, list[str]] = {}
    for module in _library_modules():
        literals = _string_literals(module)
        for name in RUN_FOLDER_FILES:
            if name in literals:
                spelled.setdefault(name, []).append(str(module.relative_to(ROOT)))
    owners = {tuple(modules) for modules in spelled.values()}
    assert owners == {("records/rundir.py",)}, spelled
    assert set(spelled) == set(RUN_FOLDER_FILES)


def test_profiles_are_adapted_to_the_host_in_one_place():
    callers = []
    for module in _library_modules():
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "adapt_for_host":
                    callers.append(str(module.relative_to(ROOT)))
    assert callers == ["server/start.py"]


# Run in its own interpreter: importing Locust here would gevent-patch the test process, and
# tests after it (emulators, sockets) would then depend on the order they run in.
_LOCUST_PARSER = """
import json, sys
import locust  # gevent patching first, as the locustfile does
from locust.argument_parser import get_parser
import vprof.locustfiles.options  # registers on Locust's parser, as -f does
parser = get_parser()  # fires init_command_line_parser: vprof's options are added
argv = json.loads(sys.argv[1])
registered = {flag: {"default": action.default, "dest": action.dest}
              for action in parser._actions for flag in action.option_strings}
print(json.dumps({"registered": registered, "parsed": vars(parser.parse_args(argv))},
                 default=str))
"""


def test_every_option_the_parent_passes_is_registered_by_the_locust_side_with_its_default(
    tmp_path,
):
    import json

    spec = LoadSpec(
        url="http://127.0.0.1:9",
        run_dir=RunDir(tmp_path / "run"),
        workload=str(tmp_path / "w.yaml"),
        traffic='{"kind": "steady"}',
        seed=7,
        salt="abc",
        model="tiny",
        tokenizer=str(tmp_path / "tok"),
        processes=2,
    )
    argv = spec.argv()
    assert argv[1:3] == ["-m", "locust"]
    out = subprocess.run(
        [sys.executable, "-c", _LOCUST_PARSER, json.dumps(argv[3:])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    seen = json.loads(out)
    registered, parsed = seen["registered"], seen["parsed"]
    flags = [token for token in argv[3:] if token.startswith("-")]
    unknown = [flag for flag in flags if flag not in registered]
    assert not unknown, f"the parent passes flags Locust does not register: {unknown}"
    for option in OPTIONS:
        action = registered[option.flag]
        assert action["default"] == option.default, option.flag
        assert action["dest"] == option.dest
    for dest, value in spec.options().items():
        assert parsed[dest] == value, dest
    # The stop timeout the parent passes is the one the locustfile uses when none is given.
    assert parsed["stop_timeout"] == STOP_TIMEOUT_S
    assert parsed["run_dir"] == str(spec.run_dir.path) and parsed["processes"] == 2


def test_the_packages_installed_are_the_folders_mapped():
    from library import PACKAGE_DIRS, PYPROJECT

    assert sorted(PYPROJECT["tool"]["setuptools"]["packages"]) == sorted(PACKAGE_DIRS)
