"""Append-only columnar storage for records: an Arrow IPC stream written in batches.

Each batch is complete on disk once written, so a run that dies keeps every batch it
flushed; the reader stops cleanly at a torn tail. Memory stays bounded by the batch size.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vprof.records.schema import FIELDS, RequestRecord, arrow_schema


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


def read_table(path: Path):  # -> pyarrow.Table
    """Every complete batch of a records file, memory-mapped (no copy), tolerating a torn tail."""
    import pyarrow as pa

    batches = []
    schema = arrow_schema()
    try:
        reader = pa.ipc.open_stream(pa.memory_map(str(path), "r"))
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
    except (pa.ArrowInvalid, OSError):
        pass  # torn tail or empty file: keep what was complete
    return pa.Table.from_batches(batches, schema=schema)


def read_records(path: Path):  # -> pandas.DataFrame
    """Records as a pandas DataFrame (``itl_ms`` stays a list column)."""
    from vprof.records.rundir import RunDir

    path = Path(path)
    if path.is_dir():
        path = RunDir(path).records
    return read_table(path).to_pandas()
