"""One way to print rows for every command: a terminal table, Markdown, CSV, JSON or NDJSON."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
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


TABLE_WIDTH = 120  # the columns a table fits when the output is not a terminal
LONG_CELL = 40  # a longer cell of a table too wide is a note below it


def table_width() -> int:
    """The columns a table may take: on a terminal its width (``COLUMNS`` first), else 120."""
    return _terminal_width() if sys.stdout.isatty() else TABLE_WIDTH


def _terminal_width() -> int:
    return max(60, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns)


def echo_note(line: str) -> None:
    """A note or a warning on stderr: on a terminal, wrapped to its width with later lines
    indented; in a log or a pipe one line, so grep finds it whole."""
    if sys.stderr.isatty():
        line = wrap(line, _terminal_width(), indent="  ")
    click.echo(line, err=True)


# A number and its unit stay on one line ("±1.3 %", "2 ms", "3.5 req/s").
_NUMBER_UNIT = re.compile(r"(\d) (?=%|ms\b|s\b|req/s|tokens\b|GiB\b|MB\b)")


def wrap(text: str, width: int, indent: str = "    ") -> str:
    """``text`` in lines of at most ``width``, later lines indented; words are not broken,
    nor a number from its unit."""
    kept = _NUMBER_UNIT.sub("\\1\u00a0", text)
    lines = textwrap.fill(
        kept, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )
    return lines.replace("\u00a0", " ")


def lift_long_cells(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    where: Callable[[Mapping[str, Any], str], str],
    width: int,
) -> tuple[list[dict[str, Any]], str]:
    """``rows`` with each cell longer than ``LONG_CELL`` (the first column's aside) replaced
    by a marker such as ``[1]``, and the notes those markers point to: ``[1] where: text``,
    one per distinct text, ``where(row, column)`` naming each cell that holds it."""
    notes: dict[str, list[str]] = {}  # in order of first sight: the markers' numbers
    numbers: dict[str, int] = {}
    lifted = []
    for row in rows:
        out = dict(row)
        for column in columns[1:]:
            text = _cell(row.get(column))
            if len(text) > LONG_CELL:
                numbers.setdefault(text, len(numbers) + 1)
                notes.setdefault(text, []).append(where(row, column))
                out[column] = f"[{numbers[text]}]"
        lifted.append(out)
    lines = [
        wrap(f"[{i}] {'; '.join(places)}: {text}", width)
        for i, (text, places) in enumerate(notes.items(), 1)
    ]
    return lifted, "\n".join(lines)


def _select(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None
) -> list[dict[str, Any]]:
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
    return [{c: row.get(c) for c in columns} for row in rows]


def render_rows(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = "table",
    columns: Sequence[str] | None = None,
    width: int | None = None,
) -> str:
    """Format ``rows`` (dicts sharing keys) as text in ``fmt``.

    A table fits ``width`` columns (default :func:`table_width`): when it would not, its long
    cells become notes below it, and columns that still do not fit continue in a block of
    their own below, the first column repeated so each row can be read.
    """
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
    width = width or table_width()
    notes = ""
    if _span(_widths(columns, cells)) > width:
        rows, columns, notes = _lift_sentences(rows, columns, width)
        cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = _widths(columns, cells)
    blocks = [
        _table_lines(
            [columns[i] for i in block],
            [[r[i] for i in block] for r in cells],
            [widths[i] for i in block],
        )
        for block in _column_blocks(widths, width)
    ]
    return "\n\n".join(blocks + ([notes] if notes else []))


def _lift_sentences(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], width: int
) -> tuple[Sequence[Mapping[str, Any]], Sequence[str], str]:
    """A too-wide table's sentences as notes below it, keyed by their row's first cell: a
    single column of them leaves the table for a list of its own; from several columns, long
    cells become markers. Names and paths, which have no spaces, stay (and may continue in a
    block below)."""
    first = columns[0]

    def wordy(column: str) -> bool:
        texts = (_cell(row.get(column)) for row in rows)
        return any(len(t) > LONG_CELL and " " in t.strip() for t in texts)

    found = [c for c in columns[1:] if wordy(c)]
    if len(found) == 1:
        (column,) = found
        listed = [
            wrap(f"{_cell(row.get(first))}: {text}", width)
            for row in rows
            if (text := _cell(row.get(column)))
        ]
        return rows, [c for c in columns if c != column], "\n".join([f"{column}:", *listed])
    if not found:
        return rows, columns, ""
    lifted, notes = lift_long_cells(
        rows, [first, *found], lambda row, column: f"{_cell(row.get(first))}, {column}", width
    )
    return lifted, columns, notes


def _widths(columns: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int]:
    return [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)


def _column_blocks(widths: Sequence[int], width: int) -> list[list[int]]:
    """The columns' indices in blocks that each fit ``width`` (a column wider alone still
    gets a block), every block after the first led by the first column."""
    blocks: list[list[int]] = [[0]]
    for i in range(1, len(widths)):
        if len(blocks[-1]) > 1 and _span([widths[j] for j in blocks[-1]] + [widths[i]]) > width:
            blocks.append([0])
        blocks[-1].append(i)
    return blocks


def _table_lines(
    columns: Sequence[str], cells: Sequence[Sequence[str]], widths: Sequence[int]
) -> str:
    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in cells)])


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
