"""Columns of a records table as numpy arrays, read straight from their Arrow buffers.

pyarrow's own ``to_numpy`` imports pandas on first use (a third of a second or more), which a
summary does not otherwise need; these read the same values from the buffers, zero-copy for
one chunk without nulls. Nulls become NaN (floats), a fill value (integers) or False (bools).
"""

from __future__ import annotations

from typing import Any


def _chunks(column: Any) -> list[Any]:
    """A column's values as one contiguous array (chunks joined by Arrow: one copy in C++,
    instead of a numpy call per record batch)."""
    if not hasattr(column, "chunks"):
        return [column]
    if column.num_chunks == 1:
        return [column.chunk(0)]
    return [combined(column)] if column.num_chunks else []


def combined(column: Any) -> Any:
    """A chunked column joined into one array (a copy); the pages of the memory-mapped records
    file it came from are handed back (:func:`vprof.records.store.release_file_of`), so a
    column read is resident once, as its copy."""
    from vprof.records.store import release_file_of

    whole = column.combine_chunks()
    release_file_of(column)
    return whole


def _valid(chunk: Any) -> Any:
    """Per value: True where the chunk holds a value (its validity bitmap, unpacked)."""
    import numpy as np

    bits = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[chunk.offset : chunk.offset + len(chunk)] == 1


def _primitive(chunk: Any, dtype: Any) -> Any:
    import numpy as np

    data = chunk.buffers()[1]
    if data is None or not len(chunk):
        return np.empty(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=chunk.offset + len(chunk))[chunk.offset :]


def _joined(parts: list[Any], dtype: Any) -> Any:
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def floats(column: Any) -> Any:
    """A float64 column (or chunk) as a float64 array; nulls are NaN. Read-only when zero-copy."""
    import numpy as np

    parts = []
    for chunk in _chunks(column):
        if chunk.null_count == len(chunk):  # nothing written (no sessions, say): no read
            parts.append(np.full(len(chunk), np.nan))
            continue
        values = _primitive(chunk, np.float64)
        if chunk.null_count:
            values = np.where(_valid(chunk), values, np.nan)
        parts.append(values)
    return _joined(parts, np.float64)


def ints(column: Any, fill: int) -> Any:
    """An int64 column as an int64 array; nulls are ``fill``."""
    import numpy as np

    parts = []
    for chunk in _chunks(column):
        if chunk.null_count == len(chunk):
            parts.append(np.full(len(chunk), fill, dtype=np.int64))
            continue
        values = _primitive(chunk, np.int64)
        if chunk.null_count:
            values = np.where(_valid(chunk), values, fill)
        parts.append(values)
    return _joined(parts, np.int64)


def bools(column: Any) -> Any:
    """A bool column as a bool array; nulls are False."""
    import numpy as np

    parts = []
    for chunk in _chunks(column):
        if not len(chunk):
            continue
        bits = np.frombuffer(chunk.buffers()[1], dtype=np.uint8)
        values = np.unpackbits(bits, bitorder="little")[chunk.offset : chunk.offset + len(chunk)]
        values = values.astype(bool)
        if chunk.null_count:
            values &= _valid(chunk)
        parts.append(values)
    return _joined(parts, bool)


def encoded(column: Any, default: str) -> tuple[Any, Any]:
    """A string column as (distinct labels, a code per row): nulls are ``default``.

    Arrow's dictionary encoding, so a million statuses cost a handful of Python strings.
    """
    import numpy as np

    if not len(column):
        return np.array([default], dtype=object), np.zeros(0, dtype=np.int32)
    whole = _chunks(column)[0]
    if whole.null_count == len(whole):  # a column nothing was written to (one server)
        return np.array([default], dtype=object), np.zeros(len(whole), dtype=np.int32)
    if 2 * whole.null_count > len(whole):
        # mostly null (``error``: one request in a hundred): encode only the values, in the
        # same order, so the labels and codes are those of the whole column
        valid = _valid(whole)
        labels, codes = encoded(_compute("drop_null", whole), default)
        fill = [*labels].index(default) if default in labels else len(labels)
        if fill == len(labels):
            labels = np.append(labels, np.array([default], dtype=object))
        whole_codes = np.full(len(whole), fill, dtype=np.int32)
        whole_codes[valid] = codes
        return labels, whole_codes
    if (single := _single_string(whole)) is not None:  # e.g. every request's endpoint
        return np.array([single], dtype=object), np.zeros(len(whole), dtype=np.int32)
    dictionary = _compute("dictionary_encode", whole)
    labels = [default if v is None else v for v in dictionary.dictionary.to_pylist()]
    indices = dictionary.indices
    codes = _primitive(indices, np.int32)
    if indices.null_count:
        if default in labels:
            fill = labels.index(default)
        else:
            fill = len(labels)
            labels.append(default)
        codes = np.where(_valid(indices), codes, fill).astype(np.int32)
    return np.asarray(labels, dtype=object), codes


def _compute(function: str, *args: Any) -> Any:
    """An Arrow compute function by name. ``pyarrow.compute`` makes a Python wrapper for each
    of its hundreds of functions when imported (40 ms of a summary's start-up); its
    ``call_function`` is the one from ``pyarrow._compute``, which loads in 5 ms."""
    try:
        from pyarrow._compute import call_function
    except ImportError:  # another layout in some pyarrow: the public module has it too
        from pyarrow.compute import call_function
    return call_function(function, list(args))


def _single_string(chunk: Any) -> str | None:
    """The one string every row of a string chunk without nulls holds, else None (a
    comparison of the bytes, several times faster than hashing each row)."""
    import numpy as np
    import pyarrow as pa

    if chunk.null_count or not pa.types.is_string(chunk.type):
        return None
    offsets = _primitive_offsets(chunk)
    width = int(offsets[1] - offsets[0])
    if not width or not (np.diff(offsets) == width).all():
        return None
    data = np.frombuffer(chunk.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    rows = data.reshape(len(chunk), width)
    return str(chunk[0].as_py()) if (rows == rows[0]).all() else None


def list_block(chunk: Any) -> tuple[Any, Any]:
    """(flat values, per-row lengths) of one list<float64> chunk; a null list has no values.

    The values are a zero-copy view of the chunk's child buffer (slicing offsets respected);
    null values inside a list (never written by vprof) read as NaN.
    """
    import numpy as np

    n = len(chunk)
    offsets = _primitive_offsets(chunk)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)  # np.diff, without its overhead
    if chunk.null_count:
        lengths[~_valid(chunk)] = 0
    child = chunk.values  # the whole child array; offsets index into it
    start, end = int(offsets[0]), int(offsets[-1]) if n else 0
    values = floats(child)[start:end] if n else np.empty(0)
    if chunk.null_count and int(lengths.sum()) != end - start:
        # null lists that still span child values: keep only the values of real lists
        keep = np.repeat(_valid(chunk), np.diff(offsets))
        values = values[keep]
    return values, lengths


def _primitive_offsets(chunk: Any) -> Any:
    import numpy as np

    n = len(chunk)
    data = chunk.buffers()[1]
    if data is None:
        return np.zeros(n + 1, dtype=np.int32)
    return np.frombuffer(data, dtype=np.int32, count=chunk.offset + n + 1)[chunk.offset :]
