"""Where vprof keeps things on disk."""

from __future__ import annotations

import os
from pathlib import Path

from vprof.common.errors import VprofError


def cache_dir() -> Path:
    """vprof's cache folder (the embedded model lives here): ``$VPROF_CACHE_DIR`` or XDG cache."""
    env = os.environ.get("VPROF_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vprof"


def check_writable_dir(path: Path, key: str | None = None) -> Path:
    """``path`` if it is, or can become, a folder vprof may write into; creates nothing.

    Raises ``VprofError`` (naming ``key``, e.g. ``--out``) when ``path`` or a parent is a file,
    or the nearest existing folder cannot be written (a read-only file system, no permission).
    """
    import tempfile

    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "a broken link" if existing.is_symlink() and not existing.exists() else "a file"
        where = "" if existing == path else f" (a parent of {str(path)!r})"
        raise VprofError(
            f"{str(existing)!r}{where} is {what}, not a folder",
            key=key,
            hint="give a folder path",
        )
    try:  # the only sure test of writability (os.access is wrong as root and on read-only mounts)
        probe = tempfile.mkdtemp(prefix=".vprof-probe-", dir=existing)
        os.rmdir(probe)
    except OSError as exc:
        raise VprofError(
            f"cannot write in {str(existing)!r}: {exc.strerror or exc}",
            key=key,
            hint="choose a folder you can write to",
        ) from None
    return path
