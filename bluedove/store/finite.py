"""Whether a poll's body, spliced from stored message texts (bluedove/store/wire.py), holds a
bare NaN, Infinity or -Infinity: what Python's json wrote for a payload number that is not
finite before publishing refused them, and what strict JSON parsers refuse. A REST poll sets
such a delivery aside (bluedove/store/queues.py, `poll_json`)."""

from __future__ import annotations

import re

import msgspec


class _Skipped(msgspec.Struct):
    """Any JSON object, its fields skipped: msgspec checks the text it skips is strict JSON
    (~3 GB/s, building nothing)."""


_SKIP = msgspec.json.Decoder(_Skipped)
# A JSON string, its escapes included: what `finite` cuts out (a payload may say "NaN" in one).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def finite(body: str) -> bool:
    """Whether `body` (a JSON object's text) holds none of the bare words NaN, Infinity and
    -Infinity. The usual body is known so by a memchr or two: it has no capital N or I (ids,
    receipts, numbers and lowercase keys have none). Else msgspec reads it (in C): strict JSON
    has none of the words outside its strings. What msgspec refuses (a word outside them, or
    something strict parsers refuse for another reason, which is not this check's) has its
    strings cut out (in C too) and is searched."""
    if "N" not in body and "I" not in body:
        return True
    try:
        _SKIP.decode(body)
    except (msgspec.DecodeError, RecursionError):
        bare = _STRING.sub("", body)
        return "NaN" not in bare and "Infinity" not in bare
    return True
