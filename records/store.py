"""Append-only columnar storage for records: an Arrow IPC stream written in batches.

Each batch is complete on disk once written, so a run that dies keeps every batch it
flushed; the reader stops cleanly at a torn tail and says so. Memory stays bounded by the
batch size. What is read is checked against vprof's schema: other files are refused.

The reader memory-maps the file: columns nobody reads are never loaded, and a pass over the
inter-token gaps (most of a large file) hands the pages it has read back to the OS with
:func:`release` as it goes, so a million requests' gaps never sit in memory all at once.
"""

from __future__ import annotations

import mmap
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vprof.common.cpus import usable_cpus
from vprof.common.errors import RunError
from vprof.records.schema import (
    FIELDS,
    RequestRecord,
    arrow_schema,
    check_gaps,
    check_scalars,
    check_schema,
    check_values,
    conform,
)


class RecordWriter:
    """Buffer records and append them to ``path`` as Arrow record batches.

    A write that fails (a full disk) leaves the file as it was up to the failed batch, and
    the writer broken: every later call raises the same error and writes nothing, so a torn
    batch is never followed by bytes a reader would take for more records. ``written``
    counts the records of complete batches.
    """

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
        self.written = 0
        self.error: OSError | None = None

    def add(self, record: RequestRecord | dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        row = record.to_dict() if isinstance(record, RequestRecord) else record
        self._buffer.append(row)
        self.count += 1
        if len(self._buffer) >= self.batch_size:
            self.flush()

    def extend(self, records: Iterable[RequestRecord | dict[str, Any]]) -> None:
        for record in records:
            self.add(record)

    def flush(self) -> None:
        if self.error is not None:
            raise self.error
        if not self._buffer:
            return
        columns = {name: [row.get(name) for row in self._buffer] for name in FIELDS}
        batch = self._pa.RecordBatch.from_pydict(columns, schema=self.schema)
        try:
            self._writer.write_batch(batch)
            self._sink.flush()
        except OSError as exc:
            self._broken(exc)
            raise
        self.written += len(self._buffer)
        self._buffer.clear()

    def _broken(self, exc: OSError) -> None:
        """Write nothing more: the file keeps its complete batches (and a torn tail)."""
        self.error = exc
        self._buffer.clear()
        try:
            self._sink.close()
        except OSError:
            pass

    def close(self) -> None:
        if self._writer is None:
            return
        if self.error is None:
            self.flush()
            try:
                self._writer.close()
                self._sink.close()
            except OSError as exc:
                self._broken(exc)
                raise
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
    damage: str = ""  # why the bytes after the last good batch were not read, when they parse
    # the batches' gaps as their check read them, (values, lengths) each (see check_gaps)
    gap_blocks: tuple[tuple[Any, Any], ...] = ()

    @property
    def torn(self) -> bool:
        """The file ends mid-batch (its writer was killed while writing), or what follows its
        last good batch is damaged."""
        return self.torn_bytes > 0

    def describe(self, expected: int | None = None) -> str:
        """``""`` for a whole file; else how much of it was readable, for people."""
        n = self.table.num_rows
        short = expected is not None and expected > n
        if not self.torn and not short:
            return ""
        text = f"{n:,} of {expected:,} records readable" if short else f"{n:,} records readable"
        text += f" ({self.batches:,} complete batch{'es' if self.batches != 1 else ''})"
        if self.damage:
            text += f"; the {self.torn_bytes:,} bytes after them are damaged ({self.damage})"
        elif self.torn:
            text += (
                f"; the file ends mid-batch, {self.torn_bytes:,} bytes after the last complete one"
            )
        elif short:
            text += "; the load generator counted more: the file was cut short"
        return text


def read_records_file(path: Path) -> RecordsFile:
    """Every complete batch of a records file, memory-mapped (no copy), schema checked.

    A torn tail (a writer killed mid-batch) is kept out and reported in the result, and so
    is everything from the first batch whose values vprof could not have written when good
    batches come before it (a writer that went on after a failed write: what follows a torn
    batch parses as nonsense); a file that is not vprof's records (other bytes, another
    schema, a folder, a first batch of nonsense) raises :class:`RunError` naming it. An empty
    file is a run that wrote nothing yet.
    """
    import pyarrow as pa

    path = Path(path)
    where = str(path)
    if path.is_dir():
        raise RunError("a folder, not a records file", path=where)
    try:
        mapped = _map(path)
        source = pa.BufferReader(mapped)
    except FileNotFoundError:
        raise RunError("no records file", path=where) from None
    except (OSError, ValueError, pa.ArrowException) as exc:
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
    batches: list[Any] = []
    ends = [source.tell()]
    released = ends[0]  # the pages before this offset were handed back
    malformed = ""
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (OSError, pa.ArrowException):
            break  # torn tail: keep what was complete
        try:
            # Offsets and lengths are checked before any value is read: a batch of nonsense
            # (what follows a torn one) can point anywhere, and reading it would crash.
            batch.validate(full=True)
        except pa.ArrowException as exc:
            malformed = f"batch {len(batches) + 1} is malformed ({exc})"
            break
        batches.append(batch)
        ends.append(source.tell())
        if ends[-1] - released >= RELEASE_BYTES:  # read: hand their pages back
            release_buffer(mapped.slice(released, ends[-1] - released))
            released = ends[-1]
    if malformed and not batches:
        raise RunError(
            f"not vprof's records: {malformed}",
            path=where,
            hint="records.arrow is written by vprof's load generator; restore it or re-run",
        )
    end = ends[-1]
    torn = 0 if end >= size or _only_end_marker(source, end, size) else size - end
    table = conform(pa.Table.from_batches(batches, schema=reader.schema), where)
    # the gaps (most of the file) are checked beside the joining of the other columns
    gaps_checked = _beside(check_gaps, table, where)
    table = _scalars_joined(table, mapped)
    try:
        try:
            check_scalars(table, where)
        finally:
            # the gaps' verdict second, as check_values gives it
            gap_blocks, gaps_error = gaps_checked()
        if gaps_error is not None:
            raise gaps_error
    except RunError as exc:
        release_buffer(mapped)
        good = _valid_batches(batches, reader.schema, where)
        if good == 0:
            raise
        table = conform(pa.Table.from_batches(batches[:good], schema=reader.schema), where)
        table = _scalars_joined(table, mapped)
        return RecordsFile(table, good, size - ends[good], damage=exc.message)
    # Checking read every batch: hand the pages back, so only what is used later is resident.
    release_buffer(mapped)
    if malformed:
        return RecordsFile(table, len(batches), size - end, malformed, gap_blocks)
    return RecordsFile(table, len(batches), torn, gap_blocks=gap_blocks)


# Pages read are handed back to the OS this many bytes at a time, not batch by batch (a
# million records are a thousand batches: a call each added a third to the checks' time).
RELEASE_BYTES = 8 << 20


def _beside(check: Any, *args: Any) -> Any:
    """Start ``check(*args)`` in a thread when the process may use two CPUs (numpy lets go of
    the interpreter in its passes) and the caller is the main thread, else run it now;
    returns a function that waits for it and returns (what it returned, None), or (None, the
    :class:`RunError` it raised).

    A reader in another thread is one of several reading at once (a report reads two runs at
    a time, one a core): a third thread beside it would only slow them all.
    """
    from concurrent.futures import ThreadPoolExecutor

    def run() -> tuple[Any, RunError | None]:
        try:
            return check(*args), None
        except RunError as exc:
            return None, exc

    if usable_cpus() < 2 or threading.current_thread() is not threading.main_thread():
        result = run()
        return lambda: result
    pool = ThreadPoolExecutor(1, thread_name_prefix="vprof-check")
    running = pool.submit(run)
    pool.shutdown(wait=False)  # its thread ends once the check is done
    return running.result


# Per-request labels that only a lookup of one row reads: they stay in the file's batches.
_LEFT_IN_BATCHES = ("request_id", "user_class", "worker")
# Columns joined at a time; the file's pages they mapped are handed back after each group.
_JOIN_GROUP = 8


def _scalars_joined(table: Any, mapped: Any = None) -> Any:
    """``table`` with each column but the gaps and the per-request labels joined into one
    array (one copy each, made by Arrow from the mapped file, a few columns at a time, the
    pages handed back after each group so the file is never resident as a whole).

    Every reader of a column (the value checks, a summary, the pictures) then uses it as it
    is, instead of joining a thousand batches' pieces and mapping the file again each time;
    the gaps, most of the file, stay in its batches.

    The copies come from the C library's allocator rather than Arrow's default (mimalloc),
    which spent much more CPU time on a fresh process's first large copies and held more
    memory at its peak (measured with ``benchmarks/summarize_1m.py``).
    """
    import pyarrow as pa

    if table.num_rows == 0 or all(c.num_chunks <= 1 for c in table.columns):
        return table
    names = [
        f.name
        for f in table.schema
        if not pa.types.is_list(f.type) and f.name not in _LEFT_IN_BATCHES
    ]
    n = table.num_rows
    empty = [name for name in names if table.column(name).null_count == n]
    joined = {name: pa.chunked_array([_nulls(n, table.schema.field(name).type)]) for name in empty}
    names = [name for name in names if name not in joined]
    for start in range(0, len(names), _JOIN_GROUP):
        group = table.select(names[start : start + _JOIN_GROUP]).combine_chunks(
            memory_pool=pa.system_memory_pool()
        )
        joined |= dict(zip(group.column_names, group.columns, strict=True))
        release_buffer(mapped)
    columns = [joined.get(name, table.column(name)) for name in table.column_names]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _nulls(n: int, type_: Any) -> Any:
    """An array of ``n`` nulls of ``type_`` (a number, bool or string), made rather than copied
    for a column nothing was written to (no sessions, one server).

    Every buffer is one read-only run of zeros that the OS hands out untouched and nothing
    writes (the values under nulls are never read as values): ``pyarrow.nulls`` zeroed fresh
    memory instead, ~50 ms of system time for the seven empty columns of a million records.
    """
    import numpy as np
    import pyarrow as pa

    zeros = np.zeros((n + 1) * 8, dtype=np.uint8)  # long enough for data, bits or offsets
    zeros.flags.writeable = False
    buffer = pa.py_buffer(zeros)
    return pa.Array.from_buffers(type_, n, [buffer] * type_.num_buffers, null_count=n)


# Mappings made by the reader, by address: (start, end, the mapping); see release().
_MAPPINGS: list[tuple[int, int, weakref.ref[mmap.mmap]]] = []
_MAPPINGS_LOCK = threading.Lock()


def _map(path: Path):  # -> pyarrow.Buffer over a read-only mapping of the file
    """The file memory-mapped read-only, as an Arrow buffer (an empty buffer for an empty file).

    Python's own ``mmap`` rather than ``pyarrow.memory_map``, for its ``madvise`` (see
    :func:`release`). The mapping lives as long as an Arrow buffer sliced from it does.
    """
    import numpy as np
    import pyarrow as pa

    with open(path, "rb") as file:
        if not file.seek(0, 2):
            return pa.py_buffer(b"")
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    start = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    with _MAPPINGS_LOCK:
        _MAPPINGS[:] = [m for m in _MAPPINGS if m[2]() is not None]
        _MAPPINGS.append((start, start + len(mapping), weakref.ref(mapping)))
    return pa.py_buffer(mapping)


def release(values: Any, through: Any = None) -> None:
    """Hand back to the OS the pages of a memory-mapped records file that ``values`` (a numpy
    view into one, e.g. a block of gaps) occupies; with ``through`` (a view further into the
    same file), every page from the start of ``values`` to the end of ``through``. They stay in
    the OS's file cache, and a later read maps them again, unchanged; an array that is not such
    a view is left alone.
    """
    try:
        address = values.ctypes.data
        nbytes = values.nbytes
        if through is not None:
            nbytes = max(nbytes, through.ctypes.data + through.nbytes - address)
    except AttributeError:
        return
    if not nbytes:
        return
    with _MAPPINGS_LOCK:
        for start, end, ref in _MAPPINGS:
            mapping = ref()
            if mapping is not None and start <= address and address + nbytes <= end:
                page = mmap.PAGESIZE
                first = (address - start) // page * page
                try:
                    mapping.madvise(mmap.MADV_DONTNEED, first, address + nbytes - start - first)
                except (ValueError, OSError):
                    pass  # closed meanwhile, or not permitted: the pages stay, nothing is lost
                return


class Releaser:
    """Hands back the pages of consecutive views into one records file a few MB at a time
    (:data:`RELEASE_BYTES`): a call per small block costs more than the work it follows.
    ``add`` each view once it is used; ``close`` hands back what is left."""

    def __init__(self) -> None:
        self.held: Any = None  # the first and last views added whose pages are still held
        self.last: Any = None

    def add(self, values: Any) -> None:
        if not values.size:
            return
        held = self.held = values if self.held is None else self.held
        self.last = values
        if values.ctypes.data + values.nbytes - held.ctypes.data >= RELEASE_BYTES:
            self.close()

    def close(self) -> None:
        if self.held is not None:
            release(self.held, through=self.last)
        self.held = self.last = None


def release_buffer(buffer: Any) -> None:
    """:func:`release` every page of an Arrow buffer (a whole mapped file, a column's values)."""
    import numpy as np

    if buffer is not None and buffer.size:
        release(np.frombuffer(buffer, dtype=np.uint8))


def release_file_of(column: Any) -> None:
    """Hand back every page of the memory-mapped records file a column (or chunk) was read
    from (or a numpy view into one). Reading a column of a batch maps the pages around it too
    (the OS reads ahead), so after a column has been read or copied the whole file is handed
    back, not its bytes."""
    if hasattr(column, "ctypes"):  # a numpy view
        if not column.nbytes:
            return
        address = column.ctypes.data
    else:
        chunks = column.chunks if hasattr(column, "chunks") else [column]
        buffers = [b for chunk in chunks[:1] for b in chunk.buffers() if b is not None and b.size]
        if not buffers:
            return
        address = buffers[-1].address
    with _MAPPINGS_LOCK:
        for start, end, ref in _MAPPINGS:
            mapping = ref()
            if mapping is not None and start <= address < end:
                try:
                    mapping.madvise(mmap.MADV_DONTNEED)
                except (ValueError, OSError):
                    pass  # closed meanwhile, or not permitted: the pages stay, nothing is lost
                return


def _valid_batches(batches: list[Any], schema: Any, where: str) -> int:
    """How many leading batches hold only values vprof writes (a bad row spoils every prefix
    that holds it, so the count is found by bisection)."""
    import pyarrow as pa

    lo, hi = 0, len(batches) - 1  # the whole list is known to fail
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            check_values(conform(pa.Table.from_batches(batches[:mid], schema=schema), where), where)
        except RunError:
            hi = mid - 1
        else:
            lo = mid
    return lo


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
