"""The compiled pass over a run's inter-token gaps (``_gappass.c``), when the install built it.

A summary reads every gap once for its ITL percentiles, mean and std and for the peak of
output tokens per second. In numpy that is about ten passes over each step of gaps (buckets,
candidates, sums, a running sum and the searches in it); the C function does it in one, about
4× less CPU (``benchmarks/summarize_1m.py``). It is loaded with :mod:`ctypes`, which lets go of
the interpreter while it runs, so two threads share the pass as they do the numpy one.

The install compiles it where it finds a C compiler (``pyproject.toml``'s ext-modules,
optional); where it did not, or ``VPROF_GAP_KERNEL=0`` is set, :func:`load` returns None and
the summary takes the numpy passes, whose figures are the same (tests compare the two).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

_MODULE = "vprof.analysis._gappass"
DISABLE = "VPROF_GAP_KERNEL"  # "0": use the numpy passes

GapPass = Callable[..., int]


@functools.cache
def _library() -> Any:
    spec = importlib.util.find_spec(_MODULE)
    if spec is None or not spec.origin:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError:  # built for another platform, or damaged: the numpy passes do it
        return None
    function = lib.vprof_gap_pass
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    function.argtypes = [
        *(pointer,) * 4,  # gaps, lengths, first_s, keep
        count,  # requests
        *(pointer,) * 2,  # wanted (or NULL), counts
        ctypes.c_int,  # shift
        pointer,  # bins
        count,  # bins' length
        *(pointer,) * 3,  # kept, sums, state
    ]
    function.restype = count
    return function


def load() -> GapPass | None:
    """:func:`gap_pass` when the compiled pass is there (and not switched off), else None."""
    if os.environ.get(DISABLE, "1") == "0" or _library() is None:
        return None
    return gap_pass


def gap_pass(
    gaps: Any,
    lengths: Any,
    first_s: Any,
    keep: Any,
    wanted: Any,
    counts: Any,
    shift: int,
    bins: Any,
    kept: Any,
    sums: Any,
    state: Any,
) -> int:
    """One pass over a block's gaps (``_gappass.c`` says what it adds where); returns how many
    gaps it copied to ``kept``. Every array is contiguous, of the type the C side reads:
    ``gaps``, ``first_s``, ``kept`` (room for every gap), ``sums`` (2) float64; ``lengths``,
    ``counts``, ``bins``, ``state`` (2) int64; ``keep`` and ``wanted`` (or None) bool."""
    import numpy as np

    def at(array: Any, dtype: Any) -> int:
        if array.dtype != dtype or not array.flags.c_contiguous:
            raise TypeError(f"the gap pass takes contiguous {np.dtype(dtype)}, not {array.dtype}")
        return int(array.ctypes.data)

    n = int(lengths.size)
    if keep.size != n or first_s.size != n or int(lengths.sum()) != gaps.size:
        raise ValueError("the gap pass takes one length, first time and keep flag per request")
    if kept.size < gaps.size or sums.size != 2 or state.size != 2:
        raise ValueError("the gap pass needs room for every gap, two sums and two states")
    if wanted is not None and wanted.size != counts.size:
        raise ValueError("the wanted buckets are one per counted bucket")
    if counts.size < 1 << (63 - shift):
        raise ValueError("too few buckets for that shift")
    return int(
        _library()(
            at(gaps, np.float64),
            at(lengths, np.int64),
            at(first_s, np.float64),
            at(keep, np.bool_),
            n,
            None if wanted is None else at(wanted, np.bool_),
            at(counts, np.int64),
            int(shift),
            at(bins, np.int64),
            int(bins.size),
            at(kept, np.float64),
            at(sums, np.float64),
            at(state, np.int64),
        )
    )
