"""What a profile's text may hold: environment variable names, and text a command line can carry.

The floor under ``profile`` and ``render``, which both check what they are given.
"""

from __future__ import annotations

import re

# POSIX portable names; \A…\Z because "$" also matches before a trailing newline
ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
ENV_NAME_HINT = "letters, digits and '_', not starting with a digit"


def env_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be an environment variable's name, or None if it can."""
    if not isinstance(name, str) or not ENV_NAME_RE.match(name):
        return f"{name!r} is not a valid environment variable name"
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot go into a command line or an environment value, or None."""
    if "\x00" in text:
        return "contains a NUL character, which no command line or environment can hold"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate, perhaps from bytes not in UTF-8)"
    return None
