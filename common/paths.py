"""Where vprof keeps things on disk."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """vprof's cache folder (the embedded model lives here): ``$VPROF_CACHE_DIR`` or XDG cache."""
    env = os.environ.get("VPROF_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vprof"
