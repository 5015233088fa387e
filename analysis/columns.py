"""Records as plain numpy columns, from a pandas DataFrame or straight from Arrow.

Summaries read a handful of columns as numpy arrays and the inter-token gaps as flat
blocks of values with per-request lengths. Reading Arrow directly keeps the list column
out of Python objects: a million requests × 64 gaps is one buffer per record batch. A column
is read the first time it is asked for, so a summary reads only the columns it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
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
    "slice",
    "prefix_group",
)


@dataclass(frozen=True)
class Coded:
    """A string column as its distinct ``labels`` and one small integer code per record.

    A million statuses are a handful of labels: tests and counts run on the codes, and the
    strings are made only for the records asked for (``coded[mask]``).
    """

    labels: Any  # numpy object array of str
    codes: Any  # numpy int array, one per record

    @classmethod
    def of(cls, values: Any) -> Coded:
        """From an array of str."""
        import numpy as np

        labels, codes = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        return cls(labels.astype(object), codes.reshape(-1))

    def isin(self, *values: str) -> Any:
        """Per record: True where its string is one of ``values``."""
        import numpy as np

        wanted = [i for i, label in enumerate(self.labels) if label in values]
        if len(wanted) == 1:
            return self.codes == wanted[0]
        return np.isin(self.codes, wanted)

    def distinct(self, mask: Any) -> list[str]:
        """The strings of the ``mask``ed records, each once, sorted."""
        import numpy as np

        present = np.bincount(self.codes[mask], minlength=len(self.labels)) > 0
        return sorted(str(label) for label in self.labels[present])

    def __getitem__(self, index: Any) -> Any:
        return self.labels[self.codes[index]]

    def __len__(self) -> int:
        return len(self.codes)


class Lazy(Mapping[str, Any]):
    """Named columns, each read by ``read(name)`` the first time it is asked for."""

    def __init__(self, names: tuple[str, ...], read: Callable[[str], Any]) -> None:
        self._names = names
        self._read = read
        self._got: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._got:
            if name not in self._names:
                raise KeyError(name)
            self._got[name] = self._read(name)
        return self._got[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


STRING_COLUMNS = ("error", "replica", "endpoint")


@dataclass(frozen=True)
class Columns:
    """Numpy views of the records a summary needs; ``itl_blocks`` are (values, lengths).

    ``floats``, ``ints`` and ``strings`` (``error``: each record's error, "" when none;
    ``replica``: the server each record went to, "" when one; ``endpoint``: completions,
    chat or generate, "" unknown) are read when first used.
    """

    n: int
    floats: Mapping[str, Any]
    ints: Mapping[str, Any]
    status: Coded
    open_loop: Any  # numpy bool array
    itl_blocks: tuple[tuple[Any, Any], ...]
    strings: Mapping[str, Coded] | None = None

    @property
    def errors(self) -> Coded | None:
        return self.strings["error"] if self.strings is not None else None

    @property
    def replicas(self) -> Coded | None:
        return self.strings["replica"] if self.strings is not None else None

    @property
    def endpoints(self) -> Coded | None:
        return self.strings["endpoint"] if self.strings is not None else None

    def gaps(self, mask: Any) -> tuple[Any, Any]:
        """(pooled gaps, per-request gap counts) of the requests selected by ``mask``."""
        import numpy as np

        from vprof.records.store import release_file_of

        rows = np.flatnonzero(mask)
        if self.itl_blocks and rows.size * _FEW_ROWS < mask.size:  # read only their gaps
            return self.gaps_at(mask, np.arange(self.gap_count(mask))), self._gap_places[0][rows]
        values, lengths, row = [], [], 0
        for block_values, block_lengths in self.itl_blocks:
            m = mask[row : row + block_lengths.size]
            row += block_lengths.size
            kept = block_lengths[m]
            # failed requests usually streamed no gaps: then every gap is kept as it is
            whole = int(kept.sum()) == block_values.size
            values.append(block_values if whole else block_values[np.repeat(m, block_lengths)])
            lengths.append(kept)
        if not values:
            return np.empty(0), np.zeros(int(mask.sum()), dtype=np.int64)
        pooled = np.concatenate(values)
        release_file_of(self.itl_blocks[0][0])  # copied: the mapped pages are not needed
        return pooled, np.concatenate(lengths)

    def gaps_at(self, mask: Any, positions: Any) -> Any:
        """The values at ``positions`` (ascending) of :meth:`gaps` of ``mask``: a few of many
        pooled gaps, read without copying the rest."""
        import numpy as np

        from vprof.records.store import release_file_of

        lengths, start_in_block, block_of = self._gap_places
        kept = np.where(mask, lengths, 0)
        ends = np.cumsum(kept)  # the pooled position after each request's gaps
        # each position's request (one with gaps), then its place in that request's block
        request = np.searchsorted(ends, positions, side="right")
        at = start_in_block[request] + positions - (ends[request] - kept[request])
        cuts = np.searchsorted(block_of[request], np.arange(len(self.itl_blocks) + 1))
        out = [
            values[at[lo:hi]]
            for (values, _), lo, hi in zip(self.itl_blocks, cuts[:-1], cuts[1:], strict=True)
            if hi > lo
        ]
        if not out:
            return np.empty(0)
        release_file_of(self.itl_blocks[0][0])  # a few values each, but from every page
        return np.concatenate(out)

    def gap_count(self, mask: Any) -> int:
        """How many gaps :meth:`gaps` of ``mask`` would pool (none is read)."""
        return int(self._gap_places[0][mask].sum())

    @cached_property
    def _gap_places(self) -> tuple[Any, Any, Any]:
        """Per request (over all blocks): its gap count, where its gaps start in its block, and
        its block's index; one array each, so a lookup over every block is a few numpy calls
        instead of a dozen per block."""
        import numpy as np

        if not self.itl_blocks:  # no gaps recorded
            return (np.zeros(self.n, dtype=np.int64),) * 3
        sizes = [block_lengths.size for _, block_lengths in self.itl_blocks]
        lengths = np.concatenate([block_lengths for _, block_lengths in self.itl_blocks])
        block_of = np.repeat(np.arange(len(sizes)), sizes)
        start = np.cumsum(lengths) - lengths  # where each request's gaps start over all blocks
        first = np.cumsum([0, *sizes[:-1]])  # each block's first request
        return lengths, start - start[first][block_of], block_of


# A selection of fewer than one request in this many reads only their gaps.
_FEW_ROWS = 16


def from_records(records: Any, itl_blocks: tuple[tuple[Any, Any], ...] = ()) -> Columns:
    """Build :class:`Columns` from a DataFrame (``read_records``) or a ``pyarrow.Table``;
    ``itl_blocks``: the table's gaps per non-empty batch, when its reader made them already."""
    import pyarrow as pa

    if isinstance(records, pa.Table):
        return _from_table(records, itl_blocks)
    return _from_frame(records)


