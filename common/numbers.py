"""The one rule for numbers read from a file or a flag: a number, finite, and in its range.

``check_number`` takes a value a reader already has (YAML, JSON); ``parse_number`` takes text
(a flag, a comma-separated list, a line of a file). Both raise the caller's ``VprofError``
subclass with the caller's path, line and key, so every message says where the number was.
"""

from __future__ import annotations

import math
from typing import Any

from vprof.common.errors import VprofError

# The longest context any served model has today is ~10 M tokens; beyond that a token count is
# a typo, and building a prompt that long would exhaust memory before the server refuses it.
MAX_TOKENS = 10_000_000
# The most rows of a table with one row per interval of a user's choosing (a run's timeline, a
# trace's rate over time): 6 days at 5 s, more than anyone reads, and little enough to hold.
MAX_INTERVAL_ROWS = 100_000


def _show(x: float | int) -> str:
    if isinstance(x, int) and abs(x) >= 10**15:
        digits = str(abs(x))
        return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:g}"


def number_hint(value: Any) -> str | None:
    """For text that is a number to Python: how to write it so YAML reads a number. Unquoted,
    only an exponent without a dot or a sign (``1e20``) is text to YAML 1.1; any other such
    text was quoted (``users: "2"``)."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number):
            return None  # "nan", "inf": not a number to write differently
        if "e" in value.lower():
            return "YAML reads this as text: write exponents with a dot and a sign (1.0e+20)"
        return f"a quoted number is text: write {value.strip()} without quotes"
    return None


def check_number(
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    integer: bool = False,
    error: type[VprofError] = VprofError,
    hint: str | None = None,
    **where: Any,
) -> Any:
    """``value`` if it is a finite number within ``[minimum, maximum]`` (and ``> above``);
    an ``int`` when ``integer``. Otherwise raises ``error(..., **where)`` (path, line, key).

    Booleans are not numbers here (YAML reads ``yes`` as true).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(
            f"must be {'a whole number' if integer else 'a number'}, got {value!r}",
            hint=hint or number_hint(value),
            **where,
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"must be a finite number, got {value!r}", hint=hint, **where)
    if integer and not float(value).is_integer():
        raise error(f"must be a whole number, got {value!r}", hint=hint, **where)
    low_ok = (above is None or value > above) and (minimum is None or value >= minimum)
    if not low_ok or (maximum is not None and value > maximum):
        if above is not None:
            low = f"more than {_show(above)}"
        elif minimum is not None:
            low = f"at least {_show(minimum)}"
        else:
            low = ""
        high = f"at most {_show(maximum)}" if maximum is not None else ""
        if minimum is not None and maximum is not None and above is None:
            wanted = f"between {_show(minimum)} and {_show(maximum)}"
        else:
            wanted = " and ".join(part for part in (low, high) if part)
        raise error(f"must be {wanted}, got {_show(value)}", hint=hint, **where)
    return int(value) if integer else value


def parse_number(
    text: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    integer: bool = False,
    error: type[VprofError] = VprofError,
    hint: str | None = None,
    **where: Any,
) -> Any:
    """``text`` as a number under the same rule (``"40"``, ``"0.5"``, ``"1e3"``)."""
    raw = str(text).strip()
    number: float | int
    try:
        number = int(raw) if integer and raw.lstrip("+-").isdigit() else float(raw)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise error(f"{text!r} is not {kind}", hint=hint, **where) from None
    return check_number(
        number,
        minimum=minimum,
        maximum=maximum,
        above=above,
        integer=integer,
        error=error,
        hint=hint,
        **where,
    )


def parse_number_list(
    text: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    integer: bool = False,
    max_items: int = 1000,
    error: type[VprofError] = VprofError,
    **where: Any,
) -> list[Any]:
    """``"128,256,512"`` → ``[128, 256, 512]``, each item under the rule; at least one item."""
    parts = [part.strip() for part in str(text).split(",")]
    if not any(parts):
        raise error("expected a comma-separated list of numbers, got nothing", **where)
    if len(parts) > max_items:
        raise error(f"at most {max_items} values, got {len(parts)}", **where)
    numbers = []
    for part in parts:
        if not part:
            raise error(f"an empty item in {text!r}", hint="e.g. 128,256,512", **where)
        numbers.append(
            parse_number(
                part,
                minimum=minimum,
                maximum=maximum,
                above=above,
                integer=integer,
                error=error,
                **where,
            )
        )
    return numbers


def check_interval_rows(
    span_s: float,
    interval_s: float,
    *,
    over: str,
    rows_of: str = "rows",
    error: type[VprofError],
    **where: Any,
) -> None:
    """Refuse, before it is built, a table of one row per ``interval_s`` over ``span_s``
    seconds with more than ``MAX_INTERVAL_ROWS`` rows, naming the interval that fits."""
    ratio = span_s / interval_s
    if ratio < MAX_INTERVAL_ROWS:  # floor(ratio) + 1 rows
        return
    rows = ratio + 1
    count = f"{rows:,.0f}" if rows < 1e15 else f"{rows:.3g}"
    raise error(
        f"{interval_s:g} s intervals over {over} make {count} {rows_of} (at most "
        f"{MAX_INTERVAL_ROWS:,})",
        hint=f"use an interval of at least {span_s / (MAX_INTERVAL_ROWS - 1):.3g} s",
        **where,
    )
