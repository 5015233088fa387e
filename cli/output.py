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


def json_text(data: Any, **options: Any) -> str:
    """``data`` as strict JSON (RFC 8259, what every parser reads): a number that is not finite
    (NaN, infinity: "not measured") is ``null``, never Python's ``NaN``."""
    return json.dumps(_finite(data), allow_nan=False, default=str, **options)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


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
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value)


def _md(text: str) -> str:
    """A Markdown table cell: a ``|`` escaped, a line break a space (either would end it)."""
    return " ".join(text.replace("|", "\\|").splitlines())


def _select(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None
) -> list[dict[str, Any]]:
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    return [{c: row.get(c) for c in columns} for row in rows]


def render_rows(
    rows: Sequence[Mapping[str, Any]], fmt: str = "table", columns: Sequence[str] | None = None
) -> str:
    """Format ``rows`` (dicts sharing keys) as text in ``fmt``."""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    if fmt == "json":
        return json_text(_select(rows, columns), indent=2)
    if fmt == "ndjson":
        return "\n".join(json_text(row) for row in _select(rows, columns))
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().rstrip("\n")
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(map(_md, columns)) + " |"]
        lines.append("|" + "|".join("---" for _ in columns) + "|")
        lines += ["| " + " | ".join(map(_md, r)) + " |" for r in cells]
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


Part = tuple[str, "Sequence[Mapping[str, Any]] | str", "Sequence[str] | None"]


HUMAN = ("table", "markdown")  # formats read by people, where sentences go between tables


def emit_parts(parts: Sequence[Part], fmt: str = "table") -> None:
    """Print several named tables (or sentences) as one output.

    JSON: one object with a member per part, so the output parses as a single document;
    NDJSON: one object per line, each tagged with its ``part``; tables, Markdown and CSV:
    each part in turn, a blank line between. A single table prints as :func:`emit` would.
    Sentences meant only for people are left out of ``parts`` by their makers in JSON.
    """
    if len(parts) == 1 and not isinstance(parts[0][1], str):
        emit(parts[0][1], fmt, parts[0][2])
        return
    if fmt == "json":
        document = {
            name: rows if isinstance(rows, str) else _select(rows, columns)
            for name, rows, columns in parts
        }
        click.echo(json_text(document, indent=2))
        return
    if fmt == "ndjson":
        for name, rows, _ in parts:
            items = [{"text": rows}] if isinstance(rows, str) else rows
            for row in items:
                click.echo(json_text({"part": name, **row}))
        return
    for i, (_, rows, columns) in enumerate(parts):
        if i:
            click.echo()
        click.echo(rows if isinstance(rows, str) else render_rows(rows, fmt, columns))
