"""Append-only columnar storage for records: an Arrow IPC stream written in batches.

Each batch is complete on disk once written, so a run that dies keeps every batch it
flushed; the reader stops cleanly at a torn tail and says so. Memory stays bounded by the
batch size. What is read is checked against vprof's schema: other files are refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.errors import RunError
from vprof.records.schema import (
    FIELDS,
    RequestRecord,
    arrow_schema,
    check_schema,
    check_values,
    conform,
)


class RecordWriter:
    """Buffer records and append them to ``path`` as Arrow record batches."""

    def __init__(self, path: Path, batch_size: int = 1000) -> None:
        import pyarrow as pa

        self._pa = pa
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.batch_size = batch_size
        self.schema = arrow_schema()
        self._sink = pa.OSFile(str(self.path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)
        self._buffer: list[dict[str, Any]] = []
        self.count = 0

    def add(self, record: RequestRecord | dict[str, Any]) -> None:
        row = record.to_dict() if isinstance(record, RequestRecord) else record
        self._buffer.append(row)
        self.count += 1
        if len(self._buffer) >= self.batch_size:
            self.flush()

    def extend(self, records: Iterable[RequestRecord | dict[str, Any]]) -> None:
        for record in records:
            self.add(record)

    def flush(self) -> None:
        if not self._buffer:
            return
        columns = {name: [row.get(name) for row in self._buffer] for name in FIELDS}
        batch = self._pa.RecordBatch.from_pydict(columns, schema=self.schema)
        self._writer.write_batch(batch)
        self._sink.flush()
        self._buffer.clear()

    def close(self) -> None:
        if self._writer is None:
            return
        self.flush()
        self._writer.close()
        self._sink.close()
        self._writer = None  # type: ignore[assignment]

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_records_table(path: Path, table: Any, batch_size: int = 10_000) -> None:
    """Write a whole table of records (vprof's schema) as the records file, in batches."""
    import pyarrow as pa

    table = table.cast(arrow_schema())
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=batch_size):
            writer.write_batch(batch)


# Arrow's *file* format is the stream format after this magic (and a footer after it).
_FILE_MAGIC = b"ARROW1"
_CONTINUATION = b"\xff\xff\xff\xff"  # every message of a stream starts with it


@dataclass(frozen=True)
class RecordsFile:
    """What a records file held: its complete batches, and whether a torn tail followed."""

    table: Any  # pyarrow.Table with vprof's schema
    batches: int  # complete batches read
    torn_bytes: int = 0  # bytes after the last complete batch that are not a whole batch

    @property
    def torn(self) -> bool:
        """The file ends mid-batch (its writer was killed while writing)."""
        return self.torn_bytes > 0

    def describe(self, expected: int | None = None) -> str:
        """``""`` for a whole file; else how much of it was readable, for people."""
        n = self.table.num_rows
        short = expected is not None and expected > n
        if not self.torn and not short:
            return ""
        text = f"{n:,} of {expected:,} records readable" if short else f"{n:,} records readable"
        text += f" ({self.batches:,} complete batch{'es' if self.batches != 1 else ''})"
        if self.torn:
            text += (
                f"; the file ends mid-batch, {self.torn_bytes:,} bytes after the last complete one"
            )
        elif short:
            text += "; the load generator counted more: the file was cut short"
        return text


def read_records_file(path: Path) -> RecordsFile:
    """Every complete batch of a records file, memory-mapped (no copy), schema checked.

    A torn tail (a writer killed mid-batch) is kept out and reported in the result; a file
    that is not vprof's records (other bytes, another schema, a folder) raises
    :class:`RunError` naming it. An empty file is a run that wrote nothing yet.
    """
    import pyarrow as pa

    path = Path(path)
    where = str(path)
    if path.is_dir():
        raise RunError("a folder, not a records file", path=where)
    try:
        source = pa.memory_map(str(path), "r")
    except FileNotFoundError:
        raise RunError("no records file", path=where) from None
    except (OSError, pa.ArrowException) as exc:
        raise RunError(f"cannot read it: {exc}", path=where) from None
    size = source.size()
    if size == 0:
        return RecordsFile(conform(arrow_schema().empty_table(), where), 0)
    head = source.read(8)
    start = 8 if head.startswith(_FILE_MAGIC) else 0
    source.seek(start)
    try:
        reader = pa.ipc.open_stream(source)
    except (OSError, pa.ArrowException):
        if head.startswith(_CONTINUATION) or start:  # a stream cut inside its schema
            return RecordsFile(conform(arrow_schema().empty_table(), where), 0, size - start)
        raise RunError(
            "not a records file (not an Arrow IPC stream)",
            path=where,
            hint="records.arrow is written by vprof's load generator; restore it or re-run",
        ) from None
    check_schema(reader.schema, where)
    batches, end = [], source.tell()
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            break
        except (OSError, pa.ArrowException):
            break  # torn tail: keep what was complete
        end = source.tell()
    torn = 0 if end >= size or _only_end_marker(source, end, size) else size - end
    table = conform(pa.Table.from_batches(batches, schema=reader.schema), where)
    check_values(table, where)
    return RecordsFile(table, len(batches), torn)


def _only_end_marker(source: Any, end: int, size: int) -> bool:
    """True when what follows the last batch is the stream's end marker (and a file footer)."""
    source.seek(end)
    return source.read(8) in (_CONTINUATION + b"\0\0\0\0", b"\0\0\0\0") and (
        size - end <= 8 or _has_footer(source, size)
    )


def _has_footer(source: Any, size: int) -> bool:
    source.seek(size - 6)
    return source.read(6) == _FILE_MAGIC


def read_table(path: Path):  # -> pyarrow.Table
    """Every complete batch of a records file (see :func:`read_records_file`)."""
    return read_records_file(path).table


def read_records(path: Path):  # -> pandas.DataFrame
    """Records as a pandas DataFrame (``itl_ms`` stays a list column)."""
    from vprof.records.rundir import RunDir

    path = Path(path)
    if path.is_dir():
        path = RunDir(path).records
    return read_table(path).to_pandas()
