"""One way to print rows for every command: a terminal table, Markdown, CSV, JSON or NDJSON."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import click

FORMATS = ("table", "markdown", "csv", "json", "ndjson")

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Output format.",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0 or abs(value) >= 100:
            return f"{value:,.1f}"
        return f"{value:.3g}" if abs(value) < 0.01 else f"{value:.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def render_rows(
    rows: Sequence[Mapping[str, Any]], fmt: str = "table", columns: Sequence[str] | None = None
) -> str:
    """Format ``rows`` (dicts sharing keys) as text in ``fmt``."""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    if fmt == "json":
        return json.dumps([{c: row.get(c) for c in columns} for row in rows], indent=2, default=str)
    if fmt == "ndjson":
        return "\n".join(json.dumps({c: row.get(c) for c in columns}, default=str) for row in rows)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines)
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def emit(
    rows: Sequence[Mapping[str, Any]], fmt: str = "table", columns: Sequence[str] | None = None
) -> None:
    """Print ``rows`` to stdout in ``fmt``."""
    click.echo(render_rows(rows, fmt, columns))
