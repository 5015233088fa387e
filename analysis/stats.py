"""Numeric helpers shared by summaries and comparisons (numpy imported lazily).

Percentiles are numpy's default ``linear`` method, as ``vllm bench serve`` uses, so numbers
line up with it; key names follow its spelling (``p99``, ``p99.9``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vprof.analysis.keys import stat_key

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99, 99.9)

# Above this many values a variance from sums (one pass, no temporaries) replaces np.std.
_LARGE = 4_000_000
# From this many non-negative values percentiles are found by BlockQuantiles.
_COUNTED = 500_000


def pct_key(q: float) -> str:
    """``99`` -> ``"p99"``, ``99.9`` -> ``"p99.9"`` (integer form when whole, like vllm)."""
    return f"p{int(q)}" if float(q).is_integer() else f"p{q:g}"


def describe(
    values: Any,
    name: str,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    *,
    overwrite: bool = False,
) -> dict[str, float]:
    """``mean_/median_/std_/pNN_<name>_ms`` of ``values``; NaN for an empty array.

    ``overwrite=True`` lets the percentile step reorder ``values`` in place (no copy), which
    matters for the tens of millions of pooled inter-token gaps of a large run.
    """
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    out: dict[str, float] = {}
    n = x.size
    if n == 0:
        out[stat_key("mean", name)] = out[stat_key("median", name)] = out[stat_key("std", name)] = (
            math.nan
        )
        for q in percentiles:
            out[stat_key(pct_key(q), name)] = math.nan
        return out
    if n > _LARGE:
        total = float(x.sum())
        mean = total / n
        # E[x²] − mean²: one pass instead of np.std's temporaries (einsum, not BLAS dot, whose
        # worker threads spin on a shared 2-core box); latencies are
        # positive with std of the order of the mean, so cancellation costs < 1e-12 relative.
        var = max(float(np.einsum("i,i->", x, x)) / n - mean * mean, 0.0)
        std = math.sqrt(var)
    else:
        mean = float(x.mean())
        std = float(x.std())
    qs = [50.0, *(float(q) for q in percentiles)]
    values_q: Any
    finite = bool(np.isfinite(x).all())
    if n >= _COUNTED and finite and x.min() >= 0:
        # a count per bucket, then a partition of a few buckets' values: several times
        # faster than np.percentile's partition of all of them, bit for bit the same
        counted = BlockQuantiles()
        counted.add(x)
        if counted.plan(qs):
            counted.collect(x)
        values_q = [counted.percentile(q) for q in qs]
    elif finite and not np.signbit(x[x == 0]).any():
        # numpy's sort is vectorised, its partition for several percentiles is not: sorting
        # takes half the time, and the values at the same ranks are the same (but for -0.0
        # beside 0.0: which of those ties lands on a rank is the partition's own business)
        if overwrite:
            x.sort()
        ordered = x if overwrite else np.sort(x)
        values_q = [_linear(n, q, ordered.__getitem__) for q in qs]
    else:
        values_q = np.percentile(x, qs, overwrite_input=overwrite)
    out[stat_key("mean", name)] = mean
    out[stat_key("median", name)] = float(values_q[0])
    out[stat_key("std", name)] = std
    for q, v in zip(percentiles, values_q[1:], strict=True):
        out[stat_key(pct_key(q), name)] = float(v)
    return out


# Above this many groups per value, one lexsort beats a sort per group.
_GROUPS_PER_VALUE = 1 / 64


def sorted_within_groups(groups: Any, values: Any, n_groups: int) -> tuple[Any, Any]:
    """``values`` ordered by their group (0 … ``n_groups`` − 1), ascending within each, as
    ``values[np.lexsort((values, groups))]``, and where each group starts (``n_groups`` + 1
    offsets). Records arrive nearly in time order, so a stable sort by group is almost free
    and each group's few values are sorted on their own: several times faster than a lexsort.
    """
    import numpy as np

    groups = np.asarray(groups, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    few = n_groups <= values.size * _GROUPS_PER_VALUE
    order = np.argsort(groups, kind="stable") if few else np.lexsort((values, groups))
    ordered = values[order]
    starts = np.searchsorted(groups[order], np.arange(n_groups + 1))
    if few:
        for lo, hi in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            if hi - lo > 1:
                ordered[lo:hi].sort()
    return ordered, starts


def percentile(values: Any, q: float) -> float:
    """One numpy-linear percentile; NaN for an empty array."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if not x.size:
        return math.nan
    with np.errstate(invalid="ignore"):
        value = float(np.percentile(x, q))
    # Interpolating between two infinite values gives NaN; the percentile is unbounded.
    return math.inf if math.isnan(value) and np.isinf(x).any() else value


