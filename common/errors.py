"""One error tree for the library; the CLI turns it into exit code 2 in one place."""

from __future__ import annotations


class VprofError(Exception):
    """A user-facing error: what was wrong, where, and what to do about it.

    ``path``, ``line`` and ``key`` locate the problem when it came from a file.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.key = key
        self.hint = hint
        super().__init__(self.format())

    def format(self) -> str:
        where = ""
        if self.path:
            where = self.path + (f":{self.line}" if self.line else "")
            if self.key:
                where += f": {self.key}"
            where += ": "
        elif self.key:
            where = f"{self.key}: "
        text = where + self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


class ProfileError(VprofError):
    """A profile that cannot be loaded, validated or rendered."""


class LaunchError(VprofError):
    """A server that could not be started or did not become healthy."""


class WorkloadError(VprofError):
    """A workload or traffic shape that is malformed."""


class RunError(VprofError):
    """A run or bench that could not proceed."""


class ReportError(VprofError):
    """A report that cannot be made from what it was given (a bad option or input file)."""


class OutputError(VprofError):
    """A file vprof was asked to write that it may not replace, or cannot write."""


def os_reason(exc: OSError) -> str:
    """What went wrong in an OS call, for people: ``No space left on device``, not Arrow's or
    Python's wrapping of it."""
    import os

    return os.strerror(exc.errno) if exc.errno else str(exc)


class ForecastError(VprofError):
    """A capacity model that cannot be fitted, read or applied (a bad model file, runs of
    another configuration, a workload it cannot replay)."""
