"""Registry commands start fast: they import none of vllm, torch, pandas, locust, numpy, pyarrow.

Each command runs in a fresh interpreter (as the console script would) and reports which heavy
modules ended up in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ["vllm", "torch", "pandas", "locust", "gevent", "numpy", "pyarrow"]

# argv[1]: the vprof arguments; argv[2]: modules to import first (to test the check itself)
_WRAPPER = """
import importlib, json, sys
args, preload, heavy = (json.loads(a) for a in sys.argv[1:4])
for name in preload:
    importlib.import_module(name)
sys.argv = ["vprof", *args]
from vprof.cli.main import cli
try:
    code = cli(standalone_mode=False)
except SystemExit as exc:
    code = exc.code
print("\\n@@" + json.dumps({"code": code, "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


def _run(
    args: list[str], cwd, preload: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> tuple[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, json.dumps(args), json.dumps(preload), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    output, _, report = proc.stdout.rpartition("\n@@")
    return output, json.loads(report)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["profiles"],
        ["render", "chunked-256"],
        ["profiles", "show", "baseline"],
        ["trace", "stats", "sample-trace"],
        ["schema", "profile"],
    ],
)
def test_registry_commands_import_no_heavy_library(args, tmp_path):
    output, report = _run(args, tmp_path)
    assert report["code"] in (0, None)
    assert output.strip(), "the command printed nothing"
    assert report["loaded"] == []


def test_the_check_notices_a_heavy_import(tmp_path):
    """Guards the guard: the same wrapper reports a heavy module once something imports it."""
    _, report = _run(["profiles"], tmp_path, preload=("numpy",))
    assert report["loaded"] == ["numpy"]


@pytest.mark.parametrize("line", ["vprof bench ch", "vprof bench base -w ", "vprof tune x -t "])
def test_shell_completion_imports_no_heavy_library(line, tmp_path):
    words = {"COMP_WORDS": line, "COMP_CWORD": str(line.count(" "))}
    output, report = _run([], tmp_path, env={"_VPROF_COMPLETE": "bash_complete", **words})
    assert output.startswith("plain,"), output
    assert report["loaded"] == []
