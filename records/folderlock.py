"""One writer per folder: a command that writes a bench, sweep or tune folder holds its lock.

The lock is ``fcntl.flock`` on the folder's ``LOCK_FILE``, which names the holder (pid, host,
command, since when). A second command is refused at once (:class:`RunError`, exit 2) naming
the folder and the holder. The kernel drops the lock of a process that dies, so a lock left
by a killed vprof is simply taken over, with a note naming who left it (its file is still
there; a holder that finishes removes it). Within one process the lock is re-entrant.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vprof.common.errors import OutputError, RunError, os_reason
from vprof.records.rundir import LOCK_FILE, this_process

_held: dict[Path, tuple[int, int]] = {}  # folder -> (descriptor, how many holds)
_made: dict[Path, list[Path]] = {}  # folders a lock made, removed again if left empty


def _holder_text(holder: dict[str, Any]) -> str:
    command = " ".join(str(part) for part in holder.get("command") or ()) or "?"
    since = holder.get("since")
    when = (
        time.strftime(" since %H:%M:%S", time.localtime(since))
        if isinstance(since, (int, float))
        else ""
    )
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}{when} ({command})"


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _open_locked(path: Path) -> tuple[int, dict[str, Any]]:
    """The lock file opened and locked, and whom it named before (``{}``: nobody)."""
    for _ in range(5):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunError(
                f"another vprof command is writing this folder: {_holder_text(holder)}",
                path=str(path.parent),
                hint="wait for it to finish, or give this command another --out",
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, _read_holder(fd)
        os.close(fd)  # its holder removed that file as we opened it: open the new one
    raise RunError("could not take its lock: the lock file keeps changing", path=str(path))


def lock_folder(folder: Path, say: Callable[[str], None] = print) -> Callable[[], None]:
    """Take ``folder``'s lock (making the folder if needed); returns the release function."""
    folder = Path(folder).resolve()
    if folder in _held:
        fd, holds = _held[folder]
        _held[folder] = (fd, holds + 1)
        return lambda: _release(folder)
    made = []
    parent = folder
    while not parent.exists() and parent != parent.parent:
        made.append(parent)
        parent = parent.parent
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, before = _open_locked(path)
    except RunError:
        _remove_empty(made)
        raise
    except OSError as exc:
        _remove_empty(made)
        raise OutputError(f"cannot be written: {os_reason(exc)}", path=str(folder)) from None
    if before:
        say(f"note: {folder}: taking over the lock left by {_holder_text(before)}, which is gone")
    me = {**this_process(), "since": time.time()}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
    except OSError:
        pass  # a full disk: the lock holds without its note
    _held[folder] = (fd, 1)
    _made[folder] = made
    return lambda: _release(folder)


def _release(folder: Path) -> None:
    fd, holds = _held[folder]
    if holds > 1:
        _held[folder] = (fd, holds - 1)
        return
    del _held[folder]
    try:
        # Gone while still held: a command that opened it meanwhile finds another file at
        # the path once it has the lock, and opens that one (_open_locked).
        (folder / LOCK_FILE).unlink()
    except OSError:
        pass
    os.close(fd)  # drops the lock
    _remove_empty(_made.pop(folder, []))


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


@contextmanager
def holding(folder: Path, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold ``folder``'s lock for the ``with`` block."""
    release = lock_folder(folder, say)
    try:
        yield
    finally:
        release()
