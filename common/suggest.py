"""Did you mean …? The closest known name to a misspelt one, for error messages."""

from __future__ import annotations

from collections.abc import Iterable


def closest(word: object, choices: Iterable[object]) -> str | None:
    """The known choice closest to ``word`` (difflib's ratio ≥ 0.6), or None."""
    import difflib  # only needed when something is wrong

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return close[0] if close else None


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    """``" (did you mean 'x'?)"`` to append to a message, or ``""`` when nothing is close."""
    near = closest(word, choices)
    return f" (did you mean {near!r}?)" if near else ""


def suggestion(word: object, choices: Iterable[object], otherwise: str | None = None) -> str | None:
    """``"did you mean 'x'?"`` for an error's hint, else ``otherwise``."""
    near = closest(word, choices)
    return f"did you mean {near!r}?" if near else otherwise
