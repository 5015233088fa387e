"""Records as plain numpy columns, from a pandas DataFrame or straight from Arrow.

Summaries read a handful of columns as numpy arrays and the inter-token gaps as flat
blocks of values with per-request lengths. Reading Arrow directly keeps the list column
out of Python objects: a million requests × 64 gaps is one buffer per record batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vprof.records.schema import Status

FLOAT_COLUMNS = (
    "scheduled_at",
    "sent_at",
    "first_token_at",
    "last_token_at",
    "finished_at",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "schedule_lag_ms",
    "idle_before_ms",
    "think_ms",
)
INT_COLUMNS = (
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "expected_prompt_tokens",
    "http_status",
    "conversation_id",
    "turn",
    "session_last",
    "prefix_group",
)


@dataclass(frozen=True)
class Columns:
    """Numpy views of the records a summary needs; ``itl_blocks`` are (values, lengths)."""

    n: int
    floats: dict[str, Any]
    ints: dict[str, Any]
    status: Any  # numpy array of str
    open_loop: Any  # numpy bool array
    itl_blocks: tuple[tuple[Any, Any], ...]
    errors: Any = None  # numpy array of str: each record's error ("" when none)
    replicas: Any = None  # numpy array of str: the server each record went to ("" when one)
    endpoints: Any = None  # numpy array of str: completions | chat | generate ("" unknown)

    def gaps(self, mask: Any) -> tuple[Any, Any]:
        """(pooled gaps, per-request gap counts) of the requests selected by ``mask``."""
        import numpy as np

        values, lengths, row = [], [], 0
        for block_values, block_lengths in self.itl_blocks:
            m = mask[row : row + block_lengths.size]
            row += block_lengths.size
            values.append(block_values[np.repeat(m, block_lengths)])
            lengths.append(block_lengths[m])
        if not values:
            return np.empty(0), np.zeros(int(mask.sum()), dtype=np.int64)
        return np.concatenate(values), np.concatenate(lengths)


def from_records(records: Any) -> Columns:
    """Build :class:`Columns` from a DataFrame (``read_records``) or a ``pyarrow.Table``."""
    import pyarrow as pa

    if isinstance(records, pa.Table):
        return _from_table(records)
    return _from_frame(records)


def _from_frame(df: Any) -> Columns:
    import numpy as np
    import pandas as pd

    n = len(df)

    def floats(name: str) -> Any:
        if name not in df:
            return np.full(n, np.nan)
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)

    def ints(name: str) -> Any:
        if name not in df:
            return np.full(n, -1, dtype=np.int64)
        return pd.to_numeric(df[name], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)

    def strings(name: str, default: str) -> Any:
        if name not in df:
            return np.full(n, default, dtype=object)
        return df[name].fillna(default).astype(str).to_numpy(dtype=object)

    status = strings("status", Status.OK.value)
    open_loop = (
        df["open_loop"].fillna(False).to_numpy(dtype=bool)
        if "open_loop" in df
        else np.zeros(n, dtype=bool)
    )
    blocks: tuple[tuple[Any, Any], ...] = ()
    if "itl_ms" in df and n:
        column = df["itl_ms"]
        if isinstance(column.dtype, pd.ArrowDtype):
            blocks = tuple(_list_block(c) for c in _arrow_chunks(column) if len(c))
        else:
            lists = [np.asarray(v if v is not None else (), dtype=np.float64) for v in column]
            lengths = np.fromiter((v.size for v in lists), dtype=np.int64, count=n)
            blocks = ((np.concatenate(lists), lengths),)
    return Columns(
        n,
        {name: floats(name) for name in FLOAT_COLUMNS},
        {name: ints(name) for name in INT_COLUMNS},
        status,
        open_loop,
        blocks,
        strings("error", ""),
        strings("replica", ""),
        strings("endpoint", ""),
    )


def _arrow_chunks(column: Any) -> list[Any]:
    import pyarrow as pa

    array = pa.array(column.array)
    return list(array.chunks) if isinstance(array, pa.ChunkedArray) else [array]


def _list_block(chunk: Any) -> tuple[Any, Any]:
    """(flat values, per-request lengths) of one Arrow list chunk, without Python loops."""
    import numpy as np
    import pyarrow.compute as pc

    lengths = pc.list_value_length(chunk).to_numpy(zero_copy_only=False)
    if chunk.null_count:  # a null list has no gaps
        lengths = np.nan_to_num(lengths, nan=0)
    values = chunk.flatten()  # respects slicing offsets; null lists contribute nothing
    # Zero-copy when there are no null gaps; nulls (never written by vprof) become NaN.
    flat = values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return flat, lengths.astype(np.int64, copy=False)


def _from_table(table: Any) -> Columns:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    names = set(table.column_names)

    def floats(name: str) -> Any:
        if name not in names:
            return np.full(n, np.nan)
        # Nulls become NaN in to_numpy; fill_null is avoided (it costs a pandas import).
        col = table.column(name).cast(pa.float64())
        return col.to_numpy().astype(np.float64, copy=False)

    def ints(name: str) -> Any:
        if name not in names:
            return np.full(n, -1, dtype=np.int64)
        col = table.column(name).cast(pa.int64())
        if col.null_count:
            return np.nan_to_num(col.to_numpy().astype(np.float64), nan=-1).astype(np.int64)
        return col.to_numpy()

    def strings(name: str, default: str) -> Any:
        if name not in names:
            return np.full(n, default, dtype=object)
        # Dictionary-encode so a million statuses become small integer codes, not objects.
        encoded = pc.dictionary_encode(table.column(name).combine_chunks())
        labels = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
        if not labels.size:
            return np.full(n, default, dtype=object)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        missing = np.isnan(codes) if codes.dtype.kind == "f" else np.zeros(n, dtype=bool)
        codes = np.nan_to_num(codes, nan=0).astype(np.int64, copy=False)
        values = labels[codes]
        values[missing] = default
        return values

    status = strings("status", Status.OK.value)
    open_loop = (
        table.column("open_loop").to_numpy(zero_copy_only=False) == True  # noqa: E712 (nulls)
        if "open_loop" in names
        else np.zeros(n, dtype=bool)
    )
    chunks = table.column("itl_ms").chunks if "itl_ms" in names else []
    return Columns(
        n,
        {name: floats(name) for name in FLOAT_COLUMNS},
        {name: ints(name) for name in INT_COLUMNS},
        status,
        open_loop,
        tuple(_list_block(chunk) for chunk in chunks if len(chunk)),
        strings("error", ""),
        strings("replica", ""),
        strings("endpoint", ""),
    )
