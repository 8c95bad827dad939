"""The command line's typed filters and values (docs/api.md, "Command line"): `--where COND`
conditions into the API's predicates, `--attr NAME=VALUE` into a message's attributes.

A value is read without the space's schema: a JSON number, `true`, `false` or a "quoted"
string is that value; anything else is the string as written (`city=Paris` is the string
"Paris", `zip="02134"` the string "02134", `amount=5` the number 5).

    NAME=VALUE          equals                 NAME!=V|W   not one of (not_in)
    NAME=LO:HI          LO <= value < HI       NAME^=P     starts with P (prefix)
    NAME=A|B|C          one of (in)            NAME$=S     ends with S (suffix)
    NAME>=V NAME>V NAME<=V NAME<V  bounds      NAME?       present   NAME!?  absent

Several conditions on one name must all hold (`--where 'amount>=10' --where 'amount<100'`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_COND_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\^=|\$=|!=|>=|<=|!\?|=|>|<|\?)(.*)", re.S)
_RANGE_RE = re.compile(r"\s*([^:|]+?)\s*:\s*([^:|]+?)\s*")
_BOUNDS = {">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}


class WhereError(ValueError):
    """A --where or --attr argument that does not parse; the message says why."""


def scalar(text: str) -> Any:
    """A value as written: a JSON number (finite), true, false or "string", else the text itself."""
    try:
        v = json.loads(text)
    except ValueError:
        return text
    if isinstance(v, (str, bool)) or (isinstance(v, (int, float)) and math.isfinite(v)):
        return v
    return text  # null, a list, an object, NaN: the text as a string


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _equals(rest: str) -> list[tuple[str, Any]]:
    """The operators of NAME=REST: a value, a LO:HI range or A|B|C."""
    v = scalar(rest)
    if v is not rest:  # JSON: a number, a boolean, a quoted string
        return [("eq", v)]
    if "|" in rest:
        return [("in", [scalar(p) for p in rest.split("|")])]
    m = _RANGE_RE.fullmatch(rest)
    if m:
        lo, hi = _number(m[1]), _number(m[2])
        if lo is not None and hi is not None:
            return [("gte", lo), ("lt", hi), ("range", None)]
    return [("eq", rest)]


def condition(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """(name, [(operator, argument)]) of one --where condition; WhereError when it does not parse."""
    m = _COND_RE.fullmatch(text.strip())
    if not m:
        raise WhereError(f"{text!r}: expected NAME=VALUE, NAME=LO:HI, NAME=A|B, NAME!=V, NAME^=P, NAME$=S, "
                         "NAME>=V (>, <=, <), NAME? or NAME!?")
    name, op, rest = m[1], m[2], m[3]
    if op in ("?", "!?"):
        if rest.strip():
            raise WhereError(f"{text!r}: {name}{op} takes no value")
        return name, [("exists", op == "?")]
    if op == "=":
        return name, _equals(rest)
    if op == "!=":
        return name, [("not_in", [scalar(p) for p in rest.split("|")])]
    if op in ("^=", "$="):
        v = scalar(rest)
        return name, [("prefix" if op == "^=" else "suffix", v if isinstance(v, str) else rest)]
    return name, [(_BOUNDS[op], scalar(rest))]


def where(conditions: list[str]) -> dict[str, Any]:
    """The predicates of --where conditions: per name a bare value for one equals, [LO, HI]
    for one range, else an object of the filter language's operators (each at most once)."""
    ops: dict[str, dict[str, Any]] = {}
    ranged: set[str] = set()
    for text in conditions:
        name, parts = condition(text)
        mine = ops.setdefault(name, {})
        for op, arg in parts:
            if op == "range":
                ranged.add(name)
                continue
            if op in mine:
                raise WhereError(f"{text!r}: {name} has a condition {op!r} already")
            mine[op] = arg
    out: dict[str, Any] = {}
    for name, mine in ops.items():
        if name in ranged and set(mine) == {"gte", "lt"}:
            out[name] = [mine["gte"], mine["lt"]]
        elif set(mine) == {"eq"}:
            out[name] = mine["eq"]
        else:
            out[name] = mine
    return out


def attributes(items: list[str]) -> dict[str, Any]:
    """A message's attributes from --attr NAME=VALUE items (`scalar` values)."""
    out: dict[str, Any] = {}
    for text in items:
        name, eq, value = text.partition("=")
        if not eq or not name.strip().isidentifier():
            raise WhereError(f"{text!r}: expected NAME=VALUE")
        if name.strip() in out:
            raise WhereError(f"{text!r}: {name.strip()} is given twice")
        out[name.strip()] = scalar(value)
    return out
