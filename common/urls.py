"""The address of a server vprof measures but did not start (``--url``), checked once."""

from __future__ import annotations

from urllib.parse import urlsplit

from vprof.common.errors import RunError

EXAMPLE = "e.g. http://10.0.0.5:8000"


def check_server_url(url: str, key: str = "--url") -> str:
    """``url`` without a trailing slash, if it is an http(s) URL with a host and a valid port.

    An empty value (an unset shell variable) is refused, not taken as "no URL": it must never
    turn a measurement of a remote server into a local launch.
    """
    text = url.strip()
    if not text:
        raise RunError(
            "is empty (an unset shell variable?)",
            key=key,
            hint=f"give the server's address, {EXAMPLE}, or leave out {key} to launch the profile",
        )
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text):
        raise RunError(f"{url!r} contains spaces or control characters", key=key, hint=EXAMPLE)
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise RunError(f"{url!r} is not a valid URL: {exc}", key=key, hint=EXAMPLE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RunError(
            f"{url!r} is not a server URL (it needs http:// or https:// and a host)",
            key=key,
            hint=EXAMPLE,
        )
    if port == 0:
        raise RunError(f"{url!r}: port 0 is not a port a server listens on", key=key, hint=EXAMPLE)
    if parts.query or parts.fragment:
        raise RunError(
            f"{url!r} has a query or fragment; give the server's base address",
            key=key,
            hint=EXAMPLE,
        )
    if parts.path.rstrip("/").endswith("/v1"):
        raise RunError(
            f"{url!r} ends in /v1; give the server's root (vprof adds /v1/completions, "
            "/health and /metrics itself)",
            key=key,
            hint=EXAMPLE,
        )
    return text.rstrip("/")
