"""Pieces every stage shares: the error tree, the clock, and vprof's folders."""

from vprof.common.clock import Clock, wall_now
from vprof.common.errors import LaunchError, ProfileError, RunError, VprofError, WorkloadError
from vprof.common.paths import cache_dir

__all__ = [
    "Clock",
    "LaunchError",
    "ProfileError",
    "RunError",
    "VprofError",
    "WorkloadError",
    "cache_dir",
    "wall_now",
]
