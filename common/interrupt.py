"""SIGINT and SIGTERM as what they are: an interruption that says which signal it was."""

from __future__ import annotations

import signal


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
