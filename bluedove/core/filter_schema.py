"""The filter language as a JSON Schema, for one space: what the OpenAPI says `predicates` is.

The schema gives the shape (docs/api.md, "Typed attributes"): per attribute of the space a
condition of its type (`[low, high]` on a number; a bare value; an object of the operators its
type has), `any_of` at the top level only, the limits on values per `in`. It accepts every
filter the server accepts. The rules a schema cannot say are the server's to check, each a 422
naming the field: one bound on each side, `exists: false` alone, a string's 256 bytes counted as
UTF-8, at most 20 attributes across the alternatives, low below high.
"""

from __future__ import annotations

from typing import Any

from bluedove.core.attributes import BOOLEAN, MAX_STRING_BYTES, NUMBER, STRING, Attribute
from bluedove.core.filter_syntax import MAX_VALUES, OPERATORS
from bluedove.core.space import Space

_VALUE: dict[str, dict[str, Any]] = {
    NUMBER: {"type": "number"},
    STRING: {"type": "string", "maxLength": MAX_STRING_BYTES},
    BOOLEAN: {"type": "boolean"},
}


def _operator(a: Attribute, op: str) -> dict[str, Any]:
    value = _VALUE[a.type]
    if op == "exists":
        return {"type": "boolean"}
    if op in ("in", "not_in"):
        return {"type": "array", "items": value, "minItems": 1, "maxItems": MAX_VALUES}
    if op in ("prefix", "suffix"):
        return _VALUE[STRING]
    return value  # eq and the bounds


def condition_schema(a: Attribute) -> dict[str, Any]:
    """A condition on attribute `a`."""
    operators = {"type": "object", "minProperties": 1, "additionalProperties": False,
                 "properties": {op: _operator(a, op) for op in sorted(OPERATORS[a.type])}}
    kinds = [_VALUE[a.type], operators]
    if a.type == NUMBER:
        kinds.insert(0, {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2,
                         "description": "[low, high]: low <= value < high"})
    return {"anyOf": kinds, "description": f"{a.type}{' (optional)' if a.optional else ''}"}


def filter_schema(space: Space) -> dict[str, Any]:
    """`predicates` in `space`: attribute -> condition, every one holding, and `any_of`."""
    conditions = {a.name: condition_schema(a) for a in space.schema}
    member = {"type": "object", "additionalProperties": False, "properties": conditions}
    return {"type": "object", "additionalProperties": False,
            "description": "attribute -> condition, every one must hold; any_of: at least one member must hold too",
            "properties": {**conditions, "any_of": {"type": "array", "minItems": 1, "items": member}}}