class BlockQuantiles:
    """Exact numpy-``linear`` percentiles, mean and std of data seen in blocks.

    For tens of millions of pooled gaps, sorting (or ``np.partition``) one big copy is the
    slow part of a summary. Instead, pass one counts values per bucket of their float64 bit
    pattern (for non-negative floats the bits sort like the values) and accumulates sums;
    pass two keeps only the values in the few buckets that hold a wanted rank, and those
    are partitioned exactly. No copy of the data is ever held.

    Usage: optionally ``guess(sample, qs)``; ``add(block)`` for every block; ``plan(qs)``,
    and if it returns True, ``collect(block)`` for the same blocks again; then
    ``describe(name, percentiles)``. With a good guess, ``add`` already keeps the candidates
    and the second pass is skipped. Negative or NaN values switch to a plain partition of
    all collected values (correct, just slower).
    """

    SHIFT = 46  # keep sign, exponent and 6 mantissa bits: buckets 1/64 of an octave wide

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self.n = 0
        self.total = 0.0
        self.total_sq = 0.0
        self.counts = np.zeros(1 << (64 - self.SHIFT - 1), dtype=np.int64)
        self.fallback = False
        self._ranks: list[int] = []
        self._wanted: Any = None
        self._parts: list = []
        self._keys = np.empty(0, dtype=np.int64)  # reused: fresh big arrays cost page faults
        self._guessed = False

    def spawn(self) -> BlockQuantiles:
        """A fresh state with this one's guess, for a share of the blocks (see :meth:`merge`)."""
        other = BlockQuantiles()
        other._wanted, other._guessed = self._wanted, self._guessed
        return other

    def merge(self, other: BlockQuantiles) -> None:
        """Take in what ``other`` (from :meth:`spawn`) saw; before ``plan``."""
        self.n += other.n
        self.total += other.total
        self.total_sq += other.total_sq
        self.counts += other.counts
        self.fallback = self.fallback or other.fallback
        self._parts += other._parts

    def add(self, x) -> None:
        np = self._np
        if not x.size:
            return
        self.n += x.size
        self.total += float(x.sum())
        self.total_sq += float(np.einsum("i,i->", x, x))
        if self.fallback:
            return
        keys = self._key(x)
        try:  # negative floats (and -0.0) have negative keys: bincount refuses them
            found = np.bincount(keys)  # as long as the largest key: no 1 MB table per step
        except ValueError:
            self.fallback = True
            return
        self.counts[: found.size] += found
        if self._guessed:  # take and compress: a third faster than indexing by arrays
            self._parts.append(x.compress(self._wanted.take(keys)))

    def buckets(self) -> tuple[Any, Any, int]:
        """For a compiled pass that does :meth:`add`'s work itself (``gapkernel.py``): the
        bucket counts it adds to, the wanted buckets whose values it keeps (None before a
        guess) and the shift that makes a value's bucket of its bits."""
        return self.counts, self._wanted if self._guessed else None, self.SHIFT

    def added(self, n: int, total: float, total_sq: float, kept: list, negative: bool) -> None:
        """Take in what a compiled pass found in ``n`` values (see :meth:`buckets`): their sum
        and sum of squares, the values of the wanted buckets, and whether it met a negative
        value (then, as in :meth:`add`, the counts no longer count)."""
        self.n += n
        self.total += total
        self.total_sq += total_sq
        self.fallback = self.fallback or negative
        if self._guessed and not self.fallback:
            self._parts += kept

    def guess(self, sample, qs) -> None:
        """Before any ``add``: pick buckets from a sample so ``add`` keeps candidates at once.

        When the guess holds (it does unless the sample misrepresents the data), ``plan``
        reports that no second ``collect`` pass is needed.
        """
        np = self._np
        sample = np.asarray(sample, dtype=np.float64)
        if not sample.size or not np.isfinite(sample).all() or (sample < 0).any():
            return
        wanted = np.zeros(self.counts.size, dtype=bool)
        # ±0.5 percentage points around each percentile: a sample of ~10⁵ values puts the
        # true rank inside with overwhelming probability (all found in one partition).
        edges = [(max(float(q) - 0.5, 0.0), min(float(q) + 0.5, 100.0)) for q in qs]
        ordered = np.sort(sample)  # as in describe: the same values as np.percentile's
        for lo, hi in ([_linear(ordered.size, q, ordered.__getitem__) for q in e] for e in edges):
            k_lo, k_hi = (int(np.float64(v).view(np.int64) >> self.SHIFT) for v in (lo, hi))
            wanted[k_lo : k_hi + 1] = True
        self._wanted = wanted
        self._guessed = True

    def plan(self, qs) -> bool:
        """Fix the ranks to find, after every ``add``; True when a ``collect`` pass is needed."""
        np = self._np
        n = self.n
        ranks: set[int] = set()
        for q in qs:
            h = (n - 1) * (float(q) / 100.0)
            lo = int(math.floor(h))
            ranks.update((min(lo, n - 1), min(lo + 1, n - 1)))
        self._ranks = sorted(r for r in ranks if r >= 0)
        if not n:
            return False
        if self.fallback:
            self._parts = []
            return True
        cum = np.cumsum(self.counts)
        buckets = np.searchsorted(cum, self._ranks, side="right")
        self._cum_before = {int(b): int(cum[b - 1]) if b else 0 for b in buckets}
        self._bucket_of = dict(zip(self._ranks, (int(b) for b in buckets), strict=True))
        if self._guessed and self._wanted[buckets].all():
            return False
        self._parts = []
        self._wanted = np.zeros(self.counts.size, dtype=bool)
        self._wanted[buckets] = True
        self._guessed = False
        return True

    def collect(self, x) -> None:
        np = self._np
        if not x.size:
            return
        if self.fallback:
            self._parts.append(np.array(x, copy=True))
            return
        self._parts.append(x.compress(self._wanted.take(self._key(x))))

    def _key(self, x):
        np = self._np
        if self._keys.size < x.size:
            self._keys = np.empty(x.size, dtype=np.int64)
        return np.right_shift(x.view(np.int64), self.SHIFT, out=self._keys[: x.size])

    def _values_at_ranks(self) -> dict[int, float]:
        if getattr(self, "_at", None) is None:
            self._at = self._find_ranks()
        return self._at

    def _find_ranks(self) -> dict[int, float]:
        np = self._np
        if self.fallback:
            kept = np.concatenate(self._parts) if self._parts else np.empty(0)
            kept.partition(self._ranks)
            return {r: float(kept[r]) for r in self._ranks}
        # The parts hold every value of the wanted buckets (the guess's are several times
        # more than the ranks need): keep only those of the buckets a rank lies in, so the
        # copy and the partition are of a few values. A rank in bucket b is then the values
        # of those buckets below b, then its place in b; one partition finds them all.
        holding = np.zeros(self.counts.size, dtype=bool)
        holding[list(self._cum_before)] = True
        kept = np.concatenate(
            [part.compress(holding.take(self._key(part))) for part in self._parts]
        )
        below = np.cumsum(np.where(holding, self.counts, 0)) - self.counts * holding
        at = {r: int(below[b]) + r - self._cum_before[b] for r, b in self._bucket_of.items()}
        found = _at_places(kept, sorted(self._cum_before), sorted(set(at.values())), self.SHIFT)
        return {r: found[i] for r, i in at.items()}

    def describe(self, name: str, percentiles: Sequence[float]) -> dict[str, float]:
        """The same keys and values as :func:`describe` over all blocks."""
        if not self.n:
            return describe([], name, percentiles)
        n = self.n
        at = self._values_at_ranks()
        mean = self.total / n
        out = {
            stat_key("mean", name): mean,
            stat_key("median", name): _linear(n, 50.0, at.__getitem__),
            stat_key("std", name): math.sqrt(max(self.total_sq / n - mean * mean, 0.0)),
        }
        for q in percentiles:
            out[stat_key(pct_key(q), name)] = _linear(n, float(q), at.__getitem__)
        return out

    def percentile(self, q: float) -> float:
        """One percentile that was included in ``plan``."""
        return (
            _linear(self.n, float(q), self._values_at_ranks().__getitem__) if self.n else math.nan
        )


