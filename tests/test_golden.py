"""Today's summaries, timelines, comparisons and report data equal the golden ones.

The golden outputs (``tests/data/golden.json``) were computed by the code before the summary
and the bootstrap were made fast, from run folders recorded against real vLLM and from seeded
synthetic runs (see ``tests/golden.py``). Floats agree to float rounding; counts, strings and
verdicts exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import golden
import pytest

REL = 1e-9  # float rounding: sums taken in another order, not another method


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return golden.run_folders(tmp_path_factory.mktemp("golden"))


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads(golden.GOLDEN.read_text())


@pytest.fixture(scope="module")
def now(runs: dict[str, Path]) -> dict[str, Any]:
    return golden.outputs(runs)


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Where ``new`` differs from ``old`` beyond float rounding."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{where}.{k}: only in one" for k in sorted(set(old) ^ set(new))]
        for key in sorted(set(old) & set(new)):
            out += differences(old[key], new[key], f"{where}.{key}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: {len(old)} items, now {len(new)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if (
        isinstance(old, numbers)
        and isinstance(new, numbers)
        and not isinstance(old, bool)
        and not isinstance(new, bool)
        and (isinstance(old, float) or isinstance(new, float))
    ):
        if math.isclose(old, new, rel_tol=REL, abs_tol=1e-12):
            return []
        return [f"{where}: {old!r}, now {new!r}"]
    return [] if old == new and type(old) is type(new) else [f"{where}: {old!r}, now {new!r}"]


def test_the_synthetic_runs_are_the_golden_ones(runs, expected):
    assert golden.fingerprint(runs) == expected["fingerprint"]


@pytest.mark.parametrize("part", ["summaries", "timelines", "report", "comparisons"])
def test_outputs_equal_the_golden_ones(part, now, expected):
    found = differences(expected[part], now[part], part)
    assert not found, "\n".join(found[:20])


def test_a_changed_number_is_found():
    old = {"a": [1.0, {"b": 2}], "c": "x"}
    assert differences(old, {"a": [1.0 + 1e-12, {"b": 2}], "c": "x"}) == []
    assert differences(old, {"a": [1.001, {"b": 2}], "c": "x"}) == [".a[0]: 1.0, now 1.001"]
    assert differences(old, {"a": [1.0, {"b": 3}], "c": "x"}) == [".a[1].b: 2, now 3"]
