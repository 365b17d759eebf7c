"""Go `time.Duration` text (`"5m"`, `"1h30m"`, `"300ms"`), as Kueue's Configuration uses it.

`parse_duration` follows `time.ParseDuration` and raises with its error text; `format_duration`
prints like `Duration.String()` (`-5m0s`), which is how Kueue's config validation shows a
duration in its messages.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from .field_error import invalid_body, k8s_error, k8s_type_error

_UNIT_NANOS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_TERM = re.compile(r"(\d*)(?:\.(\d*))?([a-zµμ]*)")


class DurationError(ValueError):
    """The text is not a Go duration; `str(err)` is Go's message."""


def parse_duration_nanos(text: str) -> int:
    original = text
    invalid = DurationError(f'time: invalid duration "{original}"')
    negative = False
    if text and text[0] in "+-":
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise invalid
    total = Decimal(0)
    pos = 0
    while pos < len(text):
        match = _TERM.match(text, pos)
        assert match is not None
        whole, fraction, unit = match.groups()
        if not whole and not fraction:
            raise invalid
        if not unit:
            raise DurationError(f'time: missing unit in duration "{original}"')
        if unit not in _UNIT_NANOS:
            raise DurationError(f'time: unknown unit "{unit}" in duration "{original}"')
        number = Decimal(f"{whole or '0'}.{fraction or '0'}")
        total += number * _UNIT_NANOS[unit]
        pos = match.end()
    nanos = int(total)
    if nanos > 2**63 - 1:
        raise invalid
    return -nanos if negative else nanos


def parse_duration(text: str) -> timedelta:
    """`time.ParseDuration`, as a timedelta (sub-microsecond parts are dropped)."""
    return timedelta(microseconds=parse_duration_nanos(text) // 1000)


def format_duration_nanos(nanos: int) -> str:
    # Duration.String(): "0s", sub-second values in the largest fitting unit, else h/m/s.
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    n = abs(nanos)
    if n < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if n >= size:
                return sign + _trim(Decimal(n) / size) + unit
    hours, rest = divmod(n, 3600 * 1_000_000_000)
    minutes, rest = divmod(rest, 60 * 1_000_000_000)
    seconds = _trim(Decimal(rest) / 1_000_000_000) + "s"
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return sign + out + seconds


def _trim(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_duration(value: timedelta) -> str:
    return format_duration_nanos(int(value / timedelta(microseconds=1)) * 1000)


def _coerce_duration(value: Any) -> str:
    if not isinstance(value, str):
        raise k8s_type_error("string")
    try:
        parse_duration_nanos(value)
    except DurationError as err:
        raise k8s_error(invalid_body(value, str(err))) from None
    return value


GoDuration = Annotated[
    str,
    BeforeValidator(_coerce_duration),
    WithJsonSchema({"type": "string", "format": "duration", "examples": ["5m", "1h30m", "90s"]}),
]
"""A Go duration string, kept as written."""
