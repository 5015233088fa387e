"""SIGINT and SIGTERM as what they are: an interruption that says which signal it was; and a
child that dies with its parent."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Interrupted(KeyboardInterrupt):
    """Raised where the program was when SIGINT or SIGTERM arrived (:func:`raise_interrupted`);
    it is a ``KeyboardInterrupt``, so every clean-up written for Ctrl-C runs for both."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    """The signal behind an interruption (a plain ``KeyboardInterrupt`` is SIGINT)."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def interruption(exc: BaseException) -> str:
    """Why a run stopped, for its status: ``interrupted by SIGTERM``, or by SIGINT (Ctrl-C)."""
    signum = signal_of(exc)
    name = signal.Signals(signum).name
    return f"interrupted by {name}" + (" (Ctrl-C)" if signum == signal.SIGINT else "")


def raise_interrupted(signum: int, frame: object) -> None:
    """A signal handler: raise :class:`Interrupted` naming ``signum``."""
    raise Interrupted(signum)


def die_with_parent(sig: signal.Signals) -> bool:
    """Have Linux send ``sig`` to this process when its parent dies (False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
