"""The library's folders, read from the one list of them: pyproject's ``package-dir``."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# import name → folder, as the package-dir mapping installs them
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
# the folders that hold Python code (profiles/ is data)
LIBRARY: list[str] = [d for d in PACKAGE_DIRS.values() if any((ROOT / d).glob("*.py"))]
