"""The code is ruff-clean and ruff-formatted (pyproject's ``[tool.ruff]``), and the library
type-checks with mypy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from library import LIBRARY

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("check", [("ruff", "check", "."), ("ruff", "format", "--check", ".")])
def test_ruff(check):
    result = _run(*check)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_on_the_library():
    result = _run("mypy", *LIBRARY)
    assert result.returncode == 0, result.stdout + result.stderr