def _from_frame(df: Any) -> Columns:
    import numpy as np
    import pandas as pd

    from vprof.records import arrays

    n = len(df)

    def floats(name: str) -> Any:
        if name not in df:
            return np.full(n, np.nan)
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)

    def ints(name: str) -> Any:
        if name not in df:
            return np.full(n, -1, dtype=np.int64)
        return pd.to_numeric(df[name], errors="coerce").fillna(-1).to_numpy(dtype=np.int64)

    def strings(name: str, default: str) -> Coded:
        if name not in df:
            return Coded(np.array([default], dtype=object), np.zeros(n, dtype=np.int64))
        return Coded.of(df[name].fillna(default).astype(str).to_numpy(dtype=object))

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
            blocks = tuple(arrays.list_block(c) for c in _arrow_chunks(column) if len(c))
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
        {name: strings(name, "") for name in STRING_COLUMNS},
    )


def _arrow_chunks(column: Any) -> list[Any]:
    import pyarrow as pa

    array = pa.array(column.array)
    return list(array.chunks) if isinstance(array, pa.ChunkedArray) else [array]


def _from_table(table: Any, blocks: tuple[tuple[Any, Any], ...] = ()) -> Columns:
    import numpy as np
    import pyarrow as pa

    from vprof.records import arrays
    from vprof.records.store import release_file_of

    n = table.num_rows
    names = set(table.column_names)

    def floats(name: str) -> Any:
        if name not in names:
            return np.full(n, np.nan)
        return arrays.floats(_as_type(table.column(name), pa.float64()))

    def ints(name: str) -> Any:
        if name not in names:
            return np.full(n, -1, dtype=np.int64)
        return arrays.ints(_as_type(table.column(name), pa.int64()), fill=-1)

    def strings(name: str, default: str) -> Coded:
        if name not in names:
            return Coded(np.array([default], dtype=object), np.zeros(n, dtype=np.int64))
        return Coded(*arrays.encoded(table.column(name), default))

    status = strings("status", Status.OK.value)
    open_loop = (
        arrays.bools(table.column("open_loop")) if "open_loop" in names else np.zeros(n, dtype=bool)
    )
    if not blocks:
        chunks = table.column("itl_ms").chunks if "itl_ms" in names else []
        blocks = tuple(arrays.list_block(chunk) for chunk in chunks if len(chunk))
        if blocks:
            # reading each batch's offsets mapped the pages around them: hand the file back
            release_file_of(blocks[0][0])
    return Columns(
        n,
        Lazy(FLOAT_COLUMNS, floats),
        Lazy(INT_COLUMNS, ints),
        status,
        open_loop,
        blocks,
        Lazy(STRING_COLUMNS, lambda name: strings(name, "")),
    )


def _as_type(column: Any, type_: Any) -> Any:
    """``column`` cast to ``type_``; vprof's own files already hold it, and then no cast is
    called (a cast, even a no-op, imports ``pyarrow.compute``: 40 ms of start-up)."""
    return column if column.type == type_ else column.cast(type_)