def _linear(n: int, q: float, value_at: Any) -> float:
    """The numpy-``linear`` ``q``-th percentile of ``n`` values, given ``value_at(rank)`` (the
    value of that rank in ascending order)."""
    h = (n - 1) * (q / 100.0)
    lo = int(math.floor(h))
    a, b = float(value_at(min(lo, n - 1))), float(value_at(min(lo + 1, n - 1)))
    t = h - lo
    diff = b - a
    # numpy's _lerp, so results match np.percentile bit for bit
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


# Finer buckets within a bucket of BlockQuantiles, to pick out a rank's few values: its next
# mantissa bits.
_FINE_BITS = 12


def _at_places(kept: Any, buckets: Sequence[int], places: Sequence[int], shift: int) -> dict:
    """The values at ``places`` (ascending) of ``kept`` sorted: non-negative floats, all in
    ``buckets`` (their bit patterns shifted right by ``shift``, ascending). Each bucket is cut
    in finer ones by the next mantissa bits, which sort like the values too; only the values
    of the finer buckets a place lies in are partitioned (a tenth of a percent of them, not the
    million or so that a run's median bucket holds).
    """
    import numpy as np

    fine = _FINE_BITS
    slot = np.full(int(max(buckets)) + 1, -1, dtype=np.int64)
    slot[list(buckets)] = np.arange(len(buckets))
    bits = kept.view(np.int64)
    keys = (slot[bits >> shift] << fine) | ((bits >> (shift - fine)) & ((1 << fine) - 1))
    counts = np.bincount(keys, minlength=len(buckets) << fine)
    ends = np.cumsum(counts)
    wanted_places = np.asarray(places, dtype=np.int64)
    holds = np.searchsorted(ends, wanted_places, side="right")  # the finer bucket of each
    wanted = np.zeros(counts.size, dtype=bool)
    wanted[holds] = True
    few = kept.compress(wanted.take(keys))
    before = np.cumsum(np.where(wanted, counts, 0)) - counts * wanted
    index = before[holds] + wanted_places - (ends[holds] - counts[holds])
    few.partition(index)
    return dict(zip(wanted_places.tolist(), few[index].tolist(), strict=True))
