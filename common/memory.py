"""Keep freed memory in this process for reuse (glibc), for work that makes many large arrays.

A summary of a million requests makes hundreds of 8-MB numpy temporaries. glibc serves each
from a fresh memory map and unmaps it when freed, until its own threshold has risen past them,
so a fresh process pays the kernel to map and zero every one of them again: in
``benchmarks/summarize_1m.py`` a first summary took ~110,000 page faults and 0.7 s of system
time, a third one ~50,000 and 0.3 s. Raised thresholds make such arrays come from the heap and
stay there once freed: the first summary then took ~57,000 faults and 0.3 s, 0.2–0.3 s less
wall time, at the same peak (what is kept is what the work had in use at its peak).

Only where the C library has ``mallopt`` (glibc); elsewhere nothing changes.
"""

from __future__ import annotations

import functools

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for the threshold it raises by itself
TRIM_THRESHOLD_BYTES = 1 << 30  # free memory at the heap's top kept, up to this much


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's thresholds once per process (see the module); True where it took them."""
    import ctypes

    try:  # the symbols the interpreter itself was linked with, its C library's among them
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # glibc returns 1 for a parameter it took; musl's mallopt takes none and returns 0
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
