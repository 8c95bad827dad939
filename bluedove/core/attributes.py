"""Typed attributes: numbers, strings and booleans, required or optional, and how each becomes
a numeric dimension when mPartition cuts it (docs/design.md, "Typed attributes").

A number is its own coordinate in [min, max). A boolean is 0 or 1 on [0, 2). A string is an
order-preserving encoding of its first WIDTH bytes (UTF-8), a whole number in [0, 256**WIDTH),
exact in a double: s <= t implies encode(s) <= encode(t), so equals is one cell of width 1, a
prefix or a range of strings one interval; strings that share their first WIDTH bytes share a
cell, and the matcher compares the whole string after the index. An optional attribute a
message leaves out sits at its dimension's lowest value (and every condition on it is checked
exactly after the index).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NUMBER, STRING, BOOLEAN = "number", "string", "boolean"
TYPES = (NUMBER, STRING, BOOLEAN)
MAX_STRING_BYTES = 256
# Bytes of a string its coordinate holds: 6 bytes are 48 bits, a double holds 53 exactly.
WIDTH = 6
STRING_TOP = float(256 ** WIDTH)


def encode(s: str) -> float:
    """The coordinate of string `s`: its first WIDTH bytes (UTF-8, zero-padded) as a number."""
    return float(int.from_bytes(s.encode()[:WIDTH].ljust(WIDTH, b"\0"), "big"))


def prefix_interval(prefix: str) -> tuple[float, float]:
    """The coordinates [lo, hi) of every string that starts with `prefix`."""
    lo = encode(prefix)
    n = len(prefix.encode())
    return lo, lo + (1.0 if n >= WIDTH else float(256 ** (WIDTH - n)))


def label(coordinate: float) -> str | None:
    """A boundary on a string's dimension as text for people (a segment's ends): the first WIDTH
    bytes of the lowest string at or above `coordinate`, without the zero padding, to be shown
    between double quotes: a byte that is no whole UTF-8 character, a backslash, a double quote
    and an unprintable character escaped (`\\xe6`, `\\\\`, `\\"`, `\\x00`). None at or past the
    dimension's end: no string is there."""
    n = max(0, math.ceil(coordinate))
    if n >= STRING_TOP:
        return None
    text = n.to_bytes(WIDTH, "big").rstrip(b"\0").decode(errors="surrogateescape")
    return "".join(_shown(c) for c in text)


def _shown(c: str) -> str:
    if "\udc80" <= c <= "\udcff":  # a byte that decoded to no character (surrogateescape)
        return f"\\x{ord(c) - 0xDC00:02x}"
    if c in "\\\"":
        return "\\" + c
    return c if c.isprintable() else c.encode("unicode_escape").decode()


def finite_number(v: Any) -> bool:
    """A JSON number that is a finite double (not a boolean, not an integer past a double)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def valid_string(v: Any) -> bool:
    """A string of at most MAX_STRING_BYTES bytes of UTF-8 (no lone surrogate)."""
    if not isinstance(v, str) or len(v) > MAX_STRING_BYTES:
        return False
    try:
        return len(v.encode()) <= MAX_STRING_BYTES
    except UnicodeEncodeError:
        return False


@dataclass(frozen=True)
class Attribute:
    """One attribute of a space: its name, type, whether a message may leave it out, and for a
    number its domain [min, max)."""

    name: str
    type: str = NUMBER
    optional: bool = False
    min: float = 0.0
    max: float = 0.0

    @property
    def low(self) -> float:
        """The lowest coordinate of its dimension (where a message without it sits)."""
        return self.min if self.type == NUMBER else 0.0

    @property
    def high(self) -> float:
        """The end of its dimension's coordinates (exclusive)."""
        if self.type == NUMBER:
            return self.max
        return STRING_TOP if self.type == STRING else 2.0

    def coordinate(self, value: Any) -> float:
        """`value` (checked: `problem` found none) on this attribute's dimension; None: absent."""
        if value is None:
            return self.low
        if self.type == STRING:
            return encode(value)
        if self.type == BOOLEAN:
            return 1.0 if value else 0.0
        return float(value)

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this attribute's value in a message; None when it can."""
        if self.type == NUMBER:
            if not finite_number(value):
                return "must be a finite number"
            if not self.min <= value < self.max:
                return f"is outside [{self.min:g}, {self.max:g})"
            return None
        if self.type == STRING:
            return None if valid_string(value) else f"must be a string of at most {MAX_STRING_BYTES} bytes of UTF-8"
        return None if isinstance(value, bool) else "must be true or false"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == NUMBER:
            out |= {"min": whole(self.min), "max": whole(self.max)}
        if self.optional:
            out["optional"] = True
        return out


def whole(v: float) -> int | float:
    """Whole floats as ints, so that the JSON reads like the configuration it came from."""
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else v
