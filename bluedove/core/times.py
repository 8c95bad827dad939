"""A point in time as a client gives one: an RFC 3339 string or whole milliseconds since the epoch.

Replay and seek take such a time (docs/api.md, "Replay"). It is checked here, with the time now
given by the caller, so a bad one is a 422 naming the field before anything changes.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from bluedove.core.errors import ApiError

# RFC 3339: a date, "T" (or a space), a time with an optional fraction, then "Z" or an offset.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def epoch_ms(value: Any, field: str, code: str = "invalid_request") -> int:
    """`value` as ms since the epoch (a fraction of a ms rounds down; before 1970 negative); 422
    naming `field` when it is not a time."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ApiError(422, code, "must be an RFC 3339 time (2026-11-27T09:00:00Z) or whole ms since the epoch",
                       field)
    return value if isinstance(value, int) else _rfc3339_ms(value, field, code)


def parse_time_ms(value: Any, field: str, now_ms: int, code: str = "invalid_request") -> int:
    """`epoch_ms`, and 422 naming `field` for a time before 1970 or later than `now_ms`."""
    ms = epoch_ms(value, field, code)
    if ms < 0:
        raise ApiError(422, code, "must not be before 1970", field)
    if ms > now_ms:
        raise ApiError(422, code, "is in the future", field)
    return ms


def _rfc3339_ms(value: str, field: str, code: str) -> int:
    m = _RFC3339.fullmatch(value)
    if m is None:
        raise ApiError(422, code, "must be an RFC 3339 time with its offset, such as 2026-11-27T09:00:00Z", field)
    date, clock, fraction, zone = m.groups()
    zone = "+00:00" if zone in "Zz" else zone
    try:
        at = datetime.fromisoformat(f"{date}T{clock}.{(fraction or '').ljust(6, '0')[:6]}{zone}")
    except ValueError:
        raise ApiError(422, code, "is not a valid date and time", field) from None
    return (at - _EPOCH) // _MS


def iso_ms(ms: int) -> str:
    """ms since the epoch as RFC 3339 in UTC, to the millisecond."""
    return (_EPOCH + ms * _MS).isoformat(timespec="milliseconds").replace("+00:00", "Z")
