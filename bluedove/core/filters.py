"""Filters: a subscription's predicates (docs/design.md, "Typed attributes") as the boxes the index
holds and the exact check after it.

A filter is an OR of alternatives (one, or one per member of `any_of`, each with the top-level
conditions), each an AND of conditions, one or more per attribute. On the dimensions
mPartition cuts, an alternative is a union of boxes: per dimension the set of coordinate
intervals its conditions allow (`in` gives several, a prefix or a range one; what the
coordinates cannot tell, such as `not_in` or `suffix`, the whole dimension), and the boxes are
their product. The boxes hold every message the filter matches; a message in a box matches
when the exact check (`Filter.matches`) says so, unless the boxes alone decide (`exact`):
numeric ranges, equals and `in` on required numbers and booleans that are cut.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, Attribute, encode, prefix_interval
from bluedove.core.errors import ApiError
from bluedove.core.filter_syntax import Condition, parse_alternatives
from bluedove.core.space import Space

Box = tuple[tuple[float, ...], tuple[float, ...]]
# An index entry of box i of a subscription with a filter is keyed `<id>#<i>` (ids never hold
# "#": the service makes them of hex digits); a plain subscription's one box is keyed by its id.
BOX_SEP = "#"
Intervals = list[tuple[float, float]]
MAX_BOXES = 1000
# What the index holds exactly, so that no check after it is needed: on a required attribute
# that is cut, of these types, conditions with these operators.
_EXACT_TYPES = (NUMBER, BOOLEAN)
_EXACT_OPS = frozenset({"gte", "gt", "lt", "lte", "eq", "in", "exists"})


@dataclass(frozen=True)
class Filter:
    """A subscription's filter: its alternatives (OR of ANDs of conditions), the index's boxes,
    and whether the boxes alone decide a match."""

    alternatives: tuple[tuple[Condition, ...], ...]
    boxes: tuple[Box, ...]
    exact: bool

    def matches(self, attributes: Mapping[str, Any]) -> bool:
        """Whether a message with these attributes (checked against the space) matches."""
        return any(all(holds(attributes.get(name), op, arg) for name, op, arg in alt) for alt in self.alternatives)


def box_key(sub_id: str, i: int) -> str:
    return f"{sub_id}{BOX_SEP}{i}"


def sub_of(key: str) -> str:
    """The subscription id of an index entry's key."""
    return key.split(BOX_SEP, 1)[0] if BOX_SEP in key else key


def holds(v: Any, op: str, arg: Any) -> bool:
    """Whether value `v` (None: the message has no such attribute) meets one condition."""
    if op == "exists":
        return (v is not None) is arg
    if v is None:
        return False
    if op == "eq":
        return bool(v == arg)
    if op == "in":
        return v in arg
    if op == "not_in":
        return v not in arg
    if op == "gte":
        return bool(v >= arg)
    if op == "gt":
        return bool(v > arg)
    if op == "lt":
        return bool(v < arg)
    if op == "lte":
        return bool(v <= arg)
    if op == "prefix":
        return bool(v.startswith(arg))
    return bool(v.endswith(arg))  # suffix


def parse_filter(predicates: Any, space: Space) -> Filter:
    """The filter of API `predicates` in `space`; ApiError (422 invalid_subscription) naming
    the field otherwise, among them a filter of more than MAX_BOXES boxes."""
    alternatives = parse_alternatives(predicates, space)
    boxes: list[Box] = []
    for alt in alternatives:
        per_dim = [_intervals(space.by_name[d.name], [(op, arg) for name, op, arg in alt if name == d.name])
                   for d in space.dimensions]
        n = math.prod(len(iv) for iv in per_dim)
        if len(boxes) + n > MAX_BOXES:
            raise ApiError(422, "invalid_subscription",
                           f"the filter expands to over {MAX_BOXES} boxes (any_of alternatives times in values); "
                           "split it into several subscriptions", "predicates")
        for combo in itertools.product(*per_dim):
            boxes.append((tuple(lo for lo, _ in combo), tuple(hi for _, hi in combo)))
    return Filter(alternatives, tuple(boxes), _exact(alternatives, space))


def _exact(alternatives: tuple[tuple[Condition, ...], ...], space: Space) -> bool:
    cut = {d.name for d in space.dimensions}
    for alt in alternatives:
        for name, op, arg in alt:
            a = space.by_name[name]
            if name not in cut or a.optional or a.type not in _EXACT_TYPES or op not in _EXACT_OPS:
                return False
            if op == "exists" and arg is False:
                return False
    return True


def _intervals(a: Attribute, conds: list[tuple[str, Any]]) -> Intervals:
    """The coordinate intervals of attribute `a`'s dimension its conditions allow (a superset of
    the coordinates of the values they allow; empty: none)."""
    out: Intervals = [(a.low, a.high)]
    for op, arg in conds:
        out = _intersect(out, _allowed(a, op, arg))
        if not out:
            break
    return out


def _allowed(a: Attribute, op: str, arg: Any) -> Intervals:
    low, high = a.low, a.high
    if op == "exists":
        if arg:
            return [(low, high)]
        return [(low, _after(a, low))] if a.optional else []  # absent sits at the lowest value
    if op in ("eq", "in"):
        values = arg if op == "in" else (arg,)
        return merge_intervals(sorted((c, _after(a, c)) for c in {a.coordinate(v) for v in values}))
    if a.type == STRING:
        if op == "prefix":
            return [prefix_interval(arg)]
        if op in ("gte", "gt"):
            return [(encode(arg), high)]
        if op in ("lt", "lte"):
            return [(low, encode(arg) + 1.0)]  # strings below it may share its cell
        return [(low, high)]  # not_in, suffix: the coordinates cannot tell
    if a.type == NUMBER:
        if op == "gte":
            return [(float(arg), high)]
        if op == "gt":
            return [(math.nextafter(float(arg), math.inf), high)]
        if op == "lt":
            return [(low, float(arg))]
        if op == "lte":
            return [(low, math.nextafter(float(arg), math.inf))]
    return [(low, high)]  # not_in


def _after(a: Attribute, c: float) -> float:
    """The end of coordinate c's cell: the next double for a number, c + 1 otherwise."""
    return math.nextafter(c, math.inf) if a.type == NUMBER else c + 1.0


def merge_intervals(iv: Intervals) -> Intervals:
    """Sorted intervals with the overlapping and touching ones joined."""
    out: Intervals = []
    for lo, hi in iv:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two sorted lists of disjoint half-open intervals."""
    out: Intervals = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
