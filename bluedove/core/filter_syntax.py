"""The filter language's syntax (docs/design.md, "Typed attributes"): API predicates checked
against a space's attributes into conditions, each error a 422 naming its field.

Per attribute a condition: for a number `[low, high]` (low <= v < high), a bare value or
`{"eq"}`, `{"in"}`, `{"not_in"}`, a range of `gt`/`gte` and `lt`/`lte`; for a string the same
but `[low, high]`, and `{"prefix"}`, `{"suffix"}`; for a boolean a bare value or `{"eq"}`; for
any `{"exists": bool}`. Several operators in one object must all hold. A top-level `any_of`
lists alternatives (each a mapping of conditions, not nesting `any_of`); the top-level
conditions hold in every one.
"""

from __future__ import annotations

from typing import Any

from bluedove.core.attributes import BOOLEAN, NUMBER, STRING, Attribute, finite_number, valid_string
from bluedove.core.errors import ApiError, echo
from bluedove.core.space import Space

# (attribute, operator, argument): `in` and `not_in` arguments are frozensets.
Condition = tuple[str, str, Any]
MAX_ATTRIBUTES = 20
MAX_VALUES = 100
_LOWER, _UPPER = ("gt", "gte"), ("lt", "lte")
OPERATORS = {NUMBER: {"eq", "in", "not_in", "gt", "gte", "lt", "lte", "exists"},
        STRING: {"eq", "in", "not_in", "gt", "gte", "lt", "lte", "prefix", "suffix", "exists"},
        BOOLEAN: {"eq", "exists"}}


def bad(message: str, field: str) -> ApiError:
    return ApiError(422, "invalid_subscription", message, field)


def parse_alternatives(predicates: Any, space: Space) -> tuple[tuple[Condition, ...], ...]:
    """The alternatives of `predicates` (one when there is no any_of), each its conditions."""
    if not isinstance(predicates, dict):
        raise bad("predicates must be an object mapping attribute names to conditions", "predicates")
    top = _conditions({k: v for k, v in predicates.items() if k != "any_of"}, space, "predicates")
    names = {c[0] for c in top}
    if "any_of" not in predicates:
        _count(names)
        return (top,)
    members = predicates["any_of"]
    if not isinstance(members, list) or not members:
        raise bad("any_of must be a list of at least one filter", "predicates.any_of")
    out = []
    for i, member in enumerate(members):
        where = f"predicates.any_of[{i}]"
        if not isinstance(member, dict):
            raise bad("an any_of member must be an object mapping attribute names to conditions", where)
        if "any_of" in member:
            raise bad("any_of members do not nest any_of", f"{where}.any_of")
        conds = _conditions(member, space, where)
        names |= {c[0] for c in conds}
        out.append(top + conds)
    _count(names)
    return tuple(out)


def _count(names: set[str]) -> None:
    if len(names) > MAX_ATTRIBUTES:
        raise bad(f"a filter has conditions on at most {MAX_ATTRIBUTES} attributes, got {len(names)}", "predicates")


def _conditions(mapping: dict[str, Any], space: Space, where: str) -> tuple[Condition, ...]:
    out: list[Condition] = []
    for name, cond in mapping.items():
        a = space.by_name.get(name)
        if a is None:
            raise bad(f"unknown attribute {echo(name)}; the space has {[x.name for x in space.schema]}",
                      f"{where}.{name}")
        out += [(name, op, arg) for op, arg in _condition(a, cond, f"{where}.{name}")]
    return tuple(out)


def _condition(a: Attribute, cond: Any, where: str) -> list[tuple[str, Any]]:
    if isinstance(cond, list):
        return _range_pair(a, cond, where)
    if isinstance(cond, dict):
        return _operators(a, cond, where)
    return [("eq", _value(a, cond, where))]


def _range_pair(a: Attribute, rng: list[Any], where: str) -> list[tuple[str, Any]]:
    """`[low, high]` on a number: low <= v < high."""
    if a.type != NUMBER:
        raise bad(f"[low, high] is a range of numbers; {a.name} is a {a.type} (use gte and lt)", where)
    lo, hi = range_bounds(rng, where)
    return [("gte", lo), ("lt", hi)]


def range_bounds(rng: list[Any], where: str) -> tuple[float, float]:
    """(low, high) of a `[low, high]` range: two finite numbers, low below high."""
    if len(rng) != 2:
        raise bad("a predicate must be a list [low, high]", where)
    lo, hi = rng
    if not finite_number(lo):
        raise bad(f"low bound must be a finite number, got {echo(lo)}", f"{where}[0]")
    if not finite_number(hi):
        raise bad(f"high bound must be a finite number, got {echo(hi)}", f"{where}[1]")
    if not lo < hi:
        raise bad(f"low ({lo}) must be below high ({hi}): the range is [low, high)", where)
    return float(lo), float(hi)


def _operators(a: Attribute, cond: dict[str, Any], where: str) -> list[tuple[str, Any]]:
    if not cond:
        raise bad("a condition object needs at least one operator", where)
    allowed = OPERATORS[a.type]
    for op in cond:
        if op not in allowed:
            raise bad(f"{echo(op)} is not an operator on a {a.type}; use one of {sorted(allowed)}", f"{where}.{op}")
    for side in (_LOWER, _UPPER):
        if all(op in cond for op in side):
            raise bad(f"{side[0]} and {side[1]} together: give one bound on each side", f"{where}.{side[0]}")
    if cond.get("exists") is False and len(cond) > 1:
        raise bad("exists: false cannot be combined with another condition (the attribute is absent)",
                  f"{where}.exists")
    out: list[tuple[str, Any]] = []
    for op, arg in cond.items():
        at = f"{where}.{op}"
        if op == "exists":
            if not isinstance(arg, bool):
                raise bad("exists must be true or false", at)
            out.append((op, arg))
        elif op in ("in", "not_in"):
            if not isinstance(arg, list) or not 1 <= len(arg) <= MAX_VALUES:
                raise bad(f"{op} must be a list of 1 to {MAX_VALUES} values", at)
            out.append((op, frozenset(_value(a, v, f"{at}[{i}]") for i, v in enumerate(arg))))
        elif op in ("prefix", "suffix"):
            if not valid_string(arg):
                raise bad(f"{op} must be a string of at most 256 bytes of UTF-8", at)
            out.append((op, arg))
        else:  # eq and the bounds
            out.append((op, _value(a, arg, at)))
    return out


def _value(a: Attribute, v: Any, where: str) -> Any:
    """A value a condition compares attribute `a` with: of its type (a number finite)."""
    if a.type == NUMBER and finite_number(v):
        return v
    if a.type == STRING and valid_string(v):
        return v
    if a.type == BOOLEAN and isinstance(v, bool):
        return v
    kinds = {NUMBER: "a finite number", STRING: "a string of at most 256 bytes of UTF-8", BOOLEAN: "true or false"}
    raise bad(f"{a.name} is a {a.type}: expected {kinds[a.type]}, got {echo(v)}", where)
